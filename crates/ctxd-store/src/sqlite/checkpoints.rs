//! WAL checkpoints off the commit path, for a gateway serving a SQLite store. SQLite's default
//! checkpoints inside the commit that crosses 1,000 WAL pages, on the committing thread: the
//! response waiting for that commit (durable before acknowledged) would wait for a copy of every
//! page and an fsync. [`Checkpoints`] turns that off on the store's connection and checkpoints, on a thread and a connection
//! of its own; WAL lets commits go on meanwhile. A passive checkpoint never shrinks the WAL
//! file: once the store is at rest (nothing written since the last tick, everything copied) the
//! thread truncates it to zero. Under a load that never pauses, the WAL is never reset by itself
//! (a writer restarts it only when it begins while every frame is copied, and the next commit
//! always lands first), so it grows for good: once it outgrows the store's limit the thread
//! raises [`WalPressure`] right after a passive copy, and the writer truncates it from its own
//! connection between two commits (from here a truncation would wait for the writer, which a
//! busy writer never leaves a gap for), with little left to copy.
//! The database's and the WAL's sizes are gauges (`ctxd_store_bytes`,
//! `ctxd_store_wal_bytes`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Checkpointer, SqliteStore, WAL_SIZE_LIMIT};
use crate::StoreError;

/// How often the WAL is copied back into the database. A passive checkpoint of a WAL already
/// copied costs a few system calls; one second of a busy gateway's writes is a few MB at most.
const EVERY: Duration = Duration::from_millis(500);
/// How often the WAL's size is looked at in between: the history index's catch-up writes
/// ~100 MB of WAL a second, so a WAL over its limit is caught within ~10 MB.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The WAL has outgrown its limit: the writer truncates it between two commits, and its
/// derived work (history indexing) waits until it has tried.
#[derive(Clone, Default)]
pub struct WalPressure(Arc<AtomicBool>);

impl WalPressure {
    pub fn is_high(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The writer tried (the checkpoints raise it again at their next tick if the WAL is still
    /// over its limit).
    pub fn relieve(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The checkpoint thread; [`Checkpoints::stop`] ends it after one last checkpoint.
pub struct Checkpoints {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Checkpoints {
    /// Take checkpoints away from `store`'s commits and run them every `EVERY`; `pressure`
    /// tells the writer when to cut the WAL back.
    pub fn start(
        store: &SqliteStore,
        path: &Path,
        pressure: WalPressure,
    ) -> Result<Self, StoreError> {
        Self::start_with_limit(store, path, pressure, WAL_SIZE_LIMIT as u64)
    }

    /// [`Checkpoints::start`], with the WAL's limit under load of `limit` bytes (a test's
    /// small one).
    pub fn start_with_limit(
        store: &SqliteStore,
        path: &Path,
        pressure: WalPressure,
        limit: u64,
    ) -> Result<Self, StoreError> {
        let checkpointer = Checkpointer::open(path)?;
        store.checkpoint_elsewhere()?;
        let (stop, stopped) = mpsc::channel::<()>();
        let files = Files::of(path);
        let thread = std::thread::Builder::new()
            .name("ctxd-checkpoint".into())
            .spawn(move || {
                let mut last = None;
                let mut due = std::time::Instant::now() + EVERY;
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(LOOK_EVERY) {
                    let over = files.wal_bytes() > limit;
                    if over || std::time::Instant::now() >= due {
                        last = checkpoint(&checkpointer, last, over, &pressure);
                        files.measure();
                        due = std::time::Instant::now() + EVERY;
                    }
                }
                checkpoint(&checkpointer, None, false, &pressure);
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

/// One passive checkpoint; `last`: the WAL's frames at the previous tick, `over`: its file is
/// over the size limit. Returns this tick's frames. A WAL with frames, all copied, and none
/// added since the previous tick belongs to a store at rest: it is truncated; one over the limit
/// raises `pressure` for the writer.
fn checkpoint(
    checkpointer: &Checkpointer,
    last: Option<i64>,
    over: bool,
    pressure: &WalPressure,
) -> Option<i64> {
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
            if over {
                pressure.raise();
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
        metrics::gauge!("ctxd_store_bytes").set(len(&self.db) as f64);
        metrics::gauge!("ctxd_store_wal_bytes").set(self.wal_bytes() as f64);
    }

    fn wal_bytes(&self) -> u64 {
        len(&self.wal)
    }
}

fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}
