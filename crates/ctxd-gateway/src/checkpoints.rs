//! WAL checkpoints off the commit path. SQLite's default checkpoints inside the commit that
//! crosses 1,000 WAL pages, on the committing thread: the response waiting for that commit
//! (durable before acknowledged) would wait for a copy of every page and an fsync. The gateway
//! turns that off on the store's connection and checkpoints here, on a thread and a connection
//! of its own; WAL lets commits go on meanwhile.

use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use ctxd_store::{Checkpointer, SqliteStore, StoreError};

/// How often the WAL is copied back into the database. A passive checkpoint of a WAL already
/// copied costs a few system calls; one second of a busy gateway's writes is a few MB at most.
const EVERY: Duration = Duration::from_millis(500);

pub struct Checkpoints {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Checkpoints {
    /// Take checkpoints away from `store`'s commits and run them every [`EVERY`].
    pub fn start(store: &SqliteStore, path: &Path) -> Result<Self, StoreError> {
        let checkpointer = Checkpointer::open(path)?;
        store.checkpoint_elsewhere()?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ctxd-checkpoint".into())
            .spawn(move || {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                    checkpoint(&checkpointer);
                }
                checkpoint(&checkpointer);
            })
            .map_err(|e| StoreError::Open {
                path: path.display().to_string(),
                message: format!("cannot start the checkpoint thread: {e}"),
            })?;
        Ok(Self { stop, thread })
    }

    /// One last checkpoint, then stop.
    pub fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("the checkpoint thread panicked");
        }
    }
}

fn checkpoint(checkpointer: &Checkpointer) {
    let started = std::time::Instant::now();
    match checkpointer.passive() {
        Ok((frames, copied)) => {
            metrics::histogram!("ctxd_store_checkpoint_seconds")
                .record(started.elapsed().as_secs_f64());
            metrics::gauge!("ctxd_store_wal_frames").set(frames as f64);
            if frames > 0 && copied < frames {
                tracing::debug!(
                    frames,
                    copied,
                    "WAL checkpoint incomplete (a reader holds it)"
                );
            }
        }
        Err(e) => tracing::warn!(error = %e, "WAL checkpoint failed; the next one retries"),
    }
}
