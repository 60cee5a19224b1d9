//! The store's one writer: appends the gateway's batches in the order they were queued, many
//! sessions' batches in one transaction (group commit).
//!
//! A completed response is *durable before acknowledged*: its batch carries an [`Ack`]
//! answered once the transaction holding it has committed, and the relay holds the response's
//! terminal part back until then (`relay.rs`). That commit is taken by the waiting request
//! itself when it can ([`WriterHandle::commit`]: no commit or index step running, the store's
//! connection free): it takes everything queued before it along, so the wait is one commit of
//! a few dozen microseconds with no hand-off to another thread (on a busy machine each hand-off
//! costs a scheduler wake-up, which was most of the wait). Otherwise the writer thread commits
//! it with everything queued beside it. Jobs nobody waits for (a request's own new messages)
//! linger up to [`LINGER`] to share a commit. A failed write marks that session's indexed copy
//! stale (the next request reloads the store's truth) and answers its ack with the error, so
//! the client gets an error instead of the end of a response the store does not hold.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ctxd_core::model::EntryId;
use ctxd_engine::Engine;
use ctxd_store::{Backend, GroupResult, GroupWrite, NewEntry, SessionId};

use ctxd_store::WalPressure;

/// Answered with the outcome of the commit that held the job.
pub type Ack = tokio::sync::oneshot::Sender<Result<(), String>>;

/// One unit of work for the writer.
pub enum Job {
    /// Append a batch atomically; the leaf moves to its last entry. With `expect_leaf`, only
    /// while the session's leaf is that entry in the store (another gateway may have moved
    /// it): otherwise nothing is written and the job fails.
    Append {
        session: SessionId,
        entries: Vec<NewEntry>,
        expect_leaf: Option<EntryId>,
        stale: Arc<AtomicBool>,
        ack: Option<Ack>,
    },
    /// Move the leaf to an existing entry.
    SetLeaf {
        session: SessionId,
        leaf: EntryId,
        stale: Arc<AtomicBool>,
        ack: Option<Ack>,
    },
    /// Answered once every job queued before it is done.
    Barrier(tokio::sync::oneshot::Sender<()>),
    /// Write what was queued before it, then stop (see [`Writer::shutdown`]).
    Stop,
}

impl Job {
    /// Someone waits for this job: the writer commits without lingering.
    fn awaited(&self) -> bool {
        matches!(
            self,
            Job::Barrier(_)
                | Job::Stop
                | Job::Append { ack: Some(_), .. }
                | Job::SetLeaf { ack: Some(_), .. }
        )
    }
}

/// What the writer thread and the requests share.
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a job the writer thread should look at is queued.
    ready: Condvar,
    depth: AtomicUsize,
    engine: Arc<Engine<dyn Backend>>,
    /// Requests may commit their own awaited jobs (not with `synchronous=FULL`: an fsync on an
    /// async worker would stall every request on it).
    inline: bool,
    health: Health,
    /// Raised when the WAL outgrew its limit: the writer cuts it back between two commits
    /// (SQLite; never raised on PostgreSQL).
    wal: WalPressure,
}

/// Whether the store commits. A write that fails (a full disk, a read-only file, a database
/// gone) marks it failing until a commit writes again; while it fails, requests are refused
/// before they go upstream (a paid answer that cannot be stored is thrown away), the index
/// backlog waits (derived work must not take the space a turn needs), and the writer probes
/// the store every [`PROBE_EVERY`] so it recovers by itself once space is freed.
#[derive(Default)]
struct Health {
    failure: Mutex<Option<String>>,
}

impl Health {
    fn get(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set(&self, failure: Option<String>) {
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        match (&*f, &failure) {
            (None, Some(e)) => {
                tracing::error!(error = %e, "the store cannot commit: new requests are refused until it can")
            }
            (Some(_), None) => tracing::info!("the store commits again"),
            _ => {}
        }
        metrics::gauge!("ctxd_store_failing").set(if failure.is_some() { 1.0 } else { 0.0 });
        *f = failure;
    }
}

/// How often a failing store is probed with a small write.
const PROBE_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// A commit or an index step is running (on the writer thread or in a request).
    busy: bool,
    /// The writer has stopped: jobs are refused.
    stopped: bool,
    /// Sessions appended by requests' own commits, for the writer's index backlog.
    appended: Vec<SessionId>,
    /// Bumped each time a request's commit empties the queue: a linger whose jobs were taken
    /// starts over for the jobs queued since.
    drained: u64,
}

/// The handle requests queue jobs on.
#[derive(Clone)]
pub struct WriterHandle {
    shared: Arc<Shared>,
}

pub struct Writer {
    handle: WriterHandle,
    thread: JoinHandle<()>,
}

impl Writer {
    /// Start the writer thread. `inline`: requests may commit their own awaited jobs; `wal`:
    /// raised by the checkpoints when the WAL needs cutting back.
    pub fn start(
        engine: Arc<Engine<dyn Backend>>,
        inline: bool,
        wal: WalPressure,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            depth: AtomicUsize::new(0),
            engine,
            inline,
            health: Health::default(),
            wal,
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ctxd-writer".into())
            .spawn(move || run(&thread_shared))?;
        Ok(Writer {
            handle: WriterHandle { shared },
            thread,
        })
    }

    pub fn handle(&self) -> WriterHandle {
        self.handle.clone()
    }

    /// Finish every job queued so far, then stop; later jobs are refused (their acks answer
    /// with an error). Handles may still be alive (a connection abandoned at the shutdown
    /// deadline): the writer does not wait for them.
    pub fn shutdown(self) {
        self.handle.send(Job::Stop);
        if self.thread.join().is_err() {
            tracing::error!("the store writer panicked");
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing holding this lock can leave the queue half-changed.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn queued(&self, n: usize) {
        self.depth.fetch_add(n, Ordering::Relaxed);
        // Moved by increments, not set from `depth`: a set racing another could leave the
        // gauge at 0 with work queued.
        metrics::gauge!("ctxd_store_queue_depth").increment(n as f64);
    }

    fn dequeued(&self, n: usize) {
        self.depth.fetch_sub(n, Ordering::Relaxed);
        metrics::gauge!("ctxd_store_queue_depth").decrement(n as f64);
    }
}

/// A job refused because the writer has stopped: its ack (dropped) answers with an error.
fn refused() {
    metrics::counter!("ctxd_store_write_errors_total").increment(1);
    tracing::error!("store writer is stopped: a write was refused");
}

impl WriterHandle {
    /// Queue `job` for the writer thread.
    pub fn send(&self, job: Job) {
        let shared = &self.shared;
        let mut q = shared.lock();
        if q.stopped {
            drop(q);
            refused();
            return;
        }
        // The writer needs waking when it may be asleep on an empty queue, or lingering when
        // someone now waits.
        let wake = job.awaited() || q.jobs.is_empty();
        q.jobs.push_back(job);
        shared.queued(1);
        drop(q);
        if wake {
            shared.ready.notify_one();
        }
    }

    /// Commit `job` (one with an ack) now, in this thread, with everything queued before it,
    /// when nothing else is writing; otherwise queue it for the writer thread. Its ack answers
    /// either way.
    pub fn commit(&self, job: Job) {
        let shared = &self.shared;
        if !shared.inline {
            return self.send(job);
        }
        let mut q = shared.lock();
        // A long queue is the writer thread's (in groups of at most MAX_GROUP): a request
        // never commits more than a group on the async worker.
        if q.stopped
            || q.busy
            || q.jobs.len() >= MAX_GROUP
            || q.jobs.iter().any(|j| matches!(j, Job::Stop))
        {
            drop(q);
            return self.send(job);
        }
        let taken = q.jobs.len();
        let mut jobs: Vec<Job> = q.jobs.drain(..).collect();
        q.drained += 1;
        jobs.push(job);
        q.busy = true;
        drop(q);
        let store = shared.engine.store();
        let appended = appended_sessions(&jobs);
        let outcome = write_group(&jobs, |writes| store.try_write_group(writes));
        let mut q = shared.lock();
        q.busy = false;
        match outcome {
            Some(results) => {
                metrics::counter!("ctxd_store_commits_total", "by" => "request").increment(1);
                q.appended.extend(appended);
                drop(q);
                answer(&shared.health, jobs, results);
                shared.dequeued(taken);
                q = shared.lock();
            }
            None => {
                // The store's connection is held (a session loading, a history read): the
                // writer thread commits them, in their order, ahead of anything queued since.
                shared.queued(1);
                for job in jobs.into_iter().rev() {
                    q.jobs.push_front(job);
                }
            }
        }
        let more = !q.jobs.is_empty();
        drop(q);
        if more {
            shared.ready.notify_one();
        }
    }

    /// Wait until everything queued so far is written (before reading a session back).
    pub async fn flush(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Job::Barrier(tx));
        let _ = rx.await;
    }

    pub fn depth(&self) -> usize {
        self.shared.depth.load(Ordering::Relaxed)
    }

    /// Why the store cannot commit now (its last write's error), `None` when it commits.
    pub fn failing(&self) -> Option<String> {
        self.shared.health.get()
    }
}

// The writer runs at the process's normal priority, never `SCHED_IDLE`: the end of every
// response waits for a commit, and an idle-class thread gets almost no CPU beside CPU-bound
// processes. An unprivileged process could not leave `SCHED_IDLE` again (`RLIMIT_NICE` is 0
// by default). docs/benchmarks.md has the measurement.

/// At most this many jobs share a transaction (a bound on the time one commit holds the store).
const MAX_GROUP: usize = 256;

/// How long a commit nobody waits for waits for more jobs after its first (a request's own new
/// messages: their response's commit carries them at the latest).
const LINGER: Duration = Duration::from_millis(20);

fn run(shared: &Shared) {
    let store = shared.engine.store();
    let mut backlog = IndexBacklog::default();
    let mut idle = false;
    let mut q = shared.lock();
    loop {
        for session in q.appended.drain(..) {
            backlog.add(session);
        }
        if q.busy {
            // A request is committing: look again when it is done (it signals when it leaves
            // jobs behind) or after a while (for the index backlog).
            q = wait(shared, q, Some(IDLE));
            continue;
        }
        if q.jobs.is_empty() && shared.health.get().is_some() {
            // Nothing to write and the store failing: probe it now and then (indexing waits).
            q = wait(shared, q, Some(PROBE_EVERY));
            if q.jobs.is_empty() && !q.busy {
                q.busy = true;
                drop(q);
                probe(shared);
                q = shared.lock();
                q.busy = false;
            }
            continue;
        }
        if shared.wal.is_high() {
            // The WAL outgrew its limit: cut it back now, between two commits.
            q.busy = true;
            drop(q);
            truncate_wal(shared);
            q = shared.lock();
            q.busy = false;
            continue;
        }
        if backlog.overdue() {
            // Under a load that never leaves the writer idle (requests commit their own jobs
            // and take the lingering ones along), a session far behind still gets its step.
            q = index_step(shared, q, &mut backlog);
            continue;
        }
        if q.jobs.is_empty() {
            if backlog.is_empty() {
                // Requests commit their own jobs without waking the writer: it looks at the
                // WAL's pressure now and then all the same.
                q = wait(shared, q, Some(WAL_LOOK));
            } else if idle {
                // Idle: index a step, then look at the queue again.
                q = index_step(shared, q, &mut backlog);
            } else {
                let started = Instant::now();
                q = wait(shared, q, Some(IDLE));
                idle = q.jobs.is_empty() && started.elapsed() >= IDLE;
            }
            continue;
        }
        idle = false;
        // What is queued joins this commit (group commit). With nobody waiting the writer
        // sleeps through the linger; a job someone waits for ends it. A request that took the
        // lingering jobs (it does not wake the writer) ends it too: the jobs queued since get
        // a linger of their own, or the writer would commit them alone at the old deadline,
        // and the response they belong to would find the store busy and hand its commit off
        // (measured at 200 req/s: one request in six, 2-5 % of responses' commits).
        let deadline = Instant::now() + LINGER;
        let drained = q.drained;
        loop {
            let now = Instant::now();
            if q.busy
                || q.jobs.is_empty()
                || q.drained != drained
                || q.jobs.len() >= MAX_GROUP
                || q.jobs.iter().any(Job::awaited)
                || now >= deadline
            {
                break;
            }
            q = wait(shared, q, Some(deadline - now));
        }
        if q.busy || q.jobs.is_empty() || q.drained != drained {
            continue; // a request took them
        }
        let take = q
            .jobs
            .iter()
            .position(|j| matches!(j, Job::Stop))
            .map_or(q.jobs.len().min(MAX_GROUP), |stop| stop + 1);
        let jobs: Vec<Job> = q.jobs.drain(..take).collect();
        let stopping = matches!(jobs.last(), Some(Job::Stop));
        q.busy = true;
        drop(q);
        for session in appended_sessions(&jobs) {
            backlog.add(session);
        }
        let count = jobs.len();
        let results =
            write_group(&jobs, |writes| Some(store.write_group(writes))).unwrap_or_default();
        metrics::counter!("ctxd_store_commits_total", "by" => "writer").increment(1);
        answer(&shared.health, jobs, results);
        shared.dequeued(count);
        q = shared.lock();
        q.busy = false;
        if stopping {
            q.stopped = true;
            // Jobs queued after the stop are dropped: their acks report an error.
            let dropped = q.jobs.len();
            q.jobs.clear();
            shared.dequeued(dropped);
            break;
        }
    }
    // Sessions still behind are caught up by their next history read.
}

/// Copy the WAL back and empty it from the writing connection, once per raise of the
/// checkpoints' [`WalPressure`].
fn truncate_wal(shared: &Shared) {
    let outcome = match shared.engine.store().truncate_wal() {
        Ok(true) => "emptied",
        Ok(false) => "busy",
        Err(e) => {
            tracing::warn!(error = %e, "truncating the WAL failed; the next checkpoint retries");
            "failed"
        }
    };
    metrics::counter!("ctxd_store_wal_truncations_total", "outcome" => outcome).increment(1);
    shared.wal.relieve();
}

/// A small write to a failing store: it commits again once it can (space freed).
fn probe(shared: &Shared) {
    let now = ctxd_engine::now_ms().to_string();
    match shared
        .engine
        .store()
        .put_setting("ctxd-probe", now.as_bytes())
    {
        Ok(()) => shared.health.set(None),
        Err(e) => tracing::debug!(error = %e, "the store still cannot commit"),
    }
}

/// One index step for the backlog's oldest session, holding the store as a commit does.
fn index_step<'a>(
    shared: &'a Shared,
    mut q: MutexGuard<'a, Queue>,
    backlog: &mut IndexBacklog,
) -> MutexGuard<'a, Queue> {
    q.busy = true;
    drop(q);
    backlog.step(shared.engine.store());
    q = shared.lock();
    q.busy = false;
    q
}

/// Wait for a signal, at most `limit`.
fn wait<'a>(
    shared: &'a Shared,
    q: MutexGuard<'a, Queue>,
    limit: Option<Duration>,
) -> MutexGuard<'a, Queue> {
    match limit {
        None => shared.ready.wait(q).unwrap_or_else(|p| p.into_inner()),
        Some(limit) => {
            shared
                .ready
                .wait_timeout(q, limit)
                .unwrap_or_else(|p| p.into_inner())
                .0
        }
    }
}

fn appended_sessions(jobs: &[Job]) -> Vec<SessionId> {
    jobs.iter()
        .filter_map(|j| match j {
            Job::Append { session, .. } => Some(*session),
            _ => None,
        })
        .collect()
}

/// How often a writer with nothing to do looks whether the WAL needs cutting back (as often as
/// the checkpoints look at its size).
const WAL_LOOK: Duration = Duration::from_millis(100);

/// No commit for this long: the writer is idle and catches the indexes up.
const IDLE: Duration = Duration::from_millis(100);
/// Under a load that never leaves the writer idle, a session whose indexes are this far behind
/// gets a step anyway, one every [`FORCED_EVERY`]: a commit queued behind such a step waits for
/// it (measured: up to ~25 ms beside 1 MB sessions), so they are rare.
const MAX_LAG: Duration = Duration::from_secs(30);
const FORCED_EVERY: Duration = Duration::from_secs(1);
/// Entries indexed per transaction: small enough that a commit queued meanwhile waits little.
const INDEX_STEP: u64 = 32;

/// Sessions whose derived indexes (full-text, history) are behind their log. The group commit
/// writes the log alone (`Indexing::Deferred`): indexing in the commit a response waits for
/// made that wait 10-40 ms at p99 (full-text segment flushes and merges). The writer indexes
/// when idle instead; a history read catches its own session up first (`history_sync`), so
/// search never misses what was committed.
#[derive(Default)]
struct IndexBacklog {
    /// Each session behind, with when it fell behind; oldest first.
    sessions: std::collections::VecDeque<(SessionId, Instant)>,
    last_forced: Option<Instant>,
}

impl IndexBacklog {
    fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    fn add(&mut self, session: SessionId) {
        if !self.sessions.iter().any(|(s, _)| *s == session) {
            self.sessions.push_back((session, Instant::now()));
            metrics::gauge!("ctxd_store_index_backlog").set(self.sessions.len() as f64);
        }
    }

    /// A session has waited [`MAX_LAG`] and no forced step ran in the last [`FORCED_EVERY`].
    fn overdue(&mut self) -> bool {
        let now = Instant::now();
        let due = self
            .sessions
            .front()
            .is_some_and(|(_, since)| now.duration_since(*since) >= MAX_LAG)
            && self
                .last_forced
                .is_none_or(|at| now.duration_since(at) >= FORCED_EVERY);
        if due {
            self.last_forced = Some(now);
        }
        due
    }

    /// Index one step of the oldest session behind; a session whose indexing fails is dropped
    /// from the backlog (its next history read retries it).
    fn step(&mut self, store: &dyn Backend) {
        let Some(&(session, _)) = self.sessions.front() else {
            return;
        };
        let started = Instant::now();
        let done = match store.index_pending(session, INDEX_STEP) {
            Ok((_, current)) => current,
            Err(e) => {
                tracing::warn!(session, error = %e, "indexing a session's history failed; its next history read retries");
                true
            }
        };
        metrics::histogram!("ctxd_store_index_seconds").record(started.elapsed().as_secs_f64());
        if done {
            self.sessions.pop_front();
            metrics::gauge!("ctxd_store_index_backlog").set(self.sessions.len() as f64);
        }
    }
}

/// Commit `jobs` with `commit`: each write's outcome, in order; `None` when `commit` wrote
/// nothing (the store was busy).
fn write_group(
    jobs: &[Job],
    commit: impl FnOnce(&[GroupWrite<'_>]) -> Option<GroupResult>,
) -> Option<Vec<Result<(), String>>> {
    let writes: Vec<GroupWrite<'_>> = jobs
        .iter()
        .filter_map(|job| match job {
            Job::Append {
                session,
                entries,
                expect_leaf,
                ..
            } => Some(GroupWrite::Append {
                session: *session,
                entries,
                expect_leaf: expect_leaf.as_ref(),
            }),
            Job::SetLeaf { session, leaf, .. } => Some(GroupWrite::SetLeaf {
                session: *session,
                leaf,
            }),
            Job::Barrier(_) | Job::Stop => None,
        })
        .collect();
    let started = Instant::now();
    let results = if writes.is_empty() {
        Ok(Vec::new())
    } else {
        commit(&writes)?
    };
    if !writes.is_empty() {
        metrics::histogram!("ctxd_store_commit_seconds").record(started.elapsed().as_secs_f64());
        metrics::histogram!("ctxd_store_group_writes").record(writes.len() as f64);
    }
    Some(match results {
        Ok(r) => r
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect(),
        Err(e) => {
            let e = e.to_string();
            writes.iter().map(|_| Err(e.clone())).collect()
        }
    })
}

/// Answer the acks and barriers of `jobs` with `results` (one per write, in order), marking
/// the sessions of failed writes stale.
fn answer(health: &Health, jobs: Vec<Job>, results: Vec<Result<(), String>>) {
    let mut results = results.into_iter();
    // A write that failed, and a write that went through (a conditional append refused
    // because another gateway got ahead is neither: the store answered).
    let mut failure = None;
    let mut wrote = false;
    let mut waiting = Vec::with_capacity(jobs.len());
    let mut barriers = Vec::new();
    for job in jobs {
        match job {
            Job::Append {
                session,
                stale,
                ack,
                expect_leaf: Some(_),
                ..
            } => {
                // A conditional append another writer got ahead of: expected now and then
                // with several gateways, not an error of the store.
                let result = results.next().unwrap_or(Ok(()));
                match &result {
                    Err(e) => {
                        stale.store(true, Ordering::Release);
                        tracing::info!(session, error = %e, "conditional append not written");
                    }
                    Ok(()) => wrote = true,
                }
                if let Some(ack) = ack {
                    waiting.push((ack, result));
                }
            }
            Job::Append {
                session,
                stale,
                ack,
                ..
            }
            | Job::SetLeaf {
                session,
                stale,
                ack,
                ..
            } => {
                let result = results.next().unwrap_or(Ok(()));
                match &result {
                    Err(e) => {
                        failed(&stale, session, e);
                        failure = Some(e.clone());
                    }
                    Ok(()) => wrote = true,
                }
                if let Some(ack) = ack {
                    waiting.push((ack, result));
                }
            }
            Job::Barrier(done) => barriers.push(done),
            Job::Stop => {}
        }
    }
    if wrote {
        health.set(None);
    } else if failure.is_some() {
        health.set(failure);
    }
    for (ack, result) in waiting {
        let _ = ack.send(result);
    }
    for done in barriers {
        let _ = done.send(());
    }
}

fn failed(stale: &AtomicBool, session: SessionId, e: &str) {
    stale.store(true, Ordering::Release);
    metrics::counter!("ctxd_store_write_errors_total").increment(1);
    tracing::error!(session, error = %e, "store write failed; the session will be reloaded");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::model::{Entry, EntryKind, Message, Role, SessionMeta};
    use ctxd_store::Store;

    fn entry(id: &str, parent: Option<&str>) -> NewEntry {
        NewEntry::new(ctxd_test_support::entry(
            id,
            parent,
            ctxd_test_support::text(Role::User, "hi"),
        ))
    }

    fn append(session: SessionId, entries: Vec<NewEntry>, ack: Option<Ack>) -> Job {
        Job::Append {
            session,
            entries,
            expect_leaf: None,
            stale: Arc::new(AtomicBool::new(false)),
            ack,
        }
    }

    /// A writer on a fresh store with one session.
    fn started(
        durability: ctxd_store::Durability,
        inline: bool,
    ) -> (
        tempfile::TempDir,
        Arc<Engine<dyn Backend>>,
        ctxd_store::SessionRecord,
        Writer,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = ctxd_store::SqliteStore::open(&dir.path().join("w.db"), durability).unwrap();
        let record = store
            .open_session("t", "k", &SessionMeta::default())
            .unwrap();
        let engine: Arc<Engine<dyn Backend>> = Arc::new(Engine::from_boxed(Box::new(store)));
        let writer = Writer::start(engine.clone(), inline, WalPressure::default()).unwrap();
        (dir, engine, record, writer)
    }

    /// Commits 64 KiB messages for `how_long`, 8 in flight; the WAL's size after each.
    async fn commit_for(
        h: &WriterHandle,
        session: SessionId,
        n: &mut u64,
        how_long: Duration,
        wal: &std::path::Path,
    ) -> Vec<u64> {
        let text = "x".repeat(64 * 1024);
        let started = Instant::now();
        let (mut acks, mut sizes) = (Vec::new(), Vec::new());
        while started.elapsed() < how_long {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let parent = (*n > 0).then(|| EntryId::new(format!("e{}", *n - 1)));
            let entry = NewEntry::new(Entry {
                id: EntryId::new(format!("e{n}")),
                parent,
                timestamp: None,
                sidechain: false,
                kind: EntryKind::Message(Message::text(Role::User, &text)),
            });
            h.send(append(session, vec![entry], Some(tx)));
            acks.push(rx);
            *n += 1;
            if acks.len() == 8 {
                for ack in acks.drain(..) {
                    assert_eq!(ack.await.unwrap(), Ok(()));
                }
            }
            sizes.push(std::fs::metadata(wal).map_or(0, |m| m.len()));
        }
        for ack in acks {
            assert_eq!(ack.await.unwrap(), Ok(()));
        }
        sizes
    }

    /// A WAL grown past its limit (here while a reader held an old snapshot) is cut back while
    /// commits go on without a pause: SQLite only ever restarts it from the top, and trims a
    /// restarted file down to the store's 64 MiB `journal_size_limit`, never below; and the
    /// checkpoint thread's own truncation would wait for a gap the writer never leaves.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_grown_wal_is_cut_back_while_commits_go_on() {
        const LIMIT: u64 = 512 << 10;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let store = ctxd_store::SqliteStore::open(&path, ctxd_store::Durability::Normal).unwrap();
        let record = store
            .open_session("t", "k", &SessionMeta::default())
            .unwrap();
        let wal = WalPressure::default();
        let checkpoints =
            ctxd_store::Checkpoints::start_with_limit(&store, &path, wal.clone(), LIMIT).unwrap();
        let engine: Arc<Engine<dyn Backend>> = Arc::new(Engine::from_boxed(Box::new(store)));
        let writer = Writer::start(engine.clone(), false, wal).unwrap();
        let h = writer.handle();
        let mut wal_path = path.as_os_str().to_owned();
        wal_path.push("-wal");
        let wal_path = std::path::PathBuf::from(wal_path);
        let mut n = 0u64;
        // A reader's snapshot keeps every frame committed meanwhile in the WAL.
        let reader = rusqlite::Connection::open(&path).unwrap();
        reader.execute_batch("BEGIN").unwrap();
        let _: i64 = reader
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .unwrap();
        let grown = commit_for(
            &h,
            record.id,
            &mut n,
            Duration::from_millis(1500),
            &wal_path,
        )
        .await;
        let grown = grown.into_iter().max().unwrap_or(0);
        reader.execute_batch("COMMIT").unwrap();
        let after = commit_for(&h, record.id, &mut n, Duration::from_secs(2), &wal_path).await;
        let least = after[after.len() / 2..].iter().copied().min().unwrap_or(0);
        writer.shutdown();
        checkpoints.stop();
        assert!(grown > 4 * LIMIT, "the WAL grew to {grown} bytes only");
        assert!(
            least < grown / 2,
            "the WAL grew to {grown} bytes and stayed at {least} or more under load"
        );
    }

    #[tokio::test]
    async fn an_ack_answers_after_the_commit_and_reports_a_failed_write() {
        let (_dir, engine, record, writer) = started(ctxd_store::Durability::Normal, true);
        let h = writer.handle();
        // A job nobody waits for, then one somebody does: the ack ends the linger, and the
        // store holds both once it answers.
        h.send(append(record.id, vec![entry("a", None)], None));
        let (tx, rx) = tokio::sync::oneshot::channel();
        h.send(append(record.id, vec![entry("b", Some("a"))], Some(tx)));
        assert_eq!(rx.await.unwrap(), Ok(()));
        assert_eq!(engine.store().load(record.id).unwrap().entries.len(), 2);
        // An id the session holds for another entry (another parent): the write fails and
        // its ack says so.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stale = Arc::new(AtomicBool::new(false));
        h.send(Job::Append {
            session: record.id,
            entries: vec![entry("b", None)],
            expect_leaf: None,
            stale: stale.clone(),
            ack: Some(tx),
        });
        assert!(rx.await.unwrap().is_err());
        assert!(stale.load(Ordering::Acquire));
        // After the stop, a write is refused: its ack is dropped, never answered Ok.
        writer.shutdown();
        let (tx, rx) = tokio::sync::oneshot::channel();
        h.send(append(record.id, vec![entry("c", Some("b"))], Some(tx)));
        assert!(rx.await.is_err());
    }

    #[tokio::test]
    async fn a_request_commits_its_own_job_with_what_was_queued_before_it() {
        let (_dir, engine, record, writer) = started(ctxd_store::Durability::Normal, true);
        let h = writer.handle();
        // Nothing else writing (a fresh writer): committed in this thread, answered on return.
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        h.commit(append(record.id, vec![entry("p", None)], Some(tx)));
        assert_eq!(
            rx.try_recv().unwrap(),
            Ok(()),
            "answered before commit returned"
        );
        // A request's own messages, queued (lingering), then its response: committed together
        // in this thread, or by the writer thread if it took the queued job first; in order
        // either way.
        h.send(append(record.id, vec![entry("q", Some("p"))], None));
        let (tx, rx) = tokio::sync::oneshot::channel();
        h.commit(append(record.id, vec![entry("r", Some("q"))], Some(tx)));
        assert_eq!(rx.await.unwrap(), Ok(()));
        let ids: Vec<String> = engine
            .store()
            .load(record.id)
            .unwrap()
            .entries
            .iter()
            .map(|e| e.id.0.clone())
            .collect();
        assert_eq!(ids, ["p", "q", "r"]);
        assert_eq!(h.depth(), 0);
        // A failing write (an id held by another entry) answers its ack with the error.
        let (tx, rx) = tokio::sync::oneshot::channel();
        h.commit(append(record.id, vec![entry("r", None)], Some(tx)));
        assert!(rx.await.unwrap().is_err());
        // After the stop, a commit is refused: its ack is dropped, never answered Ok.
        writer.shutdown();
        let (tx, rx) = tokio::sync::oneshot::channel();
        h.commit(append(record.id, vec![entry("s", Some("r"))], Some(tx)));
        assert!(rx.await.is_err());
    }

    #[test]
    fn a_linger_whose_jobs_a_request_took_restarts_for_the_next_job() {
        let (_dir, engine, record, writer) = started(ctxd_store::Durability::Normal, true);
        let h = writer.handle();
        let has = |id: &str| {
            let log = engine.store().load(record.id).unwrap();
            log.entries.iter().any(|e| e.id.0 == id)
        };
        let mut parent: Option<String> = None;
        let mut conclusive = 0;
        for round in 0..20 {
            let [a, c, b, d] = ["a", "c", "b", "d"].map(|n| format!("{n}{round}"));
            // A request's own messages start the writer's linger; its response takes them.
            let started = Instant::now();
            h.send(append(record.id, vec![entry(&a, parent.as_deref())], None));
            std::thread::sleep(LINGER / 10); // the writer wakes and lingers
            let (tx, rx) = tokio::sync::oneshot::channel();
            h.commit(append(record.id, vec![entry(&c, Some(&a))], Some(tx)));
            assert_eq!(rx.blocking_recv().unwrap(), Ok(()));
            // The next request's messages, queued before the first linger's deadline, are
            // still lingering after it: their own response is due to carry them.
            std::thread::sleep(LINGER * 3 / 5);
            let queued = Instant::now();
            h.send(append(record.id, vec![entry(&b, Some(&c))], None));
            std::thread::sleep(
                (started + LINGER * 13 / 10).saturating_duration_since(Instant::now()),
            );
            let written = has(&b);
            // Conclusive only when checked within the second job's own linger (a loaded
            // machine may sleep past it).
            if queued.elapsed() < LINGER {
                assert!(
                    !written,
                    "round {round}: committed alone at the first linger's deadline"
                );
                conclusive += 1;
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            h.commit(append(record.id, vec![entry(&d, Some(&b))], Some(tx)));
            assert_eq!(rx.blocking_recv().unwrap(), Ok(()));
            assert!(has(&b) && has(&d));
            parent = Some(d);
        }
        assert!(conclusive > 0, "no round checked inside the linger");
        writer.shutdown();
    }

    #[tokio::test]
    async fn without_inline_commits_the_writer_thread_commits() {
        let (_dir, engine, record, writer) = started(ctxd_store::Durability::Full, false);
        let h = writer.handle();
        let (tx, rx) = tokio::sync::oneshot::channel();
        h.commit(append(record.id, vec![entry("a", None)], Some(tx)));
        assert_eq!(rx.await.unwrap(), Ok(()));
        assert_eq!(engine.store().load(record.id).unwrap().entries.len(), 1);
        writer.shutdown();
    }
}
