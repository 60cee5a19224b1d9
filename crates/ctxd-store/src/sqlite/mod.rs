//! The SQLite implementation: one file, WAL, one writer behind a mutex.

mod backend;
mod checkpoints;
mod group;
mod history;
mod notes;
mod schema;
mod serve_lock;
mod sessions;

pub use checkpoints::{Checkpoints, WalPressure};
pub use schema::SCHEMA_VERSION;
pub use serve_lock::ServeLock;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use crate::{Durability, StoreError};

/// The embedded store. Cheap to share behind an `Arc`; every call takes the one connection.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    /// The file, `None` in memory.
    path: Option<PathBuf>,
    durability: Durability,
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
        // A WAL grown by a burst is cut back to this size whenever it is reset (each time a
        // checkpoint has copied it all and a new write begins): without it the file keeps its
        // largest size for good.
        let _limit: i64 = conn.query_row(
            &format!("PRAGMA journal_size_limit={WAL_SIZE_LIMIT}"),
            [],
            |r| r.get(0),
        )?;
        schema::migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
            durability,
        })
    }

    /// How hard its commits wait for the disk.
    pub fn durability(&self) -> Durability {
        self.durability
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

    /// Rewrite the database file without its free pages (`VACUUM`): the file shrinks to what
    /// it holds. Needs the store to itself: no gateway serving it.
    pub fn vacuum(&self) -> Result<(), StoreError> {
        self.conn().execute_batch("VACUUM")?;
        Ok(())
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)` on the store's own connection: copy the WAL back and
    /// cut it to zero bytes. As the connection that writes it waits for no writer, only for
    /// readers of older snapshots (50 ms at most, or it reports `false`).
    pub fn truncate_wal(&self) -> Result<bool, StoreError> {
        let conn = self.conn();
        conn.busy_timeout(std::time::Duration::from_millis(50))?;
        let busy = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        });
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        Ok(busy? == 0)
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

/// The size, in bytes, a reset WAL is truncated back to (`PRAGMA journal_size_limit`).
pub const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

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

    /// `PRAGMA wal_checkpoint(TRUNCATE)`: copy the whole WAL back and cut the file to zero
    /// bytes. It waits (up to the busy timeout) for readers and holds writers off meanwhile, so
    /// it is for a store at rest. Returns whether the WAL was emptied (a reader or writer that
    /// did not let go leaves it for the next try).
    pub fn truncate(&self) -> Result<bool, StoreError> {
        // A reader that does not let go must not hold a request's commit for long: a short
        // wait, and the next rest tries again.
        self.conn
            .busy_timeout(std::time::Duration::from_millis(50))?;
        let busy = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            });
        self.conn.busy_timeout(std::time::Duration::from_secs(1))?;
        Ok(busy? == 0)
    }
}

/// A write transaction that takes the write lock at once (`BEGIN IMMEDIATE`), so a second
/// writer (another process) waits for the busy timeout instead of failing on upgrade.
fn write_transaction(conn: &mut Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
}

/// The current time as ISO-8601 with milliseconds, from SQLite's clock.
pub(crate) const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ','now')";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wal_at_rest_is_truncated_and_a_reset_one_kept_within_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = SqliteStore::open(&path, Durability::Normal).unwrap();
        store.checkpoint_elsewhere().unwrap();
        let limit: i64 = store
            .conn()
            .query_row("PRAGMA journal_size_limit", [], |r| r.get(0))
            .unwrap();
        assert_eq!(limit, WAL_SIZE_LIMIT);
        let blob = vec![7u8; 64 * 1024];
        for i in 0..64 {
            store
                .conn()
                .execute(
                    "INSERT INTO settings (key, value) VALUES (?1, ?2)",
                    rusqlite::params![format!("k{i}"), blob],
                )
                .unwrap();
        }
        let wal = dir.path().join("s.db-wal");
        let before = std::fs::metadata(&wal).unwrap().len();
        assert!(before > 4 * 1024 * 1024, "{before}");
        let checkpointer = Checkpointer::open(&path).unwrap();
        let (frames, copied) = checkpointer.passive().unwrap();
        assert_eq!(frames, copied);
        assert_eq!(
            std::fs::metadata(&wal).unwrap().len(),
            before,
            "a passive checkpoint leaves the file as large"
        );
        assert!(checkpointer.truncate().unwrap());
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
        assert_eq!(store.integrity_check().unwrap(), "ok");
    }

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
