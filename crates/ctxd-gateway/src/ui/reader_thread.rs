//! The dashboard's own thread for its polled reads (the sessions list, a session page): at the
//! lowest scheduling priority and one job at a time, so on a small machine the request
//! workers, the store's writer and the checkpointer always win the CPU over a page rebuild
//! (measured: docs/benchmarks.md, "The dashboard beside the load").
//!
//! Only reads run here. A job that may take SQLite's write lock (a history search catching its
//! index up) stays on tokio's blocking pool: at nice 19 it could hold that lock while the
//! gateway's writer waits on it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use super::UiError;

type Job = Box<dyn FnOnce() + Send>;

/// Jobs at once: one, so the dashboard takes at most one core, and only what is left of it.
const THREADS: usize = 1;

/// The queue of the dashboard's threads, started on first use (`None`: none could start).
fn queue() -> Option<&'static Sender<Job>> {
    static QUEUE: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            let mut started = 0;
            for i in 0..THREADS {
                let rx = rx.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("ctxd-ui-{i}"))
                    .spawn(move || work(&rx));
                started += usize::from(spawned.is_ok());
            }
            (started > 0).then_some(tx)
        })
        .as_ref()
}

fn work(rx: &Mutex<Receiver<Job>>) {
    ctxd_engine::background::lowest_priority("ctxd-ui");
    loop {
        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
        let Ok(job) = job else { return };
        // A panicking job drops its answer (the request gets a 503); the thread goes on.
        let _ = catch_unwind(AssertUnwindSafe(job));
    }
}

/// Run `f` on the dashboard's thread (on tokio's blocking pool if it could not start).
pub(crate) async fn run<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, UiError> + Send + 'static,
) -> Result<T, UiError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    match queue() {
        Some(q) => {
            if let Err(e) = q.send(job) {
                tokio::task::spawn_blocking(e.0);
            }
        }
        None => {
            tokio::task::spawn_blocking(job);
        }
    }
    rx.await
        .map_err(|_| UiError::Unavailable("dashboard query: it failed on its thread".into()))?
}
