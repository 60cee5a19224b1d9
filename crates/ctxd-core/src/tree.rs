//! The active branch: the path from the leaf back to the root.

use std::collections::HashMap;

use crate::model::{Entry, EntryId, Session};

/// Index of entries by id, built once per read of a session.
pub struct Index<'a> {
    by_id: HashMap<&'a str, usize>,
}

impl<'a> Index<'a> {
    pub fn new(session: &'a Session) -> Self {
        let mut by_id = HashMap::with_capacity(session.entries.len());
        for (i, e) in session.entries.iter().enumerate() {
            by_id.insert(e.id.as_str(), i);
        }
        Self { by_id }
    }

    pub fn get(&self, id: &EntryId) -> Option<usize> {
        self.by_id.get(id.as_str()).copied()
    }
}

/// The position of the leaf: the session's `leaf` when it names an entry, else the last entry
/// that is not a subagent sidechain (or the last entry when all are).
pub fn leaf_position(session: &Session, index: &Index<'_>) -> Option<usize> {
    if let Some(pos) = session.leaf.as_ref().and_then(|leaf| index.get(leaf)) {
        return Some(pos);
    }
    session
        .entries
        .iter()
        .rposition(|e| !e.sidechain)
        .or_else(|| session.entries.len().checked_sub(1))
}

/// Positions (in `session.entries`) of the active branch, root first.
///
/// A parent id that names no entry ends the walk there (the branch starts at the orphan), and a
/// cycle is cut at the first repeat, so a damaged file still gives a branch.
pub fn active_branch(session: &Session) -> Vec<usize> {
    let index = Index::new(session);
    let Some(leaf) = leaf_position(session, &index) else {
        return Vec::new();
    };
    branch_to(session, &index, leaf)
}

/// Positions from the root to `leaf`, root first.
pub fn branch_to(session: &Session, index: &Index<'_>, leaf: usize) -> Vec<usize> {
    let mut path = vec![leaf];
    let mut seen = std::collections::HashSet::new();
    seen.insert(leaf);
    let mut current: &Entry = &session.entries[leaf];
    while let Some(parent) = current.parent.as_ref().and_then(|p| index.get(p)) {
        if !seen.insert(parent) {
            break;
        }
        path.push(parent);
        current = &session.entries[parent];
    }
    path.reverse();
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EntryKind, Message, Role};

    fn entry(id: &str, parent: Option<&str>) -> Entry {
        Entry {
            id: EntryId::new(id),
            parent: parent.map(EntryId::new),
            timestamp: None,
            sidechain: false,
            kind: EntryKind::Message(Message::text(Role::User, id)),
        }
    }

    #[test]
    fn branch_follows_parents_from_the_leaf() {
        let session = Session {
            entries: vec![
                entry("a", None),
                entry("b", Some("a")),
                entry("c", Some("b")),
                entry("d", Some("a")),
            ],
            ..Default::default()
        };
        assert_eq!(active_branch(&session), vec![0, 3]);
        let with_leaf = Session {
            leaf: Some(EntryId::new("c")),
            ..session
        };
        assert_eq!(active_branch(&with_leaf), vec![0, 1, 2]);
    }

    #[test]
    fn sidechains_are_not_the_leaf_and_cycles_end() {
        let mut side = entry("s", Some("a"));
        side.sidechain = true;
        let session = Session {
            entries: vec![entry("a", Some("b")), entry("b", Some("a")), side],
            ..Default::default()
        };
        assert_eq!(active_branch(&session), vec![0, 1]);
    }
}
