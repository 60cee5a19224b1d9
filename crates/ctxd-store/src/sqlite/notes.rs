//! Notes on SQLite: the `notes` table holds each note's current state, `note_versions` every
//! change (see `schema/v1_notes.sql`). Each operation is one transaction.

use rusqlite::{params, OptionalExtension, Row, Transaction};

use ctxd_core::notes::list::{Direction, ListOrder, OrderBy};
use ctxd_core::notes::text;

use super::SqliteStore;
use crate::contract::notes::{
    Appended, Note, NoteMeta, NoteResult, NoteVersion, NotesStore, Written,
};
use crate::contract::versions::{self, At, NoteRows, State, VersionRow};
use crate::StoreError;

const META_COLUMNS: &str = "home, path, bytes, lines, version, stale, created_ms, updated_ms";

fn meta_row(row: &Row<'_>) -> rusqlite::Result<NoteMeta> {
    Ok(NoteMeta {
        home: row.get(0)?,
        path: row.get(1)?,
        bytes: row.get::<_, i64>(2)? as usize,
        lines: row.get::<_, i64>(3)? as usize,
        version: row.get(4)?,
        stale: row.get(5)?,
        created_at_ms: row.get(6)?,
        updated_at_ms: row.get(7)?,
    })
}

fn note_row(row: &Row<'_>) -> rusqlite::Result<Note> {
    Ok(Note {
        meta: meta_row(row)?,
        body: row.get(8)?,
    })
}

/// One tenant's note rows inside a write transaction (which holds the store's write lock).
struct Rows<'a> {
    tx: &'a Transaction<'a>,
    tenant: &'a str,
}

impl NoteRows for Rows<'_> {
    fn current(&mut self, (home, path): At<'_>) -> Result<Option<Note>, StoreError> {
        Ok(self
            .tx
            .query_row(
                &format!(
                    "SELECT {META_COLUMNS}, body FROM notes WHERE tenant = ?1 AND home = ?2 AND path = ?3"
                ),
                params![self.tenant, home, path],
                note_row,
            )
            .optional()?)
    }

    fn record(
        &mut self,
        (home, path): At<'_>,
        at_ms: i64,
        row: VersionRow<'_>,
    ) -> Result<i64, StoreError> {
        let version: i64 = self.tx.query_row(
            "SELECT COALESCE(MAX(version), 0) + 1 FROM note_versions \
             WHERE tenant = ?1 AND home = ?2 AND path = ?3",
            params![self.tenant, home, path],
            |r| r.get(0),
        )?;
        self.tx.execute(
            "INSERT INTO note_versions (tenant, home, path, version, op, body, other, at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                self.tenant,
                home,
                path,
                version,
                row.op,
                row.body,
                row.other,
                at_ms
            ],
        )?;
        Ok(version)
    }

    fn put(&mut self, at: At<'_>, s: State<'_>) -> Result<NoteMeta, StoreError> {
        let (home, path) = at;
        self.tx.execute(
            "INSERT INTO notes (tenant, home, path, body, bytes, lines, version, stale, created_ms, updated_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
             ON CONFLICT (tenant, home, path) DO UPDATE SET body = excluded.body, \
             bytes = excluded.bytes, lines = excluded.lines, version = excluded.version, \
             stale = excluded.stale, created_ms = excluded.created_ms, updated_ms = excluded.updated_ms",
            params![
                self.tenant,
                home,
                path,
                s.body,
                s.body.len() as i64,
                text::line_count(s.body) as i64,
                s.version,
                s.stale,
                s.created_ms,
                s.updated_ms
            ],
        )?;
        self.current(at)?
            .map(|n| n.meta)
            .ok_or_else(|| StoreError::NoEntry(path.to_owned()))
    }

    fn remove(&mut self, (home, path): At<'_>) -> Result<(), StoreError> {
        self.tx.execute(
            "DELETE FROM notes WHERE tenant = ?1 AND home = ?2 AND path = ?3",
            params![self.tenant, home, path],
        )?;
        Ok(())
    }

    fn flag(
        &mut self,
        at: At<'_>,
        stale: bool,
        version: i64,
    ) -> Result<Option<NoteMeta>, StoreError> {
        let (home, path) = at;
        self.tx.execute(
            "UPDATE notes SET stale = ?4, version = ?5 WHERE tenant = ?1 AND home = ?2 AND path = ?3",
            params![self.tenant, home, path, stale, version],
        )?;
        Ok(self.current(at)?.map(|n| n.meta))
    }
}

impl SqliteStore {
    /// Run `change` on `tenant`'s note rows in one write transaction, committed unless it
    /// failed.
    fn notes_tx<T>(
        &self,
        tenant: &str,
        change: impl FnOnce(&mut Rows<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = super::write_transaction(&mut conn)?;
        let out = change(&mut Rows { tx: &tx, tenant })?;
        tx.commit()?;
        Ok(out)
    }
}

fn order_sql(order: ListOrder) -> String {
    let column = match order.by {
        OrderBy::Name => "path",
        OrderBy::CreatedAt => "created_ms",
        OrderBy::UpdatedAt => "updated_ms",
    };
    let direction = match order.direction {
        Direction::Ascending => "ASC",
        Direction::Descending => "DESC",
    };
    if order.by == OrderBy::Name {
        format!("path {direction}")
    } else {
        format!("{column} {direction}, path ASC")
    }
}

impl NotesStore for SqliteStore {
    fn note_write(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        body: &str,
        at_ms: i64,
    ) -> NoteResult<Written> {
        if let Err(e) = text::check_size(path, body) {
            return Ok(Err(e));
        }
        self.notes_tx(tenant, |rows| {
            versions::write(rows, (home, path), body, at_ms)
        })
        .map(Ok)
    }

    fn note_append(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        text_in: &str,
        at_ms: i64,
    ) -> NoteResult<Appended> {
        self.notes_tx(tenant, |rows| {
            versions::append(rows, (home, path), text_in, at_ms)
        })
    }

    fn note_read(&self, tenant: &str, home: &str, path: &str) -> Result<Option<Note>, StoreError> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                &format!(
                    "SELECT {META_COLUMNS}, body FROM notes \
                     WHERE tenant = ?1 AND home = ?2 AND path = ?3"
                ),
                params![tenant, home, path],
                note_row,
            )
            .optional()?)
    }

    fn note_list(
        &self,
        tenant: &str,
        home: &str,
        prefix: &str,
        order: ListOrder,
        limit: usize,
    ) -> Result<Vec<NoteMeta>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {META_COLUMNS} FROM notes WHERE tenant = ?1 AND home = ?2 \
             AND substr(path, 1, length(?3)) = ?3 ORDER BY {} LIMIT ?4",
            order_sql(order)
        ))?;
        let rows = stmt
            .query_map(
                params![
                    tenant,
                    home,
                    prefix,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                meta_row,
            )?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn note_search(
        &self,
        tenant: &str,
        home: &str,
        prefix: &str,
        query: &str,
    ) -> Result<Vec<Note>, StoreError> {
        if query.is_empty() {
            return Ok(Vec::new());
        }
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {META_COLUMNS}, body FROM notes WHERE tenant = ?1 AND home = ?2 \
             AND substr(path, 1, length(?3)) = ?3 AND instr(body, ?4) > 0 ORDER BY path"
        ))?;
        let rows = stmt
            .query_map(params![tenant, home, prefix, query], note_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn note_home(&self, tenant: &str, home: &str) -> Result<Vec<Note>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {META_COLUMNS}, body FROM notes WHERE tenant = ?1 AND home = ?2 \
             ORDER BY updated_ms DESC, path ASC"
        ))?;
        let rows = stmt
            .query_map(params![tenant, home], note_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn note_delete(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        at_ms: i64,
    ) -> Result<Option<NoteMeta>, StoreError> {
        self.notes_tx(tenant, |rows| versions::delete(rows, (home, path), at_ms))
    }

    fn note_rename(
        &self,
        tenant: &str,
        from: (&str, &str),
        to: (&str, &str),
        at_ms: i64,
    ) -> NoteResult<NoteMeta> {
        if let Err(e) = versions::check_rename(from, to) {
            return Ok(Err(e));
        }
        self.notes_tx(tenant, |rows| versions::rename(rows, from, to, at_ms))
    }

    fn note_set_stale(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        stale: bool,
        at_ms: i64,
    ) -> Result<Option<NoteMeta>, StoreError> {
        self.notes_tx(tenant, |rows| {
            versions::set_stale(rows, (home, path), stale, at_ms)
        })
    }

    fn note_versions(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
    ) -> Result<Vec<NoteVersion>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT version, op, other, at_ms FROM note_versions \
             WHERE tenant = ?1 AND home = ?2 AND path = ?3 ORDER BY version",
        )?;
        let rows = stmt
            .query_map(params![tenant, home, path], |r| {
                Ok(NoteVersion {
                    version: r.get(0)?,
                    op: r.get(1)?,
                    other: r.get(2)?,
                    at_ms: r.get(3)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    fn note_version_body(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        version: i64,
    ) -> Result<Option<String>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT version, op, body FROM note_versions \
             WHERE tenant = ?1 AND home = ?2 AND path = ?3 AND version <= ?4 \
             ORDER BY version DESC",
        )?;
        let rows = stmt.query_map(params![tenant, home, path, version], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        crate::contract::notes::body_at(
            rows.map(|r| r.map_err(StoreError::from)),
            version,
            home,
            path,
        )
    }
}

impl crate::contract::dump::Dump for SqliteStore {
    fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT key, value FROM settings ORDER BY key")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn notes_dump(&self) -> Result<crate::contract::dump::NotesDump, StoreError> {
        use crate::contract::dump::{NoteRow, NoteVersionRow, NotesDump};
        let conn = self.conn();
        let notes = conn
            .prepare(
                "SELECT tenant, home, path, body, bytes, lines, version, stale, created_ms, \
                 updated_ms FROM notes ORDER BY tenant, home, path",
            )?
            .query_map([], |r| {
                Ok(NoteRow {
                    tenant: r.get(0)?,
                    home: r.get(1)?,
                    path: r.get(2)?,
                    body: r.get(3)?,
                    bytes: r.get(4)?,
                    lines: r.get(5)?,
                    version: r.get(6)?,
                    stale: r.get(7)?,
                    created_ms: r.get(8)?,
                    updated_ms: r.get(9)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        let versions = conn
            .prepare(
                "SELECT tenant, home, path, version, op, body, other, at_ms FROM note_versions \
                 ORDER BY tenant, home, path, version",
            )?
            .query_map([], |r| {
                Ok(NoteVersionRow {
                    tenant: r.get(0)?,
                    home: r.get(1)?,
                    path: r.get(2)?,
                    version: r.get(3)?,
                    op: r.get(4)?,
                    body: r.get(5)?,
                    other: r.get(6)?,
                    at_ms: r.get(7)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(NotesDump { notes, versions })
    }

    fn notes_restore(&self, dump: &crate::contract::dump::NotesDump) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = super::write_transaction(&mut conn)?;
        {
            let mut note = tx.prepare(
                "INSERT INTO notes (tenant, home, path, body, bytes, lines, version, stale, \
                 created_ms, updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            for n in &dump.notes {
                note.execute(params![
                    n.tenant,
                    n.home,
                    n.path,
                    n.body,
                    n.bytes,
                    n.lines,
                    n.version,
                    n.stale,
                    n.created_ms,
                    n.updated_ms
                ])?;
            }
            let mut version = tx.prepare(
                "INSERT INTO note_versions (tenant, home, path, version, op, body, other, at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            for v in &dump.versions {
                version.execute(params![
                    v.tenant, v.home, v.path, v.version, v.op, v.body, v.other, v.at_ms
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}
