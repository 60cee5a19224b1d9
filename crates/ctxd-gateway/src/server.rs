//! The axum application: routes, shared state, startup and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, MethodRouter};
use axum::Router;
use ctxd_engine::Engine;
use ctxd_store::{Backend, Location, WalPressure};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::api::Api;
use crate::config::Settings;
use crate::handler;
use crate::identity;
use crate::sessions::Sessions;
use crate::upstream::Upstream;
use crate::writer::{Writer, WriterHandle};

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Store(#[from] ctxd_store::StoreError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("upstream client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("cannot make the tenant key: {0}")]
    Random(String),
    #[error("{0}")]
    Classifier(String),
    #[error("OpenTelemetry: {0}")]
    Telemetry(String),
}

/// The files of a SQLite store that a start is about to create: removed when the start fails
/// (dropped without [`NewFiles::keep`]), so a refused `ctxd serve` leaves no empty store,
/// `-wal`, `-shm` or `.serve.lock` behind. Files that existed before are never touched.
#[derive(Default)]
struct NewFiles {
    files: Vec<std::path::PathBuf>,
    dir: Option<std::path::PathBuf>,
}

impl NewFiles {
    fn watch(store: &std::path::Path) -> Self {
        let files = ["", "-wal", "-shm", ".serve.lock"]
            .iter()
            .map(|suffix| {
                let mut p = store.as_os_str().to_owned();
                p.push(suffix);
                std::path::PathBuf::from(p)
            })
            .filter(|p| !p.exists())
            .collect();
        let dir = store
            .parent()
            .filter(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(std::path::Path::to_path_buf);
        Self { files, dir }
    }

    /// The start succeeded: the files are the gateway's.
    fn keep(&mut self) {
        self.files.clear();
        self.dir = None;
    }
}

impl Drop for NewFiles {
    fn drop(&mut self) {
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
        if let Some(dir) = &self.dir {
            // Only when empty: nothing else of anyone's goes.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// State shared by every request.
pub struct Gateway {
    pub settings: Settings,
    pub engine: Arc<Engine<dyn Backend>>,
    pub upstream: Upstream,
    pub sessions: Sessions,
    pub writer: WriterHandle,
    /// Distillation passes at turn ends, on a thread of their own.
    pub(crate) distiller: crate::distill::Distiller,
    /// Who writes shell-output digests: a configured OpenAI-compatible model, else local.
    pub(crate) summarizer: ctxd_engine::digest::Summarizer,
    /// What judges meta-amnesia's reads: the configured classifier (its own instance: the
    /// distiller's lives on the passes' thread).
    pub(crate) judge: ctxd_engine::distill::Configured,
    /// How requests find their tenants (the credential hash keyed by the store's secret, so
    /// tenants survive restarts).
    pub tenancy: crate::tenancy::Tenancy,
    /// Budgets: counted in the store, checked before each request goes upstream.
    pub(crate) spending: crate::spending::Spending,
    /// A span per request to an OpenTelemetry collector, when one is configured.
    pub(crate) telemetry: Arc<crate::telemetry::Telemetry>,
    metrics: PrometheusHandle,
    /// Responses being recorded (shutdown waits for them before draining the writer).
    pub(crate) recording: AtomicUsize,
    /// Fresh request ids, unique across restarts.
    request_ids: crate::request_id::Ids,
    /// Set when the shutdown deadline has passed: open streams end with the API's error event.
    pub(crate) closing: tokio::sync::watch::Sender<bool>,
    /// Bytes of request bodies in flight ([`crate::budget`]).
    pub(crate) bodies: Arc<tokio::sync::Semaphore>,
    /// The session each tenant's model last called ctxd's MCP tools in (`/mcp` binds to it).
    pub(crate) mcp_seen: crate::mcp::Seen,
    /// Context windows the providers stated in their overflow errors.
    pub(crate) learned: crate::learned::Learned,
}

/// The process's metrics recorder (one per process; tests start several gateways).
fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05,
                0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
            ];
            let recorder = PrometheusBuilder::new()
                .set_buckets(&buckets)
                .map(PrometheusBuilder::build_recorder)
                .unwrap_or_else(|_| PrometheusBuilder::new().build_recorder());
            let handle = recorder.handle();
            // Fails only if another recorder is installed (an embedding program's): then its
            // recorder gets the metrics and /metrics shows ours empty.
            let _ = metrics::set_global_recorder(recorder);
            register_metrics();
            handle
        })
        .clone()
}

/// Every metric with its help text, at zero, so `/metrics` lists them all from the start: per
/// route (and outcome) where the labels are a closed set, else one unlabelled series.
fn register_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    let routes = [Api::Anthropic, Api::Chat, Api::Responses].map(Api::route);
    describe_counter!(
        "ctxd_requests_total",
        "Conversation requests, by route and outcome"
    );
    describe_histogram!(
        "ctxd_request_seconds",
        Unit::Seconds,
        "A request's whole time"
    );
    describe_histogram!(
        "ctxd_upstream_seconds",
        Unit::Seconds,
        "Time waiting on the provider"
    );
    describe_histogram!(
        "ctxd_overhead_seconds",
        Unit::Seconds,
        "The gateway's own time"
    );
    describe_counter!(
        "ctxd_rewritten_total",
        "Requests sent upstream rewritten by ctxd"
    );
    describe_counter!(
        "ctxd_digests_total",
        "Shell outputs replaced by a digest, by source (local, model, fallback)"
    );
    describe_counter!(
        "ctxd_amnesia_judgments_total",
        "Read-like results meta-amnesia judged, by decision (retain, drop)"
    );
    describe_counter!(
        "ctxd_amnesia_pruned_rounds_total",
        "Tool rounds meta-amnesia took out of the request's tail"
    );
    describe_counter!(
        "ctxd_amnesia_removed_tokens_total",
        "Tokens of the rounds meta-amnesia pruned (4 bytes a token)"
    );
    describe_counter!(
        "ctxd_rejected_total",
        "Requests refused, by route and status"
    );
    describe_counter!("ctxd_reminders_total", "Budget reminders added, by kind");
    describe_counter!(
        "ctxd_windows_opened_total",
        "Context windows opened, by cause"
    );
    describe_gauge!("ctxd_store_queue_depth", "Writes queued for the store");
    describe_histogram!(
        "ctxd_store_commit_seconds",
        Unit::Seconds,
        "A store commit's time"
    );
    describe_histogram!("ctxd_store_group_writes", "Writes per store commit");
    describe_counter!("ctxd_store_write_errors_total", "Store writes that failed");
    describe_counter!(
        "ctxd_store_commits_total",
        "Store commits, by who ran them: the request waiting for one, or the writer thread"
    );
    describe_gauge!(
        "ctxd_store_index_backlog",
        "Sessions whose full-text and history indexes the writer has still to catch up"
    );
    describe_histogram!(
        "ctxd_store_index_seconds",
        Unit::Seconds,
        "Time of one indexing step between commits"
    );
    describe_histogram!(
        "ctxd_store_checkpoint_seconds",
        Unit::Seconds,
        "Time of one WAL checkpoint (on its own thread and connection)"
    );
    describe_gauge!(
        "ctxd_distill_model_cpu_seconds",
        Unit::Seconds,
        "CPU time of the passes' classifier model on its own thread (MiniLM), since start"
    );
    describe_counter!(
        "ctxd_distill_landed_total",
        "Passes' edits by where they landed: at the pass's end, at a later request, refused"
    );
    describe_gauge!(
        "ctxd_distill_pending",
        "Distillation passes queued or running (paced to distill-cpu-percent of one core)"
    );
    describe_gauge!(
        "ctxd_store_wal_frames",
        "Frames in the WAL at the last checkpoint"
    );
    for route in routes {
        for outcome in ["completed", "overflow", "aborted", "failed"] {
            metrics::counter!("ctxd_requests_total", "route" => route, "outcome" => outcome)
                .increment(0);
        }
        let _ = metrics::histogram!("ctxd_request_seconds", "route" => route);
        let _ = metrics::histogram!("ctxd_upstream_seconds", "route" => route);
        let _ = metrics::histogram!("ctxd_overhead_seconds", "route" => route);
        metrics::counter!("ctxd_rewritten_total", "route" => route).increment(0);
    }
    let _ = metrics::histogram!("ctxd_upstream_seconds", "route" => "passthrough");
    for name in [
        "ctxd_rejected_total",
        "ctxd_reminders_total",
        "ctxd_windows_opened_total",
        "ctxd_store_write_errors_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    metrics::gauge!("ctxd_store_queue_depth").increment(0.0);
    metrics::gauge!("ctxd_store_index_backlog").set(0.0);
    let _ = metrics::histogram!("ctxd_store_commit_seconds");
    let _ = metrics::histogram!("ctxd_store_group_writes");
    let _ = metrics::histogram!("ctxd_store_index_seconds");
    let _ = metrics::histogram!("ctxd_store_checkpoint_seconds");
    metrics::gauge!("ctxd_store_wal_frames").set(0.0);
    metrics::gauge!("ctxd_distill_pending").increment(0.0);
    for by in ["request", "writer"] {
        metrics::counter!("ctxd_store_commits_total", "by" => by).increment(0);
    }
    crate::stats::describe_metrics();
}

/// A bound, not yet serving gateway.
pub struct Server {
    listener: tokio::net::TcpListener,
    app: Arc<Gateway>,
    writer: Writer,
    distill_thread: crate::distill::DistillThread,
    /// The store's serve lock and checkpoint thread (SQLite), released at the end.
    serving: ctxd_store::Serving,
}

impl Server {
    /// Open the store, bind the listener, start the writer.
    pub async fn bind(settings: Settings) -> Result<Self, StartError> {
        // The port first: a busy port is refused before the store is touched. Any later
        // failure removes the files this start created (store, WAL, shared memory, lock).
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|source| StartError::Listen {
                addr: settings.listen,
                source,
            })?;
        let mut created = match &settings.store {
            Location::Sqlite(path) => NewFiles::watch(path),
            _ => NewFiles::default(),
        };
        let wal = WalPressure::default();
        let reachable = listener.local_addr().ok().map(|mut a| {
            if a.ip().is_unspecified() {
                a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            a
        });
        // One gateway per SQLite file (its lock), which checkpoints its WAL off the commit
        // path; any number of gateways share a server, which orders their writes.
        let (store, serving) =
            ctxd_store::serve(&settings.store, settings.store_sync, reachable, wal.clone())?;
        let key = crate::identity::store_tenant_key(&*store).map_err(StartError::Random)?;
        // Its HTTP client has a runtime of its own: built (and later stopped) off this one.
        let endpoint = settings.otlp_endpoint.clone();
        let telemetry = tokio::task::spawn_blocking(move || {
            crate::telemetry::Telemetry::start(endpoint.as_deref())
        })
        .await
        .map_err(std::io::Error::other)?
        .map_err(StartError::Telemetry)?;
        let telemetry = Arc::new(telemetry);
        let learned = crate::learned::Learned::load(&*store);
        let mut nonce = [0u8; 4];
        getrandom::fill(&mut nonce).map_err(|e| StartError::Random(e.to_string()))?;
        // A request commits its own turn when it finds the store free and a commit costs a few
        // microseconds; a network round trip or an fsync goes to the writer.
        let inline = store.quick_commit();
        let engine: Arc<Engine<dyn Backend>> = Arc::new(Engine::from_boxed(store));
        let writer = Writer::start(engine.clone(), inline, wal)?;
        // The passes' classifier gives way to requests (`distill-cpu-percent`, `ctxd_core::pace`).
        let classifier = ctxd_engine::distill::Configured::from_settings(&settings.classifier)
            .and_then(|c| c.in_background(settings.distill_cpu_percent))
            .map_err(|e| StartError::Classifier(e.to_string()))?;
        let summarizer = match settings.classifier.kind {
            ctxd_engine::distill::ClassifierKind::OpenAi => {
                let s = settings
                    .classifier
                    .logprob()
                    .map_err(|e| StartError::Classifier(e.to_string()))?;
                ctxd_engine::digest::Summarizer::Model(
                    ctxd_engine::digest::ChatSummarizer::new(&s).map_err(StartError::Classifier)?,
                )
            }
            // `local`, and `minilm` (a build with ctxd-engine's feature): no chat model to
            // summarise with.
            _ => ctxd_engine::digest::Summarizer::Local,
        };
        let judge = ctxd_engine::distill::Configured::from_settings(&settings.classifier)
            .map_err(|e| StartError::Classifier(e.to_string()))?;
        let (distiller, distill_thread) = crate::distill::Distiller::start(
            classifier,
            settings.distill_cpu_percent,
            settings.distill_config(),
            crate::distill::Landing {
                runtime: tokio::runtime::Handle::current(),
                engine: engine.clone(),
                writer: writer.handle(),
            },
        )?;
        if !settings.listen.ip().is_loopback() {
            tracing::warn!(
                listen = %settings.listen,
                allow_keyless = settings.allow_keyless,
                "listening beyond loopback: anyone who can reach this address can use the \
                 gateway with their own API key (plain HTTP: keys cross the network unencrypted)"
            );
            if settings.tenancy == crate::tenancy::TenancyMode::Local {
                tracing::warn!(
                    "--tenancy local beyond loopback: every client shares one tenant's sessions \
                     and notes"
                );
            }
        }
        let app = Arc::new(Gateway {
            upstream: Upstream::new(&settings)?,
            sessions: Sessions::new(settings.cached_sessions, settings.session_cache_bytes),
            writer: writer.handle(),
            distiller,
            summarizer,
            judge,
            tenancy: crate::tenancy::Tenancy::new(
                settings.tenancy,
                settings.listen.ip().is_loopback(),
                key,
                settings.tenants.clone(),
            ),
            telemetry,
            spending: crate::spending::Spending::new(
                settings.budgets.clone(),
                settings.prices.clone(),
            ),
            metrics: metrics_handle(),
            recording: AtomicUsize::new(0),
            request_ids: crate::request_id::Ids::new(u32::from_le_bytes(nonce)),
            closing: tokio::sync::watch::Sender::new(false),
            bodies: crate::budget::budget(
                settings.max_bodies_in_flight_bytes,
                settings.max_body_bytes,
            ),
            mcp_seen: crate::mcp::Seen::default(),
            learned,
            engine,
            settings,
        });
        created.keep();
        Ok(Server {
            listener,
            app,
            writer,
            distill_thread,
            serving,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown` resolves, then stop as [`Server::run_signals`] does on its first
    /// signal.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            shutdown.await;
            let _ = tx.send(());
        });
        self.run_signals(rx).await
    }

    /// Serve until the first signal; then stop accepting and let in-flight requests finish
    /// within `shutdown-timeout`. At the deadline each open stream gets the API's error event
    /// and a moment to send it, then every connection is dropped. A second signal skips to
    /// that last step. Either way everything the writer holds is committed and the store
    /// closed before this returns.
    pub async fn run_signals(
        self,
        mut signals: tokio::sync::mpsc::UnboundedReceiver<()>,
    ) -> std::io::Result<()> {
        let Server {
            listener,
            app,
            writer,
            distill_thread,
            mut serving,
        } = self;
        let router = router(app.clone());
        let cap = connection_cap(app.settings.max_connections);
        let open = Arc::new(tokio::sync::Semaphore::new(cap));
        let (stopping, _) = tokio::sync::watch::channel(false);
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                signal = signals.recv() => {
                    if signal.is_none() {
                        // Nobody can signal any more: serve on (a dropped sender is no stop).
                        std::future::pending::<()>().await;
                    }
                    break;
                }
                accepted = listener.accept() => {
                    let (tcp, _) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            // Out of descriptors, mostly: wait a moment instead of spinning.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    // No Nagle: an SSE event (or a body written after its headers) would
                    // otherwise wait for the client's delayed ACK, ~40 ms a response.
                    let _ = tcp.set_nodelay(true);
                    match open.clone().try_acquire_owned() {
                        Ok(permit) => {
                            let conn = serve_connection(
                                tcp,
                                router.clone(),
                                app.settings.header_timeout,
                                stopping.subscribe(),
                            );
                            conns.spawn(async move {
                                conn.await;
                                drop(permit);
                            });
                        }
                        Err(_) => {
                            metrics::counter!("ctxd_connections_refused_total").increment(1);
                            conns.spawn(refuse_connection(tcp));
                        }
                    }
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        drop(listener);
        tracing::info!(
            open = conns.len(),
            deadline_s = app.settings.shutdown_timeout.as_secs_f64(),
            "shutting down: no new connections; finishing in-flight requests"
        );
        let _ = stopping.send(true);
        let deadline = tokio::time::sleep(app.settings.shutdown_timeout);
        tokio::pin!(deadline);
        let mut at_once = false;
        loop {
            tokio::select! {
                next = conns.join_next() => if next.is_none() { break },
                () = &mut deadline => break,
                Some(()) = signals.recv() => { at_once = true; break }
            }
        }
        if !conns.is_empty() {
            if at_once {
                tracing::warn!(
                    open = conns.len(),
                    "second signal: closing every connection now"
                );
            } else {
                // Open streams end with the API's error event; a moment to send it.
                tracing::warn!(
                    open = conns.len(),
                    "shutdown deadline: closing what is left"
                );
                let _ = app.closing.send(true);
                let grace = tokio::time::sleep(std::time::Duration::from_millis(500));
                tokio::pin!(grace);
                loop {
                    tokio::select! {
                        next = conns.join_next() => if next.is_none() { break },
                        () = &mut grace => break,
                        Some(()) = signals.recv() => break,
                    }
                }
            }
            conns.shutdown().await;
        }
        // Responses settled but not yet queued are queued within moments (CPU work and a notes
        // read): wait for them (bounded), then drain the writer and close the store.
        let settle =
            std::time::Instant::now() + std::time::Duration::from_secs(if at_once { 1 } else { 5 });
        while app.recording.load(Ordering::Acquire) > 0 && std::time::Instant::now() < settle {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        drop(router);
        let telemetry = app.telemetry.clone();
        drop(app);
        let serving = tokio::task::spawn_blocking(move || {
            telemetry.shutdown();
            distill_thread.stop();
            writer.shutdown();
            serving.stop_checkpoints();
            serving
        })
        .await
        .map_err(std::io::Error::other)?;
        tracing::info!("gateway stopped; store closed");
        drop(serving);
        Ok(())
    }
}

/// One client connection: HTTP/1.1 with keep-alive, the headers read within `header_timeout`;
/// once `stopping` is set, the request in flight finishes and the connection closes.
async fn serve_connection(
    tcp: tokio::net::TcpStream,
    router: Router,
    header_timeout: std::time::Duration,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) {
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stopping.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// A connection over the cap: its request head is read (at most 8 KiB within a second: a client
/// that wrote its request before seeing an answer must not see it as unsolicited), answered 503
/// and closed. The body is read by neither API's route, so it carries both APIs' error fields
/// (Anthropic's `type`, OpenAI's `error.code`).
async fn refuse_connection(mut tcp: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        let mut head = Vec::with_capacity(1024);
        let mut buf = [0u8; 1024];
        while head.len() < 8192 && memchr::memmem::find(&head, b"\r\n\r\n").is_none() {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"ctxd: too many open connections; retry shortly","param":null,"code":"overloaded"}}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        let _ = tcp.write_all(response.as_bytes()).await;
        let _ = tcp.shutdown().await;
    })
    .await;
}

/// `wanted` connections, within the open-file limit: the soft limit is raised to the hard one
/// first (a default soft limit of 1,024 is what let idle connections starve the gateway);
/// what the limit cannot hold lowers the cap, with a warning.
fn connection_cap(wanted: usize) -> usize {
    // Descriptors kept for the store, the upstream connections, the runtime and logs.
    const RESERVED: u64 = 64;
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let mut lim = getrlimit(Resource::Nofile);
        if lim.current < lim.maximum || (lim.current.is_some() && lim.maximum.is_none()) {
            let raised = Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            };
            if setrlimit(Resource::Nofile, raised).is_ok() {
                lim.current = lim.maximum;
            }
        }
        if let Some(current) = lim.current {
            // Each client connection may hold an upstream one too.
            let fits = (current.saturating_sub(RESERVED) / 2).max(1);
            if (wanted as u64) > fits {
                tracing::warn!(
                    wanted,
                    open_files = current,
                    cap = fits,
                    "max-connections lowered to fit the open-file limit"
                );
                return fits as usize;
            }
        }
    }
    wanted
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal");
}

fn router(app: Arc<Gateway>) -> Router {
    let mcp = crate::mcp::service(
        app.engine.clone(),
        app.tenancy.clone(),
        app.mcp_seen.clone(),
    );
    let stats = crate::stats::service(&app);
    let mcp = Router::new()
        .fallback_service(mcp)
        .layer(axum::middleware::from_fn(mcp_deleted_no_content));
    let router = Router::new()
        .nest_service("/mcp", mcp)
        .nest_service("/ui", crate::ui::service(&app))
        .route("/v1/messages", conversation(Api::Anthropic))
        .route("/v1/chat/completions", conversation(Api::Chat))
        .route("/v1/responses", conversation(Api::Responses))
        .route("/v1/messages/count_tokens", passthrough(Api::Anthropic))
        .route("/v1beta/models/{target}", any(gemini))
        .route("/v1/models/{target}", any(gemini_or_models))
        .route("/v1beta/models", any(gemini))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_route))
        .route("/", any(root))
        .fallback(fallback)
        .with_state(app.clone())
        .merge(stats);
    crate::request_id::layer(router, app.request_ids.clone())
}

/// A session's end (`DELETE /mcp`) answered 204 No Content: rmcp answers 202 Accepted, which
/// the official MCP clients do not take as success (they accept 200 or 204 and log "Session
/// termination failed: 202"). 202 stays the answer to a POSTed notification, as the spec says.
async fn mcp_deleted_no_content(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// A conversation route of `api`.
fn conversation(api: Api) -> MethodRouter<Arc<Gateway>> {
    post(
        move |State(app): State<Arc<Gateway>>,
              method: Method,
              uri: Uri,
              headers: HeaderMap,
              body: Body| handler::conversation(app, api, method, uri, headers, body),
    )
}

/// A route relayed to `api`'s provider untouched, nothing stored.
fn passthrough(api: Api) -> MethodRouter<Arc<Gateway>> {
    post(
        move |State(app): State<Arc<Gateway>>,
              method: Method,
              uri: Uri,
              headers: HeaderMap,
              body: Body| handler::passthrough(app, api, method, uri, headers, body),
    )
}

/// Gemini's routes: `{model}:generateContent` and `:streamGenerateContent` are conversations;
/// `:countTokens`, the model list and the rest are relayed untouched. A `?key=` credential
/// becomes the `x-goog-api-key` header here, before anything can log or store the URL.
async fn gemini(
    State(app): State<Arc<Gateway>>,
    method: Method,
    uri: Uri,
    mut headers: HeaderMap,
    body: Body,
) -> Response {
    let uri = crate::credentials::key_from_query(uri, &mut headers);
    let path = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let conversation = method == Method::POST
        && crate::api::GeminiTarget::of_path(path).is_some_and(|t| t.is_conversation());
    if conversation {
        handler::conversation(app, Api::Gemini, method, uri, headers, body).await
    } else {
        handler::passthrough(app, Api::Gemini, method, uri, headers, body).await
    }
}

/// `/v1/models/{target}`: Gemini's (the Python SDK's default version) when it names an action
/// or carries Google's credential; OpenAI's model lookup otherwise.
async fn gemini_or_models(
    app: State<Arc<Gateway>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let google = uri.path().contains(':')
        || headers.contains_key("x-goog-api-key")
        || crate::credentials::has_query_key(&uri);
    if google {
        gemini(app, method, uri, headers, body).await
    } else {
        fallback(app, method, uri, headers, body).await
    }
}

/// Everything else under the providers' paths (`/v1/models`, batches, files, ...): relayed to
/// the provider the headers point at, untouched.
async fn fallback(
    State(app): State<Arc<Gateway>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let api = identity::api_of_headers(&headers);
    handler::passthrough(app, api, method, uri, headers, body).await
}

/// `HEAD /` (Claude Code's preflight) and `GET /`.
async fn root(method: Method) -> Response {
    match method {
        Method::HEAD | Method::GET => (StatusCode::OK, "ctxd gateway\n").into_response(),
        _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
    }
}

/// Readiness: whether a request sent here now would be served and stored. 503 with the
/// reasons ([`Readiness::of`]); the dashboard shows the same.
async fn readyz(State(app): State<Arc<Gateway>>) -> Response {
    let r = Readiness::of(&app.writer, &app.settings.store);
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut response = (status, axum::Json(&r)).into_response();
    if !r.ready {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    response
}

/// Whether a request sent now would be served and stored, and why not: the store cannot
/// commit (its last write failed and the probe has not yet found it writing), the writer is far
/// behind, or the store's disk is nearly full.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Readiness {
    pub ready: bool,
    pub reasons: Vec<String>,
    pub store_queue: usize,
    pub disk_free_bytes: Option<u64>,
}

impl Readiness {
    pub(crate) fn of(writer: &crate::writer::WriterHandle, store: &ctxd_store::Location) -> Self {
        let mut reasons = Vec::new();
        if let Some(e) = writer.failing() {
            reasons.push(format!("the store cannot commit: {e}"));
        }
        let depth = writer.depth();
        if depth > READY_MAX_QUEUE {
            reasons.push(format!("the store writer is behind: {depth} writes queued"));
        }
        let space = match store {
            ctxd_store::Location::Sqlite(path) => crate::disk::disk_space(path),
            ctxd_store::Location::Postgres(_) => None,
        };
        if let Some((free, total)) = space {
            // 16 MiB, or a twentieth of a small file system.
            let needed = READY_MIN_FREE_BYTES.min(total / 20);
            if free < needed {
                reasons.push(format!(
                    "the store's disk is nearly full: {free} bytes free (ready needs {needed})"
                ));
            }
        }
        Readiness {
            ready: reasons.is_empty(),
            reasons,
            store_queue: depth,
            disk_free_bytes: space.map(|(free, _)| free),
        }
    }
}

/// Queued writes past which the gateway is not ready (the writer cannot keep up).
const READY_MAX_QUEUE: usize = 10_000;
/// Free bytes on the store's file system below which the gateway is not ready (a twentieth of
/// a file system smaller than 320 MiB).
const READY_MIN_FREE_BYTES: u64 = 16 * 1024 * 1024;

async fn healthz(State(app): State<Arc<Gateway>>) -> Response {
    let engine = app.engine.clone();
    let store_ok = tokio::task::spawn_blocking(move || engine.store().find_session("", "").is_ok())
        .await
        .unwrap_or(false);
    let body = serde_json::json!({
        "status": if store_ok { "ok" } else { "store unavailable" },
        "sessions_cached": app.sessions.len(),
        "store_queue": app.writer.depth(),
    });
    let status = if store_ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

async fn metrics_route(State(app): State<Arc<Gateway>>) -> Response {
    metrics::gauge!("ctxd_distill_model_cpu_seconds")
        .set(ctxd_engine::distill::model_cpu().as_secs_f64());
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        app.metrics.render(),
    )
        .into_response()
}
