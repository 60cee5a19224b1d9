//! Accounting per mechanism at the gateway: each managed request measured once
//! ([`ctxd_core::savings::measure`]) while it is planned, its figures in the response's
//! headers, its record (`ctxd.request`) appended with the turn, Prometheus counters, and
//! `GET /stats` / `GET /stats/{id}` reading the records back from the store, scoped to the
//! viewer exactly as the dashboard is ([`crate::ui::access`]). `ctxd stats` prints the same
//! views ([`overview`], [`detail`]).
//!
//! Limits: the figures describe a request's first upstream call (the continuations of ctxd's
//! hidden rounds are not counted), and a stream cut after its headers went out records
//! nothing, so its headers are not in the totals.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use ctxd_core::model::Session;
use ctxd_core::savings::{self, record, Mechanism, Record, Totals};
use ctxd_store::{Backend, NewEntry, SessionId, SessionRecord};
use serde::Serialize;

use crate::served::Insert;
use crate::server::Gateway;
use crate::sessions::Loaded;
use crate::ui::access::{Access, Viewer};
use crate::ui::UiError;
use ctxd_engine::turn::hash;

/// How the figures are estimated, stated in every view.
pub const ESTIMATE: &str = "4 bytes of text a token, per item";
/// How the cost is priced.
pub const COST: &str = "the model's list price of uncached input: an upper bound";

/// Measure the request planned on `loaded` (its branch is what goes upstream when
/// `rewritten`; else the client's conversation went as it was), with the `tools` edit `insert`
/// (ctxd's definitions a cost) and `lazy_avoided` tokens of the client's definitions left out.
pub(crate) fn measure(
    loaded: &mut Loaded,
    rewritten: bool,
    insert: Option<&Insert>,
    lazy_avoided: u64,
    model: Option<&str>,
) -> Record {
    let served = insert.map_or(0, |i| savings::tokens_of_bytes(i.served));
    let branch = loaded.log.branch();
    let m = savings::measure(&loaded.log.session, &branch, &mut loaded.savings, served);
    let m = if rewritten { m } else { m.unchanged() }.with_lazy(lazy_avoided);
    Record::new(&m, model)
}

/// The record's figures as response headers.
pub(crate) fn headers(h: &mut HeaderMap, r: &Record) {
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    };
    put("x-ctxd-tokens-sent", r.sent.to_string());
    put("x-ctxd-tokens-whole", r.whole.to_string());
    put("x-ctxd-tokens-saved", r.saved_total().to_string());
    put("x-ctxd-tokens-saved-by", r.saved.header_value());
    if let Some(usd) = r.usd() {
        put("x-ctxd-cost-saved-usd", format!("{usd:.6}"));
    }
}

/// The record into the log after its turn's response (the entry for the store, in the
/// turn's batch), counted on the gateway's metrics.
pub(crate) fn append(loaded: &mut Loaded, r: &Record, now: i64) -> NewEntry {
    let kind = r.to_entry();
    // From the parent and the record alone (the log makes a repeated id unique): entry ids
    // chain through their parents, and a clock or the log's size here made every later id
    // (and the `recall` ids texts name) differ between runs of the same conversation.
    let tag = format!("request {} {}", r.sent, r.saved_total());
    let stamp = Some(ctxd_core::windows::iso8601(now));
    let parent = loaded.log.leaf();
    let (_, entry) = loaded
        .log
        .append_under(parent, "request", &hash::text(&tag), kind, stamp);
    metrics::counter!("ctxd_tokens_sent_total").increment(r.sent);
    metrics::counter!("ctxd_tokens_whole_total").increment(r.whole);
    for (m, v) in r.saved.iter() {
        if v > 0 {
            metrics::counter!("ctxd_tokens_saved_total", "mechanism" => m.name())
                .increment(v.unsigned_abs());
        } else if v < 0 {
            metrics::counter!("ctxd_tokens_spent_total", "mechanism" => m.name())
                .increment(v.unsigned_abs());
        }
    }
    NewEntry::new(entry)
}

/// The metrics' help texts, every mechanism at zero.
pub(crate) fn describe_metrics() {
    use metrics::describe_counter;
    describe_counter!(
        "ctxd_tokens_sent_total",
        "Tokens sent upstream by managed requests (estimated, first upstream call)"
    );
    describe_counter!(
        "ctxd_tokens_whole_total",
        "Tokens those requests would have sent without ctxd (estimated)"
    );
    describe_counter!(
        "ctxd_tokens_saved_total",
        "Tokens not sent upstream, by mechanism (estimated)"
    );
    describe_counter!(
        "ctxd_tokens_spent_total",
        "Tokens ctxd added upstream, by mechanism (reminders, its tool definitions; estimated)"
    );
    metrics::counter!("ctxd_tokens_sent_total").increment(0);
    metrics::counter!("ctxd_tokens_whole_total").increment(0);
    for m in Mechanism::EXISTING {
        metrics::counter!("ctxd_tokens_saved_total", "mechanism" => m.name()).increment(0);
        metrics::counter!("ctxd_tokens_spent_total", "mechanism" => m.name()).increment(0);
    }
}

/// One session's totals.
#[derive(Clone, Debug, Serialize)]
pub struct SessionStats {
    pub id: SessionId,
    pub key: String,
    /// Only in a view of every tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub title: Option<String>,
    #[serde(flatten)]
    pub totals: Totals,
}

/// Every session a viewer may see, and their sum.
#[derive(Clone, Debug, Serialize)]
pub struct Overview {
    pub v: u32,
    pub estimate: &'static str,
    pub cost: &'static str,
    pub sessions: Vec<SessionStats>,
    pub total: Totals,
}

/// One request of a session.
#[derive(Clone, Debug, Serialize)]
pub struct RequestStats {
    pub entry_id: String,
    pub timestamp: Option<String>,
    pub sent: u64,
    pub whole: u64,
    pub saved: i64,
    pub saved_by: savings::ByMechanism,
    pub model: Option<String>,
    pub cost_saved_usd: Option<f64>,
}

/// One session request by request.
#[derive(Clone, Debug, Serialize)]
pub struct Detail {
    pub v: u32,
    pub estimate: &'static str,
    pub cost: &'static str,
    pub session: SessionStats,
    pub requests: Vec<RequestStats>,
}

/// The totals of one stored session.
pub fn session_stats(r: &SessionRecord, session: &Session, with_tenant: bool) -> SessionStats {
    stats_of(
        r,
        record::totals(session),
        current_model(session),
        with_tenant,
    )
}

/// The model the session uses now: the last one an answer or a model change names, as
/// `ctxd report` and `ctxd sessions` show it. The record's meta keeps the session's first
/// model, which in a session that switched models made `stats` disagree with them.
fn current_model(session: &Session) -> Option<String> {
    use ctxd_core::model::{EntryKind, Role};
    session
        .entries
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EntryKind::Message(m) if m.role == Role::Assistant => m.model.clone(),
            EntryKind::ModelChange { model, .. } => Some(model.clone()),
            _ => None,
        })
        .or_else(|| session.meta.model.clone())
}

fn stats_of(
    r: &SessionRecord,
    totals: Totals,
    model: Option<String>,
    with_tenant: bool,
) -> SessionStats {
    SessionStats {
        id: r.id,
        key: r.key.clone(),
        tenant: with_tenant.then(|| r.tenant.clone()),
        agent: r.meta.agent.map(|a| a.as_str().to_owned()),
        model: model.or_else(|| r.meta.model.clone()),
        title: r.meta.title.clone(),
        totals,
    }
}

/// Sessions and their sum.
pub fn overview(sessions: Vec<SessionStats>) -> Overview {
    let mut total = Totals::default();
    for s in &sessions {
        total.merge(&s.totals);
    }
    Overview {
        v: 1,
        estimate: ESTIMATE,
        cost: COST,
        sessions,
        total,
    }
}

/// What [`grouped`] sums requests by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// The working directory the client stated when the session began (or `x-ctxd-project`).
    Project,
    Agent,
    /// The model each request's record names (the session's when it names none).
    Model,
    Tenant,
    /// The UTC day of each request.
    Day,
    /// The route each request went to (`crate::routes`), or its API's upstream.
    Upstream,
}

impl GroupBy {
    pub fn name(self) -> &'static str {
        match self {
            GroupBy::Project => "project",
            GroupBy::Agent => "agent",
            GroupBy::Model => "model",
            GroupBy::Tenant => "tenant",
            GroupBy::Day => "day",
            GroupBy::Upstream => "upstream",
        }
    }

    /// The group of one request: its session's record, its entry's timestamp, its record.
    fn key(self, r: &SessionRecord, timestamp: Option<&str>, rec: &Record) -> String {
        let known = |v: Option<String>| v.unwrap_or_else(|| UNKNOWN.to_owned());
        match self {
            GroupBy::Project => known(r.meta.cwd.clone()),
            GroupBy::Agent => known(r.meta.agent.map(|a| a.as_str().to_owned())),
            GroupBy::Model => known(rec.model.clone().or_else(|| r.meta.model.clone())),
            GroupBy::Tenant => r.tenant.clone(),
            GroupBy::Upstream => rec
                .upstream
                .clone()
                .unwrap_or_else(|| DEFAULT_UPSTREAM.to_owned()),
            GroupBy::Day => known(
                timestamp
                    .filter(|t| t.len() >= 10)
                    .map(|t| t[..10].to_owned()),
            ),
        }
    }
}

/// The group of requests whose project, agent, model or time is not recorded.
const UNKNOWN: &str = "(unknown)";
/// The group of requests no route took: their API's upstream.
const DEFAULT_UPSTREAM: &str = "(the API's upstream)";

/// One group's sum.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    pub key: String,
    #[serde(flatten)]
    pub totals: Totals,
}

/// Every request of the sessions, summed by one attribute.
#[derive(Clone, Debug, Serialize)]
pub struct Grouped {
    pub v: u32,
    pub estimate: &'static str,
    pub cost: &'static str,
    pub by: &'static str,
    /// Days in order; the rest by tokens sent, most first.
    pub groups: Vec<Group>,
    pub total: Totals,
}

/// The request records of `sessions` summed by `by`.
pub fn grouped<'a>(
    by: GroupBy,
    sessions: impl IntoIterator<Item = (&'a SessionRecord, &'a Session)>,
) -> Grouped {
    let mut sums: HashMap<String, Totals> = HashMap::new();
    let mut total = Totals::default();
    for (r, session) in sessions {
        for (pos, rec) in record::requests(session) {
            let timestamp = session.entries[pos].timestamp.as_deref();
            sums.entry(by.key(r, timestamp, &rec))
                .or_default()
                .add(&rec);
            total.add(&rec);
        }
    }
    let mut groups: Vec<Group> = sums
        .into_iter()
        .map(|(key, totals)| Group { key, totals })
        .collect();
    match by {
        GroupBy::Day => groups.sort_by(|a, b| a.key.cmp(&b.key)),
        _ => groups.sort_by(|a, b| {
            b.totals
                .sent
                .cmp(&a.totals.sent)
                .then_with(|| a.key.cmp(&b.key))
        }),
    }
    Grouped {
        v: 1,
        estimate: ESTIMATE,
        cost: COST,
        by: by.name(),
        groups,
        total,
    }
}

/// A stored session request by request.
pub fn detail(r: &SessionRecord, session: &Session, with_tenant: bool) -> Detail {
    let requests = record::requests(session)
        .into_iter()
        .map(|(pos, rec)| {
            let entry = &session.entries[pos];
            RequestStats {
                entry_id: entry.id.as_str().to_owned(),
                timestamp: entry.timestamp.clone(),
                sent: rec.sent,
                whole: rec.whole,
                saved: rec.saved_total(),
                saved_by: rec.saved,
                cost_saved_usd: rec.usd(),
                model: rec.model,
            }
        })
        .collect();
    Detail {
        v: 1,
        estimate: ESTIMATE,
        cost: COST,
        session: session_stats(r, session, with_tenant),
        requests,
    }
}

/// One UTC day of usage across sessions: ctxd's records (tokens sent against the whole
/// conversation, saved, its list-price value) and what the provider billed (every response's
/// usage, priced by the model).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Day {
    /// `2026-12-05`.
    pub day: String,
    #[serde(flatten)]
    pub totals: Totals,
    /// Tokens the provider reported (input, cache reads and writes, output).
    pub billed_tokens: u64,
    /// Those at the model's price; responses of a model without one are left out.
    pub billed_usd: f64,
    pub unpriced_responses: u64,
}

/// Usage per day over `sessions`, oldest first.
pub fn daily<'a>(
    sessions: impl IntoIterator<Item = &'a Session>,
    prices: &ctxd_core::spend::PriceTable,
) -> Vec<Day> {
    use ctxd_core::model::EntryKind;
    let mut days: std::collections::BTreeMap<String, Day> = std::collections::BTreeMap::new();
    let day_of = |ts: Option<&str>| ts.filter(|t| t.len() >= 10).map(|t| t[..10].to_owned());
    for session in sessions {
        for (pos, rec) in record::requests(session) {
            if let Some(d) = day_of(session.entries[pos].timestamp.as_deref()) {
                days.entry(d).or_default().totals.add(&rec);
            }
        }
        for e in &session.entries {
            let EntryKind::Message(m) = &e.kind else {
                continue;
            };
            let (Some(u), Some(d)) = (m.usage.as_ref(), day_of(e.timestamp.as_deref())) else {
                continue;
            };
            let day = days.entry(d).or_default();
            day.billed_tokens += u.input + u.output + u.cache_read + u.cache_write;
            let model = m.model.as_deref().or(session.meta.model.as_deref());
            match model.and_then(|m| prices.price(m)) {
                Some(p) => day.billed_usd += p.micro_usd(u) as f64 / 1e6,
                None => day.unpriced_responses += 1,
            }
        }
    }
    days.into_iter().map(|(day, d)| Day { day, ..d }).collect()
}

/// What an agent's run did (`ctxd run`'s closing line): the requests recorded from `since` on
/// (an RFC 3339 UTC time, as the store stamps entries) in the sessions given, and the windows
/// opened meanwhile.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunSummary {
    /// The sessions with a request recorded since then: (id, key).
    pub sessions: Vec<(SessionId, String)>,
    /// Prompts the person (or script) wrote since then: user messages that carry no tool
    /// result and are not context the agent injected (Codex's `<environment_context>`...).
    pub turns: u64,
    pub totals: Totals,
    pub windows_opened: u64,
}

/// The [`RunSummary`] of `sessions` since `since`.
pub fn run_summary<'a>(
    since: &str,
    sessions: impl IntoIterator<Item = (&'a SessionRecord, &'a Session)>,
) -> RunSummary {
    let after = |t: Option<&str>| t.is_some_and(|t| t >= since);
    let mut out = RunSummary::default();
    for (r, session) in sessions {
        let mut touched = false;
        for (pos, rec) in record::requests(session) {
            if after(session.entries[pos].timestamp.as_deref()) {
                out.totals.add(&rec);
                touched = true;
            }
        }
        out.turns += session
            .entries
            .iter()
            .filter(|e| after(e.timestamp.as_deref()))
            .filter(|e| match &e.kind {
                ctxd_core::model::EntryKind::Message(m) => {
                    ctxd_core::recall::is_prompt(&e.kind)
                        && ctxd_formats::codex_injected_user(&m.content).is_none()
                }
                _ => false,
            })
            .count() as u64;
        out.windows_opened += session
            .entries
            .iter()
            .filter(|e| {
                matches!(e.kind, ctxd_core::model::EntryKind::WindowMarker { .. })
                    && after(e.timestamp.as_deref())
            })
            .count() as u64;
        if touched {
            out.sessions.push((r.id, r.key.clone()));
        }
    }
    out
}

/// A session's totals and current model at a version of it (its entry count).
type Cached = (u64, Totals, Option<String>);

/// The state of `/stats`: the dashboard's access rules, a read connection of its own, totals
/// cached per version of a session (its entry count).
struct StatsState {
    access: Access,
    reader: crate::ui::Reader,
    cache: Mutex<HashMap<SessionId, Cached>>,
}

/// `GET /stats` and `GET /stats/{id}`.
pub(crate) fn service(app: &Gateway) -> Router {
    let state = Arc::new(StatsState {
        access: crate::ui::access_of(app),
        reader: crate::ui::Reader::new(app.engine.clone()),
        cache: Mutex::new(HashMap::new()),
    });
    Router::new()
        .route("/stats", get(all))
        .route("/stats/{id}", get(one))
        .with_state(state)
}

async fn blocking<T: Send + 'static>(
    state: &Arc<StatsState>,
    f: impl FnOnce(&StatsState, &dyn Backend) -> Result<T, UiError> + Send + 'static,
) -> Result<T, UiError> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let engine = state.reader.engine()?;
        f(&state, engine.store())
    })
    .await
    .map_err(|e| UiError::Unavailable(format!("stats query: {e}")))?
}

fn json<T: Serialize>(value: &T) -> Response {
    (
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        axum::Json(value),
    )
        .into_response()
}

async fn all(State(state): State<Arc<StatsState>>, headers: HeaderMap) -> Response {
    let viewer = match state.access.viewer(&headers) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let read = blocking(&state, move |state, store| {
        let records = crate::ui::query::visible(store, &viewer)?;
        let with_tenant = viewer == Viewer::All;
        let mut rows = Vec::with_capacity(records.len());
        for r in &records {
            let cached = {
                let cache = state.cache.lock().unwrap_or_else(|p| p.into_inner());
                cache
                    .get(&r.id)
                    .filter(|(n, _, _)| *n == r.entry_count)
                    .map(|(_, t, m)| (*t, m.clone()))
            };
            let (totals, model) = match cached {
                Some(c) => c,
                None => {
                    let session = store.load(r.id)?;
                    let (t, m) = (record::totals(&session), current_model(&session));
                    let mut cache = state.cache.lock().unwrap_or_else(|p| p.into_inner());
                    cache.insert(r.id, (r.entry_count, t, m.clone()));
                    (t, m)
                }
            };
            rows.push(stats_of(r, totals, model, with_tenant));
        }
        Ok(overview(rows))
    })
    .await;
    match read {
        Ok(o) => json(&o),
        Err(e) => e.into_response(),
    }
}

async fn one(
    State(state): State<Arc<StatsState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let viewer = match state.access.viewer(&headers) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let Some(id) = id.parse::<SessionId>().ok().filter(|id| *id > 0) else {
        return UiError::BadRequest(format!("session id {id:?}: a positive number"))
            .into_response();
    };
    let read = blocking(&state, move |_, store| {
        let r = crate::ui::query::readable(store, &viewer, id)?;
        let session = store.load(r.id)?;
        Ok(detail(&r, &session, viewer == Viewer::All))
    })
    .await;
    match read {
        Ok(d) => json(&d),
        Err(e) => e.into_response(),
    }
}
