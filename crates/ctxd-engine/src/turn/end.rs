//! The end of a turn on the session view: an answer without tool calls arrives, a request
//! carries the results that complete a tool batch (the client's, or ctxd's in a hidden round),
//! the provider refuses a request as too long. The decision is
//! [`decide_turn_end`](crate::windows::decide_turn_end) (pure); [`end_turn`] lays its drafts
//! (reminder, marker and boot) after the leaf, reading the notes for a new window's boot on a
//! blocking thread so an async worker never waits on the store, and pushes them into the log.
//! The entries are returned, not appended to the store: the caller writes them with the batch
//! it is committing.

use std::future::Future;
use std::sync::Arc;

use ctxd_core::model::{ContentBlock, Entry, EntryKind};
use ctxd_core::tokens::TokenCounter;
use ctxd_store::Store;

use super::log::SessionLog;
use super::SessionView;
use crate::windows::{decide_turn_end, TurnEnd, TurnEndInput, TurnEndOutcome, WindowPolicy};
use crate::{Caller, Engine};

/// End the turn on `view`'s active branch: decide (here, before the first await: `counter` is
/// not held across it), then lay the drafts and push them into the log. Returns what was
/// decided and the entries appended to the log, for the store.
pub fn end_turn<'a, S>(
    engine: &Arc<Engine<S>>,
    caller: &Caller,
    view: &'a mut SessionView,
    policy: &WindowPolicy,
    end: TurnEnd,
    counter: &dyn TokenCounter,
    now_ms: i64,
) -> impl Future<Output = (TurnEndOutcome, Vec<Entry>)> + Send + 'a
where
    S: Store + Send + Sync + ?Sized + 'static,
{
    let branch = view.log.branch();
    let plan = decide_turn_end(&TurnEndInput {
        session: &view.log.session,
        branch: &branch,
        end,
        policy,
        counter,
        now_ms,
    });
    let engine = engine.clone();
    let caller = caller.clone();
    async move {
        let notes = if plan.needs_notes() {
            let c = caller.clone();
            match tokio::task::spawn_blocking(move || engine.notes_snapshot(&c, now_ms)).await {
                Ok(Ok(notes)) => Some(notes),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "turn end: notes unreadable; no new window");
                    None
                }
                Err(e) => {
                    tracing::error!(error = %e, "turn end: notes task failed; no new window");
                    None
                }
            }
        } else {
            None
        };
        let (outcome, drafted) = plan.finish(
            &caller,
            &view.record,
            &view.log.session,
            &branch,
            notes.as_ref(),
        );
        // The same drafts after the same parent (a turn end decided again after a rewind) are
        // the entries already there: the leaf moves to them, nothing is written again.
        let mut entries = Vec::with_capacity(drafted.len());
        for entry in drafted {
            match view.log.position(&entry.id) {
                Some(pos) => view.log.set_leaf(pos),
                None => {
                    view.log.push(entry.clone());
                    entries.push(entry);
                }
            }
        }
        (outcome, entries)
    }
}

/// Whether the entries a request appended (`appended`, positions in `log`) complete a tool
/// batch: they carry tool results (checked first: the branch walk costs more) and every call of
/// the batch on the branch now has its result. Such a request ends the turn that called the
/// tools, before it is projected.
pub fn completes_batch(log: &SessionLog, appended: &[usize]) -> bool {
    let carries_results = appended.iter().any(|&pos| {
        matches!(log.entry(pos).map(|e| &e.kind), Some(EntryKind::Message(m))
            if m.content.iter().any(|b| matches!(b, ContentBlock::ToolResult { .. })))
    });
    carries_results && ctxd_core::windows::batch_complete(&log.session, &log.branch())
}
