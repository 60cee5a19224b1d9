//! What a long-running gateway needs from a store beyond [`Store`], and opening a store by its
//! location. The gateway, the dashboard and the CLI hold a `dyn Backend`, so they run on any
//! store that implements these traits (SQLite, and PostgreSQL for several gateways).

use ctxd_core::model::{Entry, EntryId};

use std::path::PathBuf;

use crate::{
    Durability, GroupResult, GroupWrite, PgStore, SessionId, SqliteStore, Store, StoreError,
};

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
    /// `sqlite` or `postgres`, for logs and metrics.
    fn kind(&self) -> &'static str;

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

/// The end of a session's log: how many entries it holds, the last appended, and the leaf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Head {
    pub entries: u64,
    pub last: Option<EntryId>,
    pub leaf: Option<EntryId>,
}

/// Where a store lives, parsed from `--store`: a file path, or a `postgres://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl From<PathBuf> for Location {
    fn from(path: PathBuf) -> Self {
        Self::Sqlite(path)
    }
}

impl From<&str> for Location {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl std::fmt::Display for Location {
    /// The path, or the URL without its password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

impl Location {
    pub fn parse(text: &str) -> Self {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Self::Postgres(text.to_owned())
        } else {
            Self::Sqlite(PathBuf::from(text))
        }
    }
}

/// Open the store at `location`, creating and migrating it as needed. `durability` applies to
/// SQLite (PostgreSQL's is the server's own `synchronous_commit`).
pub fn open(location: &Location, durability: Durability) -> Result<Box<dyn Backend>, StoreError> {
    match location {
        Location::Sqlite(path) => Ok(Box::new(SqliteStore::open(path, durability)?)),
        Location::Postgres(url) => Ok(Box::new(PgStore::open(url)?)),
    }
}

/// A connection URL with its password replaced, for messages and logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some((auth, host)) => (auth, host),
        None => return url.to_owned(),
    };
    let user = auth.split_once(':').map_or(auth, |(user, _)| user);
    if user.len() == auth.len() {
        return url.to_owned();
    }
    format!("{scheme}://{user}:***@{host}")
}

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
    fn kind(&self) -> &'static str {
        "sqlite"
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
            crate::sqlite::sessions::tail(&tx, session, known.saturating_sub(1))?
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

impl GroupStore for PgStore {
    fn write_group(&self, writes: &[GroupWrite<'_>]) -> GroupResult {
        PgStore::write_group(self, writes)
    }

    fn try_write_group(&self, writes: &[GroupWrite<'_>]) -> Option<GroupResult> {
        PgStore::try_write_group(self, writes)
    }

    fn index_pending(&self, session: SessionId, limit: u64) -> Result<(u64, bool), StoreError> {
        PgStore::index_pending(self, session, limit)
    }
}

impl Backend for PgStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn location(&self) -> String {
        PgStore::location(self).to_owned()
    }

    /// The same pool: a long read takes one connection thread and leaves the others.
    fn reader(&self) -> Result<Box<dyn Backend>, StoreError> {
        Ok(Box::new(self.clone()))
    }

    fn integrity_check(&self) -> Result<String, StoreError> {
        PgStore::integrity_check(self)
    }

    /// Several gateways share one database.
    fn shared(&self) -> bool {
        true
    }

    fn follow(&self, session: SessionId, known: u64) -> Result<(Head, Vec<Entry>), StoreError> {
        crate::postgres::follow(self, session, known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_and_redaction() {
        assert_eq!(
            Location::parse("/tmp/x.db"),
            Location::Sqlite("/tmp/x.db".into())
        );
        assert!(matches!(
            Location::parse("postgresql://u@h/db"),
            Location::Postgres(_)
        ));
        assert_eq!(
            redact("postgres://ctxd:secret@db:5432/ctxd"),
            "postgres://ctxd:***@db:5432/ctxd"
        );
        assert_eq!(redact("postgres://ctxd@db/ctxd"), "postgres://ctxd@db/ctxd");
        assert_eq!(redact("postgres://db/ctxd"), "postgres://db/ctxd");
    }
}
