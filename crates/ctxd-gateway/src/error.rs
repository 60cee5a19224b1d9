//! The one error a gateway route answers with when ctxd itself refuses or cannot serve a
//! request: rendered in the API's own error shape (what the client's SDK parses), counted, and
//! with `retry-after` on every 503 (each of ctxd's is temporary: the store, the budget of bodies
//! in flight, a repaired window), which SDKs honour.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::api::Api;

#[derive(Debug)]
pub(crate) struct ApiError {
    api: Api,
    status: StatusCode,
    message: String,
}

impl ApiError {
    pub(crate) fn new(api: Api, status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            api,
            status,
            message: message.into(),
        }
    }

    /// A fault of ctxd's own (a task that died, a state that should be there).
    pub(crate) fn internal(api: Api, message: &str) -> Self {
        Self::new(
            api,
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("ctxd: {message}"),
        )
    }

    /// The body is over `--max-body-bytes` (declared, as sent, or once decompressed).
    pub(crate) fn too_large(api: Api, limit: usize) -> Self {
        Self::new(
            api,
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body is larger than the gateway's limit of {limit} bytes"),
        )
    }

    /// The budget of bodies in flight is spent.
    pub(crate) fn busy(api: Api) -> Self {
        Self::new(
            api,
            StatusCode::SERVICE_UNAVAILABLE,
            "ctxd: too many large request bodies in flight; retry shortly",
        )
    }

    #[cfg(test)]
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        metrics::counter!("ctxd_rejected_total", "route" => self.api.route(), "status" => self.status.as_str().to_owned())
            .increment(1);
        let body = self.api.error_body(self.status, &self.message);
        let mut r = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

/// For the routes whose early answer is either an error or a response relayed as is.
impl From<ApiError> for Response {
    fn from(e: ApiError) -> Self {
        e.into_response()
    }
}
