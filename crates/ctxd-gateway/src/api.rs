//! The three wire APIs the gateway speaks: what differs between them (the array that holds the
//! conversation, how one element parses, how errors look) in one place.

use axum::http::StatusCode;
use ctxd_core::model::Message;
use ctxd_formats::wire::{anthropic, openai_chat, openai_responses, stream};
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
}

impl Api {
    /// The metric and log label.
    pub fn route(self) -> &'static str {
        match self {
            Api::Anthropic => "messages",
            Api::Chat => "chat_completions",
            Api::Responses => "responses",
        }
    }

    /// The top-level field holding the conversation, one element per entry of the log.
    pub fn array_field(self) -> &'static str {
        match self {
            Api::Anthropic | Api::Chat => "messages",
            Api::Responses => "input",
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
        }
    }

    pub fn stream_api(self) -> stream::Api {
        match self {
            Api::Anthropic => stream::Api::Anthropic,
            Api::Chat => stream::Api::OpenAiChat,
            Api::Responses => stream::Api::OpenAiResponses,
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
        }
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
        let ev = Api::Anthropic.sse_error_event("upstream reset");
        assert!(ev.starts_with("event: error\ndata: {"));
        assert!(ev.ends_with("\n\n"));
    }
}
