//! The store's one writer: a thread that appends the gateway's batches in the order they were
//! queued, all those queued within a short linger in one transaction (group commit). Requests
//! never wait on the disk (an fsync costs about a millisecond here, more than
//! the gateway's whole latency budget); the indexed copy of each session ([`crate::sessions`])
//! already holds what is queued. A failed write marks that copy stale, so the next request of
//! the session reloads the truth from the store (and, since clients resend their whole
//! conversation, re-appends what was lost).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use ctxd_core::model::EntryId;
use ctxd_engine::Engine;
use ctxd_store::{GroupWrite, NewEntry, SessionId, SqliteStore};

/// One unit of work for the writer.
pub enum Job {
    /// Append a batch atomically; the leaf moves to its last entry.
    Append {
        session: SessionId,
        entries: Vec<NewEntry>,
        stale: Arc<AtomicBool>,
    },
    /// Move the leaf to an existing entry.
    SetLeaf {
        session: SessionId,
        leaf: EntryId,
        stale: Arc<AtomicBool>,
    },
    /// Answered once every job queued before it is done.
    Barrier(tokio::sync::oneshot::Sender<()>),
}

/// The handle requests queue jobs on.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Job>,
    depth: Arc<AtomicUsize>,
    /// The writer's thread, unparked by a barrier that ends its linger early.
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

    /// Finish every queued job, then stop. Call once no request can queue more.
    pub fn shutdown(self) {
        drop(self.handle);
        if self.thread.join().is_err() {
            tracing::error!("the store writer panicked");
        }
    }
}

impl WriterHandle {
    pub fn send(&self, job: Job) {
        self.depth.fetch_add(1, Ordering::Relaxed);
        // Moved by increments, not set from `depth`: a set racing the writer's could leave the
        // gauge at 0 with work queued.
        metrics::gauge!("ctxd_store_queue_depth").increment(1.0);
        if self.tx.send(job).is_err() {
            self.depth.fetch_sub(1, Ordering::Relaxed);
            metrics::gauge!("ctxd_store_queue_depth").decrement(1.0);
            tracing::error!("store writer is gone: a write was dropped");
        }
    }

    /// Wait until everything queued so far is written (before reading a session back).
    pub async fn flush(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Job::Barrier(tx));
        // Someone waits: a lingering writer commits now.
        self.thread.unpark();
        let _ = rx.await;
    }

    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }
}

/// How the writer's thread is scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Priority {
    /// `SCHED_IDLE`: any request's thread that wakes preempts a commit at once (full-text
    /// merges and fsyncs take milliseconds, on a machine whose few cores the requests need).
    /// Measured: a nice value (10, even 19) still let commits delay requests by a millisecond
    /// or more at p99, `SCHED_IDLE` did not.
    Background,
    /// An ordinary thread at nice ~10: when the writer falls behind (a machine busy with other
    /// work leaves an idle-class thread almost no time), so the queue cannot grow without end.
    CatchingUp,
}

/// More jobs than this queued after a commit: the writer is behind.
const BEHIND: usize = 2_000;
/// Fewer than this: caught up again.
const CAUGHT_UP: usize = 200;

/// Move this thread to `priority`; whether the OS allowed it (leaving `SCHED_IDLE` takes
/// `CAP_SYS_NICE` or a permissive `RLIMIT_NICE`).
fn set_priority(priority: Priority) -> bool {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::unix::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
            ThreadSchedulePolicy,
        };
        use thread_priority::{ThreadPriority, ThreadPriorityValue};
        let (policy, value) = match priority {
            Priority::Background => (NormalThreadSchedulePolicy::Idle, ThreadPriority::Min),
            // 25 of 0..=99 maps to nice 9.
            Priority::CatchingUp => match ThreadPriorityValue::try_from(25u8) {
                Ok(v) => (
                    NormalThreadSchedulePolicy::Other,
                    ThreadPriority::Crossplatform(v),
                ),
                Err(_) => return false,
            },
        };
        match set_thread_priority_and_policy(
            thread_native_id(),
            value,
            ThreadSchedulePolicy::Normal(policy),
        ) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = ?e, ?priority, "store writer keeps its priority");
                false
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = priority;
        false
    }
}

/// The writer's scheduling, adjusted after each commit to how far behind it is.
struct Scheduling {
    current: Option<Priority>,
    /// Leaving the background was refused once: not tried again.
    stuck: bool,
}

impl Scheduling {
    fn start() -> Self {
        let mut s = Scheduling {
            current: None,
            stuck: false,
        };
        if set_priority(Priority::Background) {
            s.current = Some(Priority::Background);
        }
        s
    }

    fn after_commit(&mut self, queued: usize) {
        match self.current {
            Some(Priority::Background) if queued > BEHIND && !self.stuck => {
                if set_priority(Priority::CatchingUp) {
                    tracing::warn!(queued, "store writer behind: now at normal priority");
                    self.current = Some(Priority::CatchingUp);
                } else {
                    tracing::warn!(queued, "store writer behind and cannot leave SCHED_IDLE");
                    self.stuck = true;
                }
            }
            Some(Priority::CatchingUp)
                if queued < CAUGHT_UP && set_priority(Priority::Background) =>
            {
                tracing::info!(queued, "store writer caught up: background again");
                self.current = Some(Priority::Background);
            }
            _ => {}
        }
    }
}

/// At most this many jobs share a transaction (a bound on the time one commit holds the store).
const MAX_GROUP: usize = 256;

/// How long a commit waits for more jobs after its first. Also the longest a write stays
/// unwritten on an idle gateway; a crash loses at most that (clients resend the conversation).
const LINGER: std::time::Duration = std::time::Duration::from_millis(20);

fn run(engine: &Engine<SqliteStore>, rx: &mpsc::Receiver<Job>, depth: &AtomicUsize) {
    let store = engine.store();
    let mut scheduling = Scheduling::start();
    while let Ok(first) = rx.recv() {
        // What arrives within LINGER joins this commit (group commit): requests never wait
        // for the writer, and every commit costs an fsync and the full-text indexes a segment
        // flush and merge, so fewer, larger commits cost the machine less. The writer sleeps
        // through the linger rather than waiting on the channel, so the requests queueing
        // meanwhile wake no thread; a barrier (someone is waiting) unparks it early.
        let mut jobs = vec![first];
        let deadline = std::time::Instant::now() + LINGER;
        loop {
            while jobs.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            let barrier = jobs.iter().any(|j| matches!(j, Job::Barrier(_)));
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if barrier || jobs.len() >= MAX_GROUP || left.is_zero() {
                break;
            }
            std::thread::park_timeout(left);
        }
        write_group(store, &jobs);
        // Barriers are answered once everything before them is committed.
        let count = jobs.len();
        for job in jobs {
            if let Job::Barrier(done) = job {
                let _ = done.send(());
            }
        }
        let queued = depth
            .fetch_sub(count, Ordering::Relaxed)
            .saturating_sub(count);
        metrics::gauge!("ctxd_store_queue_depth").decrement(count as f64);
        scheduling.after_commit(queued);
    }
}

fn write_group(store: &SqliteStore, jobs: &[Job]) {
    let mut writes = Vec::with_capacity(jobs.len());
    let mut stales = Vec::with_capacity(jobs.len());
    for job in jobs {
        match job {
            Job::Append {
                session,
                entries,
                stale,
            } => {
                writes.push(GroupWrite::Append {
                    session: *session,
                    entries,
                });
                stales.push((*session, stale));
            }
            Job::SetLeaf {
                session,
                leaf,
                stale,
            } => {
                writes.push(GroupWrite::SetLeaf {
                    session: *session,
                    leaf,
                });
                stales.push((*session, stale));
            }
            Job::Barrier(_) => {}
        }
    }
    if writes.is_empty() {
        return;
    }
    let started = std::time::Instant::now();
    match store.write_group(&writes) {
        Ok(results) => {
            for (result, (session, stale)) in results.iter().zip(&stales) {
                if let Err(e) = result {
                    failed(stale, *session, e);
                }
            }
        }
        Err(e) => {
            for (session, stale) in &stales {
                failed(stale, *session, &e);
            }
        }
    }
    metrics::histogram!("ctxd_store_commit_seconds").record(started.elapsed().as_secs_f64());
    metrics::histogram!("ctxd_store_group_writes").record(writes.len() as f64);
}

fn failed(stale: &AtomicBool, session: SessionId, e: &ctxd_store::StoreError) {
    stale.store(true, Ordering::Release);
    metrics::counter!("ctxd_store_write_errors_total").increment(1);
    tracing::error!(session, error = %e, "store write failed; the session will be reloaded");
}

#[cfg(all(test, target_os = "linux"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use thread_priority::unix::ThreadSchedulePolicy;
    use thread_priority::unix::{thread_schedule_policy, NormalThreadSchedulePolicy as Normal};

    fn policy() -> ThreadSchedulePolicy {
        thread_schedule_policy().unwrap()
    }

    #[test]
    fn the_writer_runs_idle_and_leaves_it_only_when_behind() {
        std::thread::spawn(|| {
            let mut s = Scheduling::start();
            assert_eq!(s.current, Some(Priority::Background));
            assert_eq!(policy(), ThreadSchedulePolicy::Normal(Normal::Idle));
            // Keeping up: stays in the background.
            s.after_commit(BEHIND);
            assert_eq!(policy(), ThreadSchedulePolicy::Normal(Normal::Idle));
            // Behind: normal priority where the OS allows leaving SCHED_IDLE (root, or a
            // permissive RLIMIT_NICE), otherwise it says so once and stays.
            s.after_commit(BEHIND + 1);
            match s.current {
                Some(Priority::CatchingUp) => {
                    assert_eq!(policy(), ThreadSchedulePolicy::Normal(Normal::Other));
                    s.after_commit(CAUGHT_UP);
                    assert_eq!(s.current, Some(Priority::CatchingUp));
                    s.after_commit(CAUGHT_UP - 1);
                    assert_eq!(s.current, Some(Priority::Background));
                    assert_eq!(policy(), ThreadSchedulePolicy::Normal(Normal::Idle));
                }
                other => {
                    assert_eq!(other, Some(Priority::Background));
                    assert!(s.stuck);
                }
            }
        })
        .join()
        .unwrap();
    }
}
