/// Why a store operation failed. Nothing is partly written when an error is returned.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A PostgreSQL statement failed (the server's message; never the connection's password).
    #[error("store: postgres: {0}")]
    Postgres(String),
    /// The database cannot be reached now; a later call reconnects.
    #[error("store: unavailable: {0}")]
    Unavailable(String),
    #[error("store: cannot open {path}: {message}")]
    Open { path: String, message: String },
    #[error("store: schema version {found} is newer than this ctxd supports ({supported})")]
    TooNew { found: u32, supported: u32 },
    #[error("store: no session {0}")]
    NoSession(String),
    #[error("store: entry {id} already exists in this session")]
    DuplicateEntry { id: String },
    #[error("store: no entry {0} in this session")]
    NoEntry(String),
    /// A conditional append found the session's leaf elsewhere: another writer (another
    /// gateway) moved it since the caller read it. Nothing was written.
    #[error("store: the session's leaf is {found:?}, not {expected}: it moved")]
    LeafMoved {
        expected: String,
        found: Option<String>,
    },
    /// A gateway holds the SQLite store's serve lock ([`crate::ServeLock`]).
    #[error(
        "the store {store} is already served by another ctxd serve{holder}: one gateway per \
         store (its indexed sessions would not see the other's writes); stop it or use \
         another --store"
    )]
    AlreadyServed { store: String, holder: String },
    #[error("store: a stored entry is unreadable ({id}): {message}")]
    Corrupt { id: String, message: String },
}
