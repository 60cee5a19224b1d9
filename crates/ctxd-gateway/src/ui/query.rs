//! The dashboard's reads, as plain functions over the engine on the dashboard's own store
//! connection. Each takes the [`Viewer`] and checks it before reading anything of a session:
//! another tenant's session is "not found", exactly as an unknown one.

use std::time::Duration;

use ctxd_core::notes::list::ListOrder;
use ctxd_core::recall::Selection;
use ctxd_engine::history::{ItemsQuery, SearchMode, SearchPage, SearchQuery};
use ctxd_engine::{Caller, Engine};
use ctxd_store::{Backend, SessionId, SessionRecord};
use serde::Serialize;

use super::access::Viewer;
use super::counts::CountsBySession;
use super::error::UiError;
use super::page::{self, Page};
use super::summary::{report_of, summarize, Cache, Row, Summary};

/// The columns the sessions page sorts by, in the table's order.
pub const SORT_KEYS: [&str; 11] = [
    "session",
    "agent",
    "project",
    "model",
    "started",
    "last_active",
    "turns",
    "context",
    "windows",
    "saved",
    "cost",
];

/// A sort order of the sessions page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    pub key: &'static str,
    pub desc: bool,
}

impl Sort {
    /// `sort` (one of [`SORT_KEYS`], default `last_active`) and `dir` (`asc`/`desc`, default
    /// `desc`).
    pub fn parse(sort: Option<&str>, dir: Option<&str>) -> Result<Sort, UiError> {
        let key = match sort {
            None | Some("") => "last_active",
            Some(k) => SORT_KEYS.into_iter().find(|s| *s == k).ok_or_else(|| {
                UiError::BadRequest(format!("sort {k:?}: use one of {}", SORT_KEYS.join(", ")))
            })?,
        };
        let desc = match dir {
            None | Some("") | Some("desc") => true,
            Some("asc") => false,
            Some(d) => return Err(UiError::BadRequest(format!("dir {d:?}: use asc or desc"))),
        };
        Ok(Sort { key, desc })
    }
}

/// Longest a sessions listing spends computing rows it has not cached (the rest arrive with
/// the next poll).
pub const LIST_BUDGET: Duration = Duration::from_millis(150);

/// The longest filter accepted.
const MAX_FILTER: usize = 200;

/// The sessions a viewer may see, filtered and sorted; and how many there are before the
/// filter.
pub fn sessions(
    engine: &Engine<dyn Backend>,
    cache: &Cache,
    memos: &CountsBySession,
    viewer: &Viewer,
    sort: Sort,
    filter: &str,
) -> Result<(Vec<Row>, usize), UiError> {
    if filter.chars().count() > MAX_FILTER {
        return Err(UiError::BadRequest(format!(
            "filter longer than {MAX_FILTER} characters"
        )));
    }
    let records = visible(engine.store(), viewer)?;
    let total = records.len();
    let needle = filter.trim().to_lowercase();
    let with_tenant = *viewer == Viewer::All;
    let mut rows: Vec<Row> = records
        .iter()
        .map(|r| Row::new(r, with_tenant))
        .filter(|r| needle.is_empty() || matches(r, &needle))
        .collect();
    cache.fill(&mut rows, LIST_BUDGET, |id| summary_of(engine, memos, id))?;
    sort_rows(&mut rows, sort);
    Ok((rows, total))
}

fn matches(r: &Row, needle: &str) -> bool {
    [
        Some(r.key.as_str()),
        r.title.as_deref(),
        r.agent.as_deref(),
        r.project.as_deref(),
        r.model.as_deref(),
    ]
    .into_iter()
    .flatten()
    .any(|f| f.to_lowercase().contains(needle))
}

fn summary_of(
    engine: &Engine<dyn Backend>,
    memos: &CountsBySession,
    id: SessionId,
) -> Result<Summary, UiError> {
    let session = engine.store().load(id)?;
    let report = memos.with(id, &session, |m| report_of(&session, &m.counter()));
    let branch = ctxd_core::tree::active_branch(&session);
    Ok(summarize(&session, &report, &branch))
}

/// Sort rows; rows not summarised yet go last on the summary's columns.
pub fn sort_rows(rows: &mut [Row], sort: Sort) {
    use std::cmp::Ordering;
    fn num(r: &Row, f: impl Fn(&Summary) -> f64) -> Option<f64> {
        r.summary.as_deref().map(f)
    }
    let cmp = |a: &Row, b: &Row| -> Ordering {
        let text = |f: fn(&Row) -> Option<&str>| {
            f(a).unwrap_or("")
                .to_lowercase()
                .cmp(&f(b).unwrap_or("").to_lowercase())
        };
        let by_num = |f: fn(&Summary) -> f64| match (num(a, f), num(b, f)) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            (Some(_), None) => Ordering::Greater,
            (None, Some(_)) => Ordering::Less,
            (None, None) => Ordering::Equal,
        };
        match sort.key {
            "session" => text(|r| Some(r.title.as_deref().unwrap_or(&r.key))),
            "agent" => text(|r| r.agent.as_deref()),
            "project" => text(|r| r.project.as_deref()),
            "model" => text(|r| r.model.as_deref()),
            "started" => a.started.cmp(&b.started),
            "turns" => by_num(|s| s.turns as f64),
            "context" => by_num(|s| s.context_tokens.unwrap_or(0) as f64),
            "windows" => by_num(|s| s.windows_opened as f64),
            "saved" => by_num(|s| s.saved_tokens as f64),
            "cost" => by_num(|s| s.saved_usd.unwrap_or(0.0)),
            _ => a.last_active.cmp(&b.last_active),
        }
        .then(a.id.cmp(&b.id))
    };
    rows.sort_by(|a, b| if sort.desc { cmp(b, a) } else { cmp(a, b) });
}

/// The session `id` if the viewer may read it.
pub fn record(
    engine: &Engine<dyn Backend>,
    viewer: &Viewer,
    id: SessionId,
) -> Result<SessionRecord, UiError> {
    readable(engine.store(), viewer, id)
}

/// The sessions a viewer may see, newest first (`GET /stats` lists the same).
pub fn visible(store: &dyn Backend, viewer: &Viewer) -> Result<Vec<SessionRecord>, UiError> {
    Ok(match viewer {
        Viewer::Tenant(t) => store.list_sessions(t)?,
        Viewer::All => {
            let mut all = Vec::new();
            for t in store.tenants()? {
                all.extend(store.list_sessions(&t)?);
            }
            // Newest first across tenants, as within one.
            all.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(b.id.cmp(&a.id)));
            all
        }
    })
}

/// The session `id`, if the viewer may read it (another tenant's is "not found").
pub fn readable(
    store: &dyn Backend,
    viewer: &Viewer,
    id: SessionId,
) -> Result<SessionRecord, UiError> {
    let found = match viewer {
        Viewer::Tenant(t) => store.session(t, id)?,
        Viewer::All => {
            let mut found = None;
            for t in store.tenants()? {
                if let Some(r) = store.session(&t, id)? {
                    found = Some(r);
                    break;
                }
            }
            found
        }
    };
    found
        .filter(|r| viewer.may_read(&r.tenant))
        .ok_or_else(|| UiError::NotFound(format!("no session {id}")))
}

/// The engine's caller for reads of `record`'s session: its own tenant and names, as the
/// model's tools would resolve them.
fn caller(record: &SessionRecord) -> Caller {
    Caller {
        tenant: record.tenant.clone(),
        session: Some(record.id),
        session_key: Some(record.key.clone()),
        agent: record.meta.agent.map(|a| a.as_str().to_owned()),
        model: record.meta.model.clone(),
        project: record.meta.cwd.clone(),
        policy: None,
    }
}

/// A note of the session's homes, as the page shows it.
#[derive(Clone, Debug, Serialize)]
pub struct Note {
    pub address: String,
    pub lines: usize,
    pub bytes: usize,
    pub text: String,
}

/// The most notes a page shows, and the most of each note's text.
const MAX_NOTES: usize = 100;
const MAX_NOTE_LINES: i64 = 400;

/// The notes the session's model could read (its homes), read-only.
pub fn notes(engine: &Engine<dyn Backend>, record: &SessionRecord) -> Result<Vec<Note>, UiError> {
    let caller = caller(record);
    let list = engine.notes_list(&caller, None, ListOrder::default(), MAX_NOTES)?;
    let mut out = Vec::with_capacity(list.notes.len());
    for n in list.notes {
        let read = engine.notes_read(&caller, &n.address, Some(1), Some(MAX_NOTE_LINES))?;
        out.push(Note {
            address: n.address,
            lines: n.lines,
            bytes: n.bytes,
            text: read.text,
        });
    }
    Ok(out)
}

/// The page of a session the viewer may read.
pub fn session_page(
    engine: &Engine<dyn Backend>,
    memos: &CountsBySession,
    record: &SessionRecord,
) -> Result<Page, UiError> {
    let session = engine.store().load(record.id)?;
    Ok(memos.with(record.id, &session, |m| {
        page::build(record.id, &record.key, &session, &m.counter())
    }))
}

/// An entry's raw content through `recall` (whole, within recall's own caps).
pub fn recall(
    engine: &Engine<dyn Backend>,
    record: &SessionRecord,
    entry: &str,
) -> Result<String, UiError> {
    if entry.is_empty() || entry.len() > 512 {
        return Err(UiError::BadRequest("entry: 1 to 512 bytes".into()));
    }
    Ok(engine.recall(&caller(record), entry, &Selection::whole())?)
}

/// Ranked history search in the session (its active branch).
pub fn search(
    engine: &Engine<dyn Backend>,
    record: &SessionRecord,
    q: &str,
) -> Result<SearchPage, UiError> {
    let query = SearchQuery {
        query: q.to_owned(),
        mode: SearchMode::Ranked,
        filters: ItemsQuery {
            limit: Some(20),
            ..ItemsQuery::default()
        },
    };
    Ok(engine.history_search_contents(&caller(record), &query)?)
}
