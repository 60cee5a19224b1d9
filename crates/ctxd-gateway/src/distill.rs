//! Distillation at turn ends, in the background: the adapter around the core's pass
//! (`ctxd_core::distill::{plan, decide}`) and the engine's classifier runner
//! (`ctxd_engine::distill::ask`).
//!
//! Where a turn is recorded (the session's lock is held there anyway), once its commit is on
//! its way, the branch is handed to a pass ([`Snapshot`]): a run-end pass after an answer
//! without tool calls, a mid-run checkpoint after one that called tools (the planner decides
//! whether a checkpoint pays off). Passes run on a thread of their own at the lowest CPU
//! priority, held to a share of one core (`distill-cpu-percent`, [`ctxd_core::pace`]), and never
//! take the session's lock, so they cost a request nothing but the copy. The copy is
//! incremental: each session keeps the branch its last pass read ([`Mirror`]), and a turn end
//! clones only the entries after the part of it the branch shares from the root (log entries
//! never change once appended), whether the branch extends it or forks from it. A full copy of a 1 MB branch at every turn
//! end was the gateway's largest cost per request at 1 MB of history (docs/benchmarks.md). At
//! most one pass per session is queued or running; a turn end meanwhile is noted, and the
//! branch is handed over for it when the pass is over (or at the session's next request, if
//! one is in flight then).
//!
//! A pass plans, asks the classifier and decides on its copy, and leaves the edits on the
//! session's slot. Then they land ([`Landing`]): when the session is idle at a turn end of the
//! branch the pass judged (the one it judged, or a later one: no request in flight, at this
//! gateway or, on a shared store, at any other), they are committed at once under it,
//! conditionally (the store refuses them if another gateway moved the leaf meanwhile), so the
//! session's next request carries them whichever gateway serves it. Otherwise they wait on
//! the slot for the session's next request here, which appends them before it is planned
//! ([`apply_ready`]).
//! A request that comes while the pass still runs waits for it at most `distill-wait` (0 by
//! default), then goes as it would have; the edits land at a later request instead. Edits of
//! a branch the client has left are dropped (passes keep no state of their own: the next one
//! judges again from the log).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ctxd_core::distill::{Config, Phase};
use ctxd_core::model::{Entry, EntryId, EntryKind, Session, SessionMeta};
use ctxd_engine::distill::{land, phase_at_end, run_pass, Configured, Limits};
use ctxd_engine::turn::log::entry_bytes;
use ctxd_engine::turn::SessionLog;
use ctxd_store::NewEntry;

use crate::sessions::{Loaded, Slot};
use crate::writer::{Job, WriterHandle};
use ctxd_core::pace::Pacer;
use ctxd_engine::background::{lowest_priority, thread_cpu};

/// Where a pass's edits are committed from: the request runtime (the landing takes the
/// session's lock; at the passes' lowest priority it could hold a request up), the store
/// (to catch up with other gateways' writes first) and its writer.
pub struct Landing {
    pub runtime: tokio::runtime::Handle,
    pub engine: Arc<ctxd_engine::Engine<dyn ctxd_store::Backend>>,
    pub writer: WriterHandle,
}

impl Landing {
    /// The end of `slot`'s pass, on the request runtime: commit the edits it left, if the
    /// session is idle where they can go, then let a request waiting for the pass go, and
    /// hand the branch to the pass for a turn end that came while this one ran.
    async fn settle(&self, slot: &Arc<Slot>, distiller: &Distiller) {
        let mut state = slot.state.lock().await;
        self.land(slot, &mut state).await;
        if finish(slot) {
            distiller.queue_noted(slot, &state);
        }
    }

    /// Commit the edits waiting on `slot` under the session's leaf when the session is idle
    /// there: still at the turn end their pass judged, or at a later turn end of the same
    /// branch (turns ended while the pass ran, and no request came since). Otherwise leave
    /// them for the session's next request. The session's lock is held until the store
    /// answers: a request planned on the edits must not reach the store before them, nor
    /// after the store refused them.
    async fn land(&self, slot: &Slot, state: &mut Option<Loaded>) {
        if slot.stale.load(Ordering::Acquire) {
            return;
        }
        let Some(loaded) = state.as_mut() else {
            return;
        };
        let Some(judged) = slot.passes().ready.as_ref().map(|r| r.leaf.1.clone()) else {
            return;
        };
        if self.engine.store().shared() && !crate::sessions::catch_up(&self.engine, loaded).await {
            // The store's log is not an extension of this copy: the next request reloads it
            // and judges the edits against what it reads.
            slot.stale.store(true, Ordering::Release);
            return;
        }
        let log = &loaded.log;
        let Some(leaf) = log.leaf().and_then(|p| log.entry(p)).map(|e| e.id.clone()) else {
            return;
        };
        // A turn end is where no request is in flight (a request's own messages move the leaf
        // off it when it is planned).
        let idle =
            leaf == judged || (slot.passes().again && phase_at_end(log, &log.branch()).is_some());
        if !idle {
            metrics::counter!("ctxd_distill_landed_total", "at" => "next_request").increment(1);
            return;
        }
        // (Edits of a branch the session has left are dropped here.)
        let entries = apply_ready(slot, loaded);
        if entries.is_empty() {
            return;
        }
        let (ack, committed) = tokio::sync::oneshot::channel();
        self.writer.send(Job::Append {
            session: loaded.record.id,
            entries,
            expect_leaf: Some(leaf),
            stale: slot.stale.clone(),
            ack: Some(ack),
        });
        let at = match committed.await {
            Ok(Ok(())) => "pass_end",
            // Another gateway's request came first: the writer marked the copy stale (it
            // holds the refused edits), and the next pass judges again.
            _ => "refused",
        };
        metrics::counter!("ctxd_distill_landed_total", "at" => at).increment(1);
    }
}

/// A session's passes, on its slot.
#[derive(Default)]
pub struct SlotPasses {
    /// A pass is queued or running.
    busy: bool,
    /// A turn ended while it was: its end (or the next request) copies the branch for another.
    again: bool,
    /// Edits waiting for the session's next request.
    ready: Option<Ready>,
    /// The branch the last pass read, to extend at the next turn end (taken while a pass
    /// runs, given back when it ends).
    mirror: Option<Mirror>,
    /// What the latest mirror holds, whether in the slot or in a pass: a second copy of the
    /// branch, charged to the session cache's budget beside the log.
    mirror_bytes: usize,
}

impl SlotPasses {
    /// Bytes the session's branch copy holds ([`Mirror`]).
    pub fn mirror_bytes(&self) -> usize {
        self.mirror_bytes
    }
}

/// A copy of a branch (root first) and the log positions its entries came from.
pub struct Mirror {
    positions: Vec<usize>,
    entries: Vec<Entry>,
    /// The entries' bytes ([`entry_bytes`]), kept as they are cloned and cut.
    bytes: usize,
}

impl Mirror {
    /// `log`'s `branch`, reusing what it shares with `prior` from the root: only the entries
    /// after the shared part are cloned, whether the branch extends `prior` or forks from it
    /// (a client that resends an older conversation with a new question forks at every turn:
    /// copying the whole branch each time was the request path's largest cost with
    /// distillation on). Returns the mirror and how many entries were cloned.
    fn of(log: &SessionLog, branch: Vec<usize>, prior: Option<Mirror>) -> (Self, usize) {
        let mut mirror = prior.unwrap_or(Mirror {
            positions: Vec::new(),
            entries: Vec::new(),
            bytes: 0,
        });
        let kept = mirror
            .positions
            .iter()
            .zip(&branch)
            .take_while(|(a, b)| a == b)
            .count();
        let cut: usize = mirror
            .entries
            .drain(kept.min(mirror.entries.len())..)
            .map(|e| entry_bytes(&e))
            .sum();
        mirror.bytes = mirror.bytes.saturating_sub(cut);
        for entry in branch[kept..].iter().filter_map(|&p| log.entry(p)) {
            mirror.bytes += entry_bytes(entry);
            mirror.entries.push(entry.clone());
        }
        mirror.positions = branch;
        let cloned = mirror.positions.len() - kept;
        // A position without an entry cannot happen (the branch is read off this log); if it
        // did, the next turn end copies whole rather than keep a mirror out of step.
        if mirror.entries.len() != mirror.positions.len() {
            mirror.positions.clear();
            mirror.entries.clear();
            mirror.bytes = 0;
        }
        (mirror, cloned)
    }
}

/// A pass's decided edits, waiting for the session's next request.
pub struct Ready {
    drafts: Vec<EntryKind>,
    /// The leaf the pass judged the branch at (its position and id).
    leaf: (usize, EntryId),
    edits: usize,
    saved_chars: usize,
}

/// What a pass reads: a copy of the branch (root first), extended from the session's
/// [`Mirror`] where it can be. Taken where the turn is recorded, at the request path's
/// priority: a pass at the lowest priority holding the session's lock could hold it for long.
pub struct Snapshot {
    mirror: Mirror,
    phase: Phase,
    leaf: (usize, EntryId),
    store_session: i64,
    /// Whose prompt cache the session's requests go to (the break-even rule's factor).
    provider: ctxd_core::cache::Provider,
}

impl Snapshot {
    /// The branch as it is now, built on `prior` (the last pass's copy); `None` when it does
    /// not end with an answer (then `prior` goes back to the slot).
    fn take(loaded: &Loaded, slot: &Slot, prior: Option<Mirror>) -> Option<Self> {
        let log = &loaded.log;
        let branch = log.branch();
        let (Some(phase), Some(leaf)) = (phase_at_end(log, &branch), log.leaf()) else {
            slot.passes().mirror = prior;
            return None;
        };
        let leaf_id = log.entry(leaf)?.id.clone();
        let (mirror, cloned) = Mirror::of(log, branch, prior);
        slot.passes().mirror_bytes = mirror.bytes;
        metrics::counter!("ctxd_distill_copied_entries_total").increment(cloned as u64);
        Some(Snapshot {
            mirror,
            phase,
            leaf: (leaf, leaf_id),
            store_session: loaded.record.id,
            provider: crate::turn::provider_of(log),
        })
    }
}

type Queue = tokio::sync::mpsc::UnboundedSender<(Arc<Slot>, Snapshot)>;

/// The queue to the passes' thread.
#[derive(Clone)]
pub struct Distiller {
    queue: Queue,
}

/// The passes' thread, stopped at shutdown.
pub struct DistillThread {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Distiller {
    /// Start the passes' thread (its own single-threaded runtime, at the lowest priority,
    /// held to `cpu_percent` % of one core: [`ctxd_core::pace`]), asking `classifier`.
    pub fn start(
        classifier: Configured,
        cpu_percent: u8,
        config: Config,
        landing: Landing,
    ) -> std::io::Result<(Self, DistillThread)> {
        let classifier = Arc::new(classifier);
        let config = Arc::new(config);
        let landing = Arc::new(landing);
        let (queue, mut jobs) = tokio::sync::mpsc::unbounded_channel::<(Arc<Slot>, Snapshot)>();
        // The passes queue the pass for a turn end that came while they ran (the loop ends at
        // `stop`, not when every sender is gone).
        let distiller = Distiller {
            queue: queue.clone(),
        };
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("ctxd-distill".into())
            .spawn(move || {
                // Passes give way to everything else on the machine: a late pass costs
                // nothing (its edits land one request later), a request slowed by one would.
                lowest_priority("ctxd-distill");
                let mut pacer = Pacer::new(cpu_percent);
                runtime.block_on(async {
                    loop {
                        let job = tokio::select! {
                            job = jobs.recv() => job,
                            _ = &mut stopped => None,
                        };
                        let Some((slot, snapshot)) = job else { break };
                        // (A classifier computing on a thread of its own, MiniLM's model, is
                        // paced there: `Configured::in_background`.)
                        let wait = pacer.delay(std::time::Instant::now(), thread_cpu());
                        if !wait.is_zero() {
                            let stop = tokio::select! {
                                () = tokio::time::sleep(wait) => false,
                                _ = &mut stopped => true,
                            };
                            if stop {
                                break;
                            }
                        }
                        // Passes of different sessions overlap while they wait on a remote
                        // classifier; their CPU work shares this one thread.
                        drop(tokio::spawn(run(
                            slot,
                            snapshot,
                            classifier.clone(),
                            config.clone(),
                            landing.clone(),
                            distiller.clone(),
                        )));
                        // Let the pass do its CPU work before the next one is paced, so
                        // that one is charged for it.
                        tokio::task::yield_now().await;
                    }
                });
                // Dropping the runtime drops the passes still running.
            })?;
        Ok((Distiller { queue }, DistillThread { stop, thread }))
    }

    /// A turn of `slot`'s session ended on `loaded`'s branch: queue a pass on a copy of it,
    /// or note the turn while a pass runs (see the module docs).
    pub fn turn_ended(&self, slot: &Arc<Slot>, loaded: &Loaded) {
        let mut passes = slot.passes();
        if passes.busy {
            passes.again = true;
            return;
        }
        let prior = passes.mirror.take();
        drop(passes);
        if let Some(snapshot) = Snapshot::take(loaded, slot, prior) {
            self.enqueue(slot, snapshot);
        }
    }

    /// The pass for a turn end noted while another ran, once that one is over: at its end
    /// ([`Landing::settle`]), or at the session's next request. The branch must end at a turn
    /// end (the noted one or a later one): otherwise a request is in flight, whose own turn
    /// end queues a pass, and the note stays for the next request.
    pub fn catch_up(&self, slot: &Arc<Slot>, loaded: &Loaded) {
        let mut passes = slot.passes();
        if passes.busy || !passes.again {
            return;
        }
        let prior = passes.mirror.take();
        drop(passes);
        if let Some(snapshot) = Snapshot::take(loaded, slot, prior) {
            self.enqueue(slot, snapshot);
        }
    }

    /// [`Distiller::catch_up`] at the end of a pass, holding the session's lock (`state`).
    fn queue_noted(&self, slot: &Arc<Slot>, state: &Option<Loaded>) {
        if slot.stale.load(Ordering::Acquire) {
            return; // the next request reloads the session, and catches up then
        }
        if let Some(loaded) = state {
            self.catch_up(slot, loaded);
        }
    }

    fn enqueue(&self, slot: &Arc<Slot>, snapshot: Snapshot) {
        let mut passes = slot.passes();
        passes.busy = true;
        passes.again = false;
        slot.distilling.store(1, Ordering::Release);
        drop(passes);
        metrics::gauge!("ctxd_distill_pending").increment(1.0);
        if self.queue.send((slot.clone(), snapshot)).is_err() {
            // Shutting down: nothing runs any more.
            finish(slot);
        }
    }
}

impl DistillThread {
    /// Stop running passes (those running are dropped: later turn ends judge again).
    pub fn stop(self) {
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::error!("the distillation thread panicked");
        }
    }
}

/// One pass of `slot`'s session on `snapshot`: plan, ask, decide, leave the edits on the slot
/// and land them.
async fn run(
    slot: Arc<Slot>,
    snapshot: Snapshot,
    classifier: Arc<Configured>,
    config: Arc<Config>,
    landing: Arc<Landing>,
    distiller: Distiller,
) {
    let started = std::time::Instant::now();
    let (ready, mirror) = pass(snapshot, &classifier, &config).await;
    let outcome = if ready.is_some() {
        "decided"
    } else {
        "nothing"
    };
    {
        let mut passes = slot.passes();
        passes.mirror = Some(mirror);
        if ready.is_some() {
            passes.ready = ready;
        }
    }
    metrics::counter!("ctxd_distill_passes_total", "outcome" => outcome).increment(1);
    metrics::histogram!("ctxd_distill_pass_seconds").record(started.elapsed().as_secs_f64());
    let runtime = landing.runtime.clone();
    if outcome == "nothing" {
        // Over without the session's lock, unless a turn ended meanwhile.
        if finish(&slot) {
            drop(runtime.spawn(async move {
                let state = slot.state.lock().await;
                distiller.queue_noted(&slot, &state);
            }));
        }
        return;
    }
    // A request waiting for the pass (`distill-wait`) goes once the edits are in the log.
    drop(runtime.spawn(async move {
        landing.settle(&slot, &distiller).await;
    }));
}

/// The pass of `slot` is over: wake a request waiting for it. Whether a turn ended while it
/// ran (its pass is still to be queued).
fn finish(slot: &Slot) -> bool {
    metrics::gauge!("ctxd_distill_pending").decrement(1.0);
    let again = {
        let mut passes = slot.passes();
        passes.busy = false;
        passes.again
    };
    slot.distilling.store(0, Ordering::Release);
    slot.distilled.notify_waiters();
    again
}

/// Plan, ask and decide on `snapshot`: the edits (`None` when there is nothing to judge), and
/// the branch copy back for the session's next pass.
async fn pass(
    snapshot: Snapshot,
    classifier: &Configured,
    base: &Config,
) -> (Option<Ready>, Mirror) {
    let Snapshot {
        mirror: Mirror {
            positions,
            entries,
            bytes,
        },
        phase,
        leaf,
        store_session,
        provider,
    } = snapshot;
    let session = Session {
        meta: SessionMeta::default(),
        leaf: entries.last().map(|e| e.id.clone()),
        entries,
    };
    let config = crate::turn::pass_config(base, store_session, provider);
    let branch: Vec<usize> = (0..session.entries.len()).collect();
    let ready = run_pass(
        classifier,
        &session,
        &branch,
        &config,
        phase,
        &Limits::default(),
    )
    .await
    .map(|pass| Ready {
        edits: pass.decisions.edits.len(),
        saved_chars: pass.decisions.saved_chars,
        drafts: pass.drafts,
        leaf,
    });
    let mirror = Mirror {
        positions,
        entries: session.entries,
        bytes,
    };
    (ready, mirror)
}

/// Append the edits a pass left on `slot`, if any, under the log's leaf (before the request
/// that calls this is planned): the entries for the store, in order. Edits of a branch the log
/// no longer continues are dropped.
pub(crate) fn apply_ready(slot: &Slot, loaded: &mut Loaded) -> Vec<NewEntry> {
    let Some(ready) = slot.passes().ready.take() else {
        return Vec::new();
    };
    let log = &mut loaded.log;
    let (leaf, leaf_id) = &ready.leaf;
    let same_log = log.entry(*leaf).is_some_and(|e| &e.id == leaf_id);
    // The pass's branch ends at its leaf: on the current branch, every entry it judged is.
    if !same_log || !log.branch().contains(leaf) {
        metrics::counter!("ctxd_distill_passes_total", "outcome" => "dropped").increment(1);
        return Vec::new();
    }
    let now = ctxd_core::windows::iso8601(ctxd_engine::now_ms());
    let entries = land(log, ready.drafts, &now);
    if ready.edits > 0 {
        metrics::counter!("ctxd_distill_passes_total", "outcome" => "edited").increment(1);
        metrics::counter!("ctxd_distill_saved_chars_total").increment(ready.saved_chars as u64);
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxd_core::model::Role;

    fn entry(id: &str, parent: Option<&str>) -> Entry {
        ctxd_test_support::entry(id, parent, ctxd_test_support::text(Role::User, id))
    }

    fn ids(m: &Mirror) -> Vec<&str> {
        m.entries.iter().map(|e| e.id.0.as_str()).collect()
    }

    #[test]
    fn a_mirror_keeps_what_the_branch_shares_with_it_and_clones_the_rest() {
        let mut log = SessionLog::new(Session::default());
        log.push(entry("a", None));
        log.push(entry("b", Some("a")));
        let (first, cloned) = Mirror::of(&log, log.branch(), None);
        assert_eq!((ids(&first), cloned), (vec!["a", "b"], 2));

        // The branch grows: only the new entries are cloned.
        log.push(entry("c", Some("b")));
        log.push(entry("d", Some("c")));
        let (grown, cloned) = Mirror::of(&log, log.branch(), Some(first));
        assert_eq!((ids(&grown), cloned), (vec!["a", "b", "c", "d"], 2));
        assert_eq!(grown.positions, log.branch());

        // The client went back to "b" and on from there: "a" and "b" are kept, "e" cloned.
        log.push(entry("e", Some("b")));
        let (forked, cloned) = Mirror::of(&log, log.branch(), Some(grown));
        assert_eq!((ids(&forked), cloned), (vec!["a", "b", "e"], 1));
        assert_eq!(forked.positions, log.branch());

        // A branch from another root shares nothing: copied whole.
        log.push(entry("x", None));
        let (other, cloned) = Mirror::of(&log, log.branch(), Some(forked));
        assert_eq!((ids(&other), cloned), (vec!["x"], 1));

        // Nothing new: nothing cloned, the same copy handed on.
        let (same, cloned) = Mirror::of(&log, log.branch(), Some(other));
        assert_eq!((ids(&same), cloned), (vec!["x"], 0));
    }
}
