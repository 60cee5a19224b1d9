//! Each API's error body for an HTTP error status.

use serde_json::json;

use crate::validate::Refusal;
use crate::Api;

/// Anthropic: `{"type":"error","error":{"type","message"},"request_id"}`;
/// OpenAI: `{"error":{"message","type","param","code"}}`.
pub(crate) fn error_body(api: Api, status: u16, message: &str, request_id: &str) -> Vec<u8> {
    let body = match api {
        Api::Anthropic => json!({
            "type": "error",
            "error": {"type": anthropic_type(status), "message": message},
            "request_id": request_id,
        }),
        Api::OpenAiChat | Api::OpenAiResponses => {
            let (kind, code) = openai_type(status);
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        }
        Api::Gemini => google(status, message),
    };
    body.to_string().into_bytes()
}

/// Google's error object: `{"error":{"code","message","status"}}`, the status the canonical
/// gRPC code of the HTTP status.
pub(crate) fn google(status: u16, message: &str) -> serde_json::Value {
    json!({"error": {"code": status, "message": message, "status": google_status(status)}})
}

fn google_status(status: u16) -> &'static str {
    match status {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 | 405 => "NOT_FOUND",
        409 => "ABORTED",
        412 => "FAILED_PRECONDITION",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        400..=499 => "INVALID_ARGUMENT",
        _ => "UNKNOWN",
    }
}

/// A strict-mode refusal (400): Anthropic's `invalid_request_error`, or OpenAI's with the
/// refusal's `param` and `code`.
pub(crate) fn refusal_body(api: Api, refusal: &Refusal, request_id: &str) -> Vec<u8> {
    let body = match api {
        Api::Anthropic => json!({
            "type": "error",
            "error": {"type": "invalid_request_error", "message": refusal.message},
            "request_id": request_id,
        }),
        Api::OpenAiChat | Api::OpenAiResponses => json!({"error": {
            "message": refusal.message,
            "type": "invalid_request_error",
            "param": refusal.param,
            "code": refusal.code,
        }}),
        Api::Gemini => google(400, &refusal.message),
    };
    body.to_string().into_bytes()
}

fn anthropic_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

fn openai_type(status: u16) -> (&'static str, Option<&'static str>) {
    match status {
        401 => ("invalid_request_error", Some("invalid_api_key")),
        403 => (
            "invalid_request_error",
            Some("unsupported_country_region_territory"),
        ),
        404 => ("invalid_request_error", Some("model_not_found")),
        429 => ("requests", Some("rate_limit_exceeded")),
        500..=599 => ("server_error", None),
        _ => ("invalid_request_error", None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn shapes_per_api() {
        let a: Value =
            serde_json::from_slice(&error_body(Api::Anthropic, 529, "busy", "req_1")).unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "overloaded_error");
        assert_eq!(a["error"]["message"], "busy");
        let o: Value =
            serde_json::from_slice(&error_body(Api::OpenAiChat, 429, "slow", "r")).unwrap();
        assert_eq!(o["error"]["type"], "requests");
        assert_eq!(o["error"]["code"], "rate_limit_exceeded");
        assert_eq!(o["error"]["message"], "slow");
        let g: Value = serde_json::from_slice(&error_body(Api::Gemini, 429, "quota", "r")).unwrap();
        assert_eq!(
            g,
            serde_json::json!({"error": {"code": 429, "message": "quota",
                "status": "RESOURCE_EXHAUSTED"}})
        );
        for (status, name) in [
            (400, "INVALID_ARGUMENT"),
            (401, "UNAUTHENTICATED"),
            (403, "PERMISSION_DENIED"),
            (404, "NOT_FOUND"),
            (500, "INTERNAL"),
            (503, "UNAVAILABLE"),
        ] {
            assert_eq!(google(status, "m")["error"]["status"], name);
        }
    }
}
