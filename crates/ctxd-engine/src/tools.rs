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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ctxd_store::SqliteStore;
    use serde_json::json;

    use super::*;
    use crate::{history, lazy, notes, recall, windows};

    /// Every tool's schema is its arguments' type's, and no tool is left out.
    #[test]
    fn every_schema_is_derived_from_its_arguments_type() {
        let derived = [
            ("new_context", parameters::<windows::NoArguments>()),
            ("wipe_memory", parameters::<windows::NoArguments>()),
            (
                "get_context_remaining",
                parameters::<windows::NoArguments>(),
            ),
            ("notes_write", parameters::<notes::args::Write>()),
            ("notes_append", parameters::<notes::args::Append>()),
            ("notes_read", parameters::<notes::args::Read>()),
            ("notes_list", parameters::<notes::args::List>()),
            ("notes_search", parameters::<notes::args::Search>()),
            ("notes_delete", parameters::<notes::args::Delete>()),
            ("notes_rename", parameters::<notes::args::Rename>()),
            ("notes_mark_stale", parameters::<notes::args::MarkStale>()),
            (
                "history_list_windows",
                parameters::<history::args::ListWindows>(),
            ),
            (
                "history_list_items",
                parameters::<history::args::ListItems>(),
            ),
            ("history_read_item", parameters::<history::args::ReadItem>()),
            (
                "history_search_contents",
                parameters::<history::args::SearchContents>(),
            ),
            ("recall", parameters::<recall::RecallArgs>()),
            ("find_capability", parameters::<lazy::FindCapabilityArgs>()),
        ];
        let specs = specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
        let typed: Vec<&str> = derived.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, typed);
        for (spec, (_, schema)) in specs.iter().zip(&derived) {
            assert_eq!(&spec.parameters, schema, "{}", spec.name);
            // The plain shape: an object, unknown fields refused, nothing Rust-specific.
            assert_eq!(schema["type"], "object", "{}", spec.name);
            assert_eq!(schema["additionalProperties"], false, "{}", spec.name);
            let text = schema.to_string();
            for rust in [
                "\"format\"",
                "\"null\"",
                "$schema",
                "$defs",
                "$ref",
                "\"title\"",
            ] {
                assert!(!text.contains(rust), "{}: {rust} in {text}", spec.name);
            }
        }
    }

    /// An unknown argument is refused with an error naming it and only arguments that exist;
    /// the argument-less window tools are the exception (a reset counts by the call's name, see
    /// `windows::call`), tested with them.
    #[test]
    fn unknown_arguments_are_refused_naming_the_field() {
        let engine = Engine::new(SqliteStore::open_in_memory().unwrap());
        let caller = Caller::default();
        for spec in specs() {
            if spec.parameters["properties"] == json!({}) {
                continue;
            }
            let out = engine
                .call_tool(&caller, spec.name, &json!({"colour": "red"}))
                .unwrap();
            let prefix = format!("{}: unknown field `colour`, expected ", spec.name);
            assert!(
                out.is_error && out.text.starts_with(&prefix),
                "{}: {}",
                spec.name,
                out.text
            );
            let named: Vec<&str> = out.text[prefix.len()..]
                .split('`')
                .skip(1)
                .step_by(2)
                .collect();
            assert!(!named.is_empty(), "{}", out.text);
            for field in named {
                assert!(
                    spec.parameters["properties"].get(field).is_some(),
                    "{}: {field} is not an argument",
                    spec.name
                );
            }
        }
    }

    #[test]
    fn a_bad_argument_is_named_with_what_is_wrong() {
        let engine = Engine::new(SqliteStore::open_in_memory().unwrap());
        let caller = Caller::default();
        let error = |name: &str, args: Value| {
            let out = engine.call_tool(&caller, name, &args).unwrap();
            assert!(out.is_error, "{name} {args}: {}", out.text);
            out.text
        };
        assert_eq!(
            error("notes_read", json!({"path": "a.md", "start_line": "two"})),
            "notes_read: start_line: invalid type: string \"two\", expected a whole number"
        );
        assert_eq!(
            error(
                "history_read_item",
                json!({"item_id": "i_1", "limit_chars": -1})
            ),
            "history_read_item: limit_chars: invalid value: integer `-1`, expected a whole \
             number from 0"
        );
        assert_eq!(
            error("recall", json!({"pattern": "x"})),
            "recall: missing field `entryId`"
        );
        assert_eq!(
            error("find_capability", json!({"query": ["web"]})),
            "find_capability: query: invalid type: sequence, expected a string"
        );
        assert_eq!(
            error("notes_list", json!("prefix=plans/")),
            "notes_list: arguments must be a JSON object"
        );
    }
}
