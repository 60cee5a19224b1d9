//! The store's one writer: a thread that appends the gateway's batches in the order they were
//! queued. Requests never wait on the disk (an fsync costs about a millisecond here, more than
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
use ctxd_store::{NewEntry, SessionId, SqliteStore, Store};

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
            .spawn(move || run(&engine, &rx, &thread_depth))?;
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
        metrics::gauge!("ctxd_store_queue_depth").set(self.depth.load(Ordering::Relaxed) as f64);
        if self.tx.send(job).is_err() {
            self.depth.fetch_sub(1, Ordering::Relaxed);
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

fn run(engine: &Engine<SqliteStore>, rx: &mpsc::Receiver<Job>, depth: &AtomicUsize) {
    let store = engine.store();
    for job in rx {
        match job {
            Job::Append {
                session,
                entries,
                stale,
            } => {
                let started = std::time::Instant::now();
                if let Err(e) = store.append(session, &entries, None) {
                    failed(&stale, session, &e);
                }
                metrics::histogram!("ctxd_store_append_seconds")
                    .record(started.elapsed().as_secs_f64());
            }
            Job::SetLeaf {
                session,
                leaf,
                stale,
            } => {
                if let Err(e) = store.set_leaf(session, &leaf) {
                    failed(&stale, session, &e);
                }
            }
            Job::Barrier(done) => {
                let _ = done.send(());
            }
        }
        let left = depth.fetch_sub(1, Ordering::Relaxed).saturating_sub(1);
        metrics::gauge!("ctxd_store_queue_depth").set(left as f64);
    }
}

fn failed(stale: &AtomicBool, session: SessionId, e: &ctxd_store::StoreError) {
    stale.store(true, Ordering::Release);
    metrics::counter!("ctxd_store_write_errors_total").increment(1);
    tracing::error!(session, error = %e, "store write failed; the session will be reloaded");
}
