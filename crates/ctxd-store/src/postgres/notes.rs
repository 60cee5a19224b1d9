//! Notes on PostgreSQL: SQLite's tables, the rules of [`crate::contract::versions`]. Each
//! operation is one transaction; a change takes an advisory lock on its note path first, so two
//! gateways changing one path take its version numbers one after the other.

use postgres::{Row, Transaction};

use ctxd_core::notes::list::{Direction, ListOrder, OrderBy};
use ctxd_core::notes::text;

use super::prepared::Prepared;
use super::{pg, PgStore};
use crate::contract::notes::{
    Appended, Note, NoteMeta, NoteResult, NoteVersion, NotesStore, Written,
};
use crate::contract::versions::{self, At, NoteRows, State, VersionRow};
use crate::StoreError;

const META_COLUMNS: &str = "home, path, bytes, lines, version, stale, created_ms, updated_ms";

fn meta_row(row: &Row) -> NoteMeta {
    NoteMeta {
        home: row.get(0),
        path: row.get(1),
        bytes: row.get::<_, i64>(2) as usize,
        lines: row.get::<_, i64>(3) as usize,
        version: row.get(4),
        stale: row.get(5),
        created_at_ms: row.get(6),
        updated_at_ms: row.get(7),
    }
}

fn note_row(row: &Row) -> Note {
    Note {
        meta: meta_row(row),
        body: row.get(8),
    }
}

/// Serialise the writers of one note path (whether the note exists or not): its versions are
/// numbered from the highest one, and two gateways must not both take the next.
fn lock_path(
    tx: &mut Transaction<'_>,
    tenant: &str,
    (home, path): At<'_>,
) -> Result<(), StoreError> {
    let key = format!("{tenant}\n{home}\n{path}");
    tx.execute_cached(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&key],
    )?;
    Ok(())
}

/// One tenant's note rows inside a transaction holding the paths' locks.
struct Rows<'a, 't> {
    tx: &'a mut Transaction<'t>,
    tenant: &'a str,
}

impl NoteRows for Rows<'_, '_> {
    /// The note's current state, its row locked until the transaction ends.
    fn current(&mut self, (home, path): At<'_>) -> Result<Option<Note>, StoreError> {
        Ok(self
            .tx
            .query_opt_cached(
                &format!(
                    "SELECT {META_COLUMNS}, body FROM notes \
                     WHERE tenant = $1 AND home = $2 AND path = $3 FOR UPDATE"
                ),
                &[&self.tenant, &home, &path],
            )?
            .map(|r| note_row(&r)))
    }

    fn record(
        &mut self,
        (home, path): At<'_>,
        at_ms: i64,
        row: VersionRow<'_>,
    ) -> Result<i64, StoreError> {
        let tenant = self.tenant;
        let version: i64 = self
            .tx
            .query_one_cached(
                "SELECT COALESCE(MAX(version), 0)::BIGINT + 1 FROM note_versions \
                 WHERE tenant = $1 AND home = $2 AND path = $3",
                &[&tenant, &home, &path],
            )?
            .get(0);
        self.tx.execute_cached(
            "INSERT INTO note_versions (tenant, home, path, version, op, body, other, at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &tenant, &home, &path, &version, &row.op, &row.body, &row.other, &at_ms,
            ],
        )?;
        Ok(version)
    }

    fn put(&mut self, (home, path): At<'_>, s: State<'_>) -> Result<NoteMeta, StoreError> {
        let row = self.tx.query_one_cached(
            &format!(
                "INSERT INTO notes (tenant, home, path, body, bytes, lines, version, stale, created_ms, updated_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (tenant, home, path) DO UPDATE SET body = excluded.body, \
                 bytes = excluded.bytes, lines = excluded.lines, version = excluded.version, \
                 stale = excluded.stale, created_ms = excluded.created_ms, updated_ms = excluded.updated_ms \
                 RETURNING {META_COLUMNS}"
            ),
            &[
                &self.tenant,
                &home,
                &path,
                &s.body,
                &(s.body.len() as i64),
                &(text::line_count(s.body) as i64),
                &s.version,
                &s.stale,
                &s.created_ms,
                &s.updated_ms,
            ],
        )?;
        Ok(meta_row(&row))
    }

    fn remove(&mut self, (home, path): At<'_>) -> Result<(), StoreError> {
        self.tx.execute_cached(
            "DELETE FROM notes WHERE tenant = $1 AND home = $2 AND path = $3",
            &[&self.tenant, &home, &path],
        )?;
        Ok(())
    }

    fn flag(
        &mut self,
        (home, path): At<'_>,
        stale: bool,
        version: i64,
    ) -> Result<Option<NoteMeta>, StoreError> {
        let row = self.tx.query_one_cached(
            &format!(
                "UPDATE notes SET stale = $4, version = $5 \
                 WHERE tenant = $1 AND home = $2 AND path = $3 RETURNING {META_COLUMNS}"
            ),
            &[&self.tenant, &home, &path, &stale, &version],
        )?;
        Ok(Some(meta_row(&row)))
    }
}

impl PgStore {
    /// Run `change` on `tenant`'s note rows in one transaction holding the locks of `paths`
    /// (taken in one order for every caller, so two changes cannot deadlock), committed unless
    /// it failed.
    fn notes_tx<T: Send + 'static>(
        &self,
        tenant: &str,
        paths: &[At<'_>],
        change: impl FnOnce(&mut Rows<'_, '_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let tenant = tenant.to_owned();
        let mut paths: Vec<(String, String)> = paths
            .iter()
            .map(|(h, p)| ((*h).to_owned(), (*p).to_owned()))
            .collect();
        paths.sort();
        self.pool.run(move |c| {
            let mut tx = c.transaction().map_err(pg)?;
            for (home, path) in &paths {
                lock_path(&mut tx, &tenant, (home, path))?;
            }
            let out = change(&mut Rows {
                tx: &mut tx,
                tenant: &tenant,
            })?;
            tx.commit().map_err(pg)?;
            Ok(out)
        })
    }
}

fn order_sql(order: ListOrder) -> String {
    let direction = match order.direction {
        Direction::Ascending => "ASC",
        Direction::Descending => "DESC",
    };
    match order.by {
        OrderBy::Name => format!("path {direction}"),
        OrderBy::CreatedAt => format!("created_ms {direction}, path ASC"),
        OrderBy::UpdatedAt => format!("updated_ms {direction}, path ASC"),
    }
}

/// `path` starts with `$3` (in characters, as SQLite's `substr` compares).
const UNDER_PREFIX: &str = "left(path, length($3)) = $3";

impl NotesStore for PgStore {
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
        let (h, p, body) = (home.to_owned(), path.to_owned(), body.to_owned());
        self.notes_tx(tenant, &[(home, path)], move |rows| {
            versions::write(rows, (&h, &p), &body, at_ms)
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
        let (h, p, text_in) = (home.to_owned(), path.to_owned(), text_in.to_owned());
        self.notes_tx(tenant, &[(home, path)], move |rows| {
            versions::append(rows, (&h, &p), &text_in, at_ms)
        })
    }

    fn note_read(&self, tenant: &str, home: &str, path: &str) -> Result<Option<Note>, StoreError> {
        let (tenant, home, path) = (tenant.to_owned(), home.to_owned(), path.to_owned());
        self.pool.run(move |c| {
            Ok(c.query_opt_cached(
                &format!("SELECT {META_COLUMNS}, body FROM notes WHERE tenant = $1 AND home = $2 AND path = $3"),
                &[&tenant, &home, &path],
            )?
            .map(|r| note_row(&r)))
        })
    }

    fn note_list(
        &self,
        tenant: &str,
        home: &str,
        prefix: &str,
        order: ListOrder,
        limit: usize,
    ) -> Result<Vec<NoteMeta>, StoreError> {
        let (tenant, home, prefix) = (tenant.to_owned(), home.to_owned(), prefix.to_owned());
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.pool.run(move |c| {
            let rows = c.query_cached(
                &format!(
                    "SELECT {META_COLUMNS} FROM notes WHERE tenant = $1 AND home = $2 \
                         AND {UNDER_PREFIX} ORDER BY {} LIMIT $4",
                    order_sql(order)
                ),
                &[&tenant, &home, &prefix, &limit],
            )?;
            Ok(rows.iter().map(meta_row).collect())
        })
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
        let (tenant, home, prefix, query) = (
            tenant.to_owned(),
            home.to_owned(),
            prefix.to_owned(),
            query.to_owned(),
        );
        self.pool.run(move |c| {
            let rows = c.query_cached(
                &format!(
                    "SELECT {META_COLUMNS}, body FROM notes WHERE tenant = $1 AND home = $2 \
                         AND {UNDER_PREFIX} AND strpos(body, $4) > 0 ORDER BY path"
                ),
                &[&tenant, &home, &prefix, &query],
            )?;
            Ok(rows.iter().map(note_row).collect())
        })
    }

    fn note_home(&self, tenant: &str, home: &str) -> Result<Vec<Note>, StoreError> {
        let (tenant, home) = (tenant.to_owned(), home.to_owned());
        self.pool.run(move |c| {
            let rows = c.query_cached(
                &format!(
                    "SELECT {META_COLUMNS}, body FROM notes WHERE tenant = $1 AND home = $2 \
                         ORDER BY updated_ms DESC, path ASC"
                ),
                &[&tenant, &home],
            )?;
            Ok(rows.iter().map(note_row).collect())
        })
    }

    fn note_delete(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        at_ms: i64,
    ) -> Result<Option<NoteMeta>, StoreError> {
        let (h, p) = (home.to_owned(), path.to_owned());
        self.notes_tx(tenant, &[(home, path)], move |rows| {
            versions::delete(rows, (&h, &p), at_ms)
        })
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
        let (from_home, from_path) = (from.0.to_owned(), from.1.to_owned());
        let (to_home, to_path) = (to.0.to_owned(), to.1.to_owned());
        self.notes_tx(tenant, &[from, to], move |rows| {
            versions::rename(rows, (&from_home, &from_path), (&to_home, &to_path), at_ms)
        })
    }

    fn note_set_stale(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        stale: bool,
        at_ms: i64,
    ) -> Result<Option<NoteMeta>, StoreError> {
        let (h, p) = (home.to_owned(), path.to_owned());
        self.notes_tx(tenant, &[(home, path)], move |rows| {
            versions::set_stale(rows, (&h, &p), stale, at_ms)
        })
    }

    fn note_versions(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
    ) -> Result<Vec<NoteVersion>, StoreError> {
        let (tenant, home, path) = (tenant.to_owned(), home.to_owned(), path.to_owned());
        self.pool.run(move |c| {
            let rows = c.query_cached(
                "SELECT version, op, other, at_ms FROM note_versions \
                     WHERE tenant = $1 AND home = $2 AND path = $3 ORDER BY version",
                &[&tenant, &home, &path],
            )?;
            Ok(rows
                .iter()
                .map(|r| NoteVersion {
                    version: r.get(0),
                    op: r.get(1),
                    other: r.get(2),
                    at_ms: r.get(3),
                })
                .collect())
        })
    }

    fn note_version_body(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        version: i64,
    ) -> Result<Option<String>, StoreError> {
        let (tenant, home, path) = (tenant.to_owned(), home.to_owned(), path.to_owned());
        self.pool.run(move |c| {
            let rows = c.query_cached(
                "SELECT version, op, body FROM note_versions \
                     WHERE tenant = $1 AND home = $2 AND path = $3 AND version <= $4 \
                     ORDER BY version DESC",
                &[&tenant, &home, &path, &version],
            )?;
            let rows = rows.iter().map(|r| Ok((r.get(0), r.get(1), r.get(2))));
            crate::contract::notes::body_at(rows, version, &home, &path)
        })
    }
}
