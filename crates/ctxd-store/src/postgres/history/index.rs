//! The derived indexes' rows on PostgreSQL (`entry_text`, `history_items`, `history_calls`), for
//! the walk of [`crate::contract::index`], and the `tsvector` text of ranked search.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use postgres::{GenericClient, Statement, Transaction};

use ctxd_core::history::{ranked_words, ParentPlace, Place};
use ctxd_core::model::EntryKind;

use super::super::pg;
use crate::contract::index::{IndexRows, Indexer as Walk, ItemIndexRow, Parent};
use crate::postgres::prepared::Prepared;
use crate::{SessionId, StoreError};

/// PostgreSQL's limits on a `tsvector`: a lexeme's bytes, a position, the whole value's bytes.
const MAX_LEXEME: usize = 2046;
const MAX_POSITION: usize = 16_383;
const MAX_VECTOR: usize = 1_000_000;

/// The highest seq of `session` in the history index (0 when none is indexed).
pub(crate) fn indexed_upto(
    c: &mut impl GenericClient,
    session: SessionId,
) -> Result<i64, StoreError> {
    Ok(c.query_one_cached(
        "SELECT COALESCE(MAX(seq), 0)::BIGINT FROM history_items WHERE session_id = $1",
        &[&session],
    )?
    .get(0))
}

/// A word as both the index and the query spell it: lower-cased, so search ignores case as
/// SQLite's `unicode61` tokenizer does; `None` when too long to be a lexeme.
pub(crate) fn lexeme(word: &str) -> Option<String> {
    let w = word.to_lowercase();
    (w.len() <= MAX_LEXEME).then_some(w)
}

/// A `tsvector` literal quoting `w` (words are letters and digits, but quoting costs nothing).
pub(crate) fn quoted(w: &str) -> String {
    format!("'{}'", w.replace('\\', "\\\\").replace('\'', "''"))
}

/// The `tsvector` text of `text`'s words with their positions; `None` when it has no word. Words
/// past PostgreSQL's limits are left out (a position past 16,383 counts as 16,383; a word longer
/// than a lexeme is not searchable; past about 1 MB of lexemes no new word is added).
pub(crate) fn tsvector(text: &str) -> Option<String> {
    let mut words: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut size = 0usize;
    for (i, word) in ranked_words(text).enumerate() {
        let Some(w) = lexeme(word) else { continue };
        let pos = (i + 1).min(MAX_POSITION);
        if let Some(positions) = words.get_mut(&w) {
            if positions.last() != Some(&pos) && positions.len() < 256 {
                positions.push(pos);
                size += 2;
            }
        } else if size + w.len() + 8 <= MAX_VECTOR {
            size += w.len() + 8;
            words.insert(w, vec![pos]);
        }
    }
    if words.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(size * 2);
    for (w, positions) in &words {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&quoted(w));
        for (n, p) in positions.iter().enumerate() {
            let _ = write!(out, "{}{p}", if n == 0 { ':' } else { ',' });
        }
    }
    Some(out)
}

/// Indexes the entries of one session ([`crate::contract::index`]), each after the one before
/// it, inside the caller's transaction (which holds the session's row lock).
pub(crate) struct Indexer {
    walk: Walk,
    /// Prepared on the first entry, reused for the others (a round trip each saved).
    statements: Option<Statements>,
}

struct Statements {
    text: Statement,
    parent: Statement,
    call: Statement,
    call_name: Statement,
    item: Statement,
}

impl Statements {
    fn prepare(tx: &mut Transaction<'_>) -> Result<Self, StoreError> {
        let mut p = |sql: &str| tx.statement(sql);
        Ok(Self {
            text: p(
                "INSERT INTO entry_text (session_id, seq, words) VALUES ($1, $2, $3::text::tsvector) \
                 ON CONFLICT DO NOTHING",
            )?,
            parent: p(
                "SELECT h.seq, h.lane, h.window_seq, \
                        EXISTS (SELECT 1 FROM history_items c \
                                WHERE c.session_id = h.session_id AND c.parent_seq = h.seq) \
                 FROM entries e \
                 JOIN history_items h ON h.session_id = e.session_id AND h.seq = e.seq \
                 WHERE e.session_id = $1 AND e.id = $2",
            )?,
            call: p(
                "INSERT INTO history_calls (session_id, call_id, name) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
            )?,
            call_name: p("SELECT name FROM history_calls WHERE session_id = $1 AND call_id = $2")?,
            item: p(
                "INSERT INTO history_items (session_id, seq, parent_seq, lane, window_seq, item_key, \
                 kind, role, tools, sidechain, text) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )?,
        })
    }
}

impl Indexer {
    pub(crate) fn new(session: SessionId) -> Self {
        Self {
            walk: Walk::new(session),
            statements: None,
        }
    }

    /// Index the entry stored at `seq`, after every entry of the session already indexed.
    pub(crate) fn add(
        &mut self,
        tx: &mut Transaction<'_>,
        seq: i64,
        id: &str,
        parent: Option<&str>,
        sidechain: bool,
        kind: &EntryKind,
    ) -> Result<(), StoreError> {
        if self.statements.is_none() {
            self.statements = Some(Statements::prepare(tx)?);
        }
        let Some(st) = &self.statements else {
            return Ok(());
        };
        self.walk
            .add(&mut Rows { tx, st }, seq, id, parent, sidechain, kind)
    }
}

/// The index rows, through the prepared statements.
struct Rows<'a, 't> {
    tx: &'a mut Transaction<'t>,
    st: &'a Statements,
}

impl IndexRows for Rows<'_, '_> {
    fn text(&mut self, session: SessionId, seq: i64, text: &str) -> Result<(), StoreError> {
        if let Some(words) = tsvector(text) {
            self.tx
                .execute(&self.st.text, &[&session, &seq, &words])
                .map_err(pg)?;
        }
        Ok(())
    }

    fn parent(&mut self, session: SessionId, id: &str) -> Result<Option<Parent>, StoreError> {
        Ok(self
            .tx
            .query_opt(&self.st.parent, &[&session, &id])
            .map_err(pg)?
            .map(|r| {
                (
                    r.get::<_, i64>(0),
                    ParentPlace {
                        place: Place {
                            lane: r.get(1),
                            window_seq: r.get(2),
                        },
                        has_child: r.get(3),
                    },
                )
            }))
    }

    fn call(&mut self, session: SessionId, call_id: &str, name: &str) -> Result<(), StoreError> {
        self.tx
            .execute(&self.st.call, &[&session, &call_id, &name])
            .map_err(pg)?;
        Ok(())
    }

    fn call_name(&mut self, session: SessionId, call_id: &str) -> Option<String> {
        self.tx
            .query_opt(&self.st.call_name, &[&session, &call_id])
            .ok()
            .flatten()
            .and_then(|r| r.try_get::<_, String>(0).ok())
    }

    fn item(&mut self, session: SessionId, row: &ItemIndexRow<'_>) -> Result<(), StoreError> {
        // PostgreSQL's text holds no NUL: one in an item's text is searched as a space.
        let text = row.text.map(|t| t.replace('\0', " "));
        self.tx
            .execute(
                &self.st.item,
                &[
                    &session,
                    &row.seq,
                    &row.parent_seq,
                    &row.place.lane,
                    &row.place.window_seq,
                    &row.key,
                    &row.kind,
                    &row.role,
                    &row.tools,
                    &row.sidechain,
                    &text,
                ],
            )
            .map_err(pg)?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn vectors_hold_lower_cased_words_with_positions() {
        assert_eq!(
            tsvector("Zebra stripes, zebra!").as_deref(),
            Some("'stripes':2 'zebra':1,3")
        );
        assert_eq!(tsvector("--- !!"), None);
        assert_eq!(quoted("it's"), "'it''s'");
    }
}
