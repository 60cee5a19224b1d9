//! The web dashboard at `/ui`: every session the gateway has seen, live, and one session's
//! context (the report's numbers, a chart per turn, savings, pruned items with their raw
//! content, history search, notes).
//!
//! - `access.rs`: who is looking (loopback, a tenant's key, the operator token).
//! - `query.rs`: the reads, over the engine on the dashboard's own store connection.
//! - `summary.rs` / `page.rs`: the figures, pure over a loaded session; the report is
//!   `ctxd_core::report::build` with the counter `ctxd report` uses, so the numbers agree.
//! - `html.rs` / `chart.rs`: server-rendered fragments and the SVG chart, maud templates that
//!   escape every value they splice in.
//! - `shell.rs`: the page every path starts as, the same template kind.
//! - `assets/`: the pages' script and style, embedded in the binary.
//!
//! Every query runs over a read connection of its own (never the gateway's writer, never a
//! request worker); the polled ones (the listing, a session page) on the dashboard's own
//! thread at the lowest priority (`reader_thread.rs`). A listing computes uncached rows within
//! [`query::LIST_BUDGET`]; a session that grows is summarised and its page rebuilt at most
//! once per refresh interval (`--ui-refresh-ms`), its copy served in between (`page_cache.rs`).

pub mod access;
pub mod chart;
mod counts;
mod error;
pub mod html;
pub mod page;
mod page_cache;
pub mod query;
mod reader_thread;
mod shell;
pub mod summary;
pub mod usage;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ctxd_engine::Engine;
use ctxd_store::{Backend, SessionId};
use maud::Markup;
use serde::Deserialize;

use crate::server::Gateway;
use access::Access;
pub use error::UiError;

/// The operator token named by `--admin-token-env`: the variable must hold a non-empty value.
pub fn admin_token(env: &str) -> Result<String, String> {
    match std::env::var(env) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
        _ => Err(format!(
            "--admin-token-env {env}: the environment variable {env} is not set (or empty)"
        )),
    }
}

/// The dashboard's state.
struct Ui {
    access: Access,
    reader: Reader,
    /// What `/readyz` reads: the writer and the store's place, shown above the sessions.
    writer: crate::writer::WriterHandle,
    store: ctxd_store::Location,
    rows: summary::Cache,
    pages: page_cache::PageCache<SessionId, Rendered>,
    memos: counts::CountsBySession,
    /// How stale a growing session's page and row may be (`Settings::ui_refresh`).
    refresh: Duration,
    /// The budgets and prices (the usage page).
    spending: crate::spending::Spending,
}

/// The dashboard's own handle on the store ([`Backend::reader`]: a second SQLite connection,
/// which WAL lets read while the gateway's writer commits), opened on first use (a failure is
/// a 503 and is retried by the next request).
pub(crate) struct Reader {
    gateway: Arc<Engine<dyn Backend>>,
    engine: Mutex<Option<Arc<Engine<dyn Backend>>>>,
}

impl Reader {
    pub(crate) fn new(gateway: Arc<Engine<dyn Backend>>) -> Reader {
        Reader {
            gateway,
            engine: Mutex::new(None),
        }
    }

    pub(crate) fn engine(&self) -> Result<Arc<Engine<dyn Backend>>, UiError> {
        let mut slot = self.engine.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = slot.as_ref() {
            return Ok(e.clone());
        }
        let store = self
            .gateway
            .store()
            .reader()
            .map_err(|e| UiError::Unavailable(e.to_string()))?;
        let engine = Arc::new(Engine::from_boxed(store));
        *slot = Some(engine.clone());
        Ok(engine)
    }
}

/// How many session pages stay cached (the most recently built).
const CACHED_PAGES: usize = 16;

/// A session page's data and its HTML.
struct Rendered {
    page: page::Page,
    html: Markup,
    built: BuildTime,
}

/// A session page's build: wall time, and the CPU time its thread spent (the wall time of a
/// build at the dashboard's lowest priority is mostly the machine's other work).
#[derive(Clone, Copy, Debug)]
struct BuildTime {
    wall_ms: f64,
    cpu_ms: f64,
}

/// The dashboard's access rules for `app` (`GET /stats` keeps the same).
pub(crate) fn access_of(app: &Gateway) -> Access {
    let admin = app
        .settings
        .admin_token_env
        .as_deref()
        .and_then(|name| admin_token(name).ok())
        .map(|t| *blake3::hash(t.as_bytes()).as_bytes());
    Access {
        open: app.settings.listen.ip().is_loopback(),
        admin,
        tenancy: app.tenancy.clone(),
        allow_keyless: app.settings.allow_keyless,
    }
}

/// The `/ui` service of a gateway: `Router::nest_service("/ui", ui::service(&app))`.
pub(crate) fn service(app: &Gateway) -> Router {
    let refresh = app.settings.ui_refresh;
    let ui = Arc::new(Ui {
        access: access_of(app),
        reader: Reader::new(app.engine.clone()),
        writer: app.writer.clone(),
        store: app.settings.store.clone(),
        rows: summary::Cache::new(refresh),
        pages: page_cache::PageCache::new(CACHED_PAGES),
        memos: counts::CountsBySession::default(),
        refresh,
        spending: app.spending.clone(),
    });
    Router::new()
        .route("/", get(shell_sessions))
        .route("/session/{id}", get(shell_session))
        .route("/usage", get(shell_usage))
        .route("/api/usage", get(api_usage))
        .route("/frag/usage", get(frag_usage))
        .route("/assets/{name}", get(asset))
        .route("/api/sessions", get(api_sessions))
        .route("/frag/sessions", get(frag_sessions))
        .route("/api/session/{id}", get(api_session))
        .route("/frag/session/{id}", get(frag_session))
        .route("/api/session/{id}/recall", get(api_recall))
        .route("/frag/session/{id}/search", get(frag_search))
        .fallback(|| async { UiError::NotFound("no such dashboard path".into()) })
        .with_state(ui)
}

impl Ui {
    /// The gateway's readiness, as `/readyz` gives it.
    fn readiness(&self) -> crate::server::Readiness {
        crate::server::Readiness::of(&self.writer, &self.store)
    }
}

/// Run `f` on a blocking thread with the dashboard's engine.
async fn blocking<T: Send + 'static>(
    ui: &Arc<Ui>,
    f: impl FnOnce(&Ui, &Engine<dyn Backend>) -> Result<T, UiError> + Send + 'static,
) -> Result<T, UiError> {
    let ui = ui.clone();
    tokio::task::spawn_blocking(move || {
        let engine = ui.reader.engine()?;
        f(&ui, &engine)
    })
    .await
    .map_err(|e| UiError::Unavailable(format!("dashboard query: {e}")))?
}

/// Run the read `f` on the dashboard's low-priority thread with its engine (see `reader_thread.rs`).
async fn polled<T: Send + 'static>(
    ui: &Arc<Ui>,
    f: impl FnOnce(&Ui, &Engine<dyn Backend>) -> Result<T, UiError> + Send + 'static,
) -> Result<T, UiError> {
    let ui = ui.clone();
    reader_thread::run(move || {
        let engine = ui.reader.engine()?;
        f(&ui, &engine)
    })
    .await
}

/// The page shell: the script fetches the fragments (with the key, when one is needed).
fn shell(ui: &Ui, page: &str, title: &str) -> Response {
    let html = shell::shell(page, title, ui.access.open).into_string();
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html,
    )
        .into_response()
}

async fn shell_sessions(State(ui): State<Arc<Ui>>) -> Response {
    shell(&ui, "sessions", "ctxd · sessions")
}

async fn shell_usage(State(ui): State<Arc<Ui>>) -> Response {
    shell(&ui, "usage", "ctxd · usage")
}

#[derive(Debug, Default, Deserialize)]
struct UsageParams {
    project: Option<String>,
    agent: Option<String>,
}

/// The usage of the viewer's sessions, per day (`usage.rs`).
async fn usage_of(
    ui: &Arc<Ui>,
    headers: &HeaderMap,
    params: Result<Query<UsageParams>, QueryRejection>,
) -> Result<usage::Usage, UiError> {
    let viewer = ui.access.viewer(headers)?;
    let Query(p) = params.map_err(bad_query)?;
    let chosen = |v: Option<String>| v.filter(|v| !v.is_empty());
    let (project, agent) = (chosen(p.project), chosen(p.agent));
    polled(ui, move |ui, engine| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        usage::usage(engine, &viewer, &ui.spending, project, agent, now)
    })
    .await
}

async fn api_usage(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    params: Result<Query<UsageParams>, QueryRejection>,
) -> Response {
    match usage_of(&ui, &headers, params).await {
        Ok(u) => json(&u),
        Err(e) => e.into_response(),
    }
}

async fn frag_usage(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    params: Result<Query<UsageParams>, QueryRejection>,
) -> Response {
    match usage_of(&ui, &headers, params).await {
        Ok(u) => fragment(usage::html(&u), None),
        Err(e) => e.into_response(),
    }
}

async fn shell_session(
    State(ui): State<Arc<Ui>>,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    match id.map_err(bad_path).and_then(|Path(id)| session_id(&id)) {
        Ok(_) => shell(&ui, "session", "ctxd · session"),
        Err(e) => e.into_response(),
    }
}

async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind): (&str, &str) = match name.as_str() {
        "ui.js" => (
            include_str!("assets/ui.js"),
            "text/javascript; charset=utf-8",
        ),
        "ui.css" => (include_str!("assets/ui.css"), "text/css; charset=utf-8"),
        _ => return UiError::NotFound(format!("no asset {name:?}")).into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

fn bad_path(e: PathRejection) -> UiError {
    UiError::BadRequest(e.body_text())
}

fn bad_query(e: QueryRejection) -> UiError {
    UiError::BadRequest(e.body_text())
}

fn session_id(text: &str) -> Result<SessionId, UiError> {
    text.parse::<SessionId>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| UiError::BadRequest(format!("session id {text:?}: a positive number")))
}

#[derive(Debug, Default, Deserialize)]
struct ListParams {
    sort: Option<String>,
    dir: Option<String>,
    q: Option<String>,
}

async fn list(
    ui: &Arc<Ui>,
    headers: &HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<(Vec<summary::Row>, usize, query::Sort), UiError> {
    let viewer = ui.access.viewer(headers)?;
    let Query(p) = params.map_err(bad_query)?;
    let sort = query::Sort::parse(p.sort.as_deref(), p.dir.as_deref())?;
    let filter = p.q.unwrap_or_default();
    polled(ui, move |ui, engine| {
        let (rows, total) = query::sessions(engine, &ui.rows, &ui.memos, &viewer, sort, &filter)?;
        Ok((rows, total, sort))
    })
    .await
}

async fn api_sessions(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    match list(&ui, &headers, params).await {
        Ok((rows, total, _)) => {
            let ready = ui.readiness();
            json(&serde_json::json!({ "total": total, "sessions": rows, "ready": ready }))
        }
        Err(e) => e.into_response(),
    }
}

async fn frag_sessions(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Response {
    match list(&ui, &headers, params).await {
        Ok((rows, total, sort)) => {
            let page = maud::html! {
                (html::readiness(&ui.readiness()))
                (html::sessions(&rows, sort, total))
            };
            fragment(page, None)
        }
        Err(e) => e.into_response(),
    }
}

/// The session the path names, if the viewer may read it, with its built page (a copy at
/// most the refresh interval old when the session has grown since).
async fn rendered(
    ui: &Arc<Ui>,
    headers: &HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Result<page_cache::Served<Rendered>, UiError> {
    let viewer = ui.access.viewer(headers)?;
    let Path(id) = id.map_err(bad_path)?;
    let id = session_id(&id)?;
    polled(ui, move |ui, engine| {
        let record = query::record(engine, &viewer, id)?;
        ui.pages.get(id, record.entry_count, ui.refresh, || {
            let start = Instant::now();
            let cpu = ctxd_engine::background::thread_cpu();
            let page = query::session_page(engine, &ui.memos, &record)?;
            let notes = query::notes(engine, &record)?;
            let built = BuildTime {
                wall_ms: start.elapsed().as_secs_f64() * 1e3,
                cpu_ms: ctxd_engine::background::thread_cpu()
                    .saturating_sub(cpu)
                    .as_secs_f64()
                    * 1e3,
            };
            let html = html::session(&page, &notes, built.wall_ms);
            // The same summary the listing would compute for this version: its row is fresh.
            ui.rows
                .put(id, record.entry_count, Arc::new(page.summary.clone()));
            Ok(Rendered { page, html, built })
        })
    })
    .await
}

async fn api_session(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    match rendered(&ui, &headers, id).await {
        Ok(r) => aged(json(&r.value.page), r.age),
        Err(e) => e.into_response(),
    }
}

async fn frag_session(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    match rendered(&ui, &headers, id).await {
        Ok(r) => {
            let html = maud::html! { (r.value.html) (html::age(r.age)) };
            aged(fragment(html, Some(r.value.built)), r.age)
        }
        Err(e) => e.into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct RecallParams {
    entry: String,
}

async fn api_recall(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<RecallParams>, QueryRejection>,
) -> Response {
    let run = on_session(&ui, &headers, id, params, |engine, record, p| {
        let text = query::recall(engine, record, &p.entry)?;
        Ok(serde_json::json!({ "entry": p.entry, "text": text }))
    });
    match run.await {
        Ok(v) => json(&v),
        Err(e) => e.into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct SearchParams {
    q: String,
}

async fn frag_search(
    State(ui): State<Arc<Ui>>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<SearchParams>, QueryRejection>,
) -> Response {
    let run = on_session(&ui, &headers, id, params, |engine, record, p| {
        query::search(engine, record, &p.q)
    });
    match run.await {
        Ok(page) => fragment(html::hits(&page), None),
        Err(e) => e.into_response(),
    }
}

/// `f` over a session the viewer may see, with the request's parameters, on a blocking
/// thread: the viewer, the path's id and the query checked first, each with its own error.
async fn on_session<P, T>(
    ui: &Arc<Ui>,
    headers: &HeaderMap,
    id: Result<Path<String>, PathRejection>,
    params: Result<Query<P>, QueryRejection>,
    f: impl FnOnce(&Engine<dyn Backend>, &ctxd_store::SessionRecord, P) -> Result<T, UiError>
        + Send
        + 'static,
) -> Result<T, UiError>
where
    P: Send + 'static,
    T: Send + 'static,
{
    let viewer = ui.access.viewer(headers)?;
    let id = session_id(&id.map_err(bad_path)?.0)?;
    let Query(p) = params.map_err(bad_query)?;
    blocking(ui, move |_, engine| {
        let record = query::record(engine, &viewer, id)?;
        f(engine, &record, p)
    })
    .await
}

/// `x-ctxd-age-ms`: how old the copy of a session page served is.
fn aged(mut r: Response, age: Duration) -> Response {
    r.headers_mut()
        .insert("x-ctxd-age-ms", HeaderValue::from(age.as_millis() as u64));
    r
}

fn json<T: serde::Serialize>(value: &T) -> Response {
    ([(header::CACHE_CONTROL, "no-store")], axum::Json(value)).into_response()
}

/// An HTML fragment; `built`, the server's time building it, as `Server-Timing` (`build`,
/// wall time; `build-cpu`, its thread's CPU time).
fn fragment(html: Markup, built: Option<BuildTime>) -> Response {
    let mut r = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        html.into_string(),
    )
        .into_response();
    if let Some(v) = built.and_then(|b| {
        let timing = format!("build;dur={:.1}, build-cpu;dur={:.1}", b.wall_ms, b.cpu_ms);
        HeaderValue::from_str(&timing).ok()
    }) {
        r.headers_mut().insert("server-timing", v);
    }
    r
}
