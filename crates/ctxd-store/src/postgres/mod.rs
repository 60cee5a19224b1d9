//! The PostgreSQL implementation, for several gateways on one database. The same traits and
//! the same results as SQLite's; what differs is said where it differs (`docs/store.md`).
//!
//! Every call runs on a connection thread of [`pool::Pool`]. Writes are one transaction each;
//! an append locks its session's row first, so appends to one session from several gateways
//! are serialised by the database and their seq numbers stay dense and ordered.

mod backend;
mod group;
mod history;
mod notes;
mod pool;
mod prepared;
mod schema;
mod sessions;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use postgres::Config;

use crate::{redact, StoreError};
use prepared::Prepared;

pub use schema::PG_SCHEMA_VERSION;

/// Connection threads when the URL does not say (`?pool=N`).
pub const DEFAULT_POOL: usize = 4;
const MAX_POOL: usize = 64;

/// The PostgreSQL store. Cloning shares the pool.
#[derive(Clone)]
pub struct PgStore {
    pool: Arc<pool::Pool>,
    location: Arc<str>,
}

impl PgStore {
    /// Connect to `url` (`postgres://user[:password]@host[:port]/db[?pool=N&...]`) and apply any
    /// pending migrations. `pool` is ctxd's own parameter; the others are the driver's.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let location = redact(url);
        let (config, size) = parse_url(url).map_err(|message| StoreError::Open {
            path: location.clone(),
            message,
        })?;
        let pool = pool::Pool::start(config, size, location.clone())?;
        let store = Self {
            pool: Arc::new(pool),
            location: location.into(),
        };
        store.pool.run(schema::migrate)?;
        Ok(store)
    }

    /// The URL without its password.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Connection threads in the pool.
    pub fn pool_size(&self) -> usize {
        self.pool.size()
    }

    /// Consistency checks a database cannot enforce by itself: `ok`, or one line per problem.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        self.pool.run(|c| {
            let checks = [
                (
                    "sessions whose leaf names no entry",
                    "SELECT COUNT(*) FROM sessions s WHERE s.leaf IS NOT NULL AND NOT EXISTS \
                     (SELECT 1 FROM entries e WHERE e.session_id = s.id AND e.id = s.leaf)",
                ),
                (
                    "sessions whose seq numbers have gaps",
                    "SELECT COUNT(*) FROM (SELECT session_id FROM entries GROUP BY session_id \
                     HAVING MAX(seq) <> COUNT(*)) g",
                ),
                (
                    "history rows without their entry",
                    "SELECT COUNT(*) FROM history_items h WHERE NOT EXISTS \
                     (SELECT 1 FROM entries e WHERE e.session_id = h.session_id AND e.seq = h.seq)",
                ),
            ];
            let mut problems = Vec::new();
            for (what, sql) in checks {
                let n: i64 = c.query_one_cached(sql, &[])?.get(0);
                if n > 0 {
                    problems.push(format!("{n} {what}"));
                }
            }
            Ok(if problems.is_empty() {
                "ok".to_owned()
            } else {
                problems.join("\n")
            })
        })
    }
}

/// The driver's config and the pool size from a URL; an error names what is wrong without
/// repeating the URL.
fn parse_url(url: &str) -> Result<(Config, usize), String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut size = DEFAULT_POOL;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("pool", n)) => {
                size = n
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_POOL).contains(n))
                    .ok_or_else(|| format!("pool={n}: give 1 to {MAX_POOL} connections"))?;
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let mut config = Config::from_str(&url).map_err(|e| e.to_string())?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    if config.get_application_name().is_none() {
        config.application_name("ctxd");
    }
    // ctxd's queries are small indexed reads a request waits for; a parallel plan's workers
    // take ~10 ms to start (measured: the window starts of a 1M-item session, 15 ms in
    // parallel, 0.3 ms without). The URL's own `options` may set it otherwise.
    let options = config.get_options().unwrap_or_default();
    if !options.contains("max_parallel_workers_per_gather") {
        let joined = format!("{options} -c max_parallel_workers_per_gather=0");
        config.options(joined.trim_start());
    }
    Ok((config, size))
}

/// A driver error's message: the server's own for a statement, the cause for a connection.
pub(crate) fn message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

/// A driver error as a store error: a closed or failed connection is `Unavailable` (the
/// thread reconnects on its next job), anything else the statement's own error. The server
/// ends a connection with a `FATAL` error of class 08 (connection) or 57P (operator
/// intervention: a shutdown, `pg_terminate_backend`).
pub(crate) fn pg(e: postgres::Error) -> StoreError {
    let io = std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>());
    let ended = e
        .code()
        .is_some_and(|c| c.code().starts_with("08") || c.code().starts_with("57P"));
    if e.is_closed() || io || ended {
        StoreError::Unavailable(message(&e))
    } else {
        StoreError::Postgres(message(&e))
    }
}

/// The current time as ISO-8601 with milliseconds in UTC, as SQLite's stores write it.
pub(crate) const NOW: &str =
    "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";

/// [`crate::Backend::follow`] on PostgreSQL: the session's leaf, its last entry and, past
/// `known`, its entries from the `known`th on, in one statement (one snapshot, one round
/// trip; indexed reads).
pub(crate) fn follow(
    store: &PgStore,
    session: crate::SessionId,
    known: u64,
) -> Result<(crate::Head, Vec<ctxd_core::model::Entry>), StoreError> {
    let known = i64::try_from(known).unwrap_or(i64::MAX);
    store.pool.run(move |c| {
        let rows = c.query_cached(
            "SELECT s.leaf, h.seq, h.id, e.id, e.parent, e.ts, e.sidechain, e.body \
             FROM sessions s \
             LEFT JOIN LATERAL (SELECT seq, id FROM entries WHERE session_id = s.id \
                                ORDER BY seq DESC LIMIT 1) h ON TRUE \
             LEFT JOIN entries e ON e.session_id = s.id AND h.seq > $2 AND e.seq >= $2 \
             WHERE s.id = $1 ORDER BY e.seq",
            &[&session, &known],
        )?;
        let first = rows
            .first()
            .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
        let seq: Option<i64> = first.get(1);
        let head = crate::Head {
            entries: seq.map_or(0, |s| u64::try_from(s).unwrap_or_default()),
            last: first
                .get::<_, Option<String>>(2)
                .map(ctxd_core::model::EntryId),
            leaf: first
                .get::<_, Option<String>>(0)
                .map(ctxd_core::model::EntryId),
        };
        let tail = rows
            .iter()
            .filter(|r| r.get::<_, Option<String>>(3).is_some())
            .map(|r| sessions::entry_row(r, 3))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((head, tail))
    })
}

impl crate::contract::dump::Dump for PgStore {
    fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.pool.run(|c| {
            Ok(
                c.query_cached("SELECT key, value FROM settings ORDER BY key", &[])?
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect(),
            )
        })
    }

    fn notes_dump(&self) -> Result<crate::contract::dump::NotesDump, StoreError> {
        use crate::contract::dump::{NoteRow, NoteVersionRow, NotesDump};
        self.pool.run(|c| {
            let notes = c
                .query_cached(
                    "SELECT tenant, home, path, body, bytes, lines, version, stale, created_ms, \
                     updated_ms FROM notes ORDER BY tenant, home, path",
                    &[],
                )?
                .iter()
                .map(|r| NoteRow {
                    tenant: r.get(0),
                    home: r.get(1),
                    path: r.get(2),
                    body: r.get(3),
                    bytes: r.get(4),
                    lines: r.get(5),
                    version: r.get(6),
                    stale: r.get(7),
                    created_ms: r.get(8),
                    updated_ms: r.get(9),
                })
                .collect();
            let versions = c
                .query_cached(
                    "SELECT tenant, home, path, version, op, body, other, at_ms FROM note_versions \
                     ORDER BY tenant, home, path, version",
                    &[],
                )?
                .iter()
                .map(|r| NoteVersionRow {
                    tenant: r.get(0),
                    home: r.get(1),
                    path: r.get(2),
                    version: r.get(3),
                    op: r.get(4),
                    body: r.get(5),
                    other: r.get(6),
                    at_ms: r.get(7),
                })
                .collect();
            Ok(NotesDump { notes, versions })
        })
    }

    fn notes_restore(&self, dump: &crate::contract::dump::NotesDump) -> Result<(), StoreError> {
        let dump = dump.clone();
        self.pool.run(move |c| {
            let mut tx = c.transaction().map_err(pg)?;
            for n in &dump.notes {
                tx.execute_cached(
                    "INSERT INTO notes (tenant, home, path, body, bytes, lines, version, stale, \
                     created_ms, updated_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    &[
                        &n.tenant,
                        &n.home,
                        &n.path,
                        &n.body,
                        &n.bytes,
                        &n.lines,
                        &n.version,
                        &n.stale,
                        &n.created_ms,
                        &n.updated_ms,
                    ],
                )?;
            }
            for v in &dump.versions {
                tx.execute_cached(
                    "INSERT INTO note_versions (tenant, home, path, version, op, body, other, \
                     at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[
                        &v.tenant, &v.home, &v.path, &v.version, &v.op, &v.body, &v.other, &v.at_ms,
                    ],
                )?;
            }
            tx.commit().map_err(pg)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_parameter_is_ours_and_the_rest_the_drivers() {
        let (config, size) = parse_url("postgres://u:pw@127.0.0.1:5/db?pool=2").unwrap();
        assert_eq!(size, 2);
        assert_eq!(config.get_dbname(), Some("db"));
        let (_, size) =
            parse_url("postgres://u@127.0.0.1/db?connect_timeout=3&pool=9&sslmode=disable")
                .unwrap();
        assert_eq!(size, 9);
        assert_eq!(parse_url("postgres://u@h/db").unwrap().1, DEFAULT_POOL);
        assert!(parse_url("postgres://u@h/db?pool=0").is_err());
        let err = parse_url("postgres://u:secret@h/db?bogus=1").unwrap_err();
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn parallel_plans_are_off_unless_the_url_says() {
        let (config, _) = parse_url("postgres://u@h/db").unwrap();
        assert_eq!(
            config.get_options(),
            Some("-c max_parallel_workers_per_gather=0")
        );
        let (config, _) = parse_url("postgres://u@h/db?options=-c%20work_mem%3D64MB").unwrap();
        assert_eq!(
            config.get_options(),
            Some("-c work_mem=64MB -c max_parallel_workers_per_gather=0")
        );
        let (config, _) =
            parse_url("postgres://u@h/db?options=-c%20max_parallel_workers_per_gather%3D2")
                .unwrap();
        assert_eq!(
            config.get_options(),
            Some("-c max_parallel_workers_per_gather=2")
        );
    }
}
