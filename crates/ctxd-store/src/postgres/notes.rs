//! Notes on PostgreSQL: `sqlite/notes.rs`'s tables and rules. Each operation is one
//! transaction; a change takes an advisory lock on its note path first, so two gateways
//! changing one path take its version numbers one after the other.

use postgres::{GenericClient, Row, Transaction};

use ctxd_core::notes::list::{Direction, ListOrder, OrderBy};
use ctxd_core::notes::text;
use ctxd_core::notes::NoteError;

use super::prepared::Prepared;
use super::{pg, PgStore};
use crate::contract::notes::{
    Appended, Note, NoteMeta, NoteResult, NoteVersion, NotesStore, Written,
};
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

/// The note's current state, its row locked until the transaction ends.
fn current(
    tx: &mut impl GenericClient,
    tenant: &str,
    home: &str,
    path: &str,
) -> Result<Option<Note>, StoreError> {
    Ok(tx
        .query_opt_cached(
            &format!(
                "SELECT {META_COLUMNS}, body FROM notes \
                 WHERE tenant = $1 AND home = $2 AND path = $3 FOR UPDATE"
            ),
            &[&tenant, &home, &path],
        )?
        .map(|r| note_row(&r)))
}

/// Serialise the writers of one note path (whether the note exists or not): its versions are
/// numbered from the highest one, and two gateways must not both take the next.
fn lock_path(
    tx: &mut Transaction<'_>,
    tenant: &str,
    home: &str,
    path: &str,
) -> Result<(), StoreError> {
    let key = format!("{tenant}\n{home}\n{path}");
    tx.execute_cached(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&key],
    )?;
    Ok(())
}

struct VersionRow<'a> {
    op: &'a str,
    body: Option<&'a str>,
    other: Option<&'a str>,
}

fn record(
    tx: &mut Transaction<'_>,
    (tenant, home, path): (&str, &str, &str),
    at_ms: i64,
    row: VersionRow<'_>,
) -> Result<i64, StoreError> {
    let version: i64 = tx
        .query_one_cached(
            "SELECT COALESCE(MAX(version), 0)::BIGINT + 1 FROM note_versions \
             WHERE tenant = $1 AND home = $2 AND path = $3",
            &[&tenant, &home, &path],
        )?
        .get(0);
    tx.execute_cached(
        "INSERT INTO note_versions (tenant, home, path, version, op, body, other, at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &tenant, &home, &path, &version, &row.op, &row.body, &row.other, &at_ms,
        ],
    )?;
    Ok(version)
}

/// The state a note is put in.
struct State<'a> {
    body: &'a str,
    version: i64,
    stale: bool,
    created_ms: i64,
    updated_ms: i64,
}

fn put(
    tx: &mut Transaction<'_>,
    (tenant, home, path): (&str, &str, &str),
    s: State<'_>,
) -> Result<NoteMeta, StoreError> {
    let row = tx
        .query_one_cached(
            &format!(
                "INSERT INTO notes (tenant, home, path, body, bytes, lines, version, stale, created_ms, updated_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                 ON CONFLICT (tenant, home, path) DO UPDATE SET body = excluded.body, \
                 bytes = excluded.bytes, lines = excluded.lines, version = excluded.version, \
                 stale = excluded.stale, created_ms = excluded.created_ms, updated_ms = excluded.updated_ms \
                 RETURNING {META_COLUMNS}"
            ),
            &[
                &tenant,
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
        let (tenant, home, path, body) = (
            tenant.to_owned(),
            home.to_owned(),
            path.to_owned(),
            body.to_owned(),
        );
        self.pool.run(move |c| {
            let at = (tenant.as_str(), home.as_str(), path.as_str());
            let mut tx = c.transaction().map_err(pg)?;
            lock_path(&mut tx, at.0, at.1, at.2)?;
            let existing = current(&mut tx, at.0, at.1, at.2)?;
            let version = record(
                &mut tx,
                at,
                at_ms,
                VersionRow {
                    op: "write",
                    body: Some(&body),
                    other: None,
                },
            )?;
            let created_ms = existing.as_ref().map_or(at_ms, |n| n.meta.created_at_ms);
            let meta = put(
                &mut tx,
                at,
                State {
                    body: &body,
                    version,
                    stale: false,
                    created_ms,
                    updated_ms: at_ms,
                },
            )?;
            tx.commit().map_err(pg)?;
            Ok(Ok(Written {
                meta,
                replaced: existing.is_some(),
            }))
        })
    }

    fn note_append(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        text_in: &str,
        at_ms: i64,
    ) -> NoteResult<Appended> {
        let (tenant, home, path, text_in) = (
            tenant.to_owned(),
            home.to_owned(),
            path.to_owned(),
            text_in.to_owned(),
        );
        self.pool.run(move |c| {
            let at = (tenant.as_str(), home.as_str(), path.as_str());
            let mut tx = c.transaction().map_err(pg)?;
            lock_path(&mut tx, at.0, at.1, at.2)?;
            let existing = current(&mut tx, at.0, at.1, at.2)?;
            let old = existing.as_ref().map_or("", |n| n.body.as_str());
            let (body, delta) = match text::append(at.2, old, &text_in) {
                Ok(done) => done,
                Err(e) => return Ok(Err(e)),
            };
            // A note created by an append records its whole body, as on SQLite.
            let row = if existing.is_some() {
                VersionRow {
                    op: "append",
                    body: Some(&delta),
                    other: None,
                }
            } else {
                VersionRow {
                    op: "write",
                    body: Some(&body),
                    other: None,
                }
            };
            let version = record(&mut tx, at, at_ms, row)?;
            let created_ms = existing.as_ref().map_or(at_ms, |n| n.meta.created_at_ms);
            let meta = put(
                &mut tx,
                at,
                State {
                    body: &body,
                    version,
                    stale: false,
                    created_ms,
                    updated_ms: at_ms,
                },
            )?;
            tx.commit().map_err(pg)?;
            Ok(Ok(Appended {
                meta,
                created: existing.is_none(),
                added_bytes: delta.len(),
            }))
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
        let (tenant, home, path) = (tenant.to_owned(), home.to_owned(), path.to_owned());
        self.pool.run(move |c| {
            let at = (tenant.as_str(), home.as_str(), path.as_str());
            let mut tx = c.transaction().map_err(pg)?;
            lock_path(&mut tx, at.0, at.1, at.2)?;
            let Some(existing) = current(&mut tx, at.0, at.1, at.2)? else {
                return Ok(None);
            };
            record(
                &mut tx,
                at,
                at_ms,
                VersionRow {
                    op: "delete",
                    body: None,
                    other: None,
                },
            )?;
            tx.execute_cached(
                "DELETE FROM notes WHERE tenant = $1 AND home = $2 AND path = $3",
                &[&at.0, &at.1, &at.2],
            )?;
            tx.commit().map_err(pg)?;
            Ok(Some(existing.meta))
        })
    }

    fn note_rename(
        &self,
        tenant: &str,
        from: (&str, &str),
        to: (&str, &str),
        at_ms: i64,
    ) -> NoteResult<NoteMeta> {
        if from == to {
            return Ok(Err(NoteError::Argument(
                "the new address is the same as the old one".to_owned(),
            )));
        }
        let tenant = tenant.to_owned();
        let (from_home, from_path) = (from.0.to_owned(), from.1.to_owned());
        let (to_home, to_path) = (to.0.to_owned(), to.1.to_owned());
        self.pool.run(move |c| {
            let src = (tenant.as_str(), from_home.as_str(), from_path.as_str());
            let dst = (tenant.as_str(), to_home.as_str(), to_path.as_str());
            let mut tx = c.transaction().map_err(pg)?;
            // Both paths, in one order for every caller, so two renames cannot deadlock.
            let (first, second) = if (src.1, src.2) < (dst.1, dst.2) {
                (src, dst)
            } else {
                (dst, src)
            };
            lock_path(&mut tx, first.0, first.1, first.2)?;
            lock_path(&mut tx, second.0, second.1, second.2)?;
            let Some(source) = current(&mut tx, src.0, src.1, src.2)? else {
                return Ok(Err(NoteError::NotFound {
                    address: from_path.clone(),
                }));
            };
            if current(&mut tx, dst.0, dst.1, dst.2)?.is_some() {
                return Ok(Err(NoteError::Exists {
                    address: to_path.clone(),
                }));
            }
            let to_label = format!("{to_home}\t{to_path}");
            let from_label = format!("{from_home}\t{from_path}");
            record(
                &mut tx,
                src,
                at_ms,
                VersionRow {
                    op: "rename_out",
                    body: None,
                    other: Some(&to_label),
                },
            )?;
            tx.execute_cached(
                "DELETE FROM notes WHERE tenant = $1 AND home = $2 AND path = $3",
                &[&src.0, &src.1, &src.2],
            )?;
            let version = record(
                &mut tx,
                dst,
                at_ms,
                VersionRow {
                    op: "rename_in",
                    body: Some(&source.body),
                    other: Some(&from_label),
                },
            )?;
            let meta = put(
                &mut tx,
                dst,
                State {
                    body: &source.body,
                    version,
                    stale: source.meta.stale,
                    created_ms: source.meta.created_at_ms,
                    updated_ms: at_ms,
                },
            )?;
            tx.commit().map_err(pg)?;
            Ok(Ok(meta))
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
        let (tenant, home, path) = (tenant.to_owned(), home.to_owned(), path.to_owned());
        self.pool.run(move |c| {
            let at = (tenant.as_str(), home.as_str(), path.as_str());
            let mut tx = c.transaction().map_err(pg)?;
            lock_path(&mut tx, at.0, at.1, at.2)?;
            let Some(existing) = current(&mut tx, at.0, at.1, at.2)? else {
                return Ok(None);
            };
            if existing.meta.stale == stale {
                return Ok(Some(existing.meta));
            }
            let op = if stale { "stale" } else { "fresh" };
            let version = record(
                &mut tx,
                at,
                at_ms,
                VersionRow {
                    op,
                    body: None,
                    other: None,
                },
            )?;
            let row = tx.query_one_cached(
                &format!(
                    "UPDATE notes SET stale = $4, version = $5 \
                         WHERE tenant = $1 AND home = $2 AND path = $3 RETURNING {META_COLUMNS}"
                ),
                &[&at.0, &at.1, &at.2, &stale, &version],
            )?;
            tx.commit().map_err(pg)?;
            Ok(Some(meta_row(&row)))
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
