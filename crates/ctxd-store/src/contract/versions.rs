//! Note versioning, the same on every backend: what each change records in a path's history and
//! what it leaves as the note's current state. A backend runs each operation in one transaction
//! of its own, holding whatever lock makes a path's next version number its own, and keeps only
//! the SQL ([`NoteRows`]).

use ctxd_core::notes::{text, NoteError};

use crate::contract::notes::{Appended, Note, NoteMeta, NoteResult, Written};
use crate::StoreError;

/// A note's address within its tenant: (home, path).
pub(crate) type At<'a> = (&'a str, &'a str);

/// One change in a path's history, as recorded (see `sqlite/schema/v1_notes.sql`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VersionRow<'a> {
    pub(crate) op: &'a str,
    pub(crate) body: Option<&'a str>,
    pub(crate) other: Option<&'a str>,
}

/// The current state a note is put in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct State<'a> {
    pub(crate) body: &'a str,
    pub(crate) version: i64,
    pub(crate) stale: bool,
    pub(crate) created_ms: i64,
    pub(crate) updated_ms: i64,
}

/// One tenant's note rows inside the caller's transaction.
pub(crate) trait NoteRows {
    /// The note's current state.
    fn current(&mut self, at: At<'_>) -> Result<Option<Note>, StoreError>;

    /// Record the path's next version (numbering continues across deletes and renames); its
    /// number.
    fn record(&mut self, at: At<'_>, at_ms: i64, row: VersionRow<'_>) -> Result<i64, StoreError>;

    /// Insert or replace the note's current state.
    fn put(&mut self, at: At<'_>, state: State<'_>) -> Result<NoteMeta, StoreError>;

    /// Remove the note's current state (its versions stay).
    fn remove(&mut self, at: At<'_>) -> Result<(), StoreError>;

    /// Set the stale flag and the version of an existing note, keeping its update time.
    fn flag(
        &mut self,
        at: At<'_>,
        stale: bool,
        version: i64,
    ) -> Result<Option<NoteMeta>, StoreError>;
}

const fn row<'a>(op: &'a str, body: Option<&'a str>, other: Option<&'a str>) -> VersionRow<'a> {
    VersionRow { op, body, other }
}

/// [`crate::NotesStore::note_write`], once the size was checked (`text::check_size`, before
/// the transaction).
pub(crate) fn write(
    rows: &mut impl NoteRows,
    at: At<'_>,
    body: &str,
    at_ms: i64,
) -> Result<Written, StoreError> {
    let existing = rows.current(at)?;
    let version = rows.record(at, at_ms, row("write", Some(body), None))?;
    let created_ms = existing.as_ref().map_or(at_ms, |n| n.meta.created_at_ms);
    let meta = rows.put(
        at,
        State {
            body,
            version,
            stale: false,
            created_ms,
            updated_ms: at_ms,
        },
    )?;
    Ok(Written {
        meta,
        replaced: existing.is_some(),
    })
}

/// [`crate::NotesStore::note_append`].
pub(crate) fn append(
    rows: &mut impl NoteRows,
    at: At<'_>,
    text_in: &str,
    at_ms: i64,
) -> NoteResult<Appended> {
    let existing = rows.current(at)?;
    let old = existing.as_ref().map_or("", |n| n.body.as_str());
    let (body, delta) = match text::append(at.1, old, text_in) {
        Ok(done) => done,
        Err(e) => return Ok(Err(e)),
    };
    // A note created by an append records its whole body, so every version can be rebuilt
    // from the last whole body before it.
    let change = if existing.is_some() {
        row("append", Some(&delta), None)
    } else {
        row("write", Some(&body), None)
    };
    let version = rows.record(at, at_ms, change)?;
    let created_ms = existing.as_ref().map_or(at_ms, |n| n.meta.created_at_ms);
    let meta = rows.put(
        at,
        State {
            body: &body,
            version,
            stale: false,
            created_ms,
            updated_ms: at_ms,
        },
    )?;
    Ok(Ok(Appended {
        meta,
        created: existing.is_none(),
        added_bytes: delta.len(),
    }))
}

/// [`crate::NotesStore::note_delete`].
pub(crate) fn delete(
    rows: &mut impl NoteRows,
    at: At<'_>,
    at_ms: i64,
) -> Result<Option<NoteMeta>, StoreError> {
    let Some(existing) = rows.current(at)? else {
        return Ok(None);
    };
    rows.record(at, at_ms, row("delete", None, None))?;
    rows.remove(at)?;
    Ok(Some(existing.meta))
}

/// A rename onto the note's own address is refused before any transaction.
pub(crate) fn check_rename(from: At<'_>, to: At<'_>) -> Result<(), NoteError> {
    if from == to {
        return Err(NoteError::Argument(
            "the new address is the same as the old one".to_owned(),
        ));
    }
    Ok(())
}

/// [`crate::NotesStore::note_rename`], once [`check_rename`] passed: the source's history ends
/// with `rename_out`, the target's continues with `rename_in` holding the whole body.
pub(crate) fn rename(
    rows: &mut impl NoteRows,
    from: At<'_>,
    to: At<'_>,
    at_ms: i64,
) -> NoteResult<NoteMeta> {
    let Some(source) = rows.current(from)? else {
        return Ok(Err(NoteError::NotFound {
            address: from.1.to_owned(),
        }));
    };
    if rows.current(to)?.is_some() {
        return Ok(Err(NoteError::Exists {
            address: to.1.to_owned(),
        }));
    }
    let to_label = format!("{}\t{}", to.0, to.1);
    let from_label = format!("{}\t{}", from.0, from.1);
    rows.record(from, at_ms, row("rename_out", None, Some(&to_label)))?;
    rows.remove(from)?;
    let version = rows.record(
        to,
        at_ms,
        row("rename_in", Some(&source.body), Some(&from_label)),
    )?;
    let meta = rows.put(
        to,
        State {
            body: &source.body,
            version,
            stale: source.meta.stale,
            created_ms: source.meta.created_at_ms,
            updated_ms: at_ms,
        },
    )?;
    Ok(Ok(meta))
}

/// [`crate::NotesStore::note_set_stale`]: a flag already as asked records nothing.
pub(crate) fn set_stale(
    rows: &mut impl NoteRows,
    at: At<'_>,
    stale: bool,
    at_ms: i64,
) -> Result<Option<NoteMeta>, StoreError> {
    let Some(existing) = rows.current(at)? else {
        return Ok(None);
    };
    if existing.meta.stale == stale {
        return Ok(Some(existing.meta));
    }
    let op = if stale { "stale" } else { "fresh" };
    let version = rows.record(at, at_ms, row(op, None, None))?;
    rows.flag(at, stale, version)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::contract::notes::body_at;
    use std::collections::BTreeMap;

    /// A path's version row as stored: (home, path, version, op, body, other).
    type Version = (String, String, i64, String, Option<String>, Option<String>);

    /// One tenant's rows in memory.
    #[derive(Default)]
    struct Rows {
        notes: BTreeMap<(String, String), Note>,
        versions: Vec<Version>,
    }

    fn key(at: At<'_>) -> (String, String) {
        (at.0.to_owned(), at.1.to_owned())
    }

    impl NoteRows for Rows {
        fn current(&mut self, at: At<'_>) -> Result<Option<Note>, StoreError> {
            Ok(self.notes.get(&key(at)).cloned())
        }

        fn record(&mut self, at: At<'_>, _: i64, r: VersionRow<'_>) -> Result<i64, StoreError> {
            let version = 1 + self
                .versions
                .iter()
                .filter(|v| (v.0.as_str(), v.1.as_str()) == at)
                .map(|v| v.2)
                .max()
                .unwrap_or(0);
            self.versions.push((
                at.0.to_owned(),
                at.1.to_owned(),
                version,
                r.op.to_owned(),
                r.body.map(str::to_owned),
                r.other.map(str::to_owned),
            ));
            Ok(version)
        }

        fn put(&mut self, at: At<'_>, s: State<'_>) -> Result<NoteMeta, StoreError> {
            let meta = NoteMeta {
                home: at.0.to_owned(),
                path: at.1.to_owned(),
                bytes: s.body.len(),
                lines: text::line_count(s.body),
                version: s.version,
                stale: s.stale,
                created_at_ms: s.created_ms,
                updated_at_ms: s.updated_ms,
            };
            let note = Note {
                meta: meta.clone(),
                body: s.body.to_owned(),
            };
            self.notes.insert(key(at), note);
            Ok(meta)
        }

        fn remove(&mut self, at: At<'_>) -> Result<(), StoreError> {
            self.notes.remove(&key(at));
            Ok(())
        }

        fn flag(
            &mut self,
            at: At<'_>,
            stale: bool,
            v: i64,
        ) -> Result<Option<NoteMeta>, StoreError> {
            Ok(self.notes.get_mut(&key(at)).map(|n| {
                n.meta.stale = stale;
                n.meta.version = v;
                n.meta.clone()
            }))
        }
    }

    impl Rows {
        fn body_at(&self, at: At<'_>, version: i64) -> Option<String> {
            let mut rows: Vec<_> = self
                .versions
                .iter()
                .filter(|v| (v.0.as_str(), v.1.as_str()) == at && v.2 <= version)
                .map(|v| Ok((v.2, v.3.clone(), v.4.clone())))
                .collect();
            rows.reverse();
            body_at(rows, version, at.0, at.1).unwrap()
        }

        fn ops(&self, at: At<'_>) -> Vec<&str> {
            self.versions
                .iter()
                .filter(|v| (v.0.as_str(), v.1.as_str()) == at)
                .map(|v| v.3.as_str())
                .collect()
        }
    }

    #[test]
    fn every_change_is_a_version_and_every_version_can_be_read_back() {
        let mut rows = Rows::default();
        let a = ("human", "a.md");
        let created = append(&mut rows, a, "one", 10).unwrap().unwrap();
        assert!(created.created);
        let appended = append(&mut rows, a, "two", 20).unwrap().unwrap();
        assert!(!appended.created && appended.meta.created_at_ms == 10);
        let stale = set_stale(&mut rows, a, true, 30).unwrap().unwrap();
        assert!(stale.stale && stale.updated_at_ms == 20 && stale.version == 3);
        assert_eq!(
            set_stale(&mut rows, a, true, 31).unwrap().unwrap().version,
            3
        );
        let written = write(&mut rows, a, "new", 40).unwrap();
        assert!(written.replaced && !written.meta.stale && written.meta.created_at_ms == 10);
        assert_eq!(rows.ops(a), ["write", "append", "stale", "write"]);
        assert_eq!(rows.body_at(a, 1).as_deref(), Some("one"));
        assert_eq!(rows.body_at(a, 3).as_deref(), Some("one\ntwo"));
        assert_eq!(rows.body_at(a, 4).as_deref(), Some("new"));
        assert!(delete(&mut rows, a, 50).unwrap().is_some());
        assert!(delete(&mut rows, a, 51).unwrap().is_none());
        assert_eq!(rows.body_at(a, 5), None);
        // Numbering continues across the delete.
        assert_eq!(write(&mut rows, a, "again", 60).unwrap().meta.version, 6);
    }

    #[test]
    fn a_rename_moves_the_body_and_keeps_both_histories() {
        let mut rows = Rows::default();
        let (a, b) = (("human", "a.md"), ("agent:x", "b.md"));
        assert!(check_rename(a, a).is_err());
        assert!(check_rename(a, b).is_ok());
        assert!(matches!(
            rename(&mut rows, a, b, 1).unwrap(),
            Err(NoteError::NotFound { .. })
        ));
        write(&mut rows, a, "body", 1).unwrap();
        write(&mut rows, b, "other", 2).unwrap();
        assert!(matches!(
            rename(&mut rows, a, b, 3).unwrap(),
            Err(NoteError::Exists { .. })
        ));
        delete(&mut rows, b, 4).unwrap();
        let moved = rename(&mut rows, a, b, 5).unwrap().unwrap();
        assert_eq!((moved.created_at_ms, moved.updated_at_ms), (1, 5));
        assert_eq!(rows.ops(a), ["write", "rename_out"]);
        assert_eq!(rows.ops(b), ["write", "delete", "rename_in"]);
        assert_eq!(rows.versions[4].5.as_deref(), Some("human\ta.md"));
        assert_eq!(rows.body_at(b, 3).as_deref(), Some("body"));
        assert_eq!(rows.body_at(a, 2), None);
    }

    #[test]
    fn an_append_over_the_limit_is_refused_and_records_nothing() {
        let mut rows = Rows::default();
        let big = "x".repeat(ctxd_core::notes::MAX_NOTE_BYTES + 1);
        assert!(append(&mut rows, ("human", "a.md"), &big, 1)
            .unwrap()
            .is_err());
        assert!(rows.versions.is_empty() && rows.notes.is_empty());
    }
}
