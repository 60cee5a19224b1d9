//! History tools: `history_list_windows`, `history_list_items`, `history_read_item`,
//! `history_search_contents`.
//!
//! Every call is scoped to the caller's session, checked against its tenant; ids resolve only
//! inside that session. History follows the active branch unless `all_branches` is set. The
//! store's history index is brought up to date (incrementally) before each read.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use ctxd_core::history::{
    self as h, agent_scope, check_query, check_role, item_facts, preview, slice_chars, BranchLanes,
    ItemFilter, RankedExcerpts, RankedQuery,
};
use ctxd_core::model::{Entry, EntryKind, SessionMeta};
use ctxd_store::{HistoryRow, SessionId, Store};

use crate::tools::{parameters, parse, ToolOutput, ToolSpec};
use crate::{Caller, Engine, EngineError};

pub(crate) mod args;

/// Which part of the history a listing covers.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// `main` or the session's agent (the main chain), or `subagent` (sidechains).
    pub agent_name: Option<String>,
    /// Every entry of the session instead of only the active branch.
    pub all_branches: bool,
}

#[derive(Clone, Debug, Default)]
pub struct WindowsQuery {
    pub scope: Scope,
    pub recent_first: bool,
    pub limit: Option<usize>,
}

#[derive(Clone, Debug, Default)]
pub struct ItemsQuery {
    pub scope: Scope,
    pub window_id: Option<String>,
    pub role: Option<String>,
    pub tool_name: Option<String>,
    pub recent_first: bool,
    pub limit: Option<usize>,
    pub max_chars_per_item: Option<usize>,
    /// Skip this many matching items first (a page's `next_offset`).
    pub offset: Option<usize>,
}

#[derive(Clone, Debug, Default)]
pub struct ReadQuery {
    /// The item's window, checked when given: the item id alone finds the item (ids are
    /// unique in a session), so the model need not carry the window along.
    pub window_id: Option<String>,
    pub item_id: String,
    pub offset_chars: Option<usize>,
    pub limit_chars: Option<usize>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Case-sensitive substring (the seed's behaviour).
    #[default]
    Literal,
    /// Full-text (FTS5, bm25), best first; words, any case.
    Ranked,
}

#[derive(Clone, Debug, Default)]
pub struct SearchQuery {
    pub query: String,
    pub mode: SearchMode,
    /// The same filters as a listing (`max_chars_per_item` is not used).
    pub filters: ItemsQuery,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WindowInfo {
    pub window_id: String,
    /// 1-based position among the windows listed in append order.
    pub number: usize,
    /// `root` or `window_marker`.
    pub opened_by: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    pub items: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WindowsPage {
    pub windows: Vec<WindowInfo>,
    /// Windows in the scope (before `limit`).
    pub total: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ItemInfo {
    pub item_id: String,
    pub window_id: String,
    /// The raw entry's id (what `recall` takes).
    pub entry_id: String,
    pub kind: String,
    pub role: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    pub chars: usize,
    pub text: String,
    /// `text` is a preview: read the item for the rest.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ItemsPage {
    pub items: Vec<ItemInfo>,
    /// More items match than `limit`.
    pub more: bool,
    /// Where the next page starts (pass it as the offset), when there is more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReadItem {
    pub item_id: String,
    pub window_id: String,
    pub entry_id: String,
    pub kind: String,
    pub role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    pub offset_chars: usize,
    pub total_chars: usize,
    pub text: String,
    /// Where to continue reading; `null` at the end.
    pub next_offset: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchHit {
    pub item_id: String,
    pub window_id: String,
    pub entry_id: String,
    pub kind: String,
    pub role: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    pub excerpt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchPage {
    pub query: String,
    pub mode: SearchMode,
    pub hits: Vec<SearchHit>,
    pub more: bool,
}

/// A session the caller owns.
struct Owned {
    id: SessionId,
    meta: SessionMeta,
}

/// Window keys by the seq of their opening entry.
struct Windows {
    by_seq: HashMap<i64, u64>,
}

impl Windows {
    fn id(&self, window_seq: i64) -> String {
        self.by_seq
            .get(&window_seq)
            .map_or_else(|| "w_unknown".to_owned(), |&k| h::window_id(k))
    }

    fn seq_of(&self, window_id: &str) -> Result<i64, EngineError> {
        let key = h::parse_window_id(window_id).map_err(EngineError::Invalid)?;
        self.by_seq
            .iter()
            .find(|(_, &k)| k == key)
            .map(|(&s, _)| s)
            .ok_or_else(|| {
                EngineError::invalid(format!(
                    "no window {window_id} in this session: list them with history_list_windows"
                ))
            })
    }
}

fn limit(limit: Option<usize>) -> Result<usize, EngineError> {
    match limit {
        None => Ok(h::DEFAULT_LIMIT),
        Some(0) => Err(EngineError::invalid("limit must be at least 1")),
        Some(n) if n > h::MAX_LIMIT => Err(EngineError::invalid(format!(
            "limit {n} is over the maximum of {}",
            h::MAX_LIMIT
        ))),
        Some(n) => Ok(n),
    }
}

fn bounded(
    value: Option<usize>,
    default: usize,
    max: usize,
    what: &str,
) -> Result<usize, EngineError> {
    match value {
        None => Ok(default),
        Some(0) => Err(EngineError::invalid(format!("{what} must be at least 1"))),
        Some(n) if n > max => Err(EngineError::invalid(format!(
            "{what} {n} is over the maximum of {max}"
        ))),
        Some(n) => Ok(n),
    }
}

fn item_text(entry: &Entry) -> String {
    item_facts(&entry.kind, &|_| None)
        .map(|f| f.text)
        .unwrap_or_default()
}

impl<S: Store + ?Sized> Engine<S> {
    /// The caller's session, checked against its tenant, with its history index up to date.
    fn history_session(&self, caller: &Caller) -> Result<Owned, EngineError> {
        let id: SessionId = caller.session.ok_or(EngineError::NoSession("history"))?;
        let meta = self
            .store
            .history_owned(&caller.tenant, id)?
            .ok_or_else(|| EngineError::invalid(format!("no session {id} for this caller")))?;
        self.store.history_sync(id)?;
        Ok(Owned { id, meta })
    }

    fn branch(
        &self,
        session: SessionId,
        scope: &Scope,
    ) -> Result<Option<BranchLanes>, EngineError> {
        if scope.all_branches {
            Ok(None)
        } else {
            Ok(Some(self.store.history_branch(session)?))
        }
    }

    fn windows_of(&self, session: SessionId) -> Result<Windows, EngineError> {
        let by_seq = self
            .store
            .history_window_starts(session)?
            .into_iter()
            .map(|(seq, id)| (seq, h::window_key(session, &id)))
            .collect();
        Ok(Windows { by_seq })
    }

    fn filter(
        &self,
        record: &Owned,
        windows: &Windows,
        q: &ItemsQuery,
    ) -> Result<ItemFilter, EngineError> {
        let sidechain = match &q.scope.agent_name {
            None => None,
            Some(name) => Some(
                agent_scope(name, record.meta.agent.map(|a| a.as_str()))
                    .map_err(EngineError::Invalid)?,
            ),
        };
        if let Some(role) = &q.role {
            check_role(role).map_err(EngineError::Invalid)?;
        }
        Ok(ItemFilter {
            window_seq: q
                .window_id
                .as_deref()
                .map(|w| windows.seq_of(w))
                .transpose()?,
            role: q.role.clone(),
            tool: q.tool_name.clone(),
            sidechain,
        })
    }

    /// The windows of the caller's session.
    pub fn history_list_windows(
        &self,
        caller: &Caller,
        q: &WindowsQuery,
    ) -> Result<WindowsPage, EngineError> {
        let record = self.history_session(caller)?;
        if let Some(name) = &q.scope.agent_name {
            agent_scope(name, record.meta.agent.map(|a| a.as_str()))
                .map_err(EngineError::Invalid)?;
        }
        let limit = limit(q.limit)?;
        let branch = self.branch(record.id, &q.scope)?;
        let rows = self.store.history_windows(record.id, branch.as_ref())?;
        let total = rows.len();
        let mut windows: Vec<WindowInfo> = rows
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                let (opened_by, reason) = match &w.start.kind {
                    EntryKind::WindowMarker { reason, .. } => {
                        ("window_marker", Some(reason.clone()))
                    }
                    _ => ("root", None),
                };
                WindowInfo {
                    window_id: h::window_id(h::window_key(record.id, w.start.id.as_str())),
                    number: i + 1,
                    opened_by,
                    reason,
                    started_at: w.start.timestamp.clone(),
                    items: w.items,
                }
            })
            .collect();
        if q.recent_first {
            windows.reverse();
        }
        windows.truncate(limit);
        Ok(WindowsPage { windows, total })
    }

    /// Items of the caller's session, filtered.
    pub fn history_list_items(
        &self,
        caller: &Caller,
        q: &ItemsQuery,
    ) -> Result<ItemsPage, EngineError> {
        let record = self.history_session(caller)?;
        let windows = self.windows_of(record.id)?;
        let filter = self.filter(&record, &windows, q)?;
        let limit = limit(q.limit)?;
        let max_chars = bounded(
            q.max_chars_per_item,
            h::DEFAULT_ITEM_CHARS,
            h::MAX_ITEM_CHARS,
            "max_chars_per_item",
        )?;
        let branch = self.branch(record.id, &q.scope)?;
        let mut rows = Vec::new();
        let offset = q.offset.unwrap_or(0);
        let mut skipped = 0usize;
        self.store.history_items(
            record.id,
            &filter,
            branch.as_ref(),
            q.recent_first,
            &mut |row| {
                if skipped < offset {
                    skipped += 1;
                    return true;
                }
                rows.push(row);
                rows.len() <= limit
            },
        )?;
        let more = rows.len() > limit;
        let next_offset = more.then_some(offset + limit);
        rows.truncate(limit);
        let items = rows
            .into_iter()
            .map(|row| {
                let text = item_text(&row.entry);
                let (shown, truncated) = preview(&text, max_chars);
                ItemInfo {
                    item_id: h::item_id(row.item_key),
                    window_id: windows.id(row.window_seq),
                    entry_id: row.entry.id.0.clone(),
                    kind: row.kind,
                    role: row.role,
                    tools: row.tools,
                    timestamp: row.entry.timestamp,
                    chars: text.chars().count(),
                    text: shown.to_owned(),
                    truncated,
                }
            })
            .collect();
        Ok(ItemsPage {
            items,
            more,
            next_offset,
        })
    }

    /// One item's text, from `offset_chars`, at most `limit_chars` characters.
    pub fn history_read_item(
        &self,
        caller: &Caller,
        q: &ReadQuery,
    ) -> Result<ReadItem, EngineError> {
        let record = self.history_session(caller)?;
        let key = h::parse_item_id(&q.item_id).map_err(EngineError::Invalid)?;
        let windows = self.windows_of(record.id)?;
        let window_seq = q
            .window_id
            .as_deref()
            .map(|w| windows.seq_of(w))
            .transpose()?;
        let limit_chars = bounded(
            q.limit_chars,
            h::DEFAULT_READ_CHARS,
            h::MAX_READ_CHARS,
            "limit_chars",
        )?;
        let rows = self.store.history_item(record.id, key)?;
        let Some(first) = rows.first() else {
            return Err(EngineError::invalid(format!(
                "no item {} in this session: list items with history_list_items",
                q.item_id
            )));
        };
        let found = windows.id(first.window_seq);
        // Item ids are hashes of entry ids, so two entries may share one: the window, when
        // given, tells them apart (and a window that holds none of them is the caller's slip).
        let row: HistoryRow = match (&q.window_id, window_seq) {
            (Some(window), Some(seq)) => rows
                .into_iter()
                .find(|r| r.window_seq == seq)
                .ok_or_else(|| {
                    EngineError::invalid(format!(
                        "item {} is not in window {window}; it is in {found}",
                        q.item_id
                    ))
                })?,
            _ if rows.len() == 1 => rows
                .into_iter()
                .next()
                .ok_or_else(|| EngineError::invalid("no item"))?,
            _ => {
                return Err(EngineError::invalid(format!(
                    "item {} is ambiguous: pass its window_id too",
                    q.item_id
                )))
            }
        };
        let text = item_text(&row.entry);
        let offset = q.offset_chars.unwrap_or(0);
        let slice = slice_chars(&text, offset, limit_chars);
        if offset > slice.total_chars {
            return Err(EngineError::invalid(format!(
                "offset_chars {offset} is past the end of the item ({} characters)",
                slice.total_chars
            )));
        }
        Ok(ReadItem {
            item_id: q.item_id.clone(),
            window_id: windows.id(row.window_seq),
            entry_id: row.entry.id.0.clone(),
            kind: row.kind,
            role: row.role,
            timestamp: row.entry.timestamp.clone(),
            offset_chars: offset,
            total_chars: slice.total_chars,
            text: slice.text.to_owned(),
            next_offset: slice.next_offset,
        })
    }

    /// Search items' contents: literal (case-sensitive) or ranked full-text.
    pub fn history_search_contents(
        &self,
        caller: &Caller,
        q: &SearchQuery,
    ) -> Result<SearchPage, EngineError> {
        check_query(&q.query).map_err(EngineError::Invalid)?;
        let fts = match q.mode {
            SearchMode::Ranked => Some(RankedQuery::parse(&q.query).map_err(EngineError::Invalid)?),
            SearchMode::Literal => None,
        };
        let record = self.history_session(caller)?;
        let windows = self.windows_of(record.id)?;
        let filter = self.filter(&record, &windows, &q.filters)?;
        let limit = limit(q.filters.limit)?;
        let branch = self.branch(record.id, &q.filters.scope)?;
        let mut rows = Vec::new();
        let mut visit = |row: HistoryRow| {
            rows.push(row);
            rows.len() <= limit
        };
        match &fts {
            Some(expr) => self.store.history_search_ranked(
                record.id,
                expr,
                &filter,
                branch.as_ref(),
                &mut visit,
            )?,
            None => self.store.history_search_literal(
                record.id,
                &q.query,
                &filter,
                branch.as_ref(),
                q.filters.recent_first,
                &mut visit,
            )?,
        }
        let more = rows.len() > limit;
        rows.truncate(limit);
        // Built once per search, not per hit.
        let ranked = (q.mode == SearchMode::Ranked).then(|| RankedExcerpts::new(&q.query));
        let hits = rows
            .into_iter()
            .map(|row| {
                let text = item_text(&row.entry);
                let excerpt = match &ranked {
                    Some(ranked) => ranked.excerpt(&text),
                    None => {
                        let at = h::find_literal(&text, &q.query).unwrap_or(0);
                        h::excerpt(&text, at, q.query.len())
                    }
                };
                SearchHit {
                    item_id: h::item_id(row.item_key),
                    window_id: windows.id(row.window_seq),
                    entry_id: row.entry.id.0.clone(),
                    kind: row.kind,
                    role: row.role,
                    timestamp: row.entry.timestamp,
                    excerpt,
                    score: row.score,
                }
            })
            .collect();
        Ok(SearchPage {
            query: q.query.clone(),
            mode: q.mode,
            hits,
            more,
        })
    }
}

// ---- The tools ----

const LIST_WINDOWS: &str = "history_list_windows";
const LIST_ITEMS: &str = "history_list_items";
const READ_ITEM: &str = "history_read_item";
const SEARCH_CONTENTS: &str = "history_search_contents";

/// The tools of this module.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: LIST_WINDOWS,
            description: "List the context windows of this session (the conversation before each reset). Returns window ids for the other history tools.",
            parameters: parameters::<args::ListWindows>(),
        },
        ToolSpec {
            name: LIST_ITEMS,
            description: "List items (messages, summaries, boots) of this session's full history, including what is no longer in context, with text previews. Filter by window, role, tool name or agent.",
            parameters: parameters::<args::ListItems>(),
        },
        ToolSpec {
            name: READ_ITEM,
            description: "Read one history item's full text in pages: pass offset_chars = the returned next_offset to continue. The item id alone finds the item.",
            parameters: parameters::<args::ReadItem>(),
        },
        ToolSpec {
            name: SEARCH_CONTENTS,
            description: "Search this session's full history. Literal, case-sensitive by default; mode \"ranked\" for full-text relevance. Same filters as history_list_items.",
            parameters: parameters::<args::SearchContents>(),
        },
    ]
}

fn to_output<T: Serialize>(value: &T) -> Result<ToolOutput, EngineError> {
    serde_json::to_string_pretty(value)
        .map(ToolOutput::ok)
        .map_err(|e| EngineError::invalid(e.to_string()))
}

/// Run `name` if it is one of this module's tools.
pub(crate) fn call<S: ctxd_store::Store + ?Sized>(
    engine: &Engine<S>,
    caller: &Caller,
    name: &str,
    args: &Value,
) -> Option<Result<ToolOutput, EngineError>> {
    Some(match name {
        LIST_WINDOWS => parse::<args::ListWindows>(name, args)
            .and_then(|a| engine.history_list_windows(caller, &a.into()))
            .and_then(|page| to_output(&page)),
        LIST_ITEMS => parse::<args::ListItems>(name, args)
            .and_then(|a| engine.history_list_items(caller, &a.into()))
            .and_then(|page| to_output(&page)),
        READ_ITEM => parse::<args::ReadItem>(name, args)
            .and_then(|a| engine.history_read_item(caller, &a.into()))
            .and_then(|item| to_output(&item)),
        SEARCH_CONTENTS => parse::<args::SearchContents>(name, args)
            .and_then(|a| engine.history_search_contents(caller, &a.into()))
            .and_then(|page| to_output(&page)),
        _ => return None,
    })
}
