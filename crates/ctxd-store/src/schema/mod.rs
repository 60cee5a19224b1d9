//! Migrations. Each is applied once, in order, in one transaction; `PRAGMA user_version` holds
//! the number applied. Never edit a released migration: add the next one.

use rusqlite::Connection;

use crate::StoreError;

/// (version, SQL). Version 1 is the first schema.
const MIGRATIONS: &[(u32, &str)] = &[(
    1,
    concat!(
        include_str!("v1_core.sql"),
        include_str!("v1_notes.sql"),
        include_str!("v1_history.sql")
    ),
)];

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = 1;

pub(crate) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let current: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::TooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for &(version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}
