//! The model-facing tools: one registry of JSON schemas and one dispatcher.
//!
//! Each feature module contributes its specs and executes its own tools; this module only lists
//! them. The gateway injects these specs into requests and runs the calls server-side; the MCP
//! server serves the same registry. A tool's arguments are a typed struct ([`args`]): its schema
//! is derived from the type, and a call is read into it.

mod args;

pub(crate) use args::{parameters, parse, Whole};

use serde::Serialize;
use serde_json::Value;

use crate::{Caller, Engine, EngineError};

/// A tool as the model is offered it.
#[derive(Clone, Debug, Serialize)]
pub struct ToolSpec {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}

/// What a tool returns to the model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolOutput {
    pub text: String,
    /// A failure the model should see (bad arguments, unknown note...), not an engine failure.
    pub is_error: bool,
    /// A record the caller appends to the log after the result (`find_capability`'s
    /// activation): the tool reads the store, the gateway owns the session's writes.
    #[serde(skip)]
    pub record: Option<ctxd_core::model::EntryKind>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: false,
            record: None,
        }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            is_error: true,
            record: None,
        }
    }
}

/// Every tool ctxd offers.
pub fn specs() -> Vec<ToolSpec> {
    let mut all = Vec::new();
    all.extend(crate::windows::specs());
    all.extend(crate::notes::specs());
    all.extend(crate::history::specs());
    all.extend(crate::recall::specs());
    all.extend(crate::lazy::specs());
    all
}

/// The names of every tool ctxd offers, in the registry's order (built once: the gateway asks
/// on every request).
pub fn names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| specs().iter().map(|s| s.name).collect())
}

impl<S> Engine<S>
where
    S: ctxd_store::Store + ?Sized,
{
    /// Run tool `name` with `args` for `caller`. Invalid arguments come back as an error output
    /// (the model can correct itself); store failures as `Err`.
    pub fn call_tool(
        &self,
        caller: &Caller,
        name: &str,
        args: &Value,
    ) -> Result<ToolOutput, EngineError> {
        let result = if let Some(r) = crate::windows::call(self, caller, name, args) {
            r
        } else if let Some(r) = crate::notes::call(self, caller, name, args) {
            r
        } else if let Some(r) = crate::history::call(self, caller, name, args) {
            r
        } else if let Some(r) = crate::recall::call(self, caller, name, args) {
            r
        } else if let Some(r) = crate::lazy::call(self, caller, name, args) {
            r
        } else {
            return Err(EngineError::UnknownTool(name.to_owned()));
        };
        match result {
            Err(EngineError::Invalid(message)) => Ok(ToolOutput::error(message)),
            other => other,
        }
    }
}
