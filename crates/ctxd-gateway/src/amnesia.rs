//! Meta-amnesia on a request, the adapter side: the engine's three steps
//! (`ctxd_engine::amnesia::{prepare, judge, commit}`) over the session's log, run while the
//! request is planned (after the digests, before the turn end and the projection), under the
//! session's lock: a dropped round never goes upstream, and its record and edits go to the
//! store in the request's own batch.

use std::sync::Arc;

use ctxd_engine::amnesia;
use ctxd_engine::distill::Classifier;
use ctxd_engine::turn::RequestPlan;
use ctxd_engine::Caller;
use ctxd_store::NewEntry;

use crate::server::Gateway;
use crate::sessions::Loaded;

/// The judgment of the round `plan`'s new elements end, appended to the log after them; the
/// entries for the request's batch.
pub(crate) async fn apply(
    app: &Arc<Gateway>,
    loaded: &mut Loaded,
    plan: &RequestPlan,
    caller: &Caller,
    now: &str,
) -> Vec<NewEntry> {
    let new = &plan.element_entries[plan.matched.min(plan.element_entries.len())..];
    if new.is_empty() {
        return Vec::new();
    }
    let prepared = {
        // The counter is used before the first await, and not held across it.
        let counter = ctxd_tokens::CachingCounter::new(ctxd_tokens::Tokenizer::for_model(
            caller.model.as_deref(),
        ));
        amnesia::prepare(
            &loaded.log,
            new,
            caller.agent.as_deref(),
            &app.settings.amnesia,
            &counter,
        )
    };
    let Some(prepared) = prepared else {
        return Vec::new();
    };
    let judged = amnesia::judge(&app.judge, prepared, app.settings.amnesia_budget).await;
    let (record, entries) = amnesia::commit(&mut loaded.log, judged, app.judge.name(), now);
    for j in &record.judgments {
        let decision = match j.decision {
            ctxd_core::wm::amnesia::Decision::Retain => "retain",
            ctxd_core::wm::amnesia::Decision::Drop => "drop",
        };
        metrics::counter!("ctxd_amnesia_judgments_total", "decision" => decision).increment(1);
    }
    if !record.pruned.is_empty() {
        metrics::counter!("ctxd_amnesia_pruned_rounds_total").increment(1);
        metrics::counter!("ctxd_amnesia_removed_tokens_total").increment(record.removed_tokens);
    }
    entries
}
