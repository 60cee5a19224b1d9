//! The SQLite implementation: one file, WAL, one writer behind a mutex.

mod group;
pub(crate) mod history;
pub use group::{GroupResult, GroupWrite};
mod notes;
pub(crate) mod sessions;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use crate::{schema, StoreError};

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous=FULL`: an acknowledged batch survives power loss (the default).
    #[default]
    Full,
    /// `synchronous=NORMAL`: survives a process crash; the last batches may be lost on power
    /// loss. Faster appends.
    Normal,
}

/// The embedded store. Cheap to share behind an `Arc`; every call takes the one connection.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// The file, `None` in memory.
    path: Option<PathBuf>,
}

impl SqliteStore {
    /// Open (or create) the store at `path`, applying any pending migrations.
    pub fn open(path: &Path, durability: Durability) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
        }
        let conn = Connection::open(path).map_err(|e| StoreError::Open {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::setup(conn, durability, Some(path.to_path_buf()))
    }

    /// A private in-memory store, for tests and one-shot commands.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::setup(Connection::open_in_memory()?, Durability::Full, None)
    }

    fn setup(
        mut conn: Connection,
        durability: Durability,
        path: Option<PathBuf>,
    ) -> Result<Self, StoreError> {
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // Refuse a newer store before touching it (not even its journal mode).
        schema::refuse_newer(&conn)?;
        // journal_mode answers with the mode in force (`memory` for in-memory databases).
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        let sync = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // 32 MiB of page cache (SQLite's default is 2 MB): the full-text indexes' merges read
        // back the segments they rewrite.
        conn.pragma_update(None, "cache_size", -32768)?;
        schema::migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
        })
    }

    /// The store's file, `None` for an in-memory store.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The connection. A panic while holding it cannot leave a half-written batch (every write
    /// is one transaction), so a poisoned lock is safe to take over.
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The connection if no other call holds it now.
    pub(crate) fn try_conn(&self) -> Option<MutexGuard<'_, Connection>> {
        match self.conn.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// `PRAGMA integrity_check`: `ok`, or what is wrong.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("PRAGMA integrity_check")?;
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<_, _>>()?;
        Ok(rows.join("\n"))
    }
}

impl SqliteStore {
    /// Stop this connection's commits from checkpointing the WAL (SQLite's default runs a
    /// checkpoint inside the commit that crosses 1,000 pages, an fsync and a copy of every page
    /// on the committing thread). The caller runs a [`Checkpointer`] instead.
    pub fn checkpoint_elsewhere(&self) -> Result<(), StoreError> {
        let conn = self.conn();
        let _pages: i64 = conn.query_row("PRAGMA wal_autocheckpoint=0", [], |r| r.get(0))?;
        Ok(())
    }
}

/// A second connection to a store's file that only checkpoints its WAL. WAL lets commits go on
/// while a checkpoint copies pages, so on its own thread it never delays the store's writer
/// (the store's one connection is not taken).
pub struct Checkpointer {
    conn: Connection,
}

impl Checkpointer {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(path).map_err(|e| StoreError::Open {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        conn.busy_timeout(std::time::Duration::from_secs(1))?;
        Ok(Self { conn })
    }

    /// `PRAGMA wal_checkpoint(PASSIVE)`: copy what no reader still needs back into the database
    /// without waiting for anyone. Returns the WAL's frames and how many are now copied.
    pub fn passive(&self) -> Result<(i64, i64), StoreError> {
        Ok(self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(1)?, r.get(2)?))
            })?)
    }
}

/// A write transaction that takes the write lock at once (`BEGIN IMMEDIATE`), so a second
/// writer (another process) waits for the busy timeout instead of failing on upgrade.
pub(crate) fn write_transaction(
    conn: &mut Connection,
) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
}

/// The current time as ISO-8601 with milliseconds, from SQLite's clock.
pub(crate) const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ','now')";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fts5_is_compiled_in() {
        let store = SqliteStore::open_in_memory().unwrap();
        let conn = store.conn();
        conn.execute(
            "INSERT INTO entry_fts (rowid, text) VALUES (1, 'hello ranked world')",
            [],
        )
        .unwrap();
        let hits: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM entry_fts WHERE entry_fts MATCH 'ranked'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(hits, 1);
    }
}
