//! The history index: windows, items, lanes, literal (trigram) and ranked (FTS5 bm25) search.
//!
//! Everything here is derived from `entries` and can be rebuilt from them. `append` indexes each
//! batch in its own transaction (`history/index.rs`); [`HistoryStore::history_sync`] catches up
//! a session stored before that (by an older build), once, and is a cheap check otherwise; the
//! engine calls it before every history read. The rules (what an item is,
//! lanes, windows, filters) are the core's ([`ctxd_core::history`]); this module only stores and
//! queries.

pub(crate) mod index;
mod ranked;

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use ctxd_core::history::{find_literal, item_facts, BranchLanes, ItemFilter, ItemRow, RankedQuery};
use ctxd_core::model::{Entry, EntryKind, SessionMeta};

use super::sessions::decode_entry;
use super::SqliteStore;
use crate::{SessionId, StoreError};

/// One indexed item with its entry.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryRow {
    pub seq: i64,
    pub lane: i64,
    pub window_seq: i64,
    pub item_key: u64,
    pub kind: String,
    pub role: String,
    pub tools: Vec<String>,
    pub sidechain: bool,
    pub entry: Entry,
    /// Ranked search only: bm25 relevance (higher is better).
    pub score: Option<f64>,
}

/// One window: its opening entry and what it holds (on the branch asked for).
#[derive(Clone, Debug, PartialEq)]
pub struct WindowRow {
    pub window_seq: i64,
    /// The entry that opened the window (a root, or a window marker).
    pub start: Entry,
    pub items: u64,
    pub first_seq: i64,
    pub last_seq: i64,
}

/// How many matches a ranked search ranks together, newest block first. Ranking costs about
/// 5-10 µs a row (bm25 reads each row's length from the index), and a common word matches
/// nearly every item: a block bounds the cost of a page (under 20 ms at a million items).
pub const RANKED_BLOCK: usize = 1_000;

/// A visitor of rows in order; returns `false` to stop.
pub type Visit<'a> = &'a mut dyn FnMut(HistoryRow) -> bool;

/// History queries over the stored log. Every method takes a session the caller already checked
/// belongs to its tenant.
pub trait HistoryStore {
    /// The metadata of `session` when it belongs to `tenant` (a cheap check, without counting
    /// entries as [`crate::Store::session`] does).
    fn history_owned(
        &self,
        tenant: &str,
        session: SessionId,
    ) -> Result<Option<SessionMeta>, StoreError>;

    /// Index the session's entries the derived indexes lack (appended by the gateway, which
    /// leaves indexing to after its commit, or stored by a build that did not index on
    /// append). Every history read calls it first. Returns how many were indexed: 0 once the
    /// indexes are current.
    fn history_sync(&self, session: SessionId) -> Result<u64, StoreError>;

    /// The active branch (from the session's leaf) as lanes.
    fn history_branch(&self, session: SessionId) -> Result<BranchLanes, StoreError>;

    /// Every window opener of the session: (seq, entry id), in order.
    fn history_window_starts(&self, session: SessionId) -> Result<Vec<(i64, String)>, StoreError>;

    /// Windows in order of their opening entry; on `branch` when given.
    fn history_windows(
        &self,
        session: SessionId,
        branch: Option<&BranchLanes>,
    ) -> Result<Vec<WindowRow>, StoreError>;

    /// Items in append order (or the reverse), filtered.
    fn history_items(
        &self,
        session: SessionId,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        recent_first: bool,
        visit: Visit<'_>,
    ) -> Result<(), StoreError>;

    /// The items whose key is `key` (one, or none; more only on a hash collision).
    fn history_item(&self, session: SessionId, key: u64) -> Result<Vec<HistoryRow>, StoreError>;

    /// Items whose text contains `query` (case-sensitive), in order, filtered.
    fn history_search_literal(
        &self,
        session: SessionId,
        query: &str,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        recent_first: bool,
        visit: Visit<'_>,
    ) -> Result<(), StoreError>;

    /// Items holding every word of `query`, filtered, in blocks of [`RANKED_BLOCK`] matches,
    /// newest block first, each best first. SQLite ranks by bm25: words in most of the store's
    /// items carry no weight there and are left out of the ranking (see
    /// `sqlite/history/ranked.rs`); when every word is that common, the newest come first with a
    /// score of 0. PostgreSQL ranks by `ts_rank` (see `postgres/history/ranked.rs`).
    fn history_search_ranked(
        &self,
        session: SessionId,
        query: &RankedQuery,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError>;
}

pub(crate) const ROW_COLUMNS: &str =
    "h.seq, h.lane, h.window_seq, h.item_key, h.kind, h.role, h.tools, \
     h.sidechain, e.id, e.parent, e.timestamp, e.body";

/// The `history_items` columns of an item, without its entry: enough to filter and to rank, so
/// a search reads an entry's body only for the items it returns.
#[derive(Clone, Debug)]
pub(crate) struct ItemCols {
    pub(crate) seq: i64,
    pub(crate) lane: i64,
    pub(crate) window_seq: i64,
    pub(crate) item_key: i64,
    pub(crate) kind: String,
    pub(crate) role: String,
    pub(crate) tools: Vec<String>,
    pub(crate) sidechain: bool,
}

impl ItemCols {
    /// Read the 8 columns `h.seq, h.lane, h.window_seq, h.item_key, h.kind, h.role, h.tools,
    /// h.sidechain` starting at column `at`.
    pub(crate) fn read(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Self> {
        let tools_text: String = r.get(at + 6)?;
        Ok(Self {
            tools: split_tools(&tools_text),
            seq: r.get(at)?,
            lane: r.get(at + 1)?,
            window_seq: r.get(at + 2)?,
            item_key: r.get::<_, Option<i64>>(at + 3)?.unwrap_or_default(),
            kind: r.get::<_, Option<String>>(at + 4)?.unwrap_or_default(),
            role: r.get::<_, Option<String>>(at + 5)?.unwrap_or_default(),
            sidechain: r.get(at + 7)?,
        })
    }

    pub(crate) fn sidechain(&self) -> bool {
        self.sidechain
    }

    pub(crate) fn accepted(&self, filter: &ItemFilter, branch: Option<&BranchLanes>) -> bool {
        filter.accepts(
            &ItemRow {
                lane: self.lane,
                seq: self.seq,
                window_seq: self.window_seq,
                role: &self.role,
                tools: &self.tools,
                sidechain: self.sidechain,
            },
            branch,
        )
    }

    pub(crate) fn with_entry(self, entry: Entry, score: Option<f64>) -> HistoryRow {
        HistoryRow {
            seq: self.seq,
            lane: self.lane,
            window_seq: self.window_seq,
            item_key: self.item_key as u64,
            kind: self.kind,
            role: self.role,
            tools: self.tools,
            sidechain: self.sidechain,
            entry,
            score,
        }
    }
}

/// Tool names stored one per line.
pub(crate) fn split_tools(text: &str) -> Vec<String> {
    text.split('\n')
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Read rows of a query selecting [`ROW_COLUMNS`], apply the filter before decoding the entry,
/// and hand them to `visit` until it says stop.
fn visit_rows(
    rows: &mut rusqlite::Rows<'_>,
    filter: &ItemFilter,
    branch: Option<&BranchLanes>,
    literal: Option<&str>,
    visit: Visit<'_>,
) -> Result<(), StoreError> {
    while let Some(r) = rows.next()? {
        let cols = ItemCols::read(r, 0)?;
        if !cols.accepted(filter, branch) {
            continue;
        }
        let body: String = r.get(11)?;
        let entry = decode_entry(r.get(8)?, r.get(9)?, r.get(10)?, cols.sidechain, &body)?;
        if let Some(q) = literal {
            let text = item_facts(&entry.kind, &|_| None).map(|f| f.text);
            if text.is_none_or(|t| find_literal(&t, q).is_none()) {
                continue;
            }
        }
        if !visit(cols.with_entry(entry, None)) {
            break;
        }
    }
    Ok(())
}

impl HistoryStore for SqliteStore {
    fn history_owned(
        &self,
        tenant: &str,
        session: SessionId,
    ) -> Result<Option<SessionMeta>, StoreError> {
        let conn = self.conn();
        let meta: Option<String> = conn
            .query_row(
                "SELECT meta FROM sessions WHERE id = ?1 AND tenant = ?2",
                params![session, tenant],
                |r| r.get(0),
            )
            .optional()?;
        meta.map(|m| {
            serde_json::from_str(&m).map_err(|e| StoreError::Corrupt {
                id: format!("session {session}"),
                message: e.to_string(),
            })
        })
        .transpose()
    }

    fn history_sync(&self, session: SessionId) -> Result<u64, StoreError> {
        let mut conn = self.conn();
        let (count, _) = sync_index(&mut conn, session, u64::MAX)?;
        Ok(count)
    }

    fn history_branch(&self, session: SessionId) -> Result<BranchLanes, StoreError> {
        let conn = self.conn();
        let leaf: Option<String> = conn
            .query_row(
                "SELECT leaf FROM sessions WHERE id = ?1",
                params![session],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
        let mut leaf_seq: Option<i64> = match leaf {
            Some(id) => conn
                .query_row(
                    "SELECT seq FROM entries WHERE session_id = ?1 AND id = ?2",
                    params![session, id],
                    |r| r.get(0),
                )
                .optional()?,
            None => None,
        };
        if leaf_seq.is_none() {
            leaf_seq = conn.query_row(
                "SELECT COALESCE((SELECT MAX(seq) FROM entries WHERE session_id = ?1 AND sidechain = 0), \
                                 (SELECT MAX(seq) FROM entries WHERE session_id = ?1))",
                params![session],
                |r| r.get(0),
            )?;
        }
        let mut lanes = BranchLanes::default();
        let mut at = leaf_seq;
        let mut lane_of = conn
            .prepare_cached("SELECT lane FROM history_items WHERE session_id = ?1 AND seq = ?2")?;
        let mut parent_of = conn.prepare_cached(
            "SELECT parent_seq FROM history_items WHERE session_id = ?1 AND seq = ?2",
        )?;
        while let Some(seq) = at {
            let Some(lane) = lane_of
                .query_row(params![session, seq], |r| r.get::<_, i64>(0))
                .optional()?
            else {
                break;
            };
            lanes.push(lane, seq);
            // Parents always have smaller seqs, so this walk ends.
            at = parent_of
                .query_row(params![session, lane], |r| r.get::<_, Option<i64>>(0))
                .optional()?
                .flatten()
                .filter(|&p| p < lane);
        }
        Ok(lanes)
    }

    fn history_window_starts(&self, session: SessionId) -> Result<Vec<(i64, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT h.seq, e.id FROM history_items h \
             JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
             WHERE h.session_id = ?1 AND h.window_seq = h.seq ORDER BY h.seq",
        )?;
        let rows = stmt
            .query_map(params![session], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn history_windows(
        &self,
        session: SessionId,
        branch: Option<&BranchLanes>,
    ) -> Result<Vec<WindowRow>, StoreError> {
        let conn = self.conn();
        let mut acc: std::collections::BTreeMap<i64, (u64, i64, i64)> = Default::default();
        let mut add = |rows: &mut rusqlite::Rows<'_>| -> Result<(), StoreError> {
            while let Some(r) = rows.next()? {
                let w: i64 = r.get(0)?;
                let n: i64 = r.get(1)?;
                let (lo, hi): (i64, i64) = (r.get(2)?, r.get(3)?);
                let slot = acc.entry(w).or_insert((0, lo, hi));
                slot.0 += n as u64;
                slot.1 = slot.1.min(lo);
                slot.2 = slot.2.max(hi);
            }
            Ok(())
        };
        match branch {
            Some(b) => {
                let mut stmt = conn.prepare_cached(
                    "SELECT window_seq, SUM(item_key IS NOT NULL), MIN(seq), MAX(seq) FROM history_items \
                     WHERE session_id = ?1 AND lane = ?2 AND seq <= ?3 GROUP BY window_seq",
                )?;
                for (lane, last) in b.lanes() {
                    add(&mut stmt.query(params![session, lane, last])?)?;
                }
            }
            None => {
                let mut stmt = conn.prepare_cached(
                    "SELECT window_seq, SUM(item_key IS NOT NULL), MIN(seq), MAX(seq) FROM history_items \
                     WHERE session_id = ?1 GROUP BY window_seq",
                )?;
                add(&mut stmt.query(params![session])?)?;
            }
        }
        let mut start = conn.prepare_cached(
            "SELECT id, parent, timestamp, sidechain, body FROM entries WHERE session_id = ?1 AND seq = ?2",
        )?;
        let mut out = Vec::with_capacity(acc.len());
        for (window_seq, (items, first_seq, last_seq)) in acc {
            let entry = start
                .query_row(params![session, window_seq], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get::<_, String>(4)?,
                    ))
                })
                .optional()?;
            let Some((id, parent, ts, side, body)) = entry else {
                continue;
            };
            out.push(WindowRow {
                window_seq,
                start: decode_entry(id, parent, ts, side, &body)?,
                items,
                first_seq,
                last_seq,
            });
        }
        Ok(out)
    }

    fn history_items(
        &self,
        session: SessionId,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        recent_first: bool,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let conn = self.conn();
        let order = if recent_first { "DESC" } else { "ASC" };
        let window = if filter.window_seq.is_some() {
            "AND h.window_seq = ?2"
        } else {
            "AND ?2 IS NULL"
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM history_items h \
             JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
             WHERE h.session_id = ?1 AND h.item_key IS NOT NULL {window} ORDER BY h.seq {order}"
        ))?;
        let mut rows = stmt.query(params![session, filter.window_seq])?;
        visit_rows(&mut rows, filter, branch, None, visit)
    }

    fn history_item(&self, session: SessionId, key: u64) -> Result<Vec<HistoryRow>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM history_items h \
             JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
             WHERE h.session_id = ?1 AND h.item_key = ?2 ORDER BY h.seq"
        ))?;
        let mut rows = stmt.query(params![session, key as i64])?;
        let mut out = Vec::new();
        visit_rows(&mut rows, &ItemFilter::default(), None, None, &mut |r| {
            out.push(r);
            true
        })?;
        Ok(out)
    }

    fn history_search_literal(
        &self,
        session: SessionId,
        query: &str,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        recent_first: bool,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let Some(phrase) = trigram_phrase(query) else {
            // Shorter than a trigram: scan the items, checking each.
            let conn = self.conn();
            let order = if recent_first { "DESC" } else { "ASC" };
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {ROW_COLUMNS} FROM history_items h \
                 JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
                 WHERE h.session_id = ?1 AND h.item_key IS NOT NULL ORDER BY h.seq {order}"
            ))?;
            let mut rows = stmt.query(params![session])?;
            return visit_rows(&mut rows, filter, branch, Some(query), visit);
        };
        let conn = self.conn();
        let order = if recent_first { "DESC" } else { "ASC" };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {ROW_COLUMNS} FROM history_trigram f \
             JOIN history_items h ON h.rowid = f.rowid \
             JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
             WHERE history_trigram MATCH ?2 AND h.session_id = ?1 ORDER BY f.rowid {order}"
        ))?;
        let mut rows = stmt.query(params![session, phrase])?;
        visit_rows(&mut rows, filter, branch, Some(query), visit)
    }

    fn history_search_ranked(
        &self,
        session: SessionId,
        query: &RankedQuery,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let fts_query = ranked::fts5_expression(query);
        ranked::search(&self.conn(), session, &fts_query, filter, branch, visit)
    }
}

/// The FTS5 expression of a literal query for a case-sensitive trigram index: one quoted phrase
/// (every occurrence of the query is an occurrence of its consecutive trigrams). `None` when the
/// query is shorter than a trigram: the caller scans instead.
fn trigram_phrase(query: &str) -> Option<String> {
    if query.chars().count() < 3 {
        return None;
    }
    Some(format!("\"{}\"", query.replace('"', "\"\"")))
}

impl SqliteStore {
    /// Index at most `limit` of `session`'s entries the derived indexes lack, in one
    /// transaction. Returns how many were indexed, and whether the session is now current.
    /// The gateway's writer calls it between commits (its appends are `Indexing::Deferred`),
    /// in steps small enough not to hold the store for long.
    pub fn index_pending(&self, session: SessionId, limit: u64) -> Result<(u64, bool), StoreError> {
        let mut conn = self.conn();
        sync_index(&mut conn, session, limit)
    }
}

/// Catch up at most `limit` entries of `session`'s derived indexes: (indexed, current now).
fn sync_index(
    conn: &mut rusqlite::Connection,
    session: SessionId,
    limit: u64,
) -> Result<(u64, bool), StoreError> {
    let behind = |c: &rusqlite::Connection| -> rusqlite::Result<(i64, i64)> {
        let last: i64 = c.query_row(
            "SELECT COALESCE(MAX(seq), 0) FROM entries WHERE session_id = ?1",
            params![session],
            |r| r.get(0),
        )?;
        Ok((index::indexed_upto(c, session)?, last))
    };
    let (indexed, last) = behind(conn)?;
    if indexed >= last {
        return Ok((0, true));
    }
    // IMMEDIATE: a second process syncing the same session waits, then finds nothing to do.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (indexed, last) = behind(&tx)?;
    let mut count = 0u64;
    let mut upto = indexed;
    {
        let mut entries = tx.prepare_cached(
            "SELECT seq, id, parent, sidechain, body FROM entries \
             WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        )?;
        let mut indexer = index::Indexer::new(&tx, session);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows = entries.query(params![session, indexed, limit])?;
        while let Some(r) = rows.next()? {
            let id: String = r.get(1)?;
            let parent: Option<String> = r.get(2)?;
            let body: String = r.get(4)?;
            let kind: EntryKind = serde_json::from_str(&body).map_err(|e| StoreError::Corrupt {
                id: id.clone(),
                message: e.to_string(),
            })?;
            upto = r.get(0)?;
            indexer.add(upto, &id, parent.as_deref(), r.get(3)?, &kind)?;
            count += 1;
        }
    }
    tx.commit()?;
    Ok((count, upto >= last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_queries_become_one_trigram_phrase() {
        assert_eq!(trigram_phrase("ab"), None);
        assert_eq!(
            trigram_phrase("say \"hi\"").as_deref(),
            Some("\"say \"\"hi\"\"\"")
        );
    }
}
