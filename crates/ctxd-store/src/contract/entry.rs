//! How an entry and a session's metadata are stored, and the checks an append makes, the same on
//! every backend: a stored log reads back the same whichever store wrote it.

use ctxd_core::model::{Entry, EntryId, EntryKind, SessionMeta};

use crate::{SessionId, StoreError};

/// Whether an append writes the derived indexes (full-text, history) in its own transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Indexing {
    /// In the append's transaction (one-shot writers: the CLI, import).
    Inline,
    /// Later, by [`crate::HistoryStore::history_sync`] or [`crate::GroupStore::index_pending`]:
    /// the commit holds only the log, so a writer someone waits for commits fast (the gateway).
    Deferred,
}

/// The serde tag of an entry kind, stored beside the body for queries.
pub(crate) fn kind_tag(kind: &EntryKind) -> &'static str {
    match kind {
        EntryKind::Message(_) => "message",
        EntryKind::SystemPrompt { .. } => "system_prompt",
        EntryKind::ToolDefs { .. } => "tool_defs",
        EntryKind::Compaction(_) => "compaction",
        EntryKind::BranchSummary { .. } => "branch_summary",
        EntryKind::ContextEdit { .. } => "context_edit",
        EntryKind::ArgsEdit { .. } => "args_edit",
        EntryKind::ModelChange { .. } => "model_change",
        EntryKind::Usage { .. } => "usage",
        EntryKind::WindowMarker { .. } => "window_marker",
        EntryKind::WindowBoot { .. } => "window_boot",
        EntryKind::Event { .. } => "event",
    }
}

/// An entry's stored body: its kind as JSON.
pub(crate) fn encode_kind(entry: &Entry) -> Result<String, StoreError> {
    serde_json::to_string(&entry.kind).map_err(|err| StoreError::Corrupt {
        id: entry.id.0.clone(),
        message: err.to_string(),
    })
}

/// An entry kind from its stored body; `Corrupt`, naming the entry `id`, when unreadable.
pub(crate) fn decode_kind(id: &str, body: &str) -> Result<EntryKind, StoreError> {
    serde_json::from_str(body).map_err(|e| StoreError::Corrupt {
        id: id.to_owned(),
        message: e.to_string(),
    })
}

/// An entry from its stored columns.
pub(crate) fn decode_entry(
    id: String,
    parent: Option<String>,
    timestamp: Option<String>,
    sidechain: bool,
    body: &str,
) -> Result<Entry, StoreError> {
    let kind = decode_kind(&id, body)?;
    Ok(Entry {
        id: EntryId(id),
        parent: parent.map(EntryId),
        timestamp,
        sidechain,
        kind,
    })
}

/// A session's metadata as stored.
pub(crate) fn encode_meta(key: &str, meta: &SessionMeta) -> Result<String, StoreError> {
    serde_json::to_string(meta).map_err(|e| StoreError::Corrupt {
        id: key.to_owned(),
        message: e.to_string(),
    })
}

/// A session's metadata from its stored JSON.
pub(crate) fn decode_meta(session: SessionId, meta: &str) -> Result<SessionMeta, StoreError> {
    serde_json::from_str(meta).map_err(|e| StoreError::Corrupt {
        id: format!("session {session}"),
        message: e.to_string(),
    })
}

/// `LeafMoved` when an append expects the leaf at `expected` and the session's is `current`.
pub(crate) fn check_leaf(
    expected: Option<&EntryId>,
    current: Option<String>,
) -> Result<(), StoreError> {
    match expected {
        Some(e) if current.as_deref() != Some(e.as_str()) => Err(StoreError::LeafMoved {
            expected: e.0.clone(),
            found: current,
        }),
        _ => Ok(()),
    }
}

/// The leaf an append leaves: the one the caller named, or the batch's last entry (`None`: the
/// leaf stays).
pub(crate) fn new_leaf<'a>(
    named: Option<&'a EntryId>,
    batch: &'a [crate::NewEntry],
) -> Option<&'a str> {
    named
        .map(|l| l.0.as_str())
        .or_else(|| batch.last().map(|n| n.entry.id.0.as_str()))
}

/// An amount as SQL's 64-bit integer (an unbounded limit, `u64::MAX`, as the largest).
pub(crate) fn sql_amount(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stored amount as a counter's (a negative one, never written, as 0).
pub(crate) fn stored_amount(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::model::{Message, Role};

    fn entry(id: &str) -> crate::NewEntry {
        crate::NewEntry::new(Entry {
            id: EntryId::new(id),
            parent: None,
            timestamp: Some("t".into()),
            sidechain: true,
            kind: EntryKind::Message(Message::text(Role::User, id)),
        })
    }

    #[test]
    fn an_entry_reads_back_as_it_was_stored() {
        let new = entry("a");
        let body = encode_kind(&new.entry).unwrap();
        assert_eq!(kind_tag(&new.entry.kind), "message");
        let back = decode_entry("a".into(), None, Some("t".into()), true, &body).unwrap();
        assert_eq!(back, new.entry);
        let err = decode_entry("b".into(), None, None, false, "{").unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { id, .. } if id == "b"));
    }

    #[test]
    fn the_leaf_check_refuses_a_moved_leaf_only() {
        let a = EntryId::new("a");
        assert!(check_leaf(None, Some("x".into())).is_ok());
        assert!(check_leaf(Some(&a), Some("a".into())).is_ok());
        assert!(matches!(
            check_leaf(Some(&a), None),
            Err(StoreError::LeafMoved { found: None, .. })
        ));
        assert!(check_leaf(Some(&a), Some("b".into())).is_err());
    }

    #[test]
    fn the_new_leaf_is_the_named_one_or_the_batchs_last() {
        let batch = [entry("a"), entry("b")];
        assert_eq!(new_leaf(None, &batch), Some("b"));
        assert_eq!(new_leaf(Some(&EntryId::new("a")), &batch), Some("a"));
        assert_eq!(new_leaf(None, &[]), None);
    }

    #[test]
    fn amounts_saturate_both_ways() {
        assert_eq!(sql_amount(u64::MAX), i64::MAX);
        assert_eq!(sql_amount(7), 7);
        assert_eq!(stored_amount(-1), 0);
        assert_eq!(stored_amount(7), 7);
    }
}
