//! The axum application: routes, shared state, startup and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, MethodRouter};
use axum::serve::ListenerExt;
use axum::Router;
use ctxd_engine::Engine;
use ctxd_store::{SqliteStore, Store};
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
}

/// State shared by every request.
pub struct Gateway {
    pub settings: Settings,
    pub engine: Arc<Engine<SqliteStore>>,
    pub upstream: Upstream,
    pub sessions: Sessions,
    pub writer: WriterHandle,
    /// Key of the tenant hash, kept in the store (so tenants survive restarts).
    pub tenant_key: [u8; 32],
    metrics: PrometheusHandle,
    /// Responses being recorded (shutdown waits for them before draining the writer).
    pub(crate) recording: AtomicUsize,
    request_ids: AtomicU64,
    boot_nonce: u32,
}

impl Gateway {
    /// The client's `x-request-id` when it sends a sane one, else a fresh id.
    pub fn request_id(&self, headers: &HeaderMap) -> String {
        if let Some(id) = headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.len() <= 64)
            .filter(|v| {
                v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
            })
        {
            return id.to_owned();
        }
        let n = self.request_ids.fetch_add(1, Ordering::Relaxed);
        format!("ctxd-{:08x}-{n}", self.boot_nonce)
    }
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
            handle
        })
        .clone()
}

/// A bound, not yet serving gateway.
pub struct Server {
    listener: tokio::net::TcpListener,
    app: Arc<Gateway>,
    writer: Writer,
}

impl Server {
    /// Open the store, bind the listener, start the writer.
    pub async fn bind(settings: Settings) -> Result<Self, StartError> {
        let store = SqliteStore::open(&settings.store, settings.store_sync)?;
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| StartError::Random(e.to_string()))?;
        let stored = store.setting_or_insert("gateway.tenant_key", &key)?;
        if stored.len() == 32 {
            key.copy_from_slice(&stored);
        }
        let mut nonce = [0u8; 4];
        getrandom::fill(&mut nonce).map_err(|e| StartError::Random(e.to_string()))?;
        let engine = Arc::new(Engine::new(store));
        let writer = Writer::start(engine.clone())?;
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .map_err(|source| StartError::Listen {
                addr: settings.listen,
                source,
            })?;
        let app = Arc::new(Gateway {
            upstream: Upstream::new(&settings)?,
            sessions: Sessions::new(settings.cached_sessions),
            writer: writer.handle(),
            tenant_key: key,
            metrics: metrics_handle(),
            recording: AtomicUsize::new(0),
            request_ids: AtomicU64::new(1),
            boot_nonce: u32::from_le_bytes(nonce),
            engine,
            settings,
        });
        Ok(Server {
            listener,
            app,
            writer,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve until `shutdown` resolves; then stop accepting, let in-flight requests finish,
    /// write everything queued and close the store.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Server {
            listener,
            app,
            writer,
        } = self;
        let router = router(app.clone());
        // No Nagle: an SSE event (or a body written after its headers) would otherwise wait
        // for the client's delayed ACK, ~40 ms a response.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await;
        // The last responses are recorded on blocking threads: wait for them to queue their
        // writes (bounded), then drain the writer.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while app.recording.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        app.writer.flush().await;
        drop(app);
        tokio::task::spawn_blocking(move || writer.shutdown())
            .await
            .map_err(std::io::Error::other)?;
        tracing::info!("gateway stopped; store closed");
        served
    }
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
    tracing::info!("shutting down: finishing in-flight requests");
}

fn router(app: Arc<Gateway>) -> Router {
    Router::new()
        .route("/v1/messages", conversation(Api::Anthropic))
        .route("/v1/chat/completions", conversation(Api::Chat))
        .route("/v1/responses", conversation(Api::Responses))
        .route("/v1/messages/count_tokens", passthrough(Api::Anthropic))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_route))
        .route("/", any(root))
        .fallback(fallback)
        .with_state(app)
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
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        app.metrics.render(),
    )
        .into_response()
}
