//! Group commit on PostgreSQL ([`crate::contract::group`]). The group's sessions are locked
//! first, in id order, so two gateways' groups over the same sessions wait for each other
//! instead of deadlocking.

use ctxd_core::model::EntryId;
use postgres::{Client, Transaction};

use super::prepared::Prepared;
use super::sessions::{append_in, set_leaf_in};
use super::{pg, PgStore};
use crate::contract::entry::Indexing;
use crate::contract::group::commit_group;
use crate::{GroupResult, GroupWrite, NewEntry, SessionId, StoreError};

/// A [`GroupWrite`] with its data owned, to cross to a connection thread.
enum Owned {
    Append {
        session: SessionId,
        entries: Vec<NewEntry>,
        expect_leaf: Option<EntryId>,
    },
    SetLeaf {
        session: SessionId,
        leaf: EntryId,
    },
}

impl Owned {
    fn session(&self) -> SessionId {
        match self {
            Self::Append { session, .. } | Self::SetLeaf { session, .. } => *session,
        }
    }
}

impl PgStore {
    pub fn write_group(&self, writes: &[GroupWrite<'_>]) -> GroupResult {
        let writes = owned(writes);
        self.pool.run(move |c| write_group_in(c, &writes))
    }

    /// [`PgStore::write_group`] when a connection thread is idle now; `None`, having written
    /// nothing, when every one is busy.
    pub fn try_write_group(&self, writes: &[GroupWrite<'_>]) -> Option<GroupResult> {
        (self.pool.idle() > 0).then(|| self.write_group(writes))
    }
}

fn owned(writes: &[GroupWrite<'_>]) -> Vec<Owned> {
    writes
        .iter()
        .map(|w| match *w {
            GroupWrite::Append {
                session,
                entries,
                expect_leaf,
            } => Owned::Append {
                session,
                entries: entries.to_vec(),
                expect_leaf: expect_leaf.cloned(),
            },
            GroupWrite::SetLeaf { session, leaf } => Owned::SetLeaf {
                session,
                leaf: leaf.clone(),
            },
        })
        .collect()
}

fn write_group_in(c: &mut Client, writes: &[Owned]) -> GroupResult {
    commit_group(
        c,
        writes,
        |c, writes| {
            let mut tx = c.transaction().map_err(pg)?;
            let mut sessions: Vec<SessionId> = writes.iter().map(Owned::session).collect();
            sessions.sort_unstable();
            sessions.dedup();
            tx.execute_cached(
                "SELECT id FROM sessions WHERE id = ANY($1) ORDER BY id FOR UPDATE",
                &[&sessions],
            )?;
            if writes.iter().try_for_each(|w| apply(&mut tx, w)).is_err() {
                // Dropped: rolled back.
                return Ok(false);
            }
            tx.commit().map_err(pg)?;
            Ok(true)
        },
        |c, write| {
            let mut tx = c.transaction().map_err(pg)?;
            let result = apply(&mut tx, write);
            if result.is_ok() {
                tx.commit().map_err(pg)?;
            }
            Ok(result)
        },
    )
}

fn apply(tx: &mut Transaction<'_>, write: &Owned) -> Result<(), StoreError> {
    match write {
        Owned::Append {
            session,
            entries,
            expect_leaf,
        } => append_in(
            tx,
            *session,
            entries,
            None,
            expect_leaf.as_ref(),
            Indexing::Deferred,
        )
        .map(|_| ()),
        Owned::SetLeaf { session, leaf } => set_leaf_in(tx, *session, leaf),
    }
}
