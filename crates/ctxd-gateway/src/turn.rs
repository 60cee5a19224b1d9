//! A turn boundary on the gateway's copy of a session's log, for the places where a turn ends:
//! an answer without tool calls arrives, a request carries the results that complete a tool
//! batch (the client's, or ctxd's in a hidden round), the provider refuses a request as too
//! long. The engine decides and drafts (`ctxd_engine::windows::end_turn_on`); this adapter
//! pushes the drafts into the log and counts them; the caller queues them for the store in the
//! batch it is writing.

use std::sync::Arc;

use ctxd_core::model::{ContentBlock, EntryKind};
use ctxd_engine::windows::{end_turn_on, TurnEnd, TurnEndInput, TurnEndOutcome, WindowPolicy};
use ctxd_engine::{now_ms, Caller};
use ctxd_store::NewEntry;

use crate::log::SessionLog;
use crate::server::Gateway;
use crate::sessions::Loaded;

/// Decide the boundary on `loaded`'s active branch (`branch`, root first, as the caller has
/// it) and push its drafts (reminder, marker and boot) into the log after the leaf. Returns
/// what was decided and the entries to write.
pub(crate) async fn end_turn(
    app: &Arc<Gateway>,
    loaded: &mut Loaded,
    branch: &[usize],
    caller: &Caller,
    policy: &WindowPolicy,
    end: TurnEnd,
) -> (TurnEndOutcome, Vec<NewEntry>) {
    let counter = ctxd_tokens::CachingCounter::new(ctxd_tokens::Tokenizer::for_model(
        caller.model.as_deref(),
    ));
    let deciding = {
        // The decision runs here, before the first await (the input is not held across it).
        let input = TurnEndInput {
            session: &loaded.log.session,
            branch,
            end,
            policy,
            counter: &counter,
            now_ms: now_ms(),
        };
        end_turn_on(&app.engine, caller, &loaded.record, &input)
    };
    let (outcome, entries) = deciding.await;
    if let Some(kind) = outcome.reminder {
        metrics::counter!("ctxd_reminders_total", "kind" => kind).increment(1);
    }
    if let Some((window, cause)) = &outcome.reset {
        metrics::counter!("ctxd_windows_opened_total", "cause" => *cause).increment(1);
        tracing::info!(window = %window, cause, "new context window");
    }
    let batch = entries
        .into_iter()
        .map(|entry| {
            loaded.log.push(entry.clone());
            NewEntry::new(entry)
        })
        .collect();
    (outcome, batch)
}

/// Whether the entries a request appended (positions in `log`) carry tool results: only then
/// can the request complete a tool batch (checked on the branch, which costs a walk of it).
pub(crate) fn carries_results(log: &SessionLog, appended: &[usize]) -> bool {
    appended.iter().any(|&pos| {
        matches!(log.entry(pos).map(|e| &e.kind), Some(EntryKind::Message(m))
            if m.content.iter().any(|b| matches!(b, ContentBlock::ToolResult { .. })))
    })
}
