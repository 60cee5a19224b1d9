//! Placeholder: being written.

use serde_json::Value;

use crate::tools::{ToolOutput, ToolSpec};
use crate::{Caller, Engine, EngineError};

/// The tools of this module.
pub fn specs() -> Vec<ToolSpec> {
    Vec::new()
}

/// Run `name` if it is one of this module's tools.
pub(crate) fn call<S: ctxd_store::Store>(
    _engine: &Engine<S>,
    _caller: &Caller,
    _name: &str,
    _args: &Value,
) -> Option<Result<ToolOutput, EngineError>> {
    None
}
