//! The generation routes: read the few body fields that matter, refuse what the real API
//! refuses (strict mode; before the script, so a refusal consumes no scripted reply), take the
//! next scripted reply (or the turn logic's), render, and deliver with the reply's [`Shape`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::json;

use crate::body;
use crate::cache;
use crate::config::Reasoning;
use crate::reply::{self, PlanInput, Rendered};
use crate::request::Head;
use crate::router::{error, json_response};
use crate::script::{Action, Shape};
use crate::server::Shared;
use crate::sse::Frames;
use crate::validate::{self, Refusal, REFUSED_HEADER};
use crate::Api;

pub(crate) async fn anthropic(s: State<Arc<Shared>>, h: HeaderMap, body: Bytes) -> Response {
    generate(Api::Anthropic, &s, &h, &body).await
}

pub(crate) async fn chat(s: State<Arc<Shared>>, h: HeaderMap, body: Bytes) -> Response {
    generate(Api::OpenAiChat, &s, &h, &body).await
}

pub(crate) async fn responses(s: State<Arc<Shared>>, h: HeaderMap, body: Bytes) -> Response {
    generate(Api::OpenAiResponses, &s, &h, &body).await
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

async fn generate(api: Api, s: &Shared, headers: &HeaderMap, raw: &Bytes) -> Response {
    let decoded = match body::decode(headers, raw, s.config.body_limit) {
        Ok(decoded) => decoded,
        Err(e) => return error(api, StatusCode::BAD_REQUEST, &e.to_string(), s),
    };
    let head: Head = match serde_json::from_slice(&decoded) {
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
    if s.config.strict {
        if let Err(refusal) = validate::check(api, &head, decoded.len(), headers, &s.config) {
            return refused(api, &refusal, s);
        }
    }
    // Anthropic's prompt cache, for a request that marks breakpoints (any other reads and
    // writes nothing, as on the real API).
    let prompt = (api == Api::Anthropic
        && memchr::memmem::find(&decoded, b"\"cache_control\"").is_some())
    .then(|| s.cache.prompt(&decoded, head.model(), &s.config))
    .flatten();
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
    if let Some(p) = &prompt {
        plan.cache = s.cache.serve(p, &s.config, std::time::Instant::now());
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
        return deliver(
            Rendered::Sse(plan.render_failure(&message)),
            &shape,
            &request_id,
        );
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
