//! The notes store: virtual files per tenant and home, every change versioned.
//!
//! A home is a key (`session:<key>`, `project:<key>`, `human`, `agent:<name>`, `model:<name>`,
//! from [`ctxd_core::notes::Home::key`]); paths are validated by the core's address grammar
//! before they reach the store. Times are milliseconds since the Unix epoch, given by the caller.
//! Every change writes a version row in the same transaction as the change, so an overwrite, an
//! append, a rename or a delete loses nothing ([`NotesStore::note_version_body`]).
//!
//! Results are `Result<_, StoreError>` for storage failures; a refusal the caller can correct (a
//! note over the size limit, a rename onto an existing note, a missing note) is the inner
//! `Result<_, NoteError>` of a [`NoteResult`], and nothing is written.

use ctxd_core::notes::{ListOrder, NoteError};
use serde::Serialize;

use crate::StoreError;

/// A storage failure outside, a refusal inside.
pub type NoteResult<T> = Result<Result<T, NoteError>, StoreError>;

/// A note without its body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoteMeta {
    pub home: String,
    pub path: String,
    pub bytes: usize,
    pub lines: usize,
    /// The version number of the note's current state.
    pub version: i64,
    pub stale: bool,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A note with its body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Note {
    pub meta: NoteMeta,
    pub body: String,
}

/// What a write did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Written {
    pub meta: NoteMeta,
    /// The note existed (its previous body is kept as an earlier version).
    pub replaced: bool,
}

/// What an append did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Appended {
    pub meta: NoteMeta,
    /// The note did not exist and was created.
    pub created: bool,
    /// Bytes added (the text, plus a joining newline when the note did not end with one).
    pub added_bytes: usize,
}

/// One change in a note path's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NoteVersion {
    pub version: i64,
    /// `write`, `append`, `delete`, `rename_in`, `rename_out`, `stale`, `fresh`.
    pub op: String,
    /// For renames: the other side, `home\tpath`.
    pub other: Option<String>,
    pub at_ms: i64,
}

/// Notes per tenant and home.
pub trait NotesStore {
    /// Create or replace the note (and clear its stale flag). Refused over the size limit.
    fn note_write(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        body: &str,
        at_ms: i64,
    ) -> NoteResult<Written>;

    /// Append `text` (creating the note when absent; see `ctxd_core::notes::text::append`), and
    /// clear its stale flag. Refused when the result would exceed the size limit.
    fn note_append(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        text: &str,
        at_ms: i64,
    ) -> NoteResult<Appended>;

    fn note_read(&self, tenant: &str, home: &str, path: &str) -> Result<Option<Note>, StoreError>;

    /// Notes of one home whose path starts with `prefix`, ordered, at most `limit`.
    fn note_list(
        &self,
        tenant: &str,
        home: &str,
        prefix: &str,
        order: ListOrder,
        limit: usize,
    ) -> Result<Vec<NoteMeta>, StoreError>;

    /// Notes of one home under `prefix` whose body contains `query` (literal, case-sensitive),
    /// by path.
    fn note_search(
        &self,
        tenant: &str,
        home: &str,
        prefix: &str,
        query: &str,
    ) -> Result<Vec<Note>, StoreError>;

    /// Every note of one home with its body, most recently updated first (the boot's snapshot).
    fn note_home(&self, tenant: &str, home: &str) -> Result<Vec<Note>, StoreError>;

    /// Delete the note; `None` when there is none. Its body stays in the versions.
    fn note_delete(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        at_ms: i64,
    ) -> Result<Option<NoteMeta>, StoreError>;

    /// Move a note to another path (possibly in another home of the same tenant). Refused when
    /// the source is missing or the target exists.
    fn note_rename(
        &self,
        tenant: &str,
        from: (&str, &str),
        to: (&str, &str),
        at_ms: i64,
    ) -> NoteResult<NoteMeta>;

    /// Set or clear the stale flag; `None` when there is no such note. The update time is kept
    /// (the text did not change).
    fn note_set_stale(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        stale: bool,
        at_ms: i64,
    ) -> Result<Option<NoteMeta>, StoreError>;

    /// Every change of a note path, oldest first (also after a delete).
    fn note_versions(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
    ) -> Result<Vec<NoteVersion>, StoreError>;

    /// The body of a note path as it was at `version`; `None` when the note did not exist then
    /// (deleted, renamed away) or there is no such version.
    fn note_version_body(
        &self,
        tenant: &str,
        home: &str,
        path: &str,
        version: i64,
    ) -> Result<Option<String>, StoreError>;
}

/// The body of a note path at `version`, from its version rows `(version, op, body)` newest
/// first from `version` down: the last whole body (`write`, `rename_in`) plus the appends
/// since. `None` when the note did not exist then. One rule for every store.
pub(crate) fn body_at(
    rows: impl IntoIterator<Item = Result<(i64, String, Option<String>), StoreError>>,
    version: i64,
    home: &str,
    path: &str,
) -> Result<Option<String>, StoreError> {
    let mut appends: Vec<String> = Vec::new();
    for (n, row) in rows.into_iter().enumerate() {
        let (v, op, body) = row?;
        if n == 0 && v != version {
            return Ok(None);
        }
        match (op.as_str(), body) {
            ("write" | "rename_in", Some(mut out)) => {
                for delta in appends.iter().rev() {
                    out.push_str(delta);
                }
                return Ok(Some(out));
            }
            ("append", Some(delta)) => appends.push(delta),
            ("delete" | "rename_out", _) => return Ok(None),
            ("stale" | "fresh", _) => {}
            (other, _) => {
                return Err(StoreError::Corrupt {
                    id: format!("note {home}/{path} version {v}"),
                    message: format!("unexpected version row {other}"),
                })
            }
        }
    }
    Ok(None)
}
