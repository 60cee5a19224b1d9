//! Group commit: many writers' batches in one transaction, so a busy gateway pays for one commit
//! (an fsync, or a network round trip) for all of them. The group writes the log only; the
//! derived indexes are caught up after ([`crate::GroupStore::index_pending`]). A group with a
//! failing write is rolled back and replayed one write per transaction, so the failure is
//! reported in its place and the others still commit.

use ctxd_core::model::EntryId;

use crate::{NewEntry, SessionId, StoreError};

/// One write of a group.
#[derive(Clone, Copy, Debug)]
pub enum GroupWrite<'a> {
    /// [`crate::Store::append`] with the leaf moving to the batch's last entry. The derived
    /// indexes are not written (`Indexing::Deferred`): [`crate::GroupStore::index_pending`] or
    /// the next history read catches them up, so the commit holds the log alone.
    Append {
        session: SessionId,
        entries: &'a [NewEntry],
        /// Only while the session's leaf is this entry (checked under the write's lock):
        /// otherwise `StoreError::LeafMoved` and nothing of the batch is written. For writes
        /// that must not land behind another writer's back (a distillation pass's edits, on a
        /// store several gateways write).
        expect_leaf: Option<&'a EntryId>,
    },
    /// [`crate::Store::set_leaf`].
    SetLeaf {
        session: SessionId,
        leaf: &'a EntryId,
    },
}

/// Each write's result in order, or the error of a transaction itself (a failed commit).
pub type GroupResult = Result<Vec<Result<(), StoreError>>, StoreError>;

/// The group rule over a backend's connection `conn`. `all` writes the whole group in one
/// transaction and commits it when every write succeeded: `Ok(true)`; `Ok(false)` when one
/// failed and it rolled back. `one` writes one in a transaction of its own, committed when it
/// succeeded: the outer error is the transaction's, the inner the write's.
pub(crate) fn commit_group<C: ?Sized, W>(
    conn: &mut C,
    writes: &[W],
    all: impl FnOnce(&mut C, &[W]) -> Result<bool, StoreError>,
    mut one: impl FnMut(&mut C, &W) -> Result<Result<(), StoreError>, StoreError>,
) -> GroupResult {
    // Rare (a write the gateway's own checks let through), so a failed group is simply
    // replayed one write per transaction to isolate it.
    if writes.len() > 1 && all(conn, writes)? {
        return Ok(writes.iter().map(|_| Ok(())).collect());
    }
    writes.iter().map(|w| one(conn, w)).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Committed writes; a write `0` fails.
    fn run(writes: &[u32], commits: &mut Vec<Vec<u32>>) -> GroupResult {
        let fails = |w: &u32| *w == 0;
        commit_group(
            commits,
            writes,
            |c, ws| {
                if ws.iter().any(fails) {
                    return Ok(false);
                }
                c.push(ws.to_vec());
                Ok(true)
            },
            |c, w| {
                if fails(w) {
                    return Ok(Err(StoreError::NoEntry(w.to_string())));
                }
                c.push(vec![*w]);
                Ok(Ok(()))
            },
        )
    }

    #[test]
    fn a_group_commits_once_or_replays_each_write_alone() {
        let mut commits = Vec::new();
        let results = run(&[1, 2, 3], &mut commits).unwrap();
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(commits, [vec![1, 2, 3]]);
        commits.clear();
        let results = run(&[1, 0, 3], &mut commits).unwrap();
        assert!(results[0].is_ok() && results[1].is_err() && results[2].is_ok());
        assert_eq!(commits, [vec![1], vec![3]]);
        commits.clear();
        assert!(run(&[0], &mut commits).unwrap()[0].is_err());
        assert!(run(&[], &mut commits).unwrap().is_empty());
        assert!(commits.is_empty());
    }
}
