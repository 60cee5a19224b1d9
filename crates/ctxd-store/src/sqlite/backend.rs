//! [`Backend`] on SQLite: one gateway per file (its lock file), a second connection for long
//! reads.

use ctxd_core::model::{Entry, EntryId};

use super::SqliteStore;
use crate::{
    Backend, Durability, GroupResult, GroupStore, GroupWrite, Head, SessionId, StoreError,
    StoreKind,
};

impl GroupStore for SqliteStore {
    fn write_group(&self, writes: &[GroupWrite<'_>]) -> GroupResult {
        SqliteStore::write_group(self, writes)
    }

    fn try_write_group(&self, writes: &[GroupWrite<'_>]) -> Option<GroupResult> {
        SqliteStore::try_write_group(self, writes)
    }

    fn index_pending(&self, session: SessionId, limit: u64) -> Result<(u64, bool), StoreError> {
        SqliteStore::index_pending(self, session, limit)
    }
}

impl Backend for SqliteStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Sqlite
    }

    /// No network; at `synchronous=NORMAL` a commit does not wait for an fsync either.
    fn quick_commit(&self) -> bool {
        self.durability() == Durability::Normal
    }

    fn truncate_wal(&self) -> Result<bool, StoreError> {
        SqliteStore::truncate_wal(self)
    }

    fn location(&self) -> String {
        self.path()
            .map_or_else(|| ":memory:".to_owned(), |p| p.display().to_string())
    }

    fn reader(&self) -> Result<Box<dyn Backend>, StoreError> {
        let Some(path) = self.path() else {
            return Err(StoreError::Open {
                path: ":memory:".into(),
                message: "an in-memory store has no second connection".into(),
            });
        };
        let reader = SqliteStore::open(path, Durability::Normal)?;
        // The reader never commits a checkpoint of its own: the gateway's checkpointer does.
        reader.checkpoint_elsewhere()?;
        Ok(Box::new(reader))
    }

    fn integrity_check(&self) -> Result<String, StoreError> {
        SqliteStore::integrity_check(self)
    }

    fn follow(&self, session: SessionId, known: u64) -> Result<(Head, Vec<Entry>), StoreError> {
        use rusqlite::OptionalExtension;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let leaf: Option<String> = tx
            .query_row("SELECT leaf FROM sessions WHERE id = ?1", [session], |r| {
                r.get(0)
            })
            .optional()?
            .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
        // `seq` numbers a session's entries from 1 without gaps: the last one is the count.
        let last: Option<(i64, String)> = tx
            .query_row(
                "SELECT seq, id FROM entries WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1",
                [session],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let (entries, last) = last.map_or((0, None), |(seq, id)| {
            (
                u64::try_from(seq).unwrap_or_default(),
                Some(EntryId::new(id)),
            )
        });
        let tail = if entries > known {
            super::sessions::tail(&tx, session, known.saturating_sub(1))?
        } else {
            Vec::new()
        };
        let head = Head {
            entries,
            last,
            leaf: leaf.map(EntryId::new),
        };
        Ok((head, tail))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_is_quick_without_an_fsync_only() {
        let dir = tempfile::tempdir().unwrap();
        let normal = SqliteStore::open(&dir.path().join("n.db"), Durability::Normal).unwrap();
        let full = SqliteStore::open(&dir.path().join("f.db"), Durability::Full).unwrap();
        assert_eq!(normal.kind(), StoreKind::Sqlite);
        assert!(normal.quick_commit());
        assert!(!full.quick_commit());
        assert!(!SqliteStore::open_in_memory().unwrap().quick_commit());
    }
}
