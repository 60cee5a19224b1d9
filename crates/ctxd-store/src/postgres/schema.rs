//! Migrations. Each is applied once, in order, in one transaction that holds an advisory lock,
//! so gateways starting together apply it once; `schema_migrations` holds the versions applied.
//! Never edit a released migration: add the next one.

use postgres::Client;

use super::pg;
use crate::StoreError;

/// (version, SQL). PostgreSQL's versions are numbered apart from SQLite's.
const MIGRATIONS: &[(u32, &str)] = &[
    (1, include_str!("schema/v1.sql")),
    (2, include_str!("schema/v2.sql")),
];

/// The PostgreSQL schema version this build writes.
pub const PG_SCHEMA_VERSION: u32 = 2;

/// The advisory lock every ctxd migrating this database takes (an arbitrary constant: "ctxd").
const MIGRATION_LOCK: i64 = 0x6374_7864;

/// Apply the pending migrations; a database written by a newer ctxd is refused, untouched.
pub(super) fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction().map_err(pg)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .map_err(pg)?;
    let exists: bool = tx
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .map_err(pg)?
        .get(0);
    let current: i32 = if exists {
        tx.query_one(
            "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
            &[],
        )
        .map_err(pg)?
        .get(0)
    } else {
        0
    };
    let current = u32::try_from(current).unwrap_or(0);
    if current > PG_SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found: current,
            supported: PG_SCHEMA_VERSION,
        });
    }
    let pending: Vec<_> = MIGRATIONS.iter().filter(|(v, _)| *v > current).collect();
    if pending.is_empty() {
        return Ok(());
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (\
             version INTEGER PRIMARY KEY, \
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .map_err(pg)?;
    for &(version, sql) in pending {
        tx.batch_execute(sql).map_err(pg)?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&(version as i32)],
        )
        .map_err(pg)?;
    }
    tx.commit().map_err(pg)
}
