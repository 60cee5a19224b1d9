//! One conversation request, end to end: read and check the body, find the tenant and the
//! session, plan the request against the log, send the projection upstream, relay the response
//! as it arrives while assembling it, and record the outcome when it completes.

// A rejection is the finished error response; it is built once per failed request.
#![allow(clippy::result_large_err)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use ctxd_core::model::{Role, SessionMeta};
use ctxd_core::view::ProjectionError;
use ctxd_engine::turn::{hash, upstream_parts, SessionLog};
use ctxd_engine::windows::{TurnEnd, WindowPolicy};
use ctxd_engine::{now_ms, Caller};
use futures_util::{Stream, StreamExt};
use std::pin::Pin;
use tracing::Instrument;

use crate::api::Api;
use crate::budget;
use crate::error::ApiError;
use crate::identity;
use crate::policy;
use crate::relay::{Completion, Framing, Outcome, Relay};
use crate::request::{ParsedRequest, PrevRequest};
use crate::rewrite::splice;
use crate::served::{Insert, Offer};
use crate::server::Gateway;
use crate::sessions::{Loaded, Slot};
use crate::turn;
use crate::upstream::Target;
use crate::writer::Job;

/// Read the body within the size limit and the body timeout (a client trickling its body
/// must not hold a connection and its buffer without end), counting it against the budget of
/// bodies in flight as it arrives.
///
/// Not tower-http's layers: its body timeout restarts at every frame (a byte every few seconds
/// would hold the connection for good; this one bounds the whole body), its limit answers 413
/// in its own shape before the route knows its API, and neither counts the bytes against the
/// budget shared by every request in flight, which must grow chunk by chunk.
pub(crate) async fn read_body(
    app: &Gateway,
    api: Api,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    held: &mut budget::Held,
) -> Result<Bytes, ApiError> {
    let timeout = app.settings.body_timeout;
    match tokio::time::timeout(timeout, read_body_within(api, headers, body, limit, held)).await {
        Ok(read) => read,
        Err(_) => Err(ApiError::new(
            api,
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "ctxd: the request body did not arrive within {} s",
                timeout.as_secs()
            ),
        )),
    }
}

async fn read_body_within(
    api: Api,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    held: &mut budget::Held,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::too_large(api, limit));
    }
    if let Some(n) = declared {
        held.grow_to(n as usize)
            .await
            .map_err(|_| ApiError::busy(api))?;
    }
    let mut stream = body.into_data_stream();
    let mut buf = bytes::BytesMut::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(
                api,
                StatusCode::BAD_REQUEST,
                format!("cannot read request body: {e}"),
            )
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::too_large(api, limit));
        }
        held.grow_to(buf.len() + chunk.len())
            .await
            .map_err(|_| ApiError::busy(api))?;
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// The body as JSON bytes: `content-encoding` gzip and zstd (Codex) are decoded block by
/// block, each block counted against the size limit and the budget of bodies in flight before
/// it is kept (a small body must not inflate without bound; the buffer grows at most to the
/// limit, never by doubling past it). tower-http's decompression would decode before that
/// budget sees a byte, and its zstd is the C library; `ruzstd` is pure Rust.
fn decode(
    api: Api,
    headers: &HeaderMap,
    raw: &Bytes,
    limit: usize,
    held: &mut budget::Held,
) -> Result<Bytes, ApiError> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    let mut out = Vec::new();
    let read = match encoding.as_deref() {
        None | Some("") | Some("identity") => return Ok(raw.clone()),
        Some("gzip") | Some("x-gzip") => read_bounded(
            flate2::read::GzDecoder::new(raw.as_ref()),
            &mut out,
            limit,
            raw.len(),
            held,
        ),
        Some("zstd") => match ruzstd::decoding::StreamingDecoder::new(raw.as_ref()) {
            Ok(d) => read_bounded(d, &mut out, limit, raw.len(), held),
            Err(e) => Err(Decoded::Bad(e.to_string())),
        },
        Some(other) => {
            return Err(ApiError::new(
                api,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("content-encoding {other:?} is not supported (use gzip or zstd)"),
            ))
        }
    };
    match read {
        Ok(()) => Ok(Bytes::from(out)),
        Err(Decoded::TooLarge) => Err(ApiError::too_large(api, limit)),
        Err(Decoded::Busy) => Err(ApiError::busy(api)),
        Err(Decoded::Bad(e)) => Err(ApiError::new(
            api,
            StatusCode::BAD_REQUEST,
            format!("cannot decompress request body: {e}"),
        )),
    }
}

enum Decoded {
    TooLarge,
    Busy,
    Bad(String),
}

/// Read `r` into `out` in 64 KiB blocks, within `limit` and the budget (`raw` bytes of the
/// compressed body are already counted).
fn read_bounded(
    mut r: impl std::io::Read,
    out: &mut Vec<u8>,
    limit: usize,
    raw: usize,
    held: &mut budget::Held,
) -> Result<(), Decoded> {
    let mut block = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut block) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Decoded::Bad(e.to_string())),
        };
        let len = out.len() + n;
        if len > limit {
            return Err(Decoded::TooLarge);
        }
        if len > out.capacity() {
            let cap = (out.capacity() * 2).max(len).min(limit);
            held.try_grow_to(raw + cap).map_err(|_| Decoded::Busy)?;
            out.reserve_exact(cap - out.len());
        }
        out.extend_from_slice(&block[..n]);
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json")
        })
}

/// How long a streamed response's headers wait for its first events (see `forward`).
const FIRST_EVENT_WAIT: Duration = Duration::from_millis(20);

/// What a request needs once planned.
struct Planned {
    upstream_body: Bytes,
    encoded: bool,
    rewritten: bool,
    completion: Completion,
    /// What re-planning the request needs after an overflow (`None`: record-only).
    replan: Option<Replan>,
    /// The request's bodies counted against the budget of bodies in flight, until the
    /// upstream has them.
    bodies: budget::Held,
    /// ctxd's tools on this request (answered by the gateway).
    offer: Offer,
    /// Why ctxd left this request as the client sent it (`x-ctxd-unmanaged`).
    unmanaged: Option<&'static str>,
}

/// Said once per process: the header tells each response.
fn warn_unmanaged_once() {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "a Responses request carries previous_response_id: ctxd sees only its new input, so \
             such requests are recorded but not managed (no ctxd tools, no resets or \
             distillation); send the whole conversation (store: false) to have them managed"
        );
    }
}

/// The request as parsed, to project it again once a recovery window has opened or ctxd has
/// answered the model's calls.
pub(crate) struct Replan {
    pub req: ParsedRequest,
    pub decoded: Bytes,
    /// The log entry of each of the request's elements.
    pub element_entries: Vec<usize>,
    pub policy: WindowPolicy,
    /// The request opts into Anthropic's 1M-token window (a window learned from an overflow
    /// is the window of this model with or without it).
    pub beta_1m: bool,
    /// The `tools` edit of the first body (ctxd's tool definitions, lazy tools' selection).
    pub insert: Option<Insert>,
    /// ctxd's tools on this request.
    pub offer: Offer,
    /// Lazy tools on this request: every later body reads the selection from the log again.
    pub lazy: Option<crate::lazy::Lazy>,
}

impl Replan {
    /// The request's policy with what the provider stated of the window since it was planned
    /// (an overflow's limit, `crate::learned`).
    pub fn current_policy(&self, app: &Arc<Gateway>) -> WindowPolicy {
        let model = self.req.model.as_deref();
        let window = policy::RequestWindow {
            beta_1m: self.beta_1m,
            learned: crate::learned::window(app, model, self.beta_1m),
        };
        policy::refit(&app.settings.management, self.policy, model, window)
    }

    /// The provider refused this request (or its continuation) as too long: the turn ends as
    /// an overflow, with what the provider stated of the window, and its drafts go to the
    /// writer. The drafts' ids when a recovery window opened (once per failure chain), `None`
    /// when none did and the refusal stands. Both the first call and a continuation go here.
    pub async fn open_recovery_window(
        &self,
        app: &Arc<Gateway>,
        slot: &Slot,
        loaded: &mut Loaded,
        caller: &Caller,
    ) -> Option<Vec<String>> {
        let policy = self.current_policy(app);
        let (outcome, drafts) =
            turn::end_turn(app, loaded, caller, &policy, TurnEnd::Overflow).await;
        let ids = drafts
            .iter()
            .map(|d| d.entry.id.as_str().to_owned())
            .collect();
        queue(app, slot, loaded.record.id, drafts);
        outcome.reset.map(|_| ids)
    }

    /// The `tools` edit of a body built now, and the tokens lazy tools leave out of it: a
    /// hidden round's `find_capability` shows in its continuation.
    pub fn tools_edit(&self, log: &SessionLog) -> (Option<Insert>, u64) {
        if self.lazy.is_none() {
            return (self.insert.clone(), 0);
        }
        turn::tools_edit(
            &self.req,
            &self.decoded,
            &self.offer,
            self.lazy.as_ref(),
            log,
        )
    }
}

pub(crate) async fn conversation(
    app: Arc<Gateway>,
    api: Api,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let span = tracing::info_span!(
        "request",
        id = crate::request_id::of(&headers),
        route = api.route()
    );
    async move {
        let path = uri
            .path_and_query()
            .map_or(uri.path(), |p| p.as_str())
            .to_owned();
        let planned = match prepare(&app, api, &headers, &path, body, started).await {
            Ok(p) => p,
            Err(r) => return r,
        };
        forward(&app, api, method, &path, &headers, planned).await
    }
    .instrument(span)
    .await
}

async fn prepare(
    app: &Arc<Gateway>,
    api: Api,
    headers: &HeaderMap,
    path: &str,
    body: Body,
    started: Instant,
) -> Result<Planned, Response> {
    let Received {
        raw,
        decoded,
        held,
        tenant,
        read_us,
    } = receive(app, api, headers, path, body, started).await?;
    let (req, named) = parse(app, api, headers, path, &tenant, &decoded)?;
    let (agent, caller) = identify(headers, &tenant, &req, &decoded);
    let key = caller.session_key.clone().unwrap_or_default();
    let mut admission = admit(app, api, &caller, &key, decoded.len()).await?;

    // A key named in the headers wins in `session_key`: its slot is the one found above.
    let slot = named.unwrap_or_else(|| app.sessions.slot(&tenant, &key));
    let meta = || SessionMeta {
        id: Some(key.clone()),
        agent,
        format: format!("gateway/{}", api.route()),
        started_at: Some(ctxd_core::windows::iso8601(now_ms())),
        model: req.model.clone(),
        // What `ctxd stats --by project` groups by.
        cwd: caller.project.clone(),
        ..SessionMeta::default()
    };
    let (mut state, settled_us, locked_us) =
        match lock_session(app, &slot, &tenant, &key, meta, started).await {
            Ok(locked) => locked,
            Err(e) => return Err(store_unavailable(app, api, headers, path, raw, &e).await),
        };
    let Some(loaded) = state.as_mut() else {
        return Err(ApiError::internal(api, "session state missing").into());
    };
    let mut caller = Caller {
        session: Some(loaded.record.id),
        ..caller
    };
    // A Responses request continuing a conversation the provider keeps shows ctxd only its new
    // input: recorded, never managed (no tools of ctxd's, no rewrite), and the client is told.
    let unmanaged = req
        .previous_response_id
        .is_some()
        .then_some("previous_response_id");
    if unmanaged.is_some() {
        warn_unmanaged_once();
    }
    let record_only = app.settings.management.record_only || unmanaged.is_some();
    let beta_1m = policy::wants_1m_context(headers);
    let turn = TurnInput {
        api,
        req: &req,
        decoded: &decoded,
        beta_1m,
        record_only,
    };
    let mut planned = match plan(app, &slot, loaded, &mut caller, turn).await {
        Ok(planned) => planned,
        Err(tools) => {
            drop(state);
            return Err(repair_and_retry_hint(app, api, &slot, &caller, tools)
                .await
                .into());
        }
    };
    let appended = record_planned(app, &slot, loaded, &mut planned);
    let attach = leaf_id(&loaded.log);
    tracing::debug!(
        session = loaded.record.id,
        matched = planned.plan.matched,
        appended,
        rewritten = planned.rewritten,
        read_us,
        settled_us,
        locked_us,
        planned_us = started.elapsed().as_micros() as u64,
        "planned"
    );
    drop(state);

    let (upstream_body, encoded) = match planned.body.take() {
        Some(body) => (Bytes::from(body), false),
        None => (raw, true),
    };
    if planned.rewritten {
        metrics::counter!("ctxd_rewritten_total", "route" => api.route()).increment(1);
    }
    let policy = planned.policy;
    let replan = (!record_only).then(|| Replan {
        req,
        decoded,
        element_entries: std::mem::take(&mut planned.plan.element_entries),
        policy: policy.window,
        beta_1m,
        insert: planned.insert,
        offer: planned.offer.clone(),
        lazy: planned.lazy,
    });
    let mut completion = Completion::new(
        app.clone(),
        slot,
        caller,
        policy.window,
        policy.distills(),
        attach,
        api,
        started,
        started.elapsed(),
    );
    completion.measured(planned.measured);
    completion.cached(planned.cache);
    completion.admitted(admission.take());
    Ok(Planned {
        unmanaged,
        upstream_body,
        encoded,
        rewritten: planned.rewritten,
        completion,
        replan,
        bodies: held,
        offer: planned.offer,
    })
}

/// A conversation request past the door: its body read and decoded within the limits, its
/// client allowed and its tenant known, before any session is touched.
struct Received {
    raw: Bytes,
    decoded: Bytes,
    /// The bodies counted against the budget of bodies in flight.
    held: budget::Held,
    tenant: String,
    /// When the body had arrived, from the request's start.
    read_us: u64,
}

async fn receive(
    app: &Arc<Gateway>,
    api: Api,
    headers: &HeaderMap,
    path: &str,
    body: Body,
    started: Instant,
) -> Result<Received, Response> {
    let limit = app.settings.max_body_bytes;
    let mut held = budget::Held::new(&app.bodies);
    let raw = read_body(app, api, headers, body, limit, &mut held).await?;
    let read_us = started.elapsed().as_micros() as u64;
    if !is_json(headers) {
        return Err(ApiError::new(
            api,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content-type must be application/json",
        )
        .into());
    }
    let decoded = decode(api, headers, &raw, limit, &mut held)?;
    keyed_or_allowed(app, api, headers)?;
    // A store that cannot commit would throw the paid answer away: refused before it goes
    // upstream (or passed unmanaged, as the operator chose), until the writer's probe finds
    // the store committing again.
    if let Some(error) = app.writer.failing() {
        let error = format!("it cannot commit: {error}");
        return Err(store_unavailable(app, api, headers, path, raw, &error).await);
    }
    let tenant = app
        .tenancy
        .tenant(headers)
        .map_err(|e| ApiError::new(api, StatusCode::UNAUTHORIZED, e.message()))?;
    Ok(Received {
        raw,
        decoded,
        held,
        tenant,
        read_us,
    })
}

/// The request parsed. A session named in the headers is known before the conversation is
/// read: its previous request lets this one be split from where it changed (clients resend
/// the whole conversation), and this one becomes its previous. That session's slot, if named.
fn parse(
    app: &Gateway,
    api: Api,
    headers: &HeaderMap,
    path: &str,
    tenant: &str,
    decoded: &Bytes,
) -> Result<(ParsedRequest, Option<Arc<Slot>>), ApiError> {
    let named =
        identity::header_session_key(headers).map(|(key, _)| app.sessions.slot(tenant, &key));
    let prev = named.as_ref().and_then(|slot| slot.last_request());
    let req = ParsedRequest::parse_after(api, decoded, prev.as_deref())
        .map_err(|e| ApiError::new(api, StatusCode::BAD_REQUEST, e.to_string()))?
        .at_path(path);
    drop(prev);
    if let Some(slot) = &named {
        app.sessions.remember(
            slot,
            PrevRequest {
                body: decoded.clone(),
                parsed: req.clone(),
            },
        );
    }
    Ok((req, named))
}

/// Who is asking: the agent (when recognised) and the caller the engine sees, its session
/// key set (from the headers, else the conversation's start) and its session id not yet.
fn identify(
    headers: &HeaderMap,
    tenant: &str,
    req: &ParsedRequest,
    decoded: &Bytes,
) -> (Option<ctxd_core::model::Agent>, Caller) {
    let (key, source) = identity::session_key(headers, req, || {
        // The conversation starts at its first message that is not a system prompt (Chat and
        // Responses keep those in the array, and many conversations share one).
        let first = (0..req.elements.len())
            .map(|i| req.message(decoded, i))
            .find(|m| !matches!(m.role, Role::System | Role::Developer))
            .map(|m| hash::message(&m));
        (req.system(decoded), first)
    });
    let (agent, agent_name) = identity::agent(headers, source, req.system_bytes(decoded));
    let conversation = req
        .array
        .clone()
        .and_then(|r| decoded.get(r))
        .unwrap_or_default();
    let caller = Caller {
        tenant: tenant.to_owned(),
        session: None,
        session_key: Some(key),
        agent: Some(agent_name),
        model: req.model.clone(),
        project: crate::project::project(headers, req.system_bytes(decoded), conversation),
        policy: None,
    };
    (agent, caller)
}

/// The slot settled (its previous response recorded) and locked, its session as the store
/// has it: loaded when the slot holds none or was marked stale, caught up when another gateway
/// shares the store. Also when it settled and when it was locked, from the request's start.
/// The error says why the store could not give the session.
async fn lock_session<'s>(
    app: &Arc<Gateway>,
    slot: &'s Slot,
    tenant: &str,
    key: &str,
    meta: impl FnOnce() -> SessionMeta,
    started: Instant,
) -> Result<(tokio::sync::MutexGuard<'s, Option<Loaded>>, u64, u64), String> {
    slot.wait_settled(Duration::from_secs(10)).await;
    let settled_us = started.elapsed().as_micros() as u64;
    if !app.settings.distill_wait.is_zero() && !slot.wait_distilled(app.settings.distill_wait).await
    {
        tracing::debug!("a distillation pass is still running; this request goes without it");
    }
    let mut state = slot.state.lock().await;
    let locked_us = started.elapsed().as_micros() as u64;
    let mut reload = state.is_none() || slot.take_stale();
    if let Some(loaded) = state.as_mut().filter(|_| !reload) {
        if app.engine.store().shared() {
            reload = !crate::sessions::catch_up(&app.engine, loaded).await;
        }
    }
    if reload {
        *state = Some(load(app, tenant, key, meta()).await?);
    }
    Ok((state, settled_us, locked_us))
}

/// What of the request the turn planning reads besides the session.
struct TurnInput<'a> {
    api: Api,
    req: &'a ParsedRequest,
    decoded: &'a Bytes,
    beta_1m: bool,
    record_only: bool,
}

/// The turn planned on the loaded session, after a finished distillation pass's edits have
/// landed under the previous turn. A window whose boot is missing cannot be projected: what
/// the turn appended is queued (the repair reads the session back) and the error is the
/// window's tools, for the repair.
async fn plan(
    app: &Arc<Gateway>,
    slot: &Arc<Slot>,
    loaded: &mut Loaded,
    caller: &mut Caller,
    turn: TurnInput<'_>,
) -> Result<turn::PlannedTurn, ctxd_core::offered::ModelTools> {
    // A turn end that came while that pass ran gets its own now.
    let landed = crate::distill::apply_ready(slot, loaded);
    app.distiller.catch_up(slot, loaded);
    let counter = turn::counter_for(caller.model.clone());
    let planned = turn::plan_turn(
        &app.settings,
        &turn::services(app, &counter),
        loaded,
        caller,
        turn::TurnRequest {
            api: turn.api,
            req: turn.req,
            decoded: turn.decoded,
            beta_1m: turn.beta_1m,
            learned: crate::learned::window(app, turn.req.model.as_deref(), turn.beta_1m),
            record_only: turn.record_only,
            landed,
            now_ms: now_ms(),
        },
    )
    .await;
    app.sessions.weigh(slot, slot.held_bytes(loaded));
    match planned {
        Ok(planned) => Ok(planned),
        Err(turn::Unprojectable {
            error: ProjectionError::MissingBoot { .. },
            window,
            appended,
        }) => {
            queue(app, slot, loaded.record.id, appended);
            Err(window.tools)
        }
    }
}

/// The planned turn's entries to the writer (or the branch it moved to, when it appended
/// none); how many were appended.
fn record_planned(
    app: &Gateway,
    slot: &Arc<Slot>,
    loaded: &Loaded,
    planned: &mut turn::PlannedTurn,
) -> usize {
    let appended = planned.appended.len();
    if appended > 0 {
        let entries = std::mem::take(&mut planned.appended);
        queue(app, slot, loaded.record.id, entries);
    } else if let Some(leaf) = planned.plan.moved_leaf.clone() {
        app.writer.send(Job::SetLeaf {
            session: loaded.record.id,
            leaf,
            stale: slot.stale.clone(),
            ack: None,
        });
    }
    appended
}

/// Entries for the session's store, queued to the writer (none: nothing queued).
fn queue(
    app: &Gateway,
    slot: &Slot,
    session: ctxd_store::SessionId,
    entries: Vec<ctxd_store::NewEntry>,
) {
    if !entries.is_empty() {
        app.writer.send(Job::Append {
            session,
            entries,
            expect_leaf: None,
            stale: slot.stale.clone(),
            ack: None,
        });
    }
}

/// The request's budgets (`crate::spending`): its estimated input reserved on each counter,
/// or the API's own error naming the limit reached (400: what a provider answers an account
/// out of credit, and what no SDK retries). `None` when no budget is configured.
async fn admit(
    app: &Arc<Gateway>,
    api: Api,
    caller: &Caller,
    session_key: &str,
    body_bytes: usize,
) -> Result<Reservation, ApiError> {
    let none = Reservation {
        app: app.clone(),
        admission: None,
    };
    if app.spending.is_empty() {
        return Ok(none);
    }
    let estimate = app.spending.estimate(caller.model.as_deref(), body_bytes);
    let (tenant, project, key) = (
        caller.tenant.clone(),
        caller.project.clone(),
        session_key.to_owned(),
    );
    let gateway = app.clone();
    let verdict = tokio::task::spawn_blocking(move || {
        let subject = ctxd_core::spend::Subject {
            tenant: &tenant,
            project: project.as_deref(),
            session: &key,
        };
        gateway
            .spending
            .admit(gateway.engine.store(), &subject, estimate, now_ms())
    })
    .await;
    match verdict {
        Ok(Ok(crate::spending::Verdict::Admitted(a))) => {
            let mut held = none;
            held.admission = Some(a);
            Ok(held)
        }
        Ok(Ok(crate::spending::Verdict::Refused(why))) => {
            tracing::info!(reason = %why, "refused by a budget");
            Err(ApiError::new(api, StatusCode::BAD_REQUEST, why))
        }
        Ok(Err(e)) => Err(ApiError::new(
            api,
            StatusCode::SERVICE_UNAVAILABLE,
            format!("ctxd: the budgets' counters cannot be read: {e}"),
        )),
        Err(e) => Err(ApiError::internal(
            api,
            &format!("budget check failed: {e}"),
        )),
    }
}

/// A request's budget reservation until its `Completion` takes it over; released if the
/// request ends before (a refusal, a repair, the store failing).
struct Reservation {
    app: Arc<Gateway>,
    admission: Option<crate::spending::Admission>,
}

impl Reservation {
    fn take(&mut self) -> Option<crate::spending::Admission> {
        self.admission.take()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(admission) = self.admission.take() {
            crate::spending::Spending::settle_later(&self.app, admission, Default::default());
        }
    }
}

/// A client without an API key or ctxd key shares one tenant with every other keyless client:
/// on a listener beyond loopback that is anyone who can reach the port, so it is refused there
/// unless `allow-keyless` says otherwise.
fn keyed_or_allowed(app: &Gateway, api: Api, headers: &HeaderMap) -> Result<(), ApiError> {
    if crate::tenancy::Tenancy::identifies(headers)
        || app.settings.allow_keyless
        || app.settings.listen.ip().is_loopback()
    {
        return Ok(());
    }
    Err(ApiError::new(
        api,
        StatusCode::UNAUTHORIZED,
        "ctxd: an API key is required on this listener (x-api-key or Authorization: Bearer); \
         the operator may allow keyless clients with --allow-keyless",
    ))
}

/// The id of the log's leaf: where a response attaches.
pub(crate) fn leaf_id(log: &SessionLog) -> Option<ctxd_core::model::EntryId> {
    log.leaf().and_then(|p| log.entry(p)).map(|e| e.id.clone())
}

/// The provider refused the request as too long: open the recovery window (once per failure
/// chain, as the seed) and project the same request again. `None` when no window opened (the
/// chain already had its recovery, or resets are off): the refusal stands.
async fn recover_overflow(
    app: &Arc<Gateway>,
    api: Api,
    completion: &mut Completion,
    replan: &Replan,
) -> Option<Bytes> {
    let slot = completion.slot().clone();
    let mut state = slot.state.lock().await;
    if slot.stale.load(std::sync::atomic::Ordering::Acquire) {
        return None;
    }
    let loaded = state.as_mut()?;
    let caller = completion.caller().clone();
    replan
        .open_recovery_window(app, &slot, loaded, &caller)
        .await?;
    let parts = match upstream_parts(&loaded.log, &replan.element_entries) {
        Ok(Some(parts)) => parts,
        Ok(None) | Err(_) => return None,
    };
    completion.reattach(leaf_id(&loaded.log));
    // The new window's body keeps the client's breakpoints that survive it; nothing before the
    // window is read again, so there is nothing to record.
    completion.cached(None);
    let model = replan.req.model.as_deref();
    let (insert, avoided) = replan.tools_edit(&loaded.log);
    completion.measured(crate::stats::measure(
        loaded,
        true,
        insert.as_ref(),
        avoided,
        model,
    ));
    metrics::counter!("ctxd_rewritten_total", "route" => api.route()).increment(1);
    Some(Bytes::from(splice(
        &replan.req,
        &replan.decoded,
        Some(&parts),
        insert.as_ref(),
    )))
}

/// A window marker without its boot: the seed's narrow repair (the boot names the ctxd tools
/// this request offers), then the client retries.
async fn repair_and_retry_hint(
    app: &Arc<Gateway>,
    api: Api,
    slot: &Arc<Slot>,
    caller: &Caller,
    tools: ctxd_core::offered::ModelTools,
) -> ApiError {
    app.writer.flush().await;
    let engine = app.engine.clone();
    let c = caller.clone();
    let outcome =
        tokio::task::spawn_blocking(move || engine.repair_window(&c, tools, now_ms())).await;
    // Whatever happened, the next request reads the session back from the store.
    slot.stale.store(true, std::sync::atomic::Ordering::Release);
    let message = match outcome {
        Ok(Ok(o)) => {
            format!("ctxd repaired this session's context window ({o:?}); retry the request")
        }
        Ok(Err(e)) => {
            format!("ctxd: this session's context window has no boot and repair failed: {e}")
        }
        Err(e) => format!("ctxd: repair failed: {e}"),
    };
    tracing::warn!(%message, "window without boot");
    ApiError::new(api, StatusCode::SERVICE_UNAVAILABLE, message)
}

/// Open (or create) the session and read it back, after the writer has drained (the store must
/// hold everything queued before it is read).
async fn load(
    app: &Arc<Gateway>,
    tenant: &str,
    key: &str,
    meta: SessionMeta,
) -> Result<Loaded, String> {
    app.writer.flush().await;
    let engine = app.engine.clone();
    let (tenant, key) = (tenant.to_owned(), key.to_owned());
    let loaded = tokio::task::spawn_blocking(move || {
        let store = engine.store();
        let record = store.open_session(&tenant, &key, &meta)?;
        let session = store.load(record.id)?;
        Ok::<_, ctxd_store::StoreError>(Loaded {
            record,
            log: SessionLog::new(session),
            savings: Default::default(),
        })
    })
    .await;
    match loaded {
        Ok(Ok(l)) => Ok(l),
        Ok(Err(e)) => Err(e.to_string()),
        Err(e) => Err(format!("store task: {e}")),
    }
}

/// A conversation request whose session the store cannot give: refused with the API's 503, or
/// forwarded unmanaged (`--store-unavailable pass`). Either way logged and counted.
async fn store_unavailable(
    app: &Arc<Gateway>,
    api: Api,
    headers: &HeaderMap,
    path: &str,
    raw: Bytes,
    error: &str,
) -> Response {
    let pass = app.settings.store_unavailable == crate::config::StoreUnavailable::Pass;
    tracing::error!(error, pass, "the store cannot give the session");
    metrics::counter!("ctxd_store_unavailable_total", "outcome" => if pass { "passed" } else { "refused" })
        .increment(1);
    if pass {
        return relay_unmanaged(app, api, Method::POST, path, headers, raw).await;
    }
    ApiError::new(
        api,
        StatusCode::SERVICE_UNAVAILABLE,
        format!("ctxd: the session store is unavailable ({error}); retry shortly"),
    )
    .into_response()
}

/// Whether an upstream error says the prompt did not fit the context window.
pub(crate) fn is_overflow(status: StatusCode, body: &[u8]) -> bool {
    if status != StatusCode::BAD_REQUEST && status != StatusCode::PAYLOAD_TOO_LARGE {
        return false;
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]).to_ascii_lowercase();
    text.contains("prompt is too long")
        || text.contains("context_length_exceeded")
        || text.contains("maximum context length")
        || text.contains("context window")
        // Google: "The input token count (N) exceeds the maximum number of tokens allowed (M)."
        || text.contains("exceeds the maximum number of tokens")
}

async fn forward(
    app: &Arc<Gateway>,
    api: Api,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    planned: Planned,
) -> Response {
    let Planned {
        upstream_body,
        encoded,
        mut rewritten,
        mut completion,
        mut replan,
        bodies: _bodies,
        offer,
        unmanaged,
    } = planned;
    let mut body = upstream_body;
    let mut encoded = encoded;
    let mut recovered = false;
    let model = completion.caller().model.clone();
    let target = app.upstream.target(api, model.as_deref());
    loop {
        let sent = Instant::now();
        let upstream = app
            .upstream
            .send(target, method.clone(), path, headers, body, encoded)
            .await;
        let resp = match upstream {
            Ok(r) => r,
            Err(e) => {
                completion.finish(Outcome::Failed, Duration::ZERO);
                return upstream_failed(target, api, &e).into_response();
            }
        };
        let waited = sent.elapsed();
        let status =
            StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let mut out_headers =
            client_headers(resp.headers(), status, rewritten, unmanaged, &completion);
        routed_header(&mut out_headers, target);
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let framing = if is_sse {
            Framing::Sse
        } else if api == Api::Gemini && crate::api::gemini_streams_json_array(path) {
            Framing::JsonArray
        } else {
            Framing::Whole
        };
        tracing::info!(
            status = status.as_u16(),
            stream = is_sse,
            upstream_ms = waited.as_millis() as u64,
            "upstream answered"
        );

        // ctxd's tools were offered: the exchange answers their calls (a success only; an
        // overflow keeps the request's re-plan for its retry).
        let exchange = if status.is_success() {
            exchange_context(
                app,
                api,
                &method,
                path,
                headers,
                &completion,
                replan.take(),
                &offer,
            )
        } else {
            None
        };
        if status.is_success() && framing != Framing::Whole {
            let body: Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>> = match exchange {
                Some(cx) => Box::pin(crate::served::exchange::spliced(cx, resp.bytes_stream())),
                None => Box::pin(
                    resp.bytes_stream()
                        .map(|r| r.map_err(|e| e.without_url().to_string())),
                ),
            };
            return relay_stream(api, framing, status, out_headers, body, completion, waited).await;
        }

        let answer = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => {
                completion.finish(Outcome::Failed, sent.elapsed());
                let cause = crate::upstream::describe(&e);
                tracing::warn!(error = %cause, "upstream response failed");
                return ApiError::new(
                    api,
                    StatusCode::BAD_GATEWAY,
                    format!("ctxd: the upstream response {cause}"),
                )
                .into_response();
            }
        };
        let waited = sent.elapsed();
        if is_overflow(status, &answer) {
            crate::learned::observe_overflow(
                app,
                completion.caller().model.as_deref(),
                policy::wants_1m_context(headers),
                &answer,
            );
            // Retried here, once: the client sees an ordinary answer, or the provider's own
            // refusal when no recovery window could open or the retry failed as well. The
            // re-plan stays for the retry: its answer may call ctxd's tools too.
            if let Some(r) = replan.as_ref().filter(|_| !recovered) {
                if let Some(retry) = recover_overflow(app, api, &mut completion, r).await {
                    tracing::info!("prompt too long upstream: retried in a recovery window");
                    recovered = true;
                    body = retry;
                    encoded = false;
                    rewritten = true;
                    continue;
                }
            }
        }
        let (answer, outcome) = if status.is_success() {
            match json_outcome(api, answer, exchange).await {
                Ok(answered) => answered,
                Err(e) => {
                    completion.finish(Outcome::Failed, sent.elapsed());
                    return e.respond(api);
                }
            }
        } else {
            (answer, Outcome::Failed)
        };
        if matches!(outcome, Outcome::Response(_)) {
            // Durable before acknowledged: the body goes out once the store holds the turn.
            if let Err(e) = completion.finish_durable(outcome, waited).await {
                return ApiError::new(
                    api,
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("ctxd: the response could not be stored ({e}); retry the request"),
                )
                .into_response();
            }
        } else {
            completion.finish(outcome, waited);
        }
        let mut response = Response::new(Body::from(answer));
        *response.status_mut() = status;
        *response.headers_mut() = out_headers;
        return response;
    }
}

/// The provider could not be reached or did not answer in time: 504 on a timeout, else 502,
/// naming the cause but never the URL.
fn upstream_failed(target: Target<'_>, api: Api, e: &reqwest::Error) -> ApiError {
    let status = if e.is_timeout() {
        StatusCode::GATEWAY_TIMEOUT
    } else {
        StatusCode::BAD_GATEWAY
    };
    let cause = crate::upstream::describe(e);
    tracing::warn!(error = %cause, upstream = target.base, "upstream request failed");
    ApiError::new(api, status, format!("ctxd: the upstream request {cause}"))
}

/// `x-ctxd-upstream`: the route a request took, when one did (`crate::routes`).
fn routed_header(h: &mut HeaderMap, target: Target<'_>) {
    if let Some(v) = target.route.and_then(|r| HeaderValue::from_str(r).ok()) {
        h.insert("x-ctxd-upstream", v);
    }
}

/// The model a body relayed untouched names, for its route (`count_tokens` names one): read
/// only when the body is plain JSON; a compressed one goes to its API's upstream.
fn model_named(headers: &HeaderMap, raw: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        model: Option<String>,
    }
    if headers.contains_key(header::CONTENT_ENCODING) || !is_json(headers) {
        return None;
    }
    serde_json::from_slice::<Named>(raw).ok()?.model
}

/// The provider's headers as the client gets them, with ctxd's own: whether the body was
/// rewritten or left unmanaged and why, the request's savings (on a success), budget warnings.
fn client_headers(
    upstream: &reqwest::header::HeaderMap,
    status: StatusCode,
    rewritten: bool,
    unmanaged: Option<&'static str>,
    completion: &Completion,
) -> HeaderMap {
    let mut out = crate::upstream::response_headers(upstream);
    if rewritten {
        out.insert("x-ctxd-rewritten", HeaderValue::from_static("1"));
    }
    if let Some(why) = unmanaged {
        out.insert("x-ctxd-unmanaged", HeaderValue::from_static(why));
    }
    if let Some(r) = completion.request_record().filter(|_| status.is_success()) {
        crate::stats::headers(&mut out, r);
    }
    for warning in completion.budget_warnings() {
        if let Ok(v) = HeaderValue::from_str(warning) {
            out.append(crate::spending::WARNING_HEADER, v);
        }
    }
    out
}

/// A successful JSON answer as the client gets it and as it is recorded: the answer assembled,
/// and when ctxd's tools were offered, its calls of them answered in hidden rounds (the
/// client's body is then the last round's). An answer that cannot be read is relayed and not
/// recorded.
async fn json_outcome(
    api: Api,
    answer: Bytes,
    exchange: Option<crate::served::exchange::Context>,
) -> Result<(Bytes, Outcome), crate::served::exchange::ExchangeError> {
    let assembled = match ctxd_formats::wire::stream::assemble_json(api.stream_api(), &answer) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "response not recorded");
            return Ok((answer, Outcome::Failed));
        }
    };
    let Some(cx) = exchange else {
        return Ok((answer, Outcome::Response(assembled)));
    };
    let (body, view) = crate::served::exchange::json_rounds(&cx, &answer, assembled).await?;
    Ok((body.unwrap_or(answer), Outcome::Response(view)))
}

/// The exchange answering ctxd's calls for this request, when it was offered ctxd's tools.
#[allow(clippy::too_many_arguments)]
fn exchange_context(
    app: &Arc<Gateway>,
    api: Api,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    completion: &Completion,
    replan: Option<Replan>,
    offer: &Offer,
) -> Option<crate::served::exchange::Context> {
    if offer.is_empty() {
        return None;
    }
    Some(crate::served::exchange::Context {
        app: app.clone(),
        api,
        slot: completion.slot().clone(),
        caller: completion.caller().clone(),
        tail: completion.tail(),
        replan: Arc::new(replan?),
        offer: offer.clone(),
        method: method.clone(),
        path: path.to_owned(),
        headers: headers.clone(),
    })
}

/// A successful streamed response, relayed as it arrives (see [`Relay`]).
async fn relay_stream(
    api: Api,
    framing: Framing,
    status: StatusCode,
    mut out_headers: HeaderMap,
    body: Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>,
    completion: Completion,
    waited: Duration,
) -> Response {
    out_headers.remove(header::CONTENT_LENGTH);
    let mut relay = Relay::new(api, framing, body, completion, waited);
    // The headers go out with the first events when those follow at once (one write, one
    // wake-up of the client instead of two); a provider slow to its first event gets its
    // headers relayed alone after a moment.
    let first = match tokio::time::timeout(FIRST_EVENT_WAIT, relay.next()).await {
        Ok(Some(item)) => Some(item),
        Ok(None) | Err(_) => None,
    };
    let body = futures_util::stream::iter(first).chain(relay);
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = status;
    *response.headers_mut() = out_headers;
    response
}

/// A request that is not a conversation turn (`count_tokens`, `/v1/models`, other paths):
/// relayed both ways untouched, nothing stored.
pub(crate) async fn passthrough(
    app: Arc<Gateway>,
    api: Api,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut held = budget::Held::new(&app.bodies);
    let limit = app.settings.max_body_bytes;
    let raw = match read_body(&app, api, &headers, body, limit, &mut held).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let path = uri
        .path_and_query()
        .map_or(uri.path(), |p| p.as_str())
        .to_owned();
    relay_unmanaged(&app, api, method, &path, &headers, raw).await
}

/// Send `raw` upstream as the client sent it and relay the answer as it comes, recording
/// nothing.
async fn relay_unmanaged(
    app: &Arc<Gateway>,
    api: Api,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    raw: Bytes,
) -> Response {
    let started = Instant::now();
    // Only a route needs the model: without one the body is not parsed at all.
    let model = app
        .upstream
        .routed()
        .then(|| match api {
            Api::Gemini => crate::api::GeminiTarget::of_path(path).map(|t| t.model.to_owned()),
            _ => model_named(headers, &raw),
        })
        .flatten();
    let target = app.upstream.target(api, model.as_deref());
    match app
        .upstream
        .send(target, method, path, headers, raw, true)
        .await
    {
        Ok(resp) => {
            let status =
                StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut headers = crate::upstream::response_headers(resp.headers());
            routed_header(&mut headers, target);
            metrics::histogram!("ctxd_upstream_seconds", "route" => "passthrough")
                .record(started.elapsed().as_secs_f64());
            let mut response = Response::new(Body::from_stream(resp.bytes_stream()));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
        Err(e) => {
            let status = if e.is_timeout() {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            tracing::warn!(error = %e, "upstream request failed");
            let e = e.without_url();
            ApiError::new(api, status, format!("ctxd: upstream request failed: {e}"))
                .into_response()
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn compressed_bodies_are_decoded_within_the_limit() {
        use std::io::Write;
        let budget = budget::budget(1 << 30, 0);
        let held = || budget::Held::new(&budget);
        let json = br#"{"input":"hello"}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(json).unwrap();
        let gz = Bytes::from(gz.finish().unwrap());
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        assert_eq!(
            decode(Api::Responses, &h, &gz, 1000, &mut held()).unwrap(),
            &json[..]
        );
        let r = decode(Api::Responses, &h, &gz, 5, &mut held()).unwrap_err();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
        assert_eq!(
            decode(Api::Responses, &h, &gz, 1000, &mut held())
                .unwrap_err()
                .status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        let junk = Bytes::from_static(b"not gzip at all");
        assert_eq!(
            decode(Api::Responses, &h, &junk, 1000, &mut held())
                .unwrap_err()
                .status(),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn overflow_errors_are_recognised() {
        assert!(is_overflow(
            StatusCode::BAD_REQUEST,
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#
        ));
        assert!(is_overflow(
            StatusCode::BAD_REQUEST,
            br#"{"error":{"code":"context_length_exceeded"}}"#
        ));
        assert!(!is_overflow(
            StatusCode::TOO_MANY_REQUESTS,
            b"context window"
        ));
    }
}
