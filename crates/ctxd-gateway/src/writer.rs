//! The store's one writer: a thread that appends the gateway's batches in the order they were
//! queued, all those queued at once in one transaction (group commit). Requests never wait on the disk (an fsync costs about a millisecond here, more than
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
            .spawn(move || {
                lower_priority();
                run(&engine, &rx, &thread_depth)
            })?;
        Ok(Writer {
            handle: WriterHandle { tx, depth },
            thread,
        })
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
        let _ = rx.await;
    }

    pub fn depth(&self) -> usize {
        self.depth.load(Ordering::Relaxed)
    }
}

/// The writer is background work: at nice 10 the request path preempts its commits (full-text
/// merges take milliseconds of CPU) instead of queueing behind them on a machine with few
/// cores. Best effort: where it cannot be lowered, it runs as is.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 10) {
        tracing::debug!(error = %e, "store writer keeps its priority");
    }
}

/// At most this many jobs share a transaction (a bound on the time one commit holds the store).
const MAX_GROUP: usize = 256;

/// How long a commit waits for more jobs after its first. Also the longest a write stays
/// unwritten on an idle gateway; a crash loses at most that (clients resend the conversation).
const LINGER: std::time::Duration = std::time::Duration::from_millis(20);

fn run(engine: &Engine<SqliteStore>, rx: &mpsc::Receiver<Job>, depth: &AtomicUsize) {
    let store = engine.store();
    while let Ok(first) = rx.recv() {
        // Everything queued meanwhile joins this commit (group commit): one fsync for many
        // requests' batches when the gateway is busy.
        // Then what arrives within LINGER joins too: requests never wait for the writer, and
        // every commit costs the full-text indexes a segment flush and merge work, so fewer,
        // larger commits cost the machine less. A barrier (someone is waiting) ends it early.
        let mut jobs = vec![first];
        let deadline = std::time::Instant::now() + LINGER;
        while jobs.len() < MAX_GROUP && !matches!(jobs.last(), Some(Job::Barrier(_))) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        write_group(store, &jobs);
        // Barriers are answered once everything before them is committed.
        let count = jobs.len();
        for job in jobs {
            if let Job::Barrier(done) = job {
                let _ = done.send(());
            }
        }
        depth.fetch_sub(count, Ordering::Relaxed);
        metrics::gauge!("ctxd_store_queue_depth").decrement(count as f64);
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
