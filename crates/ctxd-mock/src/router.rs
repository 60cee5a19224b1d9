//! Routes and the recording layer, assembled in one place. External routes are the provider
//! APIs; internal ones (`/_mock/...`) expose the record to out-of-process users and are not
//! recorded themselves.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::record::ReplyUsage;
use crate::reply::error_body;
use crate::script::Reply;
use crate::server::Shared;
use crate::validate::REFUSED_HEADER;
use crate::{handlers, Api};

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/messages", post(handlers::anthropic))
        .route("/v1/messages/count_tokens", post(handlers::count_tokens))
        .route("/v1/chat/completions", post(handlers::chat))
        .route("/v1/responses", post(handlers::responses))
        .route("/v1/models", get(models))
        // Gemini: `MODEL:ACTION` is one path segment, split by the handler.
        .route(
            "/v1/models/{segment}",
            get(gemini_model).post(handlers::gemini),
        )
        .route("/v1beta/models", get(gemini_models))
        .route(
            "/v1beta/models/{segment}",
            get(gemini_model).post(handlers::gemini),
        )
        // An OpenTelemetry collector's OTLP/HTTP traces route: the spans are recorded like any
        // request and accepted whole.
        .route("/v1/traces", post(otlp_traces))
        .route("/", get(root))
        .route("/health", get(root))
        .route("/healthz", get(root))
        .route("/_mock/requests", get(recorded).delete(clear))
        .route("/_mock/script", post(queue).delete(clear_script))
        .fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        // The record layer enforces the body limit itself, for every route.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(Arc::clone(&shared), record))
        .with_state(shared)
}

/// Collects the body (up to the limit), records the request, and hands it on.
async fn record(State(s): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    if req.uri().path().starts_with("/_mock/") {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, s.config.body_limit).await {
        Ok(bytes) => {
            let seq = s.recorder.push(&parts, &bytes);
            let mut res = next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
            if let Some(rule) = res.headers().get(REFUSED_HEADER) {
                s.recorder
                    .note_refused(seq, &String::from_utf8_lossy(rule.as_bytes()));
            }
            let usage = res
                .headers_mut()
                .remove(handlers::USAGE_HEADER)
                .and_then(|v| ReplyUsage::parse(v.to_str().ok()?));
            s.recorder.note_reply(seq, res.status().as_u16(), usage);
            res
        }
        Err(_) => {
            s.recorder.push(&parts, &Bytes::new());
            let api = api_of(parts.uri.path(), &parts.headers);
            let message = format!("request body larger than {} bytes", s.config.body_limit);
            error(api, StatusCode::PAYLOAD_TOO_LARGE, &message, &s)
        }
    }
}

/// OTLP/HTTP's answer to an export it took whole (`ExportTraceServiceResponse`, JSON).
async fn otlp_traces() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        "{}",
    )
        .into_response()
}

/// An error response in the shape of the API the request looks like.
pub(crate) fn error(api: Api, status: StatusCode, message: &str, s: &Shared) -> Response {
    let request_id = s.ids.next("req_");
    let body = error_body(api, status.as_u16(), message, &request_id);
    json_response(status, body, &request_id)
}

pub(crate) fn json_response(status: StatusCode, body: Vec<u8>, request_id: &str) -> Response {
    let mut res = (status, body).into_response();
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    if let Ok(id) = header::HeaderValue::from_str(request_id) {
        headers.insert("request-id", id.clone());
        headers.insert("x-request-id", id);
    }
    res
}

/// Anthropic routes and requests carrying `anthropic-version` get Anthropic's error shape;
/// Gemini routes (`/v1beta/`, `MODEL:ACTION`) and requests with Google's key header, Google's.
fn api_of(path: &str, headers: &HeaderMap) -> Api {
    if path.starts_with("/v1/messages") || headers.contains_key("anthropic-version") {
        Api::Anthropic
    } else if path.starts_with("/v1beta/")
        || path.starts_with("/v1/models/") && path.contains(':')
        || headers.contains_key("x-goog-api-key")
    {
        Api::Gemini
    } else {
        Api::OpenAiChat
    }
}

async fn not_found(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let api = api_of(req.uri().path(), req.headers());
    let message = format!("no route {} {}", req.method(), req.uri().path());
    error(api, StatusCode::NOT_FOUND, &message, &s)
}

async fn not_allowed(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let api = api_of(req.uri().path(), req.headers());
    let message = format!(
        "method {} not allowed on {}",
        req.method(),
        req.uri().path()
    );
    error(api, StatusCode::METHOD_NOT_ALLOWED, &message, &s)
}

/// `HEAD /` is Claude Code's connectivity preflight; its status is configurable.
async fn root(State(s): State<Arc<Shared>>, method: Method) -> Response {
    if method == Method::HEAD {
        let status = StatusCode::from_u16(s.config.head_status).unwrap_or(StatusCode::OK);
        return status.into_response();
    }
    axum::Json(json!({"ok": true})).into_response()
}

/// The Gemini models the mock lists (any `gemini*` name is served too).
const GEMINI_MODELS: [&str; 4] = [
    "gemini-2.5-pro",
    "gemini-2.5-flash",
    "gemini-2.5-flash-lite",
    "gemini-3-pro-preview",
];

/// A Gemini `Model` resource; its input limit is the window strict mode checks.
fn gemini_model_json(id: &str, s: &Shared) -> Value {
    let input = crate::validate::window(id, &HeaderMap::new(), &s.config);
    let version = id
        .strip_prefix("gemini-")
        .and_then(|rest| rest.split('-').next())
        .unwrap_or("001");
    json!({
        "name": format!("models/{id}"),
        "baseModelId": id,
        "version": version,
        "displayName": id,
        "description": format!("ctxd-mock's {id}"),
        "inputTokenLimit": input,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "countTokens"],
        "temperature": 1.0,
        "topP": 0.95,
        "topK": 64,
        "maxTemperature": 2.0,
        "thinking": true,
    })
}

/// A `/v1beta/` route, or a request carrying Google's credentials (`x-goog-api-key`, `?key=`).
fn google_request(uri: &Uri, headers: &HeaderMap) -> bool {
    uri.path().starts_with("/v1beta/")
        || headers.contains_key("x-goog-api-key")
        || uri
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv.starts_with("key=")))
}

/// `GET /v1beta/models`.
async fn gemini_models(State(s): State<Arc<Shared>>) -> Response {
    let models: Vec<Value> = GEMINI_MODELS
        .iter()
        .map(|id| gemini_model_json(id, &s))
        .collect();
    axum::Json(json!({"models": models})).into_response()
}

/// `GET /v1beta/models/{model}`: a listed or any `gemini*` model, else a 404 (Google's, or
/// OpenAI's for `/v1/models/gpt-5` without Google's credentials).
async fn gemini_model(
    State(s): State<Arc<Shared>>,
    Path(segment): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let id = segment.strip_prefix("models/").unwrap_or(&segment);
    if id.contains(':') {
        // `MODEL:generateContent` and the like are POST routes.
        let message = format!("method GET not allowed on {}", uri.path());
        return error(Api::Gemini, StatusCode::NOT_FOUND, &message, &s);
    }
    if GEMINI_MODELS.contains(&id) || id.starts_with("gemini") {
        return axum::Json(gemini_model_json(id, &s)).into_response();
    }
    if !google_request(&uri, &headers) {
        let message = format!("The model `{id}` does not exist");
        return error(
            api_of(uri.path(), &headers),
            StatusCode::NOT_FOUND,
            &message,
            &s,
        );
    }
    let message = format!(
        "models/{id} is not found for API version v1beta, or is not supported for \
         generateContent. Call ListModels to see the list of available models and their \
         supported methods."
    );
    error(Api::Gemini, StatusCode::NOT_FOUND, &message, &s)
}

/// A model list with both OpenAI and Anthropic fields; Google's list for a request carrying
/// Google's credentials (`x-goog-api-key`, `?key=`), as `/v1/models` is both APIs' route.
async fn models(s: State<Arc<Shared>>, uri: Uri, headers: HeaderMap) -> Response {
    if google_request(&uri, &headers) {
        return gemini_models(s).await;
    }
    let models: Vec<Value> = ["mock-model", "claude-sonnet-4-5", "gpt-5"]
        .iter()
        .map(|id| {
            json!({"id": id, "object": "model", "created": 1_735_689_600, "owned_by": "mock",
                   "type": "model", "display_name": id, "created_at": "2025-01-01T00:00:00Z"})
        })
        .collect();
    axum::Json(json!({"object": "list", "data": models, "has_more": false,
                      "first_id": "mock-model", "last_id": "gpt-5"}))
    .into_response()
}

async fn recorded(State(s): State<Arc<Shared>>) -> Response {
    let all: Vec<Value> = s.recorder.all().iter().map(|r| r.to_json()).collect();
    axum::Json(Value::Array(all)).into_response()
}

async fn clear(State(s): State<Arc<Shared>>) -> StatusCode {
    s.recorder.clear();
    StatusCode::NO_CONTENT
}

/// `POST /_mock/script` with a JSON array of reply specs (the `--reply` forms): queued after
/// those already queued, all or none. Answers `{"queued": N}`, the replies now waiting; a bad
/// spec is a 400 naming it.
async fn queue(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let bad = |message: String| {
        (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": message})),
        )
            .into_response()
    };
    let specs: Vec<String> = match serde_json::from_slice(&body) {
        Ok(specs) => specs,
        Err(e) => return bad(format!("expected a JSON array of reply specs: {e}")),
    };
    let replies: Result<Vec<Reply>, _> = specs.iter().map(|spec| spec.parse::<Reply>()).collect();
    match replies {
        Ok(replies) => {
            let replies = replies
                .into_iter()
                .map(|r| r.with_shape(s.config.shape.clone()));
            s.script.extend(replies);
            axum::Json(json!({"queued": s.script.len()})).into_response()
        }
        Err(e) => bad(e.to_string()),
    }
}

/// `DELETE /_mock/script`: forgets the replies not yet used.
async fn clear_script(State(s): State<Arc<Shared>>) -> StatusCode {
    s.script.clear();
    StatusCode::NO_CONTENT
}
