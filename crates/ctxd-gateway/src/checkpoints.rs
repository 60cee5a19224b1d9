//! WAL checkpoints off the commit path. SQLite's default checkpoints inside the commit that
//! crosses 1,000 WAL pages, on the committing thread: the response waiting for that commit
//! (durable before acknowledged) would wait for a copy of every page and an fsync. The gateway
//! turns that off on the store's connection and checkpoints here, on a thread and a connection
//! of its own; WAL lets commits go on meanwhile. A passive checkpoint never shrinks the WAL
//! file: once the store is at rest (nothing written since the last tick, everything copied) the
//! thread truncates it to zero, and under load the store's `journal_size_limit` cuts it back at
//! each reset. The database's and the WAL's sizes are gauges (`ctxd_store_bytes`,
//! `ctxd_store_wal_bytes`).

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
        let files = Files::of(path);
        let thread = std::thread::Builder::new()
            .name("ctxd-checkpoint".into())
            .spawn(move || {
                let mut last = None;
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                    last = checkpoint(&checkpointer, last);
                    files.measure();
                }
                checkpoint(&checkpointer, None);
                truncate(&checkpointer);
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

/// One passive checkpoint; `last`: the WAL's frames at the previous tick. Returns this tick's.
/// A WAL with frames, all copied, and none added since the previous tick belongs to a store at
/// rest: it is truncated.
fn checkpoint(checkpointer: &Checkpointer, last: Option<i64>) -> Option<i64> {
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
            if frames > 0 && copied == frames && last == Some(frames) {
                truncate(checkpointer);
                return Some(0);
            }
            Some(frames)
        }
        Err(e) => {
            tracing::warn!(error = %e, "WAL checkpoint failed; the next one retries");
            None
        }
    }
}

fn truncate(checkpointer: &Checkpointer) {
    match checkpointer.truncate() {
        Ok(true) => tracing::debug!("WAL truncated at rest"),
        Ok(false) => tracing::debug!("WAL busy; truncated at a later rest"),
        Err(e) => tracing::debug!(error = %e, "WAL truncation failed; a later rest retries"),
    }
}

/// The store's files, measured for the gauges.
struct Files {
    db: std::path::PathBuf,
    wal: std::path::PathBuf,
}

impl Files {
    fn of(path: &Path) -> Self {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        Files {
            db: path.to_owned(),
            wal: wal.into(),
        }
    }

    fn measure(&self) {
        let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        metrics::gauge!("ctxd_store_bytes").set(len(&self.db) as f64);
        metrics::gauge!("ctxd_store_wal_bytes").set(len(&self.wal) as f64);
    }
}

/// Bytes free (for an unprivileged writer) and the size of the file system holding `path`;
/// `None` where that cannot be read.
pub fn disk_space(path: &Path) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let st = rustix::fs::statvfs(dir).ok()?;
        Some((
            st.f_bavail.saturating_mul(st.f_frsize),
            st.f_blocks.saturating_mul(st.f_frsize),
        ))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}
