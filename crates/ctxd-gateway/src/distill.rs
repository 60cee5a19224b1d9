//! Distillation at turn ends, in the background: the adapter around the core's pass
//! (`ctxd_core::distill::{plan, decide}`) and the engine's classifier runner
//! (`ctxd_engine::distill::ask`).
//!
//! A pass starts once a response's turn is committed (the client already has the answer): a
//! run-end pass after an answer without tool calls, a mid-run checkpoint after one that called
//! tools (the planner decides whether a checkpoint pays off). Its three steps hold the
//! session's lock only while they read or write the log:
//!
//! 1. plan, on a blocking thread, under the lock (a pure read of the branch);
//! 2. ask the classifier, without the lock (a remote classifier may take seconds);
//! 3. decide and append, under the lock again, only if the branch has not moved since the plan:
//!    the edits go into the log and to the store before the session's next request is
//!    projected. A request that came first went upstream as it would have; the next boundary's
//!    pass judges again from the log (passes keep no state of their own).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ctxd_core::distill::{self, Config, Phase};
use ctxd_core::model::{ContentBlock, EntryId, EntryKind, Role};
use ctxd_engine::distill::{ask, Classifier, Limits, LocalClassifier};
use ctxd_store::NewEntry;

use crate::hash;
use crate::log::SessionLog;
use crate::server::Gateway;
use crate::sessions::Slot;
use crate::writer::Job;

/// The phase of a pass at the end of `branch`: a run end after an answer without tool calls,
/// a mid-run checkpoint after one with calls; `None` when the branch does not end with an
/// answer (an abort, a failed turn).
pub(crate) fn phase_at_end(log: &SessionLog, branch: &[usize]) -> Option<Phase> {
    let last = branch
        .iter()
        .rev()
        .find_map(|&p| match &log.entry(p)?.kind {
            EntryKind::Message(m) if m.role != Role::System && m.role != Role::Developer => Some(m),
            _ => None,
        })?;
    if last.role != Role::Assistant {
        return None;
    }
    let calls = last
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall { .. }));
    Some(if calls { Phase::MidRun } else { Phase::RunEnd })
}

/// What the plan step hands the ask and decide steps.
struct Planned {
    plan: distill::Plan,
    config: Config,
    /// The leaf the plan was laid out on (its position and id), and the log's length then:
    /// the decision is taken only on that same log.
    leaf: (usize, EntryId),
    len: usize,
}

/// A pass counted on its session from the turn's commit until the pass is over: the session's
/// next request waits for it (a bounded time, [`crate::Settings::distill_wait`]).
pub(crate) struct Ticket {
    slot: Arc<Slot>,
}

impl Ticket {
    pub(crate) fn take(slot: &Arc<Slot>) -> Self {
        slot.distilling.fetch_add(1, Ordering::AcqRel);
        Ticket { slot: slot.clone() }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.slot.distilling.fetch_sub(1, Ordering::AcqRel);
        self.slot.distilled.notify_waiters();
    }
}

/// Start a pass of the ticket's session in the background (see the module docs).
pub(crate) fn start(app: Arc<Gateway>, ticket: Ticket) {
    tokio::spawn(async move {
        let slot = ticket.slot.clone();
        let started = std::time::Instant::now();
        let planning = {
            let slot = slot.clone();
            tokio::task::spawn_blocking(move || plan(&slot))
        };
        let Ok(Some(planned)) = planning.await else {
            return;
        };
        let classifier = LocalClassifier;
        let answered = ask(&classifier, &planned.plan, &Limits::default()).await;
        let name = classifier.name().to_owned();
        let appended = {
            let app = app.clone();
            let slot = slot.clone();
            tokio::task::spawn_blocking(move || conclude(&app, &slot, planned, answered, &name))
        };
        let outcome = match appended.await {
            Ok(Some(n)) => {
                metrics::counter!("ctxd_distill_passes_total", "outcome" => "edited").increment(1);
                tracing::debug!(
                    entries = n,
                    ms = started.elapsed().as_millis() as u64,
                    "distillation pass"
                );
                "edited"
            }
            Ok(None) => "late",
            Err(_) => "failed",
        };
        if outcome != "edited" {
            metrics::counter!("ctxd_distill_passes_total", "outcome" => outcome).increment(1);
        }
        metrics::histogram!("ctxd_distill_pass_seconds").record(started.elapsed().as_secs_f64());
        drop(ticket);
    });
}

/// Step 1: lay the pass out on the session's branch as it is now. `None`: nothing to judge.
fn plan(slot: &Slot) -> Option<Planned> {
    let state = slot.state.blocking_lock();
    if slot.stale.load(Ordering::Acquire) {
        return None;
    }
    let loaded = state.as_ref()?;
    let log = &loaded.log;
    let branch = log.branch();
    let phase = phase_at_end(log, &branch)?;
    let leaf = log.leaf()?;
    let config = Config {
        store_session: Some(loaded.record.id),
        ..Config::default()
    };
    let plan = distill::plan(&log.session, &branch, &config, phase);
    if plan.is_empty() {
        return None;
    }
    Some(Planned {
        plan,
        config,
        leaf: (leaf, log.entry(leaf)?.id.clone()),
        len: log.len(),
    })
}

/// Step 3: decide, and append the drafts under the leaf the plan saw, when the log has not
/// moved since. The number of entries appended; `None` when the pass came too late.
fn conclude(
    app: &Gateway,
    slot: &Slot,
    planned: Planned,
    answered: ctxd_engine::distill::Answered,
    classifier: &str,
) -> Option<usize> {
    let mut state = slot.state.blocking_lock();
    if slot.stale.load(Ordering::Acquire) {
        return None;
    }
    let loaded = state.as_mut()?;
    let log = &mut loaded.log;
    let (leaf, leaf_id) = &planned.leaf;
    let unmoved = log.len() == planned.len
        && log.leaf() == Some(*leaf)
        && log.entry(*leaf).is_some_and(|e| &e.id == leaf_id);
    if !unmoved {
        return None;
    }
    let decisions = distill::decide(
        &log.session,
        &planned.plan,
        &answered.answers,
        &planned.config,
    );
    let drafts = decisions.drafts(classifier, answered.usage, answered.timed_out);
    if drafts.is_empty() {
        return Some(0);
    }
    let stamp = Some(ctxd_core::windows::iso8601(ctxd_engine::now_ms()));
    let mut parent = Some(*leaf);
    let entries: Vec<NewEntry> = drafts
        .into_iter()
        .enumerate()
        .map(|(i, kind)| {
            let tag = match &kind {
                EntryKind::ContextEdit { target, .. } => format!("distill {target}"),
                _ => format!("distill record {i}"),
            };
            let (pos, entry) =
                log.append_under(parent, "distill", &hash::text(&tag), kind, stamp.clone());
            parent = Some(pos);
            NewEntry::new(entry)
        })
        .collect();
    let n = entries.len();
    if decisions.saved_chars > 0 {
        metrics::counter!("ctxd_distill_saved_chars_total").increment(decisions.saved_chars as u64);
    }
    app.writer.send(Job::Append {
        session: loaded.record.id,
        entries,
        stale: slot.stale.clone(),
        ack: None,
    });
    Some(n)
}
