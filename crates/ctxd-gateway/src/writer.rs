//! The store's one writer: a thread that appends the gateway's batches in the order they were
//! queued, many sessions' batches in one transaction (group commit).
//!
//! A completed response is *durable before acknowledged*: its batch carries an [`Ack`] the
//! writer answers once the transaction holding it has committed, and the relay holds the
//! response's terminal part back until then (`relay.rs`). A job with an ack (or a barrier) ends
//! the writer's linger at once, so the wait is one commit, and everything queued meanwhile
//! joins the next one. Jobs nobody waits for (a request's own new messages) linger up to
//! [`LINGER`] to share a commit. A failed write marks that session's indexed copy stale (the
//! next request reloads the store's truth) and answers its ack with the error, so the client
//! gets an error instead of the end of a response the store does not hold.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ctxd_core::model::EntryId;
use ctxd_engine::Engine;
use ctxd_store::{GroupWrite, NewEntry, SessionId, SqliteStore};

/// Answered with the outcome of the commit that held the job.
pub type Ack = tokio::sync::oneshot::Sender<Result<(), String>>;

/// One unit of work for the writer.
pub enum Job {
    /// Append a batch atomically; the leaf moves to its last entry.
    Append {
        session: SessionId,
        entries: Vec<NewEntry>,
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

/// The handle requests queue jobs on.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Job>,
    depth: Arc<AtomicUsize>,
    /// The writer's thread, unparked by a job someone waits for (it ends the linger early).
    thread: std::thread::Thread,
}

pub struct Writer {
    handle: WriterHandle,
    thread: JoinHandle<()>,
}

impl Writer {
    pub fn start(engine: Arc<Engine<SqliteStore>>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let depth = Arc::new(AtomicUsize::new(0));
        let thread_depth = depth.clone();
        let thread = std::thread::Builder::new()
            .name("ctxd-writer".into())
            .spawn(move || run(&engine, &rx, &thread_depth))?;
        let handle = WriterHandle {
            tx,
            depth,
            thread: thread.thread().clone(),
        };
        Ok(Writer { handle, thread })
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

impl WriterHandle {
    pub fn send(&self, job: Job) {
        let awaited = job.awaited();
        self.depth.fetch_add(1, Ordering::Relaxed);
        // Moved by increments, not set from `depth`: a set racing the writer's could leave the
        // gauge at 0 with work queued.
        metrics::gauge!("ctxd_store_queue_depth").increment(1.0);
        if self.tx.send(job).is_err() {
            self.depth.fetch_sub(1, Ordering::Relaxed);
            metrics::gauge!("ctxd_store_queue_depth").decrement(1.0);
            metrics::counter!("ctxd_store_write_errors_total").increment(1);
            tracing::error!("store writer is stopped: a write was refused");
            return;
        }
        if awaited {
            // Someone waits: a lingering writer commits now.
            self.thread.unpark();
        }
    }

    /// Wait until everything queued so far is written (before reading a session back).
    pub async fn flush(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Job::Barrier(tx));
        let _ = rx.await;
    }

    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }
}

// The writer runs at the process's normal priority. It used to run as `SCHED_IDLE` (commits
// never delayed a request's thread), which was right while nobody waited for a commit; now the
// end of every response does, and an idle-class thread gets almost no CPU beside CPU-bound
// processes (the issue measured the writer 6 s behind during a build). An unprivileged process
// cannot leave `SCHED_IDLE` again (`RLIMIT_NICE` is 0 by default), so it is not entered at all.

/// At most this many jobs share a transaction (a bound on the time one commit holds the store).
const MAX_GROUP: usize = 256;

/// How long a commit nobody waits for waits for more jobs after its first (a request's own new
/// messages: their response's commit carries them at the latest).
const LINGER: Duration = Duration::from_millis(20);

fn run(engine: &Engine<SqliteStore>, rx: &mpsc::Receiver<Job>, depth: &AtomicUsize) {
    let store = engine.store();
    let mut backlog = IndexBacklog::default();
    let mut idle = false;
    let mut stopping = false;
    while !stopping {
        let first = if backlog.is_empty() {
            match rx.recv() {
                Ok(job) => job,
                Err(_) => break,
            }
        } else if idle {
            // Idle: index a step at a time, back to commits as soon as one is queued.
            match rx.try_recv() {
                Ok(job) => job,
                Err(mpsc::TryRecvError::Empty) => {
                    backlog.step(store);
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => break,
            }
        } else {
            match rx.recv_timeout(IDLE) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    idle = true;
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        };
        idle = false;
        // What is queued joins this commit (group commit). With nobody waiting the writer
        // sleeps through the linger (requests queueing meanwhile wake no thread); a job someone
        // waits for unparks it.
        let mut jobs = vec![first];
        let deadline = std::time::Instant::now() + LINGER;
        loop {
            while jobs.len() < MAX_GROUP && !matches!(jobs.last(), Some(Job::Stop)) {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if jobs.iter().any(Job::awaited) || jobs.len() >= MAX_GROUP || left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
        stopping = matches!(jobs.last(), Some(Job::Stop));
        let count = jobs.len();
        for job in &jobs {
            if let Job::Append { session, .. } = job {
                backlog.add(*session);
            }
        }
        write_group(store, jobs);
        depth.fetch_sub(count, Ordering::Relaxed);
        metrics::gauge!("ctxd_store_queue_depth").decrement(count as f64);
        if backlog.overdue() {
            backlog.step(store);
        }
    }
    // Jobs queued after the stop are dropped with the channel: their acks report an error.
    // Sessions still behind are caught up by their next history read.
}

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
    fn step(&mut self, store: &SqliteStore) {
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

/// Commit `jobs` in one transaction, then answer their acks and barriers.
fn write_group(store: &SqliteStore, jobs: Vec<Job>) {
    let mut writes = Vec::with_capacity(jobs.len());
    let mut waiting = Vec::with_capacity(jobs.len());
    let mut barriers = Vec::new();
    for job in &jobs {
        match job {
            Job::Append {
                session, entries, ..
            } => writes.push(GroupWrite::Append {
                session: *session,
                entries,
            }),
            Job::SetLeaf { session, leaf, .. } => writes.push(GroupWrite::SetLeaf {
                session: *session,
                leaf,
            }),
            Job::Barrier(_) | Job::Stop => {}
        }
    }
    let started = std::time::Instant::now();
    let results = if writes.is_empty() {
        Ok(Vec::new())
    } else {
        store.write_group(&writes)
    };
    if !writes.is_empty() {
        metrics::histogram!("ctxd_store_commit_seconds").record(started.elapsed().as_secs_f64());
        metrics::histogram!("ctxd_store_group_writes").record(writes.len() as f64);
    }
    drop(writes);
    let mut results = match results {
        Ok(r) => r
            .into_iter()
            .map(|r| r.map_err(|e| e.to_string()))
            .collect(),
        Err(e) => {
            let e = e.to_string();
            jobs.iter()
                .filter(|j| matches!(j, Job::Append { .. } | Job::SetLeaf { .. }))
                .map(|_| Err(e.clone()))
                .collect::<Vec<_>>()
        }
    }
    .into_iter();
    for job in jobs {
        match job {
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
                if let Err(e) = &result {
                    failed(&stale, session, e);
                }
                if let Some(ack) = ack {
                    waiting.push((ack, result));
                }
            }
            Job::Barrier(done) => barriers.push(done),
            Job::Stop => {}
        }
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
        NewEntry::new(Entry {
            id: EntryId::new(id),
            parent: parent.map(EntryId::new),
            timestamp: None,
            sidechain: false,
            kind: EntryKind::Message(Message::text(Role::User, "hi")),
        })
    }

    fn append(session: SessionId, entries: Vec<NewEntry>, ack: Option<Ack>) -> Job {
        Job::Append {
            session,
            entries,
            stale: Arc::new(AtomicBool::new(false)),
            ack,
        }
    }

    #[tokio::test]
    async fn an_ack_answers_after_the_commit_and_reports_a_failed_write() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SqliteStore::open(&dir.path().join("w.db"), ctxd_store::Durability::Normal).unwrap();
        let record = store
            .open_session("t", "k", &SessionMeta::default())
            .unwrap();
        let engine = Arc::new(Engine::new(store));
        let writer = Writer::start(engine.clone()).unwrap();
        let h = writer.handle();
        // A job nobody waits for, then one somebody does: the ack ends the linger, and the
        // store holds both once it answers.
        h.send(append(record.id, vec![entry("a", None)], None));
        let (tx, rx) = tokio::sync::oneshot::channel();
        h.send(append(record.id, vec![entry("b", Some("a"))], Some(tx)));
        assert_eq!(rx.await.unwrap(), Ok(()));
        assert_eq!(engine.store().load(record.id).unwrap().entries.len(), 2);
        // A duplicate id: the write fails and its ack says so.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stale = Arc::new(AtomicBool::new(false));
        h.send(Job::Append {
            session: record.id,
            entries: vec![entry("b", Some("a"))],
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
}
