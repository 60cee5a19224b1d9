//! The generation routes: read the few body fields that matter, refuse what the real API
//! refuses (strict mode; before the script, so a refusal consumes no scripted reply), take the
//! next scripted reply (or the turn logic's), render, and deliver with the reply's [`Shape`].

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;

use crate::body;
use crate::cache;
use crate::config::Reasoning;
use crate::reply::{self, Piece, PlanInput, Rendered};
use crate::request::Head;
use crate::router::{error, json_response};
use crate::script::{Action, Shape};
use crate::server::Shared;
use crate::sse::Frames;
use crate::validate::{self, Refusal, REFUSED_HEADER};
use crate::Api;

pub(crate) async fn anthropic(s: State<Arc<Shared>>, h: HeaderMap, body: Bytes) -> Response {
    generate(Api::Anthropic, &s, &h, &body, None).await
}

pub(crate) async fn chat(s: State<Arc<Shared>>, h: HeaderMap, body: Bytes) -> Response {
    generate(Api::OpenAiChat, &s, &h, &body, None).await
}

pub(crate) async fn responses(s: State<Arc<Shared>>, h: HeaderMap, body: Bytes) -> Response {
    generate(Api::OpenAiResponses, &s, &h, &body, None).await
}

/// A Gemini generation: the model and the streaming come from the route, not the body.
#[derive(Clone, Debug)]
struct GeminiRoute {
    model: String,
    stream: bool,
    /// `alt=sse`: SSE events rather than a streamed JSON array.
    sse: bool,
}

/// `POST /v1beta/models/{MODEL:ACTION}` (and `/v1/...`): the segment is split on its last
/// `:` (model names hold dots and dashes) into the model and `generateContent`,
/// `streamGenerateContent` or `countTokens`.
pub(crate) async fn gemini(
    s: State<Arc<Shared>>,
    Path(segment): Path<String>,
    uri: Uri,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let Some((model, action)) = segment.rsplit_once(':') else {
        let message = format!(
            "models/{segment} is not found for API version v1beta, or is not supported for \
             POST. Call ListModels to see the list of available models and their supported \
             methods."
        );
        return error(Api::Gemini, StatusCode::NOT_FOUND, &message, &s);
    };
    let sse = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
    let route = |stream| GeminiRoute {
        model: model.to_owned(),
        stream,
        sse,
    };
    match action {
        "generateContent" => generate(Api::Gemini, &s, &h, &body, Some(route(false))).await,
        "streamGenerateContent" => generate(Api::Gemini, &s, &h, &body, Some(route(true))).await,
        "countTokens" => gemini_count_tokens(&s, &h, &body),
        _ => {
            let message = format!("Method not found: models/{model}:{action}");
            error(Api::Gemini, StatusCode::NOT_FOUND, &message, &s)
        }
    }
}

/// `{"totalTokens": N}`: the estimate of `generateContentRequest` when the body has one, else
/// of the whole body (its `contents`), the figure a reply reports as `promptTokenCount`.
fn gemini_count_tokens(s: &Shared, h: &HeaderMap, raw: &Bytes) -> Response {
    #[derive(serde::Deserialize)]
    struct CountRequest<'a> {
        #[serde(borrow, default, rename = "generateContentRequest")]
        #[serde(alias = "generate_content_request")]
        request: Option<&'a serde_json::value::RawValue>,
    }
    let decoded = match body::decode(h, raw, s.config.body_limit) {
        Ok(decoded) => decoded,
        Err(e) => return error(Api::Gemini, StatusCode::BAD_REQUEST, &e.to_string(), s),
    };
    let request: CountRequest = match serde_json::from_slice(&decoded) {
        Ok(r) => r,
        Err(e) => {
            let message = format!("Invalid JSON payload received. {e}");
            return error(Api::Gemini, StatusCode::BAD_REQUEST, &message, s);
        }
    };
    let len = request.request.map_or(decoded.len(), |r| r.get().len());
    let tokens = validate::estimate_tokens(len);
    let body = json!({"totalTokens": tokens,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": tokens}]});
    json_response(
        StatusCode::OK,
        body.to_string().into_bytes(),
        &s.ids.next("req_"),
    )
}

/// `{"input_tokens": N}` with N about a quarter of the decoded body's bytes.
pub(crate) async fn count_tokens(s: State<Arc<Shared>>, h: HeaderMap, raw: Bytes) -> Response {
    match body::decode(&h, &raw, s.config.body_limit) {
        Ok(decoded) => {
            let tokens = validate::estimate_tokens(decoded.len());
            let id = s.ids.next("req_");
            json_response(
                StatusCode::OK,
                json!({"input_tokens": tokens}).to_string().into_bytes(),
                &id,
            )
        }
        Err(e) => error(Api::Anthropic, StatusCode::BAD_REQUEST, &e.to_string(), &s),
    }
}

async fn generate(
    api: Api,
    s: &Shared,
    headers: &HeaderMap,
    raw: &Bytes,
    gemini: Option<GeminiRoute>,
) -> Response {
    let decoded = match body::decode(headers, raw, s.config.body_limit) {
        Ok(decoded) => decoded,
        Err(e) => return error(api, StatusCode::BAD_REQUEST, &e.to_string(), s),
    };
    let mut head: Head = match serde_json::from_slice(&decoded) {
        Ok(head) => head,
        Err(e) => {
            return error(
                api,
                StatusCode::BAD_REQUEST,
                &format!("invalid JSON body: {e}"),
                s,
            );
        }
    };
    if let Some(g) = &gemini {
        head.model = Some(Cow::Owned(g.model.clone()));
        head.stream = Some(g.stream);
    }
    if s.config.strict {
        if api == Api::Gemini {
            let checked = {
                let signed = s.gemini_signed.lock().unwrap_or_else(|p| p.into_inner());
                validate::gemini::check(&head, &|h| signed.contains(&h))
            };
            if let Err(refusal) = checked {
                return refused(api, &refusal, s);
            }
        }
        if let Err(refusal) = validate::check(api, &head, decoded.len(), headers, &s.config) {
            return refused(api, &refusal, s);
        }
    }
    // Anthropic's prompt cache, for a request that marks breakpoints (any other reads and
    // writes nothing, as on the real API); Gemini's implicit one, for every request.
    let prompt = match api {
        Api::Anthropic if memchr::memmem::find(&decoded, b"\"cache_control\"").is_some() => {
            s.cache.prompt(&decoded, head.model(), &s.config)
        }
        Api::Gemini => s.cache.gemini_prompt(&decoded, head.model(), &s.config),
        _ => None,
    };
    if let Some(p) = &prompt {
        if s.config.strict && p.markers > cache::MAX_BREAKPOINTS {
            let refusal = Refusal::new("anthropic.cache_control_limit", cache::too_many(p.markers));
            return refused(api, &refusal, s);
        }
    }
    let (action, shape) = match take_reply(s).await {
        Ok(reply) => reply,
        Err(waited) => {
            let message = format!(
                "ctxd-mock: the script said wait, and no reply was queued within {} ms \
                 (POST /_mock/script)",
                waited.as_millis()
            );
            return error(api, StatusCode::BAD_REQUEST, &message, s);
        }
    };
    if !shape.first_byte_delay.is_zero() {
        tokio::time::sleep(shape.first_byte_delay).await;
    }
    let (parts, failure) = match action {
        Action::Error { status, message } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return with_headers(error(api, status, &message, s), &shape);
        }
        Action::Parts(parts) => (Some(parts), None),
        // (`take_reply` never returns a wait.)
        Action::Default | Action::Wait { .. } => (None, None),
        Action::FailMidStream { message } => (None, Some(message)),
    };
    let reasoning = match (s.config.reasoning, api) {
        (Reasoning::Off, _) | (_, Api::OpenAiChat) => false,
        (Reasoning::Always, _) => true,
        (Reasoning::WhenAsked, Api::Anthropic) => head.wants_thinking(),
        (Reasoning::WhenAsked, Api::OpenAiResponses) => head.wants_reasoning(),
        (Reasoning::WhenAsked, Api::Gemini) => head.wants_thoughts(),
    };
    let input = PlanInput {
        api,
        head: &head,
        parts,
        final_text: &s.config.final_text,
        reasoning,
        body_len: decoded.len(),
    };
    let mut plan = reply::plan(input, &s.ids);
    plan.usage = s.config.usage;
    if let Some(g) = &gemini {
        plan.gemini_sse = g.sse;
        if let Some(res) = gemini_reply_checks(&plan, &head, s) {
            return res;
        }
    }
    if let Some(p) = &prompt {
        plan.cache = if api == Api::Gemini {
            s.cache
                .serve_implicit(p, &s.config, std::time::Instant::now())
        } else {
            s.cache.serve(p, &s.config, std::time::Instant::now())
        };
        plan.input_tokens = plan
            .input_tokens
            .saturating_sub(plan.cache.read + plan.cache.creation)
            .max(1);
    }
    let stream = head.stream();
    let request_id = s.ids.next("req_");
    if let Some(message) = failure {
        if !stream {
            return with_headers(
                error(api, StatusCode::INTERNAL_SERVER_ERROR, &message, s),
                &shape,
            );
        }
        return deliver(plan.render_failure(&message), &shape, &request_id);
    }
    let rendered = match shape.pad_to {
        Some(target) => reply::pad_to(&plan, stream, target),
        None => plan.render(stream),
    };
    let mut res = deliver(rendered, &shape, &request_id);
    if shape.truncate.is_none() {
        // Noted on the request's record by the record layer, which takes the header off.
        let usage = format!(
            "{} {} {} {}",
            plan.input_tokens,
            plan.output_tokens(),
            plan.cache.read,
            plan.cache.creation
        );
        if let Ok(v) = HeaderValue::from_str(&usage) {
            res.headers_mut().insert(USAGE_HEADER, v);
        }
    }
    res
}

/// Gemini, strict mode: a scripted call must name a declared function (the real model cannot
/// call anything else; the test's script is wrong: a 400 saying so). Then notes the call the
/// reply signs, whose signature strict mode demands back within the tool loop.
fn gemini_reply_checks(plan: &reply::Plan, head: &Head, s: &Shared) -> Option<Response> {
    if s.config.strict {
        let declared = head.tools_for(Api::Gemini);
        let undeclared = plan.pieces.iter().find_map(|p| match p {
            Piece::Call { call, .. }
                if !declared
                    .iter()
                    .any(|d| d.name.as_deref() == Some(call.name.as_str())) =>
            {
                Some(call.name.as_str())
            }
            _ => None,
        });
        if let Some(name) = undeclared {
            let message = format!(
                "ctxd-mock: the scripted reply calls `{name}`, which the request does not \
                 declare (tools[].functionDeclarations)"
            );
            return Some(error(Api::Gemini, StatusCode::BAD_REQUEST, &message, s));
        }
    }
    if let Some(h) = reply::gemini::signed_call(plan) {
        let mut signed = s.gemini_signed.lock().unwrap_or_else(|p| p.into_inner());
        if signed.len() >= 200_000 {
            signed.clear();
        }
        signed.insert(h);
    }
    None
}

/// The usage a complete reply reported, from the handler to the record layer (never sent).
pub(crate) const USAGE_HEADER: &str = "x-mock-usage";

/// The reply's extra headers ([`Shape::headers`]) on `res`.
fn with_headers(mut res: Response, shape: &Shape) -> Response {
    for (name, value) in &shape.headers {
        if let (Ok(n), Ok(v)) = (
            header::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            res.headers_mut().append(n, v);
        }
    }
    res
}

/// The next scripted reply (the built-in logic when none is queued); a `wait` holds the
/// request for the reply queued after it, waits in a row each for their own. `Err`: a wait
/// that ran out, with its time.
async fn take_reply(s: &Shared) -> Result<(Action, Shape), Duration> {
    let Some(mut reply) = s.script.pop() else {
        return Ok((Action::Default, s.config.shape.clone()));
    };
    while let Action::Wait { timeout } = reply.action {
        reply = s.script.pop_within(timeout).await.ok_or(timeout)?;
    }
    Ok((reply.action, reply.shape))
}

/// A strict-mode refusal: 400 with the API's error body and the rule in [`REFUSED_HEADER`].
fn refused(api: Api, refusal: &Refusal, s: &Shared) -> Response {
    let request_id = s.ids.next("req_");
    let body = reply::refusal_body(api, refusal, &request_id);
    let mut res = json_response(StatusCode::BAD_REQUEST, body, &request_id);
    res.headers_mut()
        .insert(REFUSED_HEADER, HeaderValue::from_static(refusal.rule));
    res
}

/// The response for a rendered body: JSON with its length, or SSE chunked; paced and cut per
/// the shape.
fn deliver(rendered: Rendered, shape: &Shape, request_id: &str) -> Response {
    let (body, content_type) = match rendered {
        Rendered::Json(bytes) if shape.truncate.is_none() => {
            return with_headers(json_response(StatusCode::OK, bytes, request_id), shape);
        }
        Rendered::Json(bytes) => (
            Body::new(Frames::json(bytes, shape.truncate)),
            "application/json",
        ),
        Rendered::Sse(frames) => (
            Body::new(Frames::events(frames, shape.event_delay, shape.truncate)),
            "text/event-stream; charset=utf-8",
        ),
        Rendered::JsonStream(frames) => (
            Body::new(Frames::events(frames, shape.event_delay, shape.truncate)),
            "application/json",
        ),
    };
    let mut res = Response::new(body);
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(id) = HeaderValue::from_str(request_id) {
        h.insert("request-id", id.clone());
        h.insert("x-request-id", id);
    }
    with_headers(res, shape)
}
