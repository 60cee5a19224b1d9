//! The walk that writes the derived indexes (full-text, history items, tool calls) for a
//! session's entries in append order, the same on every backend: what goes in each row, in what
//! order, and where each entry's parent is found. The rules of an item, a lane and a window are
//! the core's ([`ctxd_core::history`]); a backend writes the rows ([`IndexRows`]).

use std::cell::RefCell;

use ctxd_core::history::{item_facts, item_key, place, tool_calls, ParentPlace, Place};
use ctxd_core::model::EntryKind;
use ctxd_core::text::entry_text;

use crate::{SessionId, StoreError};

/// An indexed entry as a child sees it: its seq and place.
pub(crate) type Parent = (i64, ParentPlace);

/// One `history_items` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ItemIndexRow<'a> {
    pub(crate) seq: i64,
    pub(crate) parent_seq: Option<i64>,
    pub(crate) place: Place,
    /// `None` for an entry that is not an item (it still has a place: its children need it).
    pub(crate) key: Option<i64>,
    pub(crate) kind: Option<&'static str>,
    pub(crate) role: Option<&'static str>,
    /// Tool names, one per line.
    pub(crate) tools: String,
    pub(crate) sidechain: bool,
    /// The item's searchable text, when it has any.
    pub(crate) text: Option<&'a str>,
}

/// A backend's index rows, written inside the caller's transaction.
pub(crate) trait IndexRows {
    /// Ranked search's row of an entry's (non-empty) text. A row already there is kept.
    fn text(&mut self, session: SessionId, seq: i64, text: &str) -> Result<(), StoreError>;

    /// The indexed entry `id`, with whether it has a child yet.
    fn parent(&mut self, session: SessionId, id: &str) -> Result<Option<Parent>, StoreError>;

    /// A tool call's name by its id. A call already recorded is kept.
    fn call(&mut self, session: SessionId, call_id: &str, name: &str) -> Result<(), StoreError>;

    /// The name of the tool call `call_id`, when recorded.
    fn call_name(&mut self, session: SessionId, call_id: &str) -> Option<String>;

    /// The entry's `history_items` row (and its literal-search text).
    fn item(&mut self, session: SessionId, row: &ItemIndexRow<'_>) -> Result<(), StoreError>;
}

/// Indexes the entries of one session, each after the one before it.
#[derive(Debug)]
pub(crate) struct Indexer {
    session: SessionId,
    /// The previous entry (id, seq, place, has a child): in a linear log it is the next one's
    /// parent, found without a query.
    prev: Option<(String, i64, Place, bool)>,
}

impl Indexer {
    pub(crate) fn new(session: SessionId) -> Self {
        Self {
            session,
            prev: None,
        }
    }

    /// Index the entry stored at `seq`. Entries must come in seq order, after every entry of the
    /// session already indexed.
    pub(crate) fn add(
        &mut self,
        rows: &mut impl IndexRows,
        seq: i64,
        id: &str,
        parent: Option<&str>,
        sidechain: bool,
        kind: &EntryKind,
    ) -> Result<(), StoreError> {
        let session = self.session;
        let text = entry_text(kind);
        if !text.is_empty() {
            rows.text(session, seq, &text)?;
        }
        let parent_place = match parent {
            None => None,
            Some(p) => match &mut self.prev {
                Some((pid, pseq, pplace, has_child)) if pid == p => {
                    let found = (
                        *pseq,
                        ParentPlace {
                            place: *pplace,
                            has_child: *has_child,
                        },
                    );
                    *has_child = true;
                    Some(found)
                }
                _ => rows.parent(session, p)?,
            },
        };
        let here = place(seq, kind, parent_place.map(|(_, p)| p));
        for (call_id, name) in tool_calls(kind) {
            rows.call(session, call_id, name)?;
        }
        let facts = {
            let rows = RefCell::new(&mut *rows);
            item_facts(kind, &|call_id| {
                rows.borrow_mut().call_name(session, call_id)
            })
        };
        rows.item(
            session,
            &ItemIndexRow {
                seq,
                parent_seq: parent_place.map(|(s, _)| s),
                place: here,
                key: facts.as_ref().map(|_| item_key(session, id) as i64),
                kind: facts.as_ref().map(|f| f.kind),
                role: facts.as_ref().map(|f| f.role),
                tools: facts
                    .as_ref()
                    .map(|f| f.tools.join("\n"))
                    .unwrap_or_default(),
                sidechain,
                text: facts
                    .as_ref()
                    .map(|f| f.text.as_str())
                    .filter(|t| !t.is_empty()),
            },
        )?;
        self.prev = Some((id.to_owned(), seq, here, false));
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::model::{ContentBlock, Message, Role};
    use std::collections::HashMap;

    /// An item row as kept: seq, parent seq, place, role, tools.
    type Item = (i64, Option<i64>, Place, Option<String>, String);

    /// The rows in memory; counts the parent lookups the walk could not avoid.
    #[derive(Default)]
    struct Rows {
        ids: HashMap<i64, String>,
        items: Vec<Item>,
        texts: Vec<i64>,
        calls: HashMap<String, String>,
        lookups: usize,
    }

    impl IndexRows for Rows {
        fn text(&mut self, _: SessionId, seq: i64, _: &str) -> Result<(), StoreError> {
            self.texts.push(seq);
            Ok(())
        }

        fn parent(&mut self, _: SessionId, id: &str) -> Result<Option<Parent>, StoreError> {
            self.lookups += 1;
            let Some((&seq, _)) = self.ids.iter().find(|(_, i)| *i == id) else {
                return Ok(None);
            };
            let (_, _, place, ..) = self.items.iter().find(|r| r.0 == seq).unwrap().clone();
            let has_child = self.items.iter().any(|r| r.1 == Some(seq));
            Ok(Some((seq, ParentPlace { place, has_child })))
        }

        fn call(&mut self, _: SessionId, call_id: &str, name: &str) -> Result<(), StoreError> {
            self.calls
                .entry(call_id.to_owned())
                .or_insert_with(|| name.to_owned());
            Ok(())
        }

        fn call_name(&mut self, _: SessionId, call_id: &str) -> Option<String> {
            self.calls.get(call_id).cloned()
        }

        fn item(&mut self, _: SessionId, row: &ItemIndexRow<'_>) -> Result<(), StoreError> {
            self.items.push((
                row.seq,
                row.parent_seq,
                row.place,
                row.role.map(str::to_owned),
                row.tools.clone(),
            ));
            Ok(())
        }
    }

    fn add(ix: &mut Indexer, rows: &mut Rows, seq: i64, id: &str, parent: Option<&str>) {
        let kind = EntryKind::Message(Message::text(Role::User, id));
        rows.ids.insert(seq, id.to_owned());
        ix.add(rows, seq, id, parent, false, &kind).unwrap();
    }

    fn lane(rows: &Rows, seq: i64) -> i64 {
        rows.items.iter().find(|r| r.0 == seq).unwrap().2.lane
    }

    #[test]
    fn a_linear_log_stays_in_one_lane_without_lookups_and_a_fork_opens_one() {
        let (mut ix, mut rows) = (Indexer::new(1), Rows::default());
        add(&mut ix, &mut rows, 1, "a", None);
        add(&mut ix, &mut rows, 2, "b", Some("a"));
        add(&mut ix, &mut rows, 3, "c", Some("b"));
        assert_eq!(rows.lookups, 0);
        assert_eq!((lane(&rows, 2), lane(&rows, 3)), (1, 1));
        assert_eq!(rows.texts, [1, 2, 3]);
        // A second child of `b`: found by a lookup, and in a lane of its own.
        add(&mut ix, &mut rows, 4, "d", Some("b"));
        assert_eq!(rows.lookups, 1);
        assert_eq!(lane(&rows, 4), 4);
        assert_eq!(rows.items[3].1, Some(2));
        // A new walk (a later transaction) looks its first parent up.
        let mut later = Indexer::new(1);
        add(&mut later, &mut rows, 5, "e", Some("d"));
        assert_eq!((rows.lookups, lane(&rows, 5)), (2, 4));
    }

    #[test]
    fn a_tool_result_names_its_call_from_an_earlier_entry() {
        let (mut ix, mut rows) = (Indexer::new(1), Rows::default());
        let call = EntryKind::Message(Message {
            content: vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "grep".into(),
                arguments: serde_json::json!({}),
            }],
            ..Message::text(Role::Assistant, "")
        });
        ix.add(&mut rows, 1, "a", None, false, &call).unwrap();
        assert_eq!(rows.calls.get("c1").map(String::as_str), Some("grep"));
        assert_eq!(rows.items[0].4, "grep");
    }
}
