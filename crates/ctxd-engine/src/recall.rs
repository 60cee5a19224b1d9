//! The `recall` tool: an entry's raw content by id (never the edited view), whole, by line
//! range or by pattern; an omitted exchange as a transcript. The rules are the core's
//! ([`ctxd_core::recall`]).

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use ctxd_core::model::{Entry, EntryId};
use ctxd_core::recall::{self as r, Selection};
use ctxd_core::tree::active_branch;
use ctxd_store::Store;

use crate::tools::{parameters, parse, ToolOutput, ToolSpec};
use crate::{Caller, Engine, EngineError};

/// `recall`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecallArgs {
    /// The entry id.
    #[serde(rename = "entryId")]
    entry_id: String,
    /// Only lines matching this regex (Rust syntax; each line is matched on its first 4,000
    /// characters).
    #[schemars(length(max = r::MAX_PATTERN_CHARS))]
    pattern: Option<String>,
    /// First line to show (1-based).
    #[schemars(range(min = 1))]
    offset: Option<i64>,
    /// At most this many lines.
    #[schemars(range(min = 1))]
    limit: Option<i64>,
}

/// The tools of this module.
pub fn specs() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "recall",
        description: "Show the full original content of an entry whose output was shortened or omitted from context (the id in a recall({\"entryId\":…}) note). An omitted exchange comes back as a transcript. Optional pattern (regex; matching lines with line numbers) or offset/limit (lines). Output is capped at 2,000 lines / 50 KB with a note on how to continue.",
        parameters: parameters::<RecallArgs>(),
    }]
}

impl<S: Store + ?Sized> Engine<S> {
    /// The text `recall` returns for `entry_id` in the caller's session.
    pub fn recall(
        &self,
        caller: &Caller,
        entry_id: &str,
        selection: &Selection,
    ) -> Result<String, EngineError> {
        let id = caller.session.ok_or(EngineError::NoSession("recall"))?;
        self.store
            .history_owned(&caller.tenant, id)?
            .ok_or_else(|| EngineError::invalid(format!("no session {id} for this caller")))?;
        // An item id of the history tools (`i_…`, what boots and checkpoints show) names the
        // same entry as its own id: one id scheme for everything the model reads.
        // The index is brought up to date first: a distillation pass names items of entries
        // the writer may not have indexed yet.
        let by_item = match ctxd_core::history::parse_item_id(entry_id) {
            Ok(key) => {
                self.store.history_sync(id)?;
                self.store.history_item(id, key)?.into_iter().next()
            }
            Err(_) => None,
        };
        let entry = match by_item {
            Some(row) => row.entry,
            None => self
                .store
                .entry(id, &EntryId::new(entry_id))?
                .ok_or_else(|| EngineError::invalid(r::unknown_entry(entry_id)))?,
        };
        let text = if r::is_prompt(&entry.kind) {
            // A prompt may head an omitted exchange: that needs the branch and its edits.
            let session = self.store.load(id)?;
            let branch = active_branch(&session);
            let omitted = session
                .entries
                .iter()
                .position(|e| e.id == entry.id)
                .map(|pos| r::omitted_exchange(&session, &branch, pos))
                .unwrap_or_default();
            if omitted.is_empty() {
                r::entry_text(&entry.kind)
            } else {
                let mut parts: Vec<&Entry> = vec![&entry];
                parts.extend(omitted.iter().filter_map(|&p| session.entries.get(p)));
                r::transcript(&parts)
            }
        } else {
            r::entry_text(&entry.kind)
        };
        Ok(r::render(entry_id, &text, selection))
    }
}

fn run<S: Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
    args: &Value,
) -> Result<ToolOutput, EngineError> {
    let a: RecallArgs = parse("recall", args)?;
    if a.entry_id.is_empty() {
        return Err(EngineError::invalid(
            "recall: entryId is empty (the id in a recall({\"entryId\":…}) note)",
        ));
    }
    let selection = Selection::new(a.pattern.as_deref(), a.offset, a.limit)
        .map_err(|e| EngineError::invalid(format!("recall: {e}")))?;
    Ok(ToolOutput::ok(engine.recall(
        caller,
        &a.entry_id,
        &selection,
    )?))
}

/// Run `name` if it is one of this module's tools.
pub(crate) fn call<S: ctxd_store::Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
    name: &str,
    args: &Value,
) -> Option<Result<ToolOutput, EngineError>> {
    (name == "recall").then(|| run(engine, caller, args))
}
