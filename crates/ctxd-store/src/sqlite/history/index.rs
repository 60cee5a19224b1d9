//! Writing the derived indexes (`entry_text` + `entry_fts` for ranked search, `history_items`,
//! `history_calls`, `history_trigram`) for entries in append order. An inline `append` indexes
//! its batch in its own transaction; `history_sync` and `index_pending` use the same code to
//! catch up entries appended with `Indexing::Deferred` (the gateway) or by an older build.

use rusqlite::{params, Connection, OptionalExtension};

use ctxd_core::history::{item_facts, place, tool_calls, ParentPlace, Place};
use ctxd_core::model::EntryKind;
use ctxd_core::text::entry_text;

use crate::{SessionId, StoreError};

/// The highest seq of `session` in the history index (0 when none is indexed).
pub(crate) fn indexed_upto(conn: &Connection, session: SessionId) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM history_items WHERE session_id = ?1")?
        .query_row(params![session], |r| r.get(0))
}

/// Indexes the entries of one session, each after the one before it, inside the caller's
/// transaction.
pub(crate) struct Indexer<'c> {
    conn: &'c Connection,
    session: SessionId,
    /// The previous entry (id, seq, place, has a child): in a linear log it is the next one's
    /// parent, found without a query.
    prev: Option<(String, i64, Place, bool)>,
}

impl<'c> Indexer<'c> {
    pub(crate) fn new(conn: &'c Connection, session: SessionId) -> Self {
        Self {
            conn,
            session,
            prev: None,
        }
    }

    /// Index the entry stored at `seq`. Entries must come in seq order, after every entry of the
    /// session already indexed.
    pub(crate) fn add(
        &mut self,
        seq: i64,
        id: &str,
        parent: Option<&str>,
        sidechain: bool,
        kind: &EntryKind,
    ) -> Result<(), StoreError> {
        let (conn, session) = (self.conn, self.session);
        // Ranked search's full-text row. A store written by a build that filled it on append
        // (before the history index) already has it: the mapping row's uniqueness skips it.
        let text = entry_text(kind);
        if !text.is_empty()
            && conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO entry_text (session_id, seq) VALUES (?1, ?2)",
                )?
                .execute(params![session, seq])?
                == 1
        {
            conn.prepare_cached("INSERT INTO entry_fts (rowid, text) VALUES (?1, ?2)")?
                .execute(params![conn.last_insert_rowid(), text])?;
        }
        let parent_place: Option<(i64, ParentPlace)> = match parent {
            None => None,
            Some(p) => match &mut self.prev {
                Some((pid, pseq, pplace, has_child)) if pid == p => {
                    let found = (
                        *pseq,
                        ParentPlace {
                            place: *pplace,
                            has_child: *has_child,
                        },
                    );
                    *has_child = true;
                    Some(found)
                }
                _ => conn
                    .prepare_cached(
                        "SELECT h.seq, h.lane, h.window_seq, \
                                EXISTS (SELECT 1 FROM history_items c \
                                        WHERE c.session_id = h.session_id AND c.parent_seq = h.seq) \
                         FROM entries e \
                         JOIN history_items h ON h.session_id = e.session_id AND h.seq = e.seq \
                         WHERE e.session_id = ?1 AND e.id = ?2",
                    )?
                    .query_row(params![session, p], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            ParentPlace {
                                place: Place {
                                    lane: r.get(1)?,
                                    window_seq: r.get(2)?,
                                },
                                has_child: r.get(3)?,
                            },
                        ))
                    })
                    .optional()?,
            },
        };
        let here = place(seq, kind, parent_place.map(|(_, p)| p));
        let mut insert_call = conn.prepare_cached(
            "INSERT OR IGNORE INTO history_calls (session_id, call_id, name) VALUES (?1, ?2, ?3)",
        )?;
        for (call_id, name) in tool_calls(kind) {
            insert_call.execute(params![session, call_id, name])?;
        }
        let facts = item_facts(kind, &|call_id| {
            conn.prepare_cached(
                "SELECT name FROM history_calls WHERE session_id = ?1 AND call_id = ?2",
            )
            .ok()?
            .query_row(params![session, call_id], |r| r.get::<_, String>(0))
            .optional()
            .ok()
            .flatten()
        });
        let key = facts
            .as_ref()
            .map(|_| ctxd_core::history::item_key(session, id) as i64);
        conn.prepare_cached(
            "INSERT INTO history_items (session_id, seq, parent_seq, lane, window_seq, item_key, \
             kind, role, tools, sidechain) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            session,
            seq,
            parent_place.map(|(s, _)| s),
            here.lane,
            here.window_seq,
            key,
            facts.as_ref().map(|f| f.kind),
            facts.as_ref().map(|f| f.role),
            facts
                .as_ref()
                .map(|f| f.tools.join("\n"))
                .unwrap_or_default(),
            sidechain,
        ])?;
        if let Some(f) = facts.filter(|f| !f.text.is_empty()) {
            conn.prepare_cached("INSERT INTO history_trigram (rowid, text) VALUES (?1, ?2)")?
                .execute(params![conn.last_insert_rowid(), f.text])?;
        }
        self.prev = Some((id.to_owned(), seq, here, false));
        Ok(())
    }
}
