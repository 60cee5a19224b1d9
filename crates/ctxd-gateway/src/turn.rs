//! A turn boundary on the gateway's copy of a session's log, the one path for the three places
//! where a turn ends: an answer without tool calls arrives, a request carries the results that
//! complete a tool batch, the provider refuses a request as too long. The engine's pure
//! decision, the notes read for a new window's boot (on a blocking thread), the drafts pushed
//! into the log; the caller queues them for the store in the batch it is writing.

use std::sync::Arc;

use ctxd_core::model::{ContentBlock, EntryKind};
use ctxd_engine::windows::{decide_turn_end, TurnEnd, TurnEndInput, TurnEndOutcome, WindowPolicy};
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
    let now = now_ms();
    let plan = decide_turn_end(&TurnEndInput {
        session: &loaded.log.session,
        branch,
        end,
        policy,
        counter: &counter,
        now_ms: now,
    });
    let notes = if plan.needs_notes() {
        let engine = app.engine.clone();
        let c = caller.clone();
        match tokio::task::spawn_blocking(move || engine.notes_snapshot(&c, now)).await {
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
    let (outcome, entries) = plan.finish(
        caller,
        &loaded.record,
        &loaded.log.session,
        branch,
        notes.as_ref(),
    );
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
