//! Connection threads. `postgres::Client` drives its socket with a private tokio runtime and
//! `block_on`, which panics on a thread already inside a runtime (the gateway calls the store
//! from tokio workers). So every database call runs on a plain thread of this pool, each owning
//! one client; a call sends a closure and waits for its answer on a channel.
//!
//! A thread whose client has closed (the server restarted, the connection was terminated)
//! reconnects on its next job, with a backoff between failed attempts; jobs that arrive while it
//! cannot connect fail at once with [`StoreError::Unavailable`]. An idle client does not notice
//! that its server went away until it is used, so once one thread finds its client closed, the
//! others reconnect before their next job instead of failing it (after a restart each would
//! otherwise fail one job in turn, each marking the gateway's store failing for a while).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres::{Client, Config, NoTls};

use crate::StoreError;

type Job = Box<dyn FnOnce(Result<&mut Client, StoreError>) + Send>;

/// The first wait after a failed connection attempt; doubled per failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Short, so the gateway serves again within half a second of the database's return (a
/// refused connection on a down server costs a system call; clients were getting 503s for
/// seconds after it was back).
const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// Threads that each own a connection, fed from one queue.
pub(crate) struct Pool {
    jobs: Sender<Job>,
    idle: Arc<AtomicUsize>,
    size: usize,
}

impl Pool {
    /// Start `size` threads connecting to `config` (lazily, on their first job). `location` is
    /// the redacted URL, for messages.
    pub(crate) fn start(config: Config, size: usize, location: String) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let idle = Arc::new(AtomicUsize::new(size));
        let losses = Arc::new(AtomicU64::new(0));
        for n in 0..size {
            let mut conn = Connection::new(config.clone(), location.clone(), losses.clone());
            let (queue, idle) = (queue.clone(), idle.clone());
            std::thread::Builder::new()
                .name(format!("ctxd-pg-{n}"))
                .spawn(move || conn.serve(&queue, &idle))
                .map_err(|e| StoreError::Open {
                    path: location.clone(),
                    message: format!("cannot start a connection thread: {e}"),
                })?;
        }
        Ok(Self { jobs, idle, size })
    }

    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// How many threads wait for a job now (a hint: another caller may take one first).
    pub(crate) fn idle(&self) -> usize {
        self.idle.load(Ordering::Acquire)
    }

    /// Run `f` on a connection thread and wait for its answer.
    pub(crate) fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Client) -> Result<T, StoreError> + Send + 'static,
    {
        let (answer, wait) = mpsc::sync_channel(1);
        self.submit(Box::new(move |client| {
            let _gone = answer.send(client.and_then(f));
        }))?;
        wait.recv().map_err(|_| lost())?
    }

    /// Run `f` on a connection thread, handing each value it yields to `visit` on this thread
    /// as it comes, until `f` ends or `visit` returns `false` (then `f`'s next yield returns
    /// `false` and it stops).
    pub(crate) fn stream<R, F>(
        &self,
        f: F,
        visit: &mut dyn FnMut(R) -> bool,
    ) -> Result<(), StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Client, &mut dyn FnMut(R) -> bool) -> Result<(), StoreError>
            + Send
            + 'static,
    {
        let (rows, received) = mpsc::sync_channel::<R>(64);
        let (answer, wait) = mpsc::sync_channel(1);
        self.submit(Box::new(move |client| {
            let result = client.and_then(|c| f(c, &mut |row| rows.send(row).is_ok()));
            drop(rows);
            let _gone = answer.send(result);
        }))?;
        for row in received.iter() {
            if !visit(row) {
                break;
            }
        }
        drop(received);
        wait.recv().map_err(|_| lost())?
    }

    fn submit(&self, job: Job) -> Result<(), StoreError> {
        self.jobs.send(job).map_err(|_| lost())
    }
}

fn lost() -> StoreError {
    StoreError::Unavailable("a connection thread stopped during the call".into())
}

/// One thread's connection, reopened when it closes.
struct Connection {
    config: Config,
    location: String,
    client: Option<Client>,
    backoff: Duration,
    next_attempt: Instant,
    last_error: String,
    /// Connections any thread of the pool found closed, so far.
    losses: Arc<AtomicU64>,
    /// `losses` when this client connected: one found closed since may mean the server went
    /// away under this one too.
    connected_at: u64,
}

impl Connection {
    fn new(config: Config, location: String, losses: Arc<AtomicU64>) -> Self {
        Self {
            config,
            location,
            client: None,
            backoff: MIN_BACKOFF,
            next_attempt: Instant::now(),
            last_error: String::new(),
            losses,
            connected_at: 0,
        }
    }

    fn serve(&mut self, queue: &Mutex<Receiver<Job>>, idle: &AtomicUsize) {
        loop {
            let job = {
                let queue = queue.lock().unwrap_or_else(|p| p.into_inner());
                match queue.recv() {
                    Ok(job) => job,
                    // The store was dropped.
                    Err(_) => return,
                }
            };
            idle.fetch_sub(1, Ordering::AcqRel);
            let done = catch_unwind(AssertUnwindSafe(|| job(self.client())));
            if done.is_err() {
                // The client's state is unknown after a panic: start over.
                self.client = None;
                super::prepared::forget_all();
            }
            if self.client.as_ref().is_some_and(Client::is_closed) {
                self.losses.fetch_add(1, Ordering::AcqRel);
            }
            idle.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The open client, reconnecting when it closed and the backoff allows.
    fn client(&mut self) -> Result<&mut Client, StoreError> {
        let losses = self.losses.load(Ordering::Acquire);
        if self.client.as_ref().is_some_and(Client::is_closed) || losses > self.connected_at {
            self.client = None;
        }
        if self.client.is_none() {
            if Instant::now() < self.next_attempt {
                return Err(self.unavailable());
            }
            match self.config.connect(NoTls) {
                Ok(client) => {
                    // The old connection's statements died with it.
                    super::prepared::forget_all();
                    self.client = Some(client);
                    self.backoff = MIN_BACKOFF;
                    self.connected_at = losses;
                }
                Err(e) => {
                    self.last_error = super::message(&e);
                    self.next_attempt = Instant::now() + self.backoff;
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    return Err(self.unavailable());
                }
            }
        }
        match &mut self.client {
            Some(client) => Ok(client),
            None => Err(StoreError::Unavailable(format!(
                "{}: not connected",
                self.location
            ))),
        }
    }

    fn unavailable(&self) -> StoreError {
        StoreError::Unavailable(format!("{}: {}", self.location, self.last_error))
    }
}
