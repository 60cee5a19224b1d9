//! The dashboard's one error type: each variant knows its status, and the body is always
//! `{"error": "..."}` (the page's script shows the message; a test reads it).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// Beyond loopback without a key: the page asks for one.
    #[error("an API key (x-api-key), a ctxd key (x-ctxd-key) or the operator token is needed beyond loopback")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(&'static str),
    /// Unknown, or another tenant's (the two are answered alike: nothing leaks existence).
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadRequest(String),
    #[error("store: {0}")]
    Store(#[from] ctxd_store::StoreError),
    #[error("the dashboard's store connection is unavailable: {0}")]
    Unavailable(String),
}

impl UiError {
    fn status(&self) -> StatusCode {
        match self {
            UiError::Unauthorized => StatusCode::UNAUTHORIZED,
            UiError::Forbidden(_) => StatusCode::FORBIDDEN,
            UiError::NotFound(_) => StatusCode::NOT_FOUND,
            UiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            UiError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            UiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl From<ctxd_engine::EngineError> for UiError {
    fn from(e: ctxd_engine::EngineError) -> Self {
        match e {
            ctxd_engine::EngineError::Store(s) => UiError::Store(s),
            other => UiError::BadRequest(other.to_string()),
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        if matches!(self, UiError::Store(_) | UiError::Unavailable(_)) {
            tracing::warn!(error = %self, "dashboard query failed");
        }
        let body = serde_json::json!({ "error": self.to_string() });
        (
            self.status(),
            [(axum::http::header::CACHE_CONTROL, "no-store")],
            axum::Json(body),
        )
            .into_response()
    }
}
