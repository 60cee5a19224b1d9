//! The history index on PostgreSQL: `sqlite/history.rs`'s queries over the same derived rows.
//! Literal search is `LIKE` through a trigram index (`pg_trgm`), rechecked with the core's
//! `find_literal`; ranked search is in `history/ranked.rs`.

pub(crate) mod index;
mod ranked;

use postgres::types::ToSql;
use postgres::{Client, Row};

use ctxd_core::history::{BranchLanes, ItemFilter, RankedQuery};
use ctxd_core::model::SessionMeta;

use super::prepared::Prepared;
use super::sessions::{entry_row, lock_session};
use super::{pg, PgStore};
use crate::contract::entry::{decode_kind, decode_meta};
use crate::contract::history::{split_tools, walk_branch, ItemCols, WindowTally};
use crate::{HistoryRow, HistoryStore, SessionId, StoreError, Visit, WindowRow};

/// An item's `history_items` columns, then its entry's `id, parent, ts, sidechain, body`.
const ROW_COLUMNS: &str = "h.seq, h.lane, h.window_seq, h.item_key, h.kind, h.role, h.tools, \
     h.sidechain, e.id, e.parent, e.ts, e.sidechain, e.body";

/// The 8 `history_items` columns from `at`.
fn item_cols(r: &Row, at: usize) -> ItemCols {
    ItemCols {
        seq: r.get(at),
        lane: r.get(at + 1),
        window_seq: r.get(at + 2),
        item_key: r.get::<_, Option<i64>>(at + 3).unwrap_or_default(),
        kind: r.get::<_, Option<String>>(at + 4).unwrap_or_default(),
        role: r.get::<_, Option<String>>(at + 5).unwrap_or_default(),
        tools: split_tools(r.get(at + 6)),
        sidechain: r.get(at + 7),
    }
}

/// A [`HistoryRow`] from a row selecting [`ROW_COLUMNS`], when the filter (and the literal
/// recheck) keep it.
fn kept(
    r: &Row,
    filter: &ItemFilter,
    branch: Option<&BranchLanes>,
    literal: Option<&str>,
) -> Result<Option<HistoryRow>, StoreError> {
    item_cols(r, 0).kept(filter, branch, literal, |_| entry_row(r, 8))
}

/// Rows fetched from the server at a time while streaming: a visitor that wants the last 20
/// items of a long session does not make the server send them all.
const FETCH: i32 = 128;

/// Stream the rows of `sql` through the filter to `sink` until it says stop, a page at a time
/// (a portal in a read-only transaction).
fn stream_rows(
    c: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    filter: &ItemFilter,
    branch: Option<&BranchLanes>,
    literal: Option<&str>,
    sink: &mut dyn FnMut(HistoryRow) -> bool,
) -> Result<(), StoreError> {
    let mut tx = c.build_transaction().read_only(true).start().map_err(pg)?;
    let portal = tx.bind(sql, params).map_err(pg)?;
    loop {
        let rows = tx.query_portal(&portal, FETCH).map_err(pg)?;
        if !feed(&rows, filter, branch, literal, sink)? || rows.len() < FETCH as usize {
            return Ok(());
        }
    }
}

/// Give `sink` the rows the filter (and the literal recheck) keep; `false` once it said stop.
fn feed(
    rows: &[Row],
    filter: &ItemFilter,
    branch: Option<&BranchLanes>,
    literal: Option<&str>,
    sink: &mut dyn FnMut(HistoryRow) -> bool,
) -> Result<bool, StoreError> {
    for r in rows {
        if let Some(row) = kept(r, filter, branch, literal)? {
            if !sink(row) {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Rows a literal search asks for at a time: keyset pages, each continuing after the last row
/// of the one before. The limit is what lets the planner pick a plan that stops early. Asked
/// for every match, it read every candidate the trigram index gave before the first row:
/// a phrase of common words with a rarer one (`status failed`, 1 % of a million items) had
/// each of its 10,000 candidates' rows read, rechecked and sorted, for a page of 50 (200-330
/// ms); with the limit the session is walked in order and the walk stops at the page (5-10
/// ms). Rare phrases still go through the index (one page, the same cost as before).
const LITERAL_PAGE: usize = 128;

/// `LIKE`'s pattern for text containing `query` (`\` is `LIKE`'s escape character).
fn like_pattern(query: &str) -> String {
    let escaped = query
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{escaped}%")
}

impl HistoryStore for PgStore {
    fn history_owned(
        &self,
        tenant: &str,
        session: SessionId,
    ) -> Result<Option<SessionMeta>, StoreError> {
        let tenant = tenant.to_owned();
        self.pool.run(move |c| {
            let row = c.query_opt_cached(
                "SELECT meta FROM sessions WHERE id = $1 AND tenant = $2",
                &[&session, &tenant],
            )?;
            row.map(|r| decode_meta(session, r.get(0))).transpose()
        })
    }

    fn history_sync(&self, session: SessionId) -> Result<u64, StoreError> {
        self.pool
            .run(move |c| sync_index(c, session, u64::MAX).map(|(n, _)| n))
    }

    fn history_branch(&self, session: SessionId) -> Result<BranchLanes, StoreError> {
        self.pool.run(move |c| branch(c, session))
    }

    fn history_window_starts(&self, session: SessionId) -> Result<Vec<(i64, String)>, StoreError> {
        self.pool.run(move |c| {
            let rows = c.query_cached(
                "SELECT h.seq, e.id FROM history_items h \
                     JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
                     WHERE h.session_id = $1 AND h.window_seq = h.seq ORDER BY h.seq",
                &[&session],
            )?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn history_windows(
        &self,
        session: SessionId,
        branch: Option<&BranchLanes>,
    ) -> Result<Vec<WindowRow>, StoreError> {
        let lanes = branch.map(BranchLanes::lanes);
        self.pool.run(move |c| windows(c, session, lanes))
    }

    fn history_items(
        &self,
        session: SessionId,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        recent_first: bool,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let (filter, branch) = (filter.clone(), branch.cloned());
        let order = if recent_first { "DESC" } else { "ASC" };
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM history_items h \
             JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
             WHERE h.session_id = $1 AND h.item_key IS NOT NULL \
             AND ($2::BIGINT IS NULL OR h.window_seq = $2) ORDER BY h.seq {order}"
        );
        self.pool.stream(
            move |c, sink| {
                let window = filter.window_seq;
                let params: [&(dyn ToSql + Sync); 2] = [&session, &window];
                stream_rows(c, &sql, &params, &filter, branch.as_ref(), None, sink)
            },
            visit,
        )
    }

    fn history_item(&self, session: SessionId, key: u64) -> Result<Vec<HistoryRow>, StoreError> {
        self.pool.run(move |c| {
            let sql = format!(
                "SELECT {ROW_COLUMNS} FROM history_items h \
                 JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
                 WHERE h.session_id = $1 AND h.item_key = $2 ORDER BY h.seq"
            );
            let mut out = Vec::new();
            let key = key as i64;
            let params: [&(dyn ToSql + Sync); 2] = [&session, &key];
            let all = ItemFilter::default();
            stream_rows(c, &sql, &params, &all, None, None, &mut |r| {
                out.push(r);
                true
            })?;
            Ok(out)
        })
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
        let (filter, branch, query) = (filter.clone(), branch.cloned(), query.to_owned());
        // `$3`: the last row read (none yet: beyond either end).
        let (order, after, start) = if recent_first {
            ("DESC", "h.seq < $3", i64::MAX)
        } else {
            ("ASC", "h.seq > $3", i64::MIN)
        };
        let sql = format!(
            "SELECT {ROW_COLUMNS} FROM history_items h \
             JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
             WHERE h.session_id = $1 AND h.item_key IS NOT NULL AND h.text LIKE $2 \
               AND {after} ORDER BY h.seq {order} LIMIT {LITERAL_PAGE}"
        );
        self.pool.stream(
            move |c, sink| {
                let pattern = like_pattern(&query);
                let mut tx = c.build_transaction().read_only(true).start().map_err(pg)?;
                let mut last = start;
                loop {
                    // Planned with its values each time (not kept): the plan depends on them.
                    let rows = tx
                        .query(sql.as_str(), &[&session, &pattern, &last])
                        .map_err(pg)?;
                    let Some(end) = rows.last() else {
                        return Ok(());
                    };
                    last = end.get(0);
                    let more = feed(&rows, &filter, branch.as_ref(), Some(&query), sink)?;
                    if !more || rows.len() < LITERAL_PAGE {
                        return Ok(());
                    }
                }
            },
            visit,
        )
    }

    fn history_search_ranked(
        &self,
        session: SessionId,
        query: &RankedQuery,
        filter: &ItemFilter,
        branch: Option<&BranchLanes>,
        visit: Visit<'_>,
    ) -> Result<(), StoreError> {
        let (filter, branch, query) = (filter.clone(), branch.cloned(), query.clone());
        self.pool.stream(
            move |c, sink| {
                ranked::search(
                    c,
                    session,
                    &query,
                    &filter,
                    branch.as_ref(),
                    ranked::BLOCK,
                    sink,
                )
            },
            visit,
        )
    }
}

impl PgStore {
    /// Index at most `limit` of `session`'s entries the derived indexes lack, in one
    /// transaction: (indexed, current now). As SQLite's.
    pub fn index_pending(&self, session: SessionId, limit: u64) -> Result<(u64, bool), StoreError> {
        self.pool.run(move |c| sync_index(c, session, limit))
    }
}

/// Catch up at most `limit` entries of `session`'s derived indexes: (indexed, current now).
/// The session's row lock makes a second gateway doing the same wait, then find less to do.
fn sync_index(c: &mut Client, session: SessionId, limit: u64) -> Result<(u64, bool), StoreError> {
    let behind =
        |c: &mut dyn FnMut(&str) -> Result<i64, StoreError>| -> Result<(i64, i64), StoreError> {
            let last =
                c("SELECT COALESCE(MAX(seq), 0)::BIGINT FROM entries WHERE session_id = $1")?;
            let indexed =
                c("SELECT COALESCE(MAX(seq), 0)::BIGINT FROM history_items WHERE session_id = $1")?;
            Ok((indexed, last))
        };
    let (indexed, last) = behind(&mut |sql| Ok(c.query_one_cached(sql, &[&session])?.get(0)))?;
    if indexed >= last {
        return Ok((0, true));
    }
    let mut tx = c.transaction().map_err(pg)?;
    lock_session(&mut tx, session)?;
    let (indexed, last) = behind(&mut |sql| Ok(tx.query_one_cached(sql, &[&session])?.get(0)))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = tx.query_cached(
        "SELECT seq, id, parent, sidechain, body FROM entries \
             WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        &[&session, &indexed, &limit],
    )?;
    let mut indexer = index::Indexer::new(session);
    let mut upto = indexed;
    for r in &rows {
        let id: String = r.get(1);
        let parent: Option<String> = r.get(2);
        let body: String = r.get(4);
        let kind = decode_kind(&id, &body)?;
        upto = r.get(0);
        indexer.add(&mut tx, upto, &id, parent.as_deref(), r.get(3), &kind)?;
    }
    tx.commit().map_err(pg)?;
    Ok((rows.len() as u64, upto >= last))
}

fn branch(c: &mut Client, session: SessionId) -> Result<BranchLanes, StoreError> {
    let leaf: Option<String> = c
        .query_opt_cached("SELECT leaf FROM sessions WHERE id = $1", &[&session])?
        .ok_or_else(|| StoreError::NoSession(session.to_string()))?
        .get(0);
    let mut leaf_seq: Option<i64> = match leaf {
        Some(id) => c
            .query_opt_cached(
                "SELECT seq FROM entries WHERE session_id = $1 AND id = $2",
                &[&session, &id],
            )?
            .map(|r| r.get(0)),
        None => None,
    };
    if leaf_seq.is_none() {
        leaf_seq = c
            .query_one_cached(
                "SELECT COALESCE((SELECT MAX(seq) FROM entries WHERE session_id = $1 AND NOT sidechain), \
                                 (SELECT MAX(seq) FROM entries WHERE session_id = $1))",
                &[&session],
            )?
            .get(0);
    }
    let lane_of = c
        .statement("SELECT lane, (SELECT parent_seq FROM history_items p WHERE p.session_id = $1 AND p.seq = h.lane) \
                  FROM history_items h WHERE h.session_id = $1 AND h.seq = $2")?;
    walk_branch(leaf_seq, |seq| {
        Ok(c.query_opt(&lane_of, &[&session, &seq])
            .map_err(pg)?
            .map(|r| (r.get(0), r.get(1))))
    })
}

fn windows(
    c: &mut Client,
    session: SessionId,
    lanes: Option<Vec<(i64, i64)>>,
) -> Result<Vec<WindowRow>, StoreError> {
    let mut tally = WindowTally::default();
    let mut add = |rows: Vec<Row>| {
        for r in rows {
            tally.add(r.get(0), r.get(1), r.get(2), r.get(3));
        }
    };
    match lanes {
        Some(lanes) => {
            let stmt = c.statement(
                "SELECT window_seq, COUNT(item_key), MIN(seq), MAX(seq) FROM history_items \
                     WHERE session_id = $1 AND lane = $2 AND seq <= $3 GROUP BY window_seq",
            )?;
            for (lane, last) in lanes {
                add(c.query(&stmt, &[&session, &lane, &last]).map_err(pg)?);
            }
        }
        None => add(c.query_cached(
            "SELECT window_seq, COUNT(item_key), MIN(seq), MAX(seq) FROM history_items \
                 WHERE session_id = $1 GROUP BY window_seq",
            &[&session],
        )?),
    }
    let start = c.statement(
        "SELECT id, parent, ts, sidechain, body FROM entries WHERE session_id = $1 AND seq = $2",
    )?;
    tally.rows(|window_seq| {
        c.query_opt(&start, &[&session, &window_seq])
            .map_err(pg)?
            .map(|r| entry_row(&r, 0))
            .transpose()
    })
}
