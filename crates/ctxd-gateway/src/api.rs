//! The four wire APIs the gateway speaks: what differs between them (the array that holds the
//! conversation, how one element parses, how errors look) in one place.

use axum::http::StatusCode;
use ctxd_core::model::Message;
use ctxd_formats::wire::{anthropic, gemini, openai_chat, openai_responses, stream};
use serde_json::{json, Value};

/// A wire API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    Chat,
    /// OpenAI Responses (`POST /v1/responses`).
    Responses,
    /// Google's Gemini API (`POST /v1beta/models/{model}:generateContent`, and
    /// `:streamGenerateContent`).
    Gemini,
}

/// What a Gemini URL names: `/v1beta/models/{model}:{action}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GeminiTarget<'a> {
    pub model: &'a str,
    /// `generateContent`, `streamGenerateContent`, `countTokens`, ...
    pub action: &'a str,
}

impl<'a> GeminiTarget<'a> {
    /// The model and action of a path (a query after `?` is ignored).
    pub fn of_path(path: &'a str) -> Option<Self> {
        let path = path.split('?').next()?;
        let last = &path[path.rfind("/models/")? + "/models/".len()..];
        let (model, action) = last.rsplit_once(':')?;
        (!model.is_empty() && !model.contains('/')).then_some(GeminiTarget { model, action })
    }

    /// Whether the action asks the model for a turn.
    pub fn is_conversation(self) -> bool {
        matches!(self.action, "generateContent" | "streamGenerateContent")
    }
}

/// Whether a Gemini request streams one JSON array (`streamGenerateContent` without
/// `alt=sse`).
pub fn gemini_streams_json_array(path: &str) -> bool {
    GeminiTarget::of_path(path).is_some_and(|t| t.action == "streamGenerateContent")
        && !gemini_wants_sse(path)
}

/// Whether a Gemini stream request asks for SSE (`alt=sse`); without it the API streams one
/// JSON array.
pub fn gemini_wants_sse(path: &str) -> bool {
    path.split_once('?').is_some_and(|(_, query)| {
        query
            .split('&')
            .any(|pair| pair.eq_ignore_ascii_case("alt=sse"))
    })
}

impl Api {
    /// The metric and log label.
    pub fn route(self) -> &'static str {
        match self {
            Api::Anthropic => "messages",
            Api::Chat => "chat_completions",
            Api::Responses => "responses",
            Api::Gemini => "generate_content",
        }
    }

    /// The top-level field holding the conversation, one element per entry of the log.
    pub fn array_field(self) -> &'static str {
        match self {
            Api::Anthropic | Api::Chat => "messages",
            Api::Responses => "input",
            Api::Gemini => "contents",
        }
    }

    /// One element of the conversation array as a message of the session model. The same
    /// parsers read the importers' files and assemble responses, so an element the client echoes
    /// back parses to the message the gateway appended from the response stream.
    pub fn parse_element(self, element: &Value) -> Message {
        match self {
            Api::Anthropic => anthropic::message(element),
            Api::Chat => openai_chat::message(element),
            Api::Responses => openai_responses::item(element),
            Api::Gemini => gemini::content(element),
        }
    }

    pub fn stream_api(self) -> stream::Api {
        match self {
            Api::Anthropic => stream::Api::Anthropic,
            Api::Chat => stream::Api::OpenAiChat,
            Api::Responses => stream::Api::OpenAiResponses,
            Api::Gemini => stream::Api::Gemini,
        }
    }

    /// An error body in the API's own shape.
    pub fn error_body(self, status: StatusCode, message: &str) -> Value {
        match self {
            Api::Anthropic => json!({
                "type": "error",
                "error": {"type": anthropic_error_type(status), "message": message},
            }),
            Api::Chat | Api::Responses => json!({
                "error": {
                    "message": message,
                    "type": openai_error_type(status),
                    "param": null,
                    "code": null,
                },
            }),
            Api::Gemini => google_error(status, message),
        }
    }

    /// An error delivered inside an event stream that has already started: the client has a
    /// status 200 and must learn from the stream itself that the response failed.
    pub fn sse_error_event(self, message: &str) -> String {
        match self {
            Api::Anthropic => format!(
                "event: error\ndata: {}\n\n",
                json!({"type": "error", "error": {"type": "api_error", "message": message}})
            ),
            Api::Chat => format!(
                "data: {}\n\n",
                json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}})
            ),
            Api::Responses => format!(
                "event: error\ndata: {}\n\n",
                json!({"type": "error", "code": "server_error", "message": message, "param": null})
            ),
            Api::Gemini => format!(
                "data: {}\r\n\r\n",
                google_error(StatusCode::INTERNAL_SERVER_ERROR, message)
            ),
        }
    }
}

impl Api {
    /// The provider's error answer (`status`, `retry-after`, its body in this API's error
    /// shape) as the event ending a stream that already started: the provider's type, code and
    /// message kept, the status and the wait named in the message, since the stream's own
    /// status is 200 and carries no header any more.
    pub fn sse_provider_error(
        self,
        status: StatusCode,
        retry_after: Option<&str>,
        body: &[u8],
    ) -> String {
        let parsed: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let error = match self {
            Api::Responses => parsed.get("error").unwrap_or(&parsed),
            _ => parsed.get("error").unwrap_or(&serde_json::Value::Null),
        };
        let said = error
            .get("message")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned());
        let mut message = format!("{said} (the provider answered HTTP {}", status.as_u16());
        if let Some(wait) = retry_after {
            message.push_str(&format!("; retry-after: {wait}"));
        }
        message.push(')');
        let kind = error.get("type").and_then(serde_json::Value::as_str);
        let code = error
            .get("code")
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        match self {
            Api::Anthropic => format!(
                "event: error\ndata: {}\n\n",
                json!({"type": "error", "error": {
                    "type": kind.unwrap_or(anthropic_error_type(status)), "message": message}})
            ),
            Api::Chat => format!(
                "data: {}\n\n",
                json!({"error": {"message": message,
                    "type": kind.unwrap_or(openai_error_type(status)), "param": null, "code": code}})
            ),
            Api::Responses => format!(
                "event: error\ndata: {}\n\n",
                json!({"type": "error", "code": if code.is_null() {
                    serde_json::Value::from(openai_error_type(status)) } else { code },
                    "message": message, "param": null})
            ),
            Api::Gemini => {
                let mut body = google_error(status, &message);
                if let Some(s) = error.get("status").filter(|s| s.is_string()) {
                    body["error"]["status"] = s.clone();
                }
                format!("data: {body}\r\n\r\n")
            }
        }
    }
}

/// Google's error shape: `{"error": {"code", "message", "status"}}`, the status a gRPC code name.
fn google_error(status: StatusCode, message: &str) -> Value {
    json!({"error": {"code": status.as_u16(), "message": message, "status": google_status(status)}})
}

fn google_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 | 415 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}

fn anthropic_error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

fn openai_error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 413 | 415 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shapes_follow_each_api() {
        let a = Api::Anthropic.error_body(StatusCode::PAYLOAD_TOO_LARGE, "too big");
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "request_too_large");
        let o = Api::Chat.error_body(StatusCode::BAD_REQUEST, "bad json");
        assert_eq!(o["error"]["type"], "invalid_request_error");
        assert_eq!(o["error"]["message"], "bad json");
        let g = Api::Gemini.error_body(StatusCode::TOO_MANY_REQUESTS, "slow down");
        assert_eq!(g["error"]["code"], 429);
        assert_eq!(g["error"]["status"], "RESOURCE_EXHAUSTED");
        let ev = Api::Anthropic.sse_error_event("upstream reset");
        assert!(ev.starts_with("event: error\ndata: {"));
        assert!(ev.ends_with("\n\n"));
    }

    #[test]
    fn a_gemini_path_names_its_model_and_action() {
        let t = GeminiTarget::of_path(
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=k",
        )
        .unwrap();
        assert_eq!(
            (t.model, t.action),
            ("gemini-2.5-pro", "streamGenerateContent")
        );
        assert!(t.is_conversation());
        assert!(gemini_wants_sse(
            "/v1beta/models/m:streamGenerateContent?alt=sse&key=k"
        ));
        assert!(!gemini_wants_sse(
            "/v1beta/models/m:streamGenerateContent?key=alt=sse"
        ));
        assert_eq!(GeminiTarget::of_path("/v1beta/models"), None);
        assert!(!GeminiTarget::of_path("/v1beta/models/m:countTokens")
            .unwrap()
            .is_conversation());
    }
}
