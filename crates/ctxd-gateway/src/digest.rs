//! Shell-output digests on a request, the adapter side: the engine's three steps
//! (`ctxd_engine::digest::{prepare, Summarizer::summarize, commit}`) over the session's log,
//! run while the request is planned, under the session's lock, before the turn end and the
//! projection: the model never sees a digested output whole, and the edits go to the store in
//! the request's own batch.

use std::sync::Arc;

use ctxd_engine::digest::{self, DigestContext};
use ctxd_engine::turn::RequestPlan;
use ctxd_engine::Caller;
use ctxd_store::NewEntry;

use crate::server::Gateway;
use crate::sessions::Loaded;

/// The digests of `plan`'s new elements, appended to the log after them; the entries for the
/// request's batch. `recall`: the model is offered `recall` (the digests name it).
pub(crate) async fn apply(
    app: &Arc<Gateway>,
    loaded: &mut Loaded,
    plan: &RequestPlan,
    caller: &Caller,
    recall: bool,
    now: &str,
) -> Vec<NewEntry> {
    let new = &plan.element_entries[plan.matched.min(plan.element_entries.len())..];
    if new.is_empty() {
        return Vec::new();
    }
    let cfg = &app.settings.digest;
    let cx = DigestContext {
        agent: caller.agent.as_deref(),
        recall,
        store_session: Some(loaded.record.id),
        summarized: app.summarizer.is_model(),
    };
    let mut prepared = {
        // The counter is used before the first await, and not held across it.
        let counter = ctxd_tokens::CachingCounter::new(ctxd_tokens::Tokenizer::for_model(
            caller.model.as_deref(),
        ));
        digest::prepare(&loaded.log, new, cfg, cx, &counter)
    };
    if prepared.is_empty() {
        return Vec::new();
    }
    app.summarizer.summarize(&mut prepared, cfg).await;
    for p in &prepared.digests {
        metrics::counter!("ctxd_digests_total", "source" => p.source).increment(1);
    }
    digest::commit(&mut loaded.log, prepared, now)
}
