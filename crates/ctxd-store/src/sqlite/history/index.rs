//! The derived indexes' rows on SQLite (`entry_text` + `entry_fts` for ranked search,
//! `history_items`, `history_calls`, `history_trigram`), for the walk of
//! [`crate::contract::index`]. An inline `append` indexes its batch in its own transaction;
//! `history_sync` and `index_pending` use the same walk to catch up entries appended with
//! `Indexing::Deferred` (the gateway) or by an older build.

use rusqlite::{params, Connection, OptionalExtension};

use ctxd_core::history::{ParentPlace, Place};

use crate::contract::index::{IndexRows, ItemIndexRow, Parent};
use crate::{SessionId, StoreError};

/// The highest seq of `session` in the history index (0 when none is indexed).
pub(crate) fn indexed_upto(conn: &Connection, session: SessionId) -> rusqlite::Result<i64> {
    conn.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM history_items WHERE session_id = ?1")?
        .query_row(params![session], |r| r.get(0))
}

/// The index rows inside the caller's transaction.
pub(crate) struct Rows<'c>(pub(crate) &'c Connection);

impl IndexRows for Rows<'_> {
    fn text(&mut self, session: SessionId, seq: i64, text: &str) -> Result<(), StoreError> {
        let conn = self.0;
        // A store written by a build that filled it on append (before the history index)
        // already has it: the mapping row's uniqueness skips it.
        if conn
            .prepare_cached("INSERT OR IGNORE INTO entry_text (session_id, seq) VALUES (?1, ?2)")?
            .execute(params![session, seq])?
            == 1
        {
            conn.prepare_cached("INSERT INTO entry_fts (rowid, text) VALUES (?1, ?2)")?
                .execute(params![conn.last_insert_rowid(), text])?;
        }
        Ok(())
    }

    fn parent(&mut self, session: SessionId, id: &str) -> Result<Option<Parent>, StoreError> {
        Ok(self
            .0
            .prepare_cached(
                "SELECT h.seq, h.lane, h.window_seq, \
                        EXISTS (SELECT 1 FROM history_items c \
                                WHERE c.session_id = h.session_id AND c.parent_seq = h.seq) \
                 FROM entries e \
                 JOIN history_items h ON h.session_id = e.session_id AND h.seq = e.seq \
                 WHERE e.session_id = ?1 AND e.id = ?2",
            )?
            .query_row(params![session, id], |r| {
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
            .optional()?)
    }

    fn call(&mut self, session: SessionId, call_id: &str, name: &str) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "INSERT OR IGNORE INTO history_calls (session_id, call_id, name) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![session, call_id, name])?;
        Ok(())
    }

    fn call_name(&mut self, session: SessionId, call_id: &str) -> Option<String> {
        self.0
            .prepare_cached("SELECT name FROM history_calls WHERE session_id = ?1 AND call_id = ?2")
            .ok()?
            .query_row(params![session, call_id], |r| r.get::<_, String>(0))
            .optional()
            .ok()
            .flatten()
    }

    fn item(&mut self, session: SessionId, row: &ItemIndexRow<'_>) -> Result<(), StoreError> {
        let conn = self.0;
        conn.prepare_cached(
            "INSERT INTO history_items (session_id, seq, parent_seq, lane, window_seq, item_key, \
             kind, role, tools, sidechain) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?
        .execute(params![
            session,
            row.seq,
            row.parent_seq,
            row.place.lane,
            row.place.window_seq,
            row.key,
            row.kind,
            row.role,
            row.tools,
            row.sidechain,
        ])?;
        if let Some(text) = row.text {
            conn.prepare_cached("INSERT INTO history_trigram (rowid, text) VALUES (?1, ?2)")?
                .execute(params![conn.last_insert_rowid(), text])?;
        }
        Ok(())
    }
}
