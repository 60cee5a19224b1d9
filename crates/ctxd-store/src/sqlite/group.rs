//! Group commit on SQLite ([`crate::contract::group`]). A commit costs an fsync (about a
//! millisecond here at `synchronous=FULL`); a busy gateway queues several batches per
//! millisecond, so it pays once for all of them. The group writes the log only: flushing and
//! merging the full-text and history indexes' segments at every commit made a commit cost
//! milliseconds (measured: p99 of the wait 10-40 ms); they are caught up after, in larger
//! batches, by [`SqliteStore::index_pending`].

use super::sessions::{append_in, set_leaf_in};
use super::SqliteStore;
use crate::contract::entry::Indexing;
use crate::contract::group::commit_group;
use crate::{GroupResult, GroupWrite, StoreError};

impl SqliteStore {
    /// Apply `writes` in order. The outer error is a transaction's own (a commit that failed);
    /// otherwise each write's result, in order.
    pub fn write_group(&self, writes: &[GroupWrite<'_>]) -> GroupResult {
        let mut conn = self.conn();
        write_group_in(&mut conn, writes)
    }

    /// [`SqliteStore::write_group`] when the store's connection is free now; `None`, having
    /// written nothing, when another call holds it (a caller that must not block, such as an
    /// async worker, hands the group to a thread instead).
    pub fn try_write_group(&self, writes: &[GroupWrite<'_>]) -> Option<GroupResult> {
        let mut conn = self.try_conn()?;
        Some(write_group_in(&mut conn, writes))
    }
}

fn write_group_in(conn: &mut rusqlite::Connection, writes: &[GroupWrite<'_>]) -> GroupResult {
    commit_group(
        conn,
        writes,
        |conn, writes| {
            let tx = super::write_transaction(conn)?;
            if writes.iter().try_for_each(|w| apply(&tx, w)).is_err() {
                // Dropped: rolled back.
                return Ok(false);
            }
            tx.commit()?;
            Ok(true)
        },
        |conn, write| {
            let tx = super::write_transaction(conn)?;
            let result = apply(&tx, write);
            if result.is_ok() {
                tx.commit()?;
            }
            Ok(result)
        },
    )
}

fn apply(conn: &rusqlite::Connection, write: &GroupWrite<'_>) -> Result<(), StoreError> {
    match *write {
        GroupWrite::Append {
            session,
            entries,
            expect_leaf,
        } => append_in(
            conn,
            session,
            entries,
            None,
            expect_leaf,
            Indexing::Deferred,
        )
        .map(|_| ()),
        GroupWrite::SetLeaf { session, leaf } => set_leaf_in(conn, session, leaf),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{NewEntry, Store};
    use ctxd_core::model::{Entry, EntryId, EntryKind, Message, Role, SessionMeta};

    fn entry(id: &str, parent: Option<&str>) -> NewEntry {
        NewEntry::new(Entry {
            id: EntryId::new(id),
            parent: parent.map(EntryId::new),
            timestamp: None,
            sidechain: false,
            kind: EntryKind::Message(Message::text(Role::User, id)),
        })
    }

    #[test]
    fn a_failing_write_is_rolled_back_alone() {
        let store = SqliteStore::open_in_memory().unwrap();
        let a = store
            .open_session("t", "a", &SessionMeta::default())
            .unwrap();
        let b = store
            .open_session("t", "b", &SessionMeta::default())
            .unwrap();
        let first = [entry("a1", None), entry("a2", Some("a1"))];
        let dup = [
            entry("b1", None),
            entry("a1-again", Some("b1")),
            entry("b1", None),
        ];
        let later = [entry("a3", Some("a2"))];
        let missing = EntryId::new("nowhere");
        let results = store
            .write_group(&[
                GroupWrite::Append {
                    session: a.id,
                    entries: &first,
                    expect_leaf: None,
                },
                GroupWrite::Append {
                    session: b.id,
                    entries: &dup,
                    expect_leaf: None,
                },
                GroupWrite::SetLeaf {
                    session: b.id,
                    leaf: &missing,
                },
                GroupWrite::Append {
                    session: a.id,
                    entries: &later,
                    expect_leaf: None,
                },
                GroupWrite::SetLeaf {
                    session: a.id,
                    leaf: &EntryId::new("a2"),
                },
            ])
            .unwrap();
        assert!(results[0].is_ok());
        assert!(matches!(results[1], Err(StoreError::DuplicateEntry { .. })));
        assert!(matches!(results[2], Err(StoreError::NoEntry(_))));
        assert!(results[3].is_ok() && results[4].is_ok());
        let session_a = store.load(a.id).unwrap();
        let ids: Vec<&str> = session_a.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a1", "a2", "a3"]);
        assert_eq!(session_a.leaf, Some(EntryId::new("a2")));
        let session_b = store.load(b.id).unwrap();
        assert!(
            session_b.entries.is_empty(),
            "the failed batch left nothing behind"
        );
        // The history index followed the committed writes only.
        let appended_later = store.append(b.id, &[entry("b1", None)], None).unwrap();
        assert_eq!(appended_later, 1, "b's first batch number is still free");
    }
}
