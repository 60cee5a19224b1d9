//! ctxd-store: the durable session log.
//!
//! [`Store`] is what the engine needs from storage: sessions per tenant, atomic appends of entry
//! batches, the leaf, and reading a session back. [`SqliteStore`] implements it on one embedded
//! SQLite file (WAL, `synchronous=FULL` by default, one writer, versioned migrations, FTS5).
//! `PgStore` (the `postgres` feature, on by default) implements the same traits on PostgreSQL,
//! for several gateways on one database. Entries are never updated or deleted.
//!
//! ```
//! use ctxd_store::{SqliteStore, Store, NewEntry};
//! use ctxd_core::model::{Entry, EntryId, EntryKind, Message, Role, SessionMeta};
//!
//! let store = SqliteStore::open_in_memory().unwrap();
//! let s = store.open_session("", "demo", &SessionMeta::default()).unwrap();
//! let entry = Entry { id: EntryId::new("a"), parent: None, timestamp: None, sidechain: false,
//!     kind: EntryKind::Message(Message::text(Role::User, "hi")) };
//! store.append(s.id, &[NewEntry::new(entry)], None).unwrap();
//! assert_eq!(store.load(s.id).unwrap().entries.len(), 1);
//! ```

mod contract;
mod error;
mod location;
#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;

use ctxd_core::model::{Entry, EntryId, Session, SessionMeta};
use ctxd_core::spend::{Counter, Spend};
use serde::Serialize;

pub use contract::backend::{Backend, Durability, GroupStore, Head, StoreKind};
pub use contract::dump::{Dump, NoteRow, NoteVersionRow, NotesDump};
pub use contract::group::{GroupResult, GroupWrite};
pub(crate) use contract::history::RANKED_BLOCK;
pub use contract::history::{HistoryRow, HistoryStore, Visit, WindowRow};
pub use contract::notes::{Appended, Note, NoteMeta, NoteResult, NoteVersion, NotesStore, Written};
pub use error::StoreError;
pub use location::{open, redact, serve, Location, Serving};
#[cfg(feature = "postgres")]
pub use postgres::{PgStore, DEFAULT_POOL, PG_SCHEMA_VERSION};
pub use sqlite::{
    Checkpointer, Checkpoints, ServeLock, SqliteStore, WalPressure, SCHEMA_VERSION, WAL_SIZE_LIMIT,
};

/// The store's own id of a session (stable for the life of the store).
pub type SessionId = i64;

/// A session as the store knows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SessionRecord {
    pub id: SessionId,
    pub tenant: String,
    /// The caller's key for the session (the agent's session id, or the imported file's id).
    pub key: String,
    pub meta: SessionMeta,
    pub created_at: String,
    pub updated_at: String,
    pub leaf: Option<EntryId>,
    pub entry_count: u64,
}

/// An entry to append, with the client's own bytes for it when the gateway has them.
#[derive(Clone, Debug)]
pub struct NewEntry {
    pub entry: Entry,
    pub raw: Option<Vec<u8>>,
}

impl NewEntry {
    pub fn new(entry: Entry) -> Self {
        Self { entry, raw: None }
    }
}

/// Sessions and their append-only entries, with the notes beside them ([`NotesStore`]) and
/// the history index over them ([`HistoryStore`]).
pub trait Store: NotesStore + HistoryStore {
    /// The session `key` of `tenant`, created with `meta` when it does not exist yet.
    fn open_session(
        &self,
        tenant: &str,
        key: &str,
        meta: &SessionMeta,
    ) -> Result<SessionRecord, StoreError>;

    fn find_session(&self, tenant: &str, key: &str) -> Result<Option<SessionRecord>, StoreError>;

    /// The session with this id, only if it belongs to `tenant`.
    fn session(&self, tenant: &str, id: SessionId) -> Result<Option<SessionRecord>, StoreError>;

    /// The tenants that have sessions. For the operator's own tools (the CLI on the store
    /// file), never for a tenant's request.
    fn tenants(&self) -> Result<Vec<String>, StoreError>;

    /// Every session of `tenant`, most recently updated first.
    fn list_sessions(&self, tenant: &str) -> Result<Vec<SessionRecord>, StoreError>;

    /// Append `batch` atomically: all entries or none. The leaf moves to `leaf`, or to the last
    /// entry of the batch. Returns the batch number.
    fn append(
        &self,
        session: SessionId,
        batch: &[NewEntry],
        leaf: Option<&EntryId>,
    ) -> Result<i64, StoreError>;

    /// Move the leaf to an existing entry (the client rewound or switched branches).
    fn set_leaf(&self, session: SessionId, leaf: &EntryId) -> Result<(), StoreError>;

    /// The whole session: metadata, every entry in append order, the leaf.
    fn load(&self, session: SessionId) -> Result<Session, StoreError>;

    /// One entry by id, as it was appended.
    fn entry(&self, session: SessionId, id: &EntryId) -> Result<Option<Entry>, StoreError>;

    /// The client's own bytes of an entry, when they were stored.
    fn raw(&self, session: SessionId, id: &EntryId) -> Result<Option<Vec<u8>>, StoreError>;

    /// The store-wide setting `key`; when absent, `value` is stored first (atomically, so two
    /// processes racing agree on one value). Used for the gateway's tenant-hash key.
    fn setting_or_insert(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, StoreError>;

    /// Store `value` as the store-wide setting `key`, replacing what was there (what the
    /// gateways learned, e.g. a model's real context window: every gateway on the store reads
    /// it).
    fn put_setting(&self, key: &str, value: &[u8]) -> Result<(), StoreError>;

    /// Every store-wide setting whose key starts with `prefix`, in key order.
    fn settings_with_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// The spending counter of a budget's scope and period (zero when none was kept yet).
    fn spend(&self, scope: &str, period: &str) -> Result<Counter, StoreError>;

    /// Reserve `amount` on the counter unless what it has used and reserved already reaches
    /// `bound` in either unit: one atomic statement, so any number of gateways sharing the
    /// store admit at most one request past a limit. The counter after, and whether the
    /// reservation was made.
    fn spend_reserve(
        &self,
        scope: &str,
        period: &str,
        amount: Spend,
        bound: Spend,
    ) -> Result<(bool, Counter), StoreError>;

    /// Add `used` to the counter and take `release` off what it has reserved (never below 0).
    fn spend_settle(
        &self,
        scope: &str,
        period: &str,
        used: Spend,
        release: Spend,
    ) -> Result<(), StoreError>;
}
