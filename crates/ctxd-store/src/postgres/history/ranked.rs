//! Ranked history search on PostgreSQL: the words' `tsquery` against `entry_text.words` (a GIN
//! index), matches taken newest first in blocks of [`RANKED_BLOCK`], each block scored by
//! `ts_rank` (with length normalisation) and walked best first; among equal scores the newest.
//!
//! Unlike FTS5's bm25, `ts_rank` has no inverse document frequency: a word found in most items
//! weighs as much as a rare one, so there is no common-word sampling here, and scores are on
//! another scale than SQLite's (both higher-is-better).

use std::collections::HashMap;

use postgres::Client;

use ctxd_core::history::{BranchLanes, ItemFilter, RankedQuery};

use super::index::{lexeme, quoted};
use super::{item_cols, pg};
use crate::postgres::prepared::Prepared;
use crate::postgres::sessions::entry_row;
use crate::{HistoryRow, SessionId, StoreError, RANKED_BLOCK};

pub(super) const BLOCK: usize = RANKED_BLOCK;

/// The `tsquery` text requiring every word; `None` when a word cannot be a lexeme (too long to be
/// indexed, so nothing matches).
fn tsquery(query: &RankedQuery) -> Option<String> {
    let words: Option<Vec<String>> = query
        .words()
        .iter()
        .map(|w| lexeme(w).map(|l| quoted(&l)))
        .collect();
    Some(words?.join(" & "))
}

pub(super) fn search(
    c: &mut Client,
    session: SessionId,
    query: &RankedQuery,
    filter: &ItemFilter,
    branch: Option<&BranchLanes>,
    block_size: usize,
    sink: &mut dyn FnMut(HistoryRow) -> bool,
) -> Result<(), StoreError> {
    let Some(tsq) = tsquery(query) else {
        return Ok(());
    };
    // Prepared for this search only: the server may give a statement kept across searches a
    // generic plan, blind to how rare the words are (the best plan for a word in every row
    // walks the session newest first; for a word in one row it asks the word index).
    let matches = c
        .prepare(
            "SELECT t.seq, ts_rank(t.words, q, 1)::FLOAT8 \
             FROM entry_text t, CAST($2::TEXT AS TSQUERY) q \
             WHERE t.session_id = $1 AND t.words @@ q AND t.seq < $3 \
             ORDER BY t.seq DESC LIMIT $4",
        )
        .map_err(pg)?;
    let items = c.statement(
        "SELECT h.seq, h.lane, h.window_seq, h.item_key, h.kind, h.role, h.tools, h.sidechain \
             FROM history_items h WHERE h.session_id = $1 AND h.seq = ANY($2) \
             AND h.item_key IS NOT NULL",
    )?;
    let entry = c.statement(
        "SELECT id, parent, ts, sidechain, body FROM entries WHERE session_id = $1 AND seq = $2",
    )?;
    let size = i64::try_from(block_size).unwrap_or(i64::MAX);
    let mut before = i64::MAX;
    loop {
        let rows = c
            .query(&matches, &[&session, &tsq, &before, &size])
            .map_err(pg)?;
        let mut block: Vec<(i64, f64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let Some(&(oldest, _)) = block.last() else {
            return Ok(());
        };
        before = oldest;
        let full = block.len() >= block_size;
        // Best first; among equal scores, the newest.
        block.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        let seqs: Vec<i64> = block.iter().map(|b| b.0).collect();
        let mut cols: HashMap<i64, _> = c
            .query(&items, &[&session, &seqs])
            .map_err(pg)?
            .iter()
            .map(|r| {
                let cols = item_cols(r, 0);
                (cols.seq, cols)
            })
            .collect();
        for (seq, score) in block {
            let Some(cols) = cols.remove(&seq) else {
                continue;
            };
            if !cols.accepted(filter, branch) {
                continue;
            }
            let Some(r) = c.query_opt(&entry, &[&session, &seq]).map_err(pg)? else {
                continue;
            };
            if !sink(cols.with_entry(entry_row(&r, 0)?, Some(score))) {
                return Ok(());
            }
        }
        if !full {
            return Ok(());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn queries_require_every_lower_cased_word() {
        let q = RankedQuery::parse("Disk-FULL error").unwrap();
        assert_eq!(tsquery(&q).as_deref(), Some("'disk' & 'full' & 'error'"));
        let long = RankedQuery::parse(&"x".repeat(3000)).unwrap();
        assert_eq!(tsquery(&long), None);
    }
}
