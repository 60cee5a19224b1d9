//! A turn boundary, the adapter side: the engine ends the turn on the session view
//! (`ctxd_engine::turn::end_turn`: decide, draft, push into the log); this counts what it
//! decided and hands back the entries for the store, which the caller queues in the batch it is
//! writing.

use std::sync::Arc;

use ctxd_engine::windows::{TurnEnd, TurnEndOutcome, WindowPolicy};
use ctxd_engine::{now_ms, Caller};
use ctxd_store::NewEntry;

use crate::server::Gateway;
use crate::sessions::Loaded;

/// End the turn on `loaded`'s active branch: its drafts (reminder, marker and boot) go into
/// the log after the leaf. Returns what was decided and the entries to write.
pub(crate) async fn end_turn(
    app: &Arc<Gateway>,
    loaded: &mut Loaded,
    caller: &Caller,
    policy: &WindowPolicy,
    end: TurnEnd,
) -> (TurnEndOutcome, Vec<NewEntry>) {
    let ending = {
        // The counter is used by the decision, before the first await, and not held across it.
        let counter = ctxd_tokens::CachingCounter::new(ctxd_tokens::Tokenizer::for_model(
            caller.model.as_deref(),
        ));
        ctxd_engine::turn::end_turn(&app.engine, caller, loaded, policy, end, &counter, now_ms())
    };
    let (outcome, entries) = ending.await;
    if let Some(kind) = outcome.reminder {
        metrics::counter!("ctxd_reminders_total", "kind" => kind).increment(1);
    }
    if let Some((window, cause)) = &outcome.reset {
        metrics::counter!("ctxd_windows_opened_total", "cause" => *cause).increment(1);
        tracing::info!(window = %window, cause, "new context window");
    }
    (outcome, entries.into_iter().map(NewEntry::new).collect())
}
