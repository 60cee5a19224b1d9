//! Migrations. Each is applied once, in order, in one transaction; `PRAGMA user_version` holds
//! the number applied. Never edit a released migration: add the next one.

use rusqlite::Connection;

use crate::StoreError;

/// (version, SQL). Version 1 is the first schema; 2 adds store settings (the gateway's key);
/// 3 makes entries a rowid table (large rows no longer slow every seek) with a batch index;
/// 4 adds budgets' spending counters.
const MIGRATIONS: &[(u32, &str)] = &[
    (
        1,
        concat!(
            include_str!("v1_core.sql"),
            include_str!("v1_notes.sql"),
            include_str!("v1_history.sql")
        ),
    ),
    (2, include_str!("v2_settings.sql")),
    (3, include_str!("v3_entries_rowid.sql")),
    (4, include_str!("v4_spend.sql")),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = 4;

/// A store written by a newer ctxd is refused, untouched.
pub(crate) fn refuse_newer(conn: &Connection) -> Result<u32, StoreError> {
    let current: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(current)
}

pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let current = refuse_newer(conn)?;
    for &(version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        let tx = super::write_transaction(conn)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}
