//! The server's lifecycle: bind, serve on a runtime (the caller's or a thread's own), stop.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::Config;
use crate::error::MockError;
use crate::ids::Ids;
use crate::record::{Recorded, Recorder};
use crate::router;
use crate::script::Script;

/// How long in-flight replies may go on after a stop before they are dropped.
const GRACE: Duration = Duration::from_secs(1);

/// State every request handler reads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: Config,
    pub script: Script,
    pub recorder: Recorder,
    pub ids: Ids,
    /// Anthropic's prompt cache, simulated (and Gemini's implicit one).
    pub cache: crate::cache::Cache,
    /// The Gemini function calls the mock signed (hashes of their signed content): strict
    /// mode demands their signature back within the tool loop.
    pub gemini_signed: std::sync::Mutex<std::collections::HashSet<u64>>,
}

/// A running mock server on 127.0.0.1. Stops on [`MockServer::stop`] or when dropped.
#[derive(Debug)]
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    runner: Runner,
}

#[derive(Debug)]
enum Runner {
    Task(Option<tokio::task::JoinHandle<()>>),
    Thread(Option<std::thread::JoinHandle<()>>),
}

impl MockServer {
    /// Starts serving on the current tokio runtime.
    pub async fn start(config: Config) -> Result<Self, MockError> {
        let port = config.port;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|source| MockError::Bind { port, source })?;
        let shared = shared(config)?;
        let addr = listener
            .local_addr()
            .map_err(|source| MockError::Bind { port, source })?;
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(serve(listener, Arc::clone(&shared), stopped));
        Ok(Self {
            addr,
            shared,
            stop,
            runner: Runner::Task(Some(task)),
        })
    }

    /// Starts serving on threads of its own (a runtime with two workers), for sync tests and
    /// benchmarks.
    pub fn start_blocking(config: Config) -> Result<Self, MockError> {
        let port = config.port;
        let bind_err = |source| MockError::Bind { port, source };
        let listener =
            std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        let shared = shared(config)?;
        // Two workers: a benchmark's 1 MB bodies are read and scanned on both cores.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ctxd-mock")
            .enable_all()
            .build()
            .map_err(MockError::Runtime)?;
        let (stop, stopped) = watch::channel(false);
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("ctxd-mock-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    // Cannot fail: the socket is a bound, non-blocking std listener.
                    if let Ok(listener) = TcpListener::from_std(listener) {
                        serve(listener, state, stopped).await;
                    }
                });
                runtime.shutdown_timeout(GRACE);
            })
            .map_err(MockError::Runtime)?;
        Ok(Self {
            addr,
            shared,
            stop,
            runner: Runner::Thread(Some(thread)),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (no trailing slash; clients append `/v1/...`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.recorder.all()
    }

    /// Forgets the requests received so far.
    pub fn clear(&self) {
        self.shared.recorder.clear();
    }

    /// The queue of scripted replies (shared with the server: push at any time).
    pub fn script(&self) -> &Script {
        &self.shared.script
    }

    /// Stops accepting; in-flight replies get [`GRACE`] to finish. Waits for the server's own
    /// thread; on the caller's runtime the server task ends by itself (see [`Self::shutdown`]).
    pub fn stop(self) {
        drop(self);
    }

    /// Stops and waits until the server has finished (the listener is closed).
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        match &mut self.runner {
            Runner::Task(task) => {
                if let Some(task) = task.take() {
                    let _ = task.await;
                }
            }
            Runner::Thread(thread) => {
                if let Some(thread) = thread.take() {
                    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
                }
            }
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Runner::Thread(thread) = &mut self.runner {
            if let Some(thread) = thread.take() {
                let _ = thread.join();
            }
        }
    }
}

fn shared(config: Config) -> Result<Arc<Shared>, MockError> {
    let recorder = Recorder::new(config.recording, config.log.as_deref())?;
    let script = Script::default();
    script.extend(config.script.iter().cloned());
    Ok(Arc::new(Shared {
        config,
        script,
        recorder,
        ids: Ids::new(),
        cache: crate::cache::Cache::default(),
        gemini_signed: std::sync::Mutex::default(),
    }))
}

/// Serves until `stopped` turns true (or its sender is gone), then lets in-flight replies
/// finish for at most [`GRACE`].
async fn serve(listener: TcpListener, shared: Arc<Shared>, stopped: watch::Receiver<bool>) {
    let app = router::router(shared);
    let mut signal = stopped.clone();
    let mut grace = stopped;
    // No Nagle: an SSE event written after another would otherwise wait for the client's
    // delayed ACK (~40 ms), which a latency baseline cannot afford.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = signal.wait_for(|stop| *stop).await;
    });
    tokio::select! {
        _ = server => {}
        _ = async move {
            let _ = grace.wait_for(|stop| *stop).await;
            tokio::time::sleep(GRACE).await;
        } => {}
    }
}
