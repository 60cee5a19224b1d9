//! Placeholder: being written.

use serde_json::Value;

use ctxd_core::model::Session;

use crate::error::{ImportError, Warning};

pub(crate) fn import(_doc: &Value, _warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
    Err(ImportError::Malformed {
        format: "swe_agent",
        message: "not implemented yet".into(),
    })
}
