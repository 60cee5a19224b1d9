//! The history index: windows, items, lanes, literal (trigram) and ranked (FTS5 bm25) search.
//!
//! Everything here is derived from `entries` and can be rebuilt from them. `append` indexes each
//! batch in its own transaction (`history/index.rs`); [`HistoryStore::history_sync`] catches up
//! a session stored before that (by an older build), once, and is a cheap check otherwise; the
//! engine calls it before every history read. The rules (what an item is,
//! lanes, windows, filters) are the core's ([`ctxd_core::history`]); this module only stores and
//! queries.

pub(super) mod index;
mod ranked;

use rusqlite::{params, OptionalExtension, TransactionBehavior};

use ctxd_core::history::{BranchLanes, ItemFilter, RankedQuery};
use ctxd_core::model::SessionMeta;

use super::SqliteStore;
use crate::contract::entry::{decode_entry, decode_kind, decode_meta};
use crate::contract::history::{split_tools, walk_branch, ItemCols, WindowTally};
use crate::contract::index::Indexer;
use crate::{HistoryRow, HistoryStore, SessionId, StoreError, Visit, WindowRow};

pub(crate) const ROW_COLUMNS: &str =
    "h.seq, h.lane, h.window_seq, h.item_key, h.kind, h.role, h.tools, \
     h.sidechain, e.id, e.parent, e.timestamp, e.body";

/// Read the 8 columns `h.seq, h.lane, h.window_seq, h.item_key, h.kind, h.role, h.tools,
/// h.sidechain` starting at column `at`.
pub(crate) fn item_cols(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<ItemCols> {
    let tools_text: String = r.get(at + 6)?;
    Ok(ItemCols {
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
        let kept = item_cols(r, 0)?.kept(filter, branch, literal, |cols| {
            let body: String = r.get(11)?;
            decode_entry(r.get(8)?, r.get(9)?, r.get(10)?, cols.sidechain, &body)
        })?;
        if kept.is_some_and(|row| !visit(row)) {
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
        meta.map(|m| decode_meta(session, &m)).transpose()
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
        let mut lane_of = conn
            .prepare_cached("SELECT lane FROM history_items WHERE session_id = ?1 AND seq = ?2")?;
        let mut parent_of = conn.prepare_cached(
            "SELECT parent_seq FROM history_items WHERE session_id = ?1 AND seq = ?2",
        )?;
        walk_branch(leaf_seq, |seq| {
            let Some(lane) = lane_of
                .query_row(params![session, seq], |r| r.get::<_, i64>(0))
                .optional()?
            else {
                return Ok(None);
            };
            let parent = parent_of
                .query_row(params![session, lane], |r| r.get::<_, Option<i64>>(0))
                .optional()?
                .flatten();
            Ok(Some((lane, parent)))
        })
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
        let mut tally = WindowTally::default();
        let mut add = |rows: &mut rusqlite::Rows<'_>| -> Result<(), StoreError> {
            while let Some(r) = rows.next()? {
                tally.add(r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
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
        tally.rows(|window_seq| {
            start
                .query_row(params![session, window_seq], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get::<_, String>(4)?,
                    ))
                })
                .optional()?
                .map(|(id, parent, ts, side, body)| decode_entry(id, parent, ts, side, &body))
                .transpose()
        })
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
        let mut indexer = Indexer::new(session);
        let mut index_rows = index::Rows(&tx);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows = entries.query(params![session, indexed, limit])?;
        while let Some(r) = rows.next()? {
            let id: String = r.get(1)?;
            let parent: Option<String> = r.get(2)?;
            let body: String = r.get(4)?;
            let kind = decode_kind(&id, &body)?;
            upto = r.get(0)?;
            let sidechain = r.get(3)?;
            indexer.add(
                &mut index_rows,
                upto,
                &id,
                parent.as_deref(),
                sidechain,
                &kind,
            )?;
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
