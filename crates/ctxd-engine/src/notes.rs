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

impl<S: ctxd_store::Store> Engine<S> {
    /// Every home's notes for `caller`, read once (the boot's notes index is rendered from it).
    /// Placeholder until the notes store lands: every home empty.
    pub fn notes_snapshot(
        &self,
        _caller: &Caller,
        opened_at_ms: i64,
    ) -> Result<ctxd_core::notes::NotesSnapshot, EngineError> {
        Ok(ctxd_core::notes::NotesSnapshot {
            opened_at_ms,
            ..Default::default()
        })
    }
}
