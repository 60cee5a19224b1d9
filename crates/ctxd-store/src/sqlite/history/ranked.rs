//! Ranked (FTS5 bm25) history search with a bounded cost at a million items. Matches are taken
//! newest first in blocks of [`RANKED_BLOCK`](crate::RANKED_BLOCK); each block is
//!
//! 1. **read** from the full-text index and `entry_text` only (rowid, seq: no `history_items`
//!    row, no entry body, no JSON);
//! 2. **scored** by one FTS5 query over the block's rowid range. FTS5's bm25 counts, once per
//!    query, every row holding each word (its IDF): about 70 ms per word found in all of a
//!    million rows. A word in more than half of the rows gets an IDF of 1e-6 (FTS5 clamps it),
//!    so its weight is nil; such words are found by sampling the index and left out of the
//!    scoring query. When every word is that common, nothing is scored: the newest come first,
//!    with a score of 0;
//! 3. **walked** best first: an item's `history_items` row is read (for the filters) and its
//!    entry decoded only when the walk reaches it, until the caller has enough.
//!
//! The next (older) block is read only when the caller wants more than a block gave.

use std::collections::HashMap;

use rusqlite::{params, Connection};

use ctxd_core::history::{BranchLanes, ItemFilter, RankedQuery};

use super::{item_cols, ROW_COLUMNS};
use crate::contract::entry::decode_entry;
use crate::{SessionId, StoreError, Visit};

/// How a ranked search works through the matches.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tuning {
    /// Matches ranked together ([`RANKED_BLOCK`](crate::RANKED_BLOCK)).
    pub block: usize,
    /// Below this many rows in the index every word is scored (counting them is cheap).
    pub min_rows: i64,
    /// The sample: this many slices of rowids spread evenly over the index...
    pub slices: i64,
    /// ...of this many rows each.
    pub slice_rows: i64,
    /// A word in at least this share of the sample is left out. bm25 gives nil weight only above
    /// one half; the margin absorbs the sampling error (4,096 rows: about 0.8 points).
    pub common_share: f64,
}

pub(super) const TUNING: Tuning = Tuning {
    block: crate::RANKED_BLOCK,
    min_rows: 20_000,
    slices: 4,
    slice_rows: 1_024,
    common_share: 0.6,
};

/// A match of the session: its index rowid, its entry's seq, its score.
struct Candidate {
    rowid: i64,
    seq: i64,
    score: f64,
}

/// The FTS5 expression of a ranked query: its words, each quoted, all required (an implicit
/// AND), which [`plain_phrases`] reads back.
pub(super) fn fts5_expression(query: &RankedQuery) -> String {
    let quoted: Vec<String> = query
        .words()
        .iter()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    quoted.join(" ")
}

pub(super) fn search(
    conn: &Connection,
    session: SessionId,
    fts_query: &str,
    filter: &ItemFilter,
    branch: Option<&BranchLanes>,
    visit: Visit<'_>,
) -> Result<(), StoreError> {
    search_with(conn, session, fts_query, filter, branch, TUNING, visit)
}

pub(super) fn search_with(
    conn: &Connection,
    session: SessionId,
    fts_query: &str,
    filter: &ItemFilter,
    branch: Option<&BranchLanes>,
    tuning: Tuning,
    visit: Visit<'_>,
) -> Result<(), StoreError> {
    let mut scoring: Option<Option<String>> = None;
    let mut item = conn.prepare_cached(&format!(
        "SELECT {ROW_COLUMNS} FROM history_items h \
         JOIN entries e ON e.session_id = h.session_id AND e.seq = h.seq \
         WHERE h.session_id = ?1 AND h.seq = ?2 AND h.item_key IS NOT NULL"
    ))?;
    let mut before = i64::MAX;
    loop {
        let mut block = block(conn, session, fts_query, before, tuning.block)?;
        let Some(last) = block.last() else {
            return Ok(());
        };
        before = last.rowid;
        let full = block.len() >= tuning.block;
        if scoring.is_none() {
            scoring = Some(scoring_expression(conn, fts_query, tuning)?);
        }
        if let Some(Some(expr)) = &scoring {
            score(conn, expr, &mut block)?;
        }
        // Best first; among equal scores, the newest.
        block.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.seq.cmp(&a.seq)));
        for c in block {
            let mut rows = item.query(params![session, c.seq])?;
            let Some(r) = rows.next()? else {
                continue;
            };
            let cols = item_cols(r, 0)?;
            if !cols.accepted(filter, branch) {
                continue;
            }
            let body: String = r.get(11)?;
            let entry = decode_entry(r.get(8)?, r.get(9)?, r.get(10)?, cols.sidechain(), &body)?;
            if !visit(cols.with_entry(entry, Some(c.score))) {
                return Ok(());
            }
        }
        if !full {
            return Ok(());
        }
    }
}

/// Up to `size` matches of the session below rowid `before`, newest first.
fn block(
    conn: &Connection,
    session: SessionId,
    fts_query: &str,
    before: i64,
    size: usize,
) -> Result<Vec<Candidate>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT f.rowid, t.seq FROM entry_fts f JOIN entry_text t ON t.rowid = f.rowid \
         WHERE entry_fts MATCH ?2 AND f.rowid < ?3 AND t.session_id = ?1 \
         ORDER BY f.rowid DESC LIMIT ?4",
    )?;
    let rows = stmt.query_map(params![session, fts_query, before, size as i64], |r| {
        Ok(Candidate {
            rowid: r.get(0)?,
            seq: r.get(1)?,
            score: 0.0,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// bm25 of the candidates under `expr` (higher is better).
fn score(conn: &Connection, expr: &str, candidates: &mut [Candidate]) -> Result<(), StoreError> {
    let (Some(lo), Some(hi)) = (
        candidates.iter().map(|c| c.rowid).min(),
        candidates.iter().map(|c| c.rowid).max(),
    ) else {
        return Ok(());
    };
    let at: HashMap<i64, usize> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| (c.rowid, i))
        .collect();
    let mut stmt = conn.prepare_cached(
        "SELECT rowid, rank FROM entry_fts WHERE entry_fts MATCH ?1 AND rowid BETWEEN ?2 AND ?3",
    )?;
    let mut rows = stmt.query(params![expr, lo, hi])?;
    while let Some(r) = rows.next()? {
        if let Some(&i) = at.get(&r.get::<_, i64>(0)?) {
            // FTS5's bm25 is lower-is-better; report higher-is-better.
            candidates[i].score = -r.get::<_, f64>(1)?;
        }
    }
    Ok(())
}

/// The expression to score by: `fts_query` without its words found in most rows, `None` when
/// every word is. An expression other than plain quoted words (what
/// [`fts5_expression`] writes) is scored whole.
fn scoring_expression(
    conn: &Connection,
    fts_query: &str,
    tuning: Tuning,
) -> Result<Option<String>, StoreError> {
    let Some(phrases) = plain_phrases(fts_query) else {
        return Ok(Some(fts_query.to_owned()));
    };
    // entry_text rowids are dense (rows are never deleted): the highest is the row count.
    let rows: i64 = conn.query_row("SELECT COALESCE(MAX(rowid), 0) FROM entry_text", [], |r| {
        r.get(0)
    })?;
    if rows < tuning.min_rows {
        return Ok(Some(fts_query.to_owned()));
    }
    let mut kept = Vec::new();
    for phrase in phrases {
        if share(conn, phrase, rows, tuning)? < tuning.common_share {
            kept.push(phrase);
        }
    }
    Ok((!kept.is_empty()).then(|| kept.join(" ")))
}

/// The share of a sample of the index's rows that match `phrase`.
fn share(conn: &Connection, phrase: &str, rows: i64, s: Tuning) -> Result<f64, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT COUNT(*) FROM entry_fts WHERE entry_fts MATCH ?1 AND rowid BETWEEN ?2 AND ?3",
    )?;
    let step = (rows / s.slices.max(1)).max(1);
    let (mut hits, mut sampled) = (0i64, 0i64);
    let mut lo = 1;
    while lo <= rows && sampled < s.slices * s.slice_rows {
        let hi = (lo + s.slice_rows - 1).min(rows);
        hits += stmt.query_row(params![phrase, lo, hi], |r| r.get::<_, i64>(0))?;
        sampled += hi - lo + 1;
        lo += step;
    }
    Ok(if sampled == 0 {
        0.0
    } else {
        hits as f64 / sampled as f64
    })
}

/// The phrases of an expression made only of double-quoted phrases separated by spaces (an
/// implicit AND), each as written (quotes included); `None` for anything else.
fn plain_phrases(expr: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b' ' {
            i += 1;
            continue;
        }
        if bytes[i] != b'"' {
            return None;
        }
        let start = i;
        i += 1;
        loop {
            match bytes.get(i) {
                None => return None,
                // A doubled quote is a quote inside the phrase.
                Some(b'"') if bytes.get(i + 1) == Some(&b'"') => i += 2,
                Some(b'"') => break,
                Some(_) => i += 1,
            }
        }
        i += 1;
        if bytes.get(i).is_some_and(|&b| b != b' ') {
            return None;
        }
        out.push(&expr[start..i]);
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::HistoryStore;
    use crate::{NewEntry, SqliteStore, Store};
    use ctxd_core::model::{Entry, EntryId, EntryKind, Message, Role, SessionMeta};

    /// 300 items, all saying "common"; every 10th also says "rare", a different number of times
    /// in a text of a different length, so no two of them tie; every other of those is the
    /// assistant's.
    fn store() -> (SqliteStore, SessionId) {
        let store = SqliteStore::open_in_memory().unwrap();
        let s = store
            .open_session("", "k", &SessionMeta::default())
            .unwrap();
        let batch: Vec<NewEntry> = (0..300)
            .map(|i| {
                let mut text = format!("common item {i}");
                if i % 10 == 0 {
                    text.push_str(&" rare".repeat(1 + (i / 10) % 4));
                    text.push_str(&" filler".repeat(i / 10));
                }
                NewEntry::new(Entry {
                    id: EntryId::new(format!("e{i}")),
                    parent: (i > 0).then(|| EntryId::new(format!("e{}", i - 1))),
                    timestamp: None,
                    sidechain: false,
                    kind: EntryKind::Message(Message::text(
                        if i % 20 == 10 {
                            Role::Assistant
                        } else {
                            Role::User
                        },
                        text,
                    )),
                })
            })
            .collect();
        store.append(s.id, &batch, None).unwrap();
        store.history_sync(s.id).unwrap();
        (store, s.id)
    }

    const SMALL: Tuning = Tuning {
        block: 2_000,
        min_rows: 100,
        slices: 4,
        slice_rows: 25,
        common_share: 0.6,
    };

    fn ranked(store: &SqliteStore, session: SessionId, expr: &str, s: Tuning) -> Vec<(i64, f64)> {
        ranked_filtered(store, session, expr, &ItemFilter::default(), s)
    }

    fn ranked_filtered(
        store: &SqliteStore,
        session: SessionId,
        expr: &str,
        filter: &ItemFilter,
        s: Tuning,
    ) -> Vec<(i64, f64)> {
        let mut out = Vec::new();
        let conn = store.conn();
        search_with(&conn, session, expr, filter, None, s, &mut |r| {
            out.push((r.seq, r.score.unwrap()));
            true
        })
        .unwrap();
        out
    }

    /// FTS5's own bm25 order over every match (higher is better).
    fn bm25(store: &SqliteStore, expr: &str) -> Vec<(i64, f64)> {
        let conn = store.conn();
        let mut stmt = conn
            .prepare(
                "SELECT t.seq, -f.rank FROM entry_fts f JOIN entry_text t ON t.rowid = f.rowid \
                 WHERE entry_fts MATCH ?1 ORDER BY f.rank",
            )
            .unwrap();
        let rows = stmt.query_map([expr], |r| Ok((r.get(0)?, r.get(1)?)));
        rows.unwrap().collect::<Result<_, _>>().unwrap()
    }

    fn seqs(rows: &[(i64, f64)]) -> Vec<i64> {
        rows.iter().map(|r| r.0).collect()
    }

    #[test]
    fn leaving_out_a_word_in_most_rows_keeps_the_bm25_order() {
        let (store, s) = store();
        let expr = "\"common\" \"rare\"";
        let conn = store.conn();
        assert_eq!(
            scoring_expression(&conn, expr, SMALL).unwrap().as_deref(),
            Some("\"rare\""),
            "\"common\" is in every row"
        );
        drop(conn);
        let ours = ranked(&store, s, expr, SMALL);
        let theirs = bm25(&store, expr);
        assert_eq!(ours.len(), 30);
        assert_eq!(seqs(&ours), seqs(&theirs));
        for ((_, a), (_, b)) in ours.iter().zip(&theirs) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    #[test]
    fn a_small_index_or_an_other_expression_is_scored_whole() {
        let (store, s) = store();
        let whole = Tuning {
            min_rows: 1_000,
            ..SMALL
        };
        for (expr, sampling) in [
            ("\"common\" \"rare\"", whole),
            ("\"rare\" OR \"common\"", SMALL),
        ] {
            let theirs = bm25(&store, expr);
            let mut ours = ranked(&store, s, expr, sampling);
            assert_eq!(ours.len(), theirs.len(), "{expr}");
            // Exact scores; order them as FTS5 does (ties newest first in ours).
            ours.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut theirs = theirs;
            theirs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            assert_eq!(ours, theirs, "{expr}");
        }
    }

    #[test]
    fn when_every_word_is_common_the_newest_come_first() {
        let (store, s) = store();
        let ours = ranked(&store, s, "\"common\" \"item\"", SMALL);
        assert_eq!(ours.len(), 300);
        assert!(ours.iter().all(|r| r.1 == 0.0));
        assert_eq!(ours[0].0, 300);
        assert!(ours.windows(2).all(|w| w[0].0 > w[1].0));
    }

    #[test]
    fn ranked_queries_become_quoted_words() {
        let q = RankedQuery::parse("disk-full error!").unwrap();
        assert_eq!(fts5_expression(&q), "\"disk\" \"full\" \"error\"");
    }

    #[test]
    fn plain_phrases_are_quoted_words_only() {
        assert_eq!(
            plain_phrases("\"a\" \"b c\""),
            Some(vec!["\"a\"", "\"b c\""])
        );
        assert_eq!(
            plain_phrases("\"say \"\"hi\"\"\""),
            Some(vec!["\"say \"\"hi\"\"\""])
        );
        assert_eq!(plain_phrases("  \"a\"  "), Some(vec!["\"a\""]));
        for not in [
            "",
            "a",
            "\"a\" OR \"b\"",
            "\"a\"b",
            "\"a",
            "NEAR(\"a\" \"b\")",
            "\"a\"*",
        ] {
            assert_eq!(plain_phrases(not), None, "{not}");
        }
    }

    #[test]
    fn blocks_of_matches_are_ranked_newest_block_first_and_filtered_in_the_walk() {
        let (store, s) = store();
        let tuning = Tuning { block: 7, ..SMALL };
        let user = ItemFilter {
            role: Some("user".into()),
            ..Default::default()
        };
        let ours = ranked_filtered(&store, s, "\"rare\"", &user, tuning);
        // By hand: the 30 matches newest first, in blocks of 7, each best first, then the user's.
        let mut all = bm25(&store, "\"rare\"");
        all.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut expected = Vec::new();
        for block in all.chunks(7) {
            let mut block = block.to_vec();
            block.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
            // seq i + 1 holds item i; the assistant's are i % 20 == 10.
            expected.extend(block.into_iter().filter(|r| (r.0 - 1) % 20 != 10));
        }
        assert_eq!(ours.len(), 15);
        assert_eq!(ours, expected);
        // A caller that stops early stops the walk: one block read and scored, three taken.
        let mut taken = 0;
        let conn = store.conn();
        search_with(&conn, s, "\"rare\"", &user, None, tuning, &mut |_| {
            taken += 1;
            taken < 3
        })
        .unwrap();
        assert_eq!(taken, 3);
    }
}
