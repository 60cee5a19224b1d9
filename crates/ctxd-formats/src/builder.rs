//! Assembling a session entry by entry, with synthesised ids where a format has none.

use ctxd_core::model::{Entry, EntryId, EntryKind, Session};

/// Builds a session. Linear formats use [`Builder::push_linear`], which chains each entry to the
/// previous one; tree formats push entries with their own ids and parents.
#[derive(Debug, Default)]
pub(crate) struct Builder {
    pub session: Session,
    last: Option<EntryId>,
    /// Entries pushed for the current line, so several entries from one line get distinct ids.
    line: usize,
    on_line: usize,
}

impl Builder {
    /// Append an entry whose parent is the previously appended one. Its id is `L<line>`, or
    /// `L<line>.<n>` for the n-th further entry made from the same line: stable across imports.
    pub fn push_linear(
        &mut self,
        line_no: usize,
        timestamp: Option<String>,
        kind: EntryKind,
    ) -> EntryId {
        if self.line != line_no {
            self.line = line_no;
            self.on_line = 0;
        }
        let id = if self.on_line == 0 {
            EntryId(format!("L{line_no}"))
        } else {
            EntryId(format!("L{line_no}.{}", self.on_line))
        };
        self.on_line += 1;
        self.push(Entry {
            id: id.clone(),
            parent: self.last.clone(),
            timestamp,
            sidechain: false,
            kind,
        });
        id
    }

    /// Append an entry as it is; it becomes the parent of the next linear entry.
    pub fn push(&mut self, entry: Entry) {
        self.last = Some(entry.id.clone());
        self.session.entries.push(entry);
    }

    /// The id of the last appended entry.
    #[allow(dead_code)] // for the tree importers
    pub fn last(&self) -> Option<&EntryId> {
        self.last.as_ref()
    }

    /// Make `id` the parent of the next linear entry (after a branch point, a compaction...).
    #[allow(dead_code)] // for the tree importers
    pub fn set_last(&mut self, id: Option<EntryId>) {
        self.last = id;
    }

    pub fn finish(self) -> Session {
        self.session
    }
}
