//! What a long-running gateway needs from a store beyond [`Store`]. The gateway, the dashboard
//! and the CLI hold a `dyn Backend`, so they run on any store that implements these traits
//! (SQLite, and PostgreSQL for several gateways).

use ctxd_core::model::{Entry, EntryId};

use crate::{GroupResult, GroupWrite, SessionId, Store, StoreError};

/// Group commit and deferred indexing: the gateway's writer commits many requests' batches in
/// one transaction holding the log alone, and catches the derived indexes up afterwards.
pub trait GroupStore: Store {
    /// Apply `writes` in order. The outer error is a transaction's own (a commit that failed);
    /// otherwise each write's result, in order.
    fn write_group(&self, writes: &[GroupWrite<'_>]) -> GroupResult;

    /// [`GroupStore::write_group`] when that can start now without waiting for another call;
    /// `None`, having written nothing, when it cannot (a caller that must not block, such as an
    /// async worker, hands the group to a thread instead).
    fn try_write_group(&self, writes: &[GroupWrite<'_>]) -> Option<GroupResult>;

    /// Index at most `limit` of `session`'s entries the derived indexes lack, in one
    /// transaction. Returns how many were indexed, and whether the session is now current.
    fn index_pending(&self, session: SessionId, limit: u64) -> Result<(u64, bool), StoreError>;
}

/// A store a gateway can run on.
pub trait Backend: GroupStore + crate::Dump + Send + Sync {
    /// The database the store is on, for logs and metrics. What a caller decides by belongs in
    /// a capability method instead ([`Backend::shared`], [`Backend::quick_commit`]).
    fn kind(&self) -> StoreKind;

    /// A commit costs microseconds: no network round trip and no wait for the disk (SQLite at
    /// [`Durability::Normal`]). A request can then commit its own turn when it finds the store
    /// free rather than hand it to a writer thread.
    fn quick_commit(&self) -> bool {
        false
    }

    /// The location a person would pass to `--store` again, without any password.
    fn location(&self) -> String;

    /// A handle for long reads (the dashboard) that does not queue behind the gateway's
    /// commits: SQLite opens a second connection on its file; a pooled backend shares itself.
    fn reader(&self) -> Result<Box<dyn Backend>, StoreError>;

    /// The backend's own consistency check: `ok`, or what is wrong.
    fn integrity_check(&self) -> Result<String, StoreError>;

    /// Copy a write-ahead log back and empty it, from the connection that writes (no other
    /// writer to wait for); whether it was emptied (a reader that did not let go in time
    /// leaves it for a later call). A backend without such a log has nothing to do.
    fn truncate_wal(&self) -> Result<bool, StoreError> {
        Ok(true)
    }

    /// Other processes may append to the sessions this one serves (several gateways on one
    /// server), so a cached copy of a session is checked with [`Backend::follow`] before use.
    /// A SQLite store is served by one gateway alone (its lock file).
    fn shared(&self) -> bool {
        false
    }

    /// For a cached copy of the session holding its first `known` entries: how far the
    /// session's log goes ([`Head`]) and, when it holds more, its entries from the copy's last
    /// on (the `known`th first, for the copy to check it is its own), in append order. One
    /// consistent read (on PostgreSQL one round trip: it runs before every request of a
    /// session whose cache another gateway may have outdated).
    fn follow(&self, session: SessionId, known: u64) -> Result<(Head, Vec<Entry>), StoreError>;
}

/// Which database a store is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

impl StoreKind {
    /// `sqlite` or `postgres`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The end of a session's log: how many entries it holds, the last appended, and the leaf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Head {
    pub entries: u64,
    pub last: Option<EntryId>,
    pub leaf: Option<EntryId>,
}

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
