//! The rows a store copy carries besides sessions (`ctxd store copy`): store settings (the
//! gateway's tenant key: without it no credential finds its sessions in the copy) and notes with
//! every version, as stored. Sessions are copied through [`crate::Store`] itself.

use crate::StoreError;

/// A note's current state, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteRow {
    pub tenant: String,
    pub home: String,
    pub path: String,
    pub body: String,
    pub bytes: i64,
    pub lines: i64,
    pub version: i64,
    pub stale: bool,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// One change of a note path, as stored (see `sqlite/schema/v1_notes.sql`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteVersionRow {
    pub tenant: String,
    pub home: String,
    pub path: String,
    pub version: i64,
    pub op: String,
    pub body: Option<String>,
    pub other: Option<String>,
    pub at_ms: i64,
}

/// Every note and every version of a store, in key order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotesDump {
    pub notes: Vec<NoteRow>,
    pub versions: Vec<NoteVersionRow>,
}

/// Reading and restoring what a copy carries besides sessions.
pub trait Dump {
    /// Every store-wide setting: (key, value).
    fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// Every note and version.
    fn notes_dump(&self) -> Result<NotesDump, StoreError>;

    /// Insert `dump`'s rows as they are, in one transaction. A row whose key exists already
    /// fails the whole restore (a copy goes into a store without notes).
    fn notes_restore(&self, dump: &NotesDump) -> Result<(), StoreError>;
}
