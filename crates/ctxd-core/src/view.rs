//! What the model sees of a branch: the projection, built by one forward walk.
//!
//! The walk applies, in branch order: the system prompt and tool definitions in effect;
//! messages; context edits (a later edit of a target replaces an earlier one; `None` omits the
//! target); compactions (everything before is replaced by the summary, plus the entries from
//! `first_kept` on, or exactly Codex's `replacement` messages); branch summaries. The walk reports
//! each change, so the report can follow the context size turn by turn without rebuilding it.

use crate::model::{Compaction, ContentBlock, EntryKind, Message, Session, ToolDef};

/// One item of the projection.
#[derive(Clone, Debug, PartialEq)]
pub struct Item<'a> {
    /// Position in `session.entries` of the entry this item shows.
    pub entry: usize,
    pub kind: ItemKind<'a>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ItemKind<'a> {
    /// A message, with the content the model sees (its own, or the latest edit's).
    Message {
        message: &'a Message,
        content: &'a [ContentBlock],
        edited: bool,
    },
    /// A compaction or branch summary, shown as a message.
    Summary { kind: SummaryKind, text: &'a str },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SummaryKind {
    Compaction,
    Branch,
}

/// What one step of the walk changed.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Nothing the model sees (events, model changes, usage).
    None,
    System,
    Tools,
    /// An item was appended at the end.
    Added,
    /// The item at this index now shows other content.
    Edited {
        index: usize,
    },
    /// The item at this index was removed.
    Omitted {
        index: usize,
    },
    /// The items were replaced wholesale (a compaction).
    Reset,
}

/// The projection under construction. Feed it the branch with [`Projector::step`].
pub struct Projector<'a> {
    session: &'a Session,
    pub system: Option<(usize, &'a str)>,
    pub tools: Option<(usize, &'a [ToolDef])>,
    pub items: Vec<Item<'a>>,
    /// Positions of the compactions met so far.
    pub compactions: Vec<usize>,
}

impl<'a> Projector<'a> {
    pub fn new(session: &'a Session) -> Self {
        Self {
            session,
            system: None,
            tools: None,
            items: Vec::new(),
            compactions: Vec::new(),
        }
    }

    /// Apply the entry at `pos` (the next entry of the branch).
    pub fn step(&mut self, pos: usize) -> Change {
        let Some(entry) = self.session.entries.get(pos) else {
            return Change::None;
        };
        match &entry.kind {
            EntryKind::SystemPrompt { text } => {
                self.system = Some((pos, text));
                Change::System
            }
            EntryKind::ToolDefs { tools } => {
                self.tools = Some((pos, tools));
                Change::Tools
            }
            EntryKind::Message(message) => {
                self.items.push(Item {
                    entry: pos,
                    kind: ItemKind::Message {
                        message,
                        content: &message.content,
                        edited: false,
                    },
                });
                Change::Added
            }
            EntryKind::BranchSummary { summary, .. } => {
                self.items.push(Item {
                    entry: pos,
                    kind: ItemKind::Summary {
                        kind: SummaryKind::Branch,
                        text: summary,
                    },
                });
                Change::Added
            }
            EntryKind::ContextEdit {
                target,
                replacement,
            } => {
                let entries = &self.session.entries;
                let Some(index) = self
                    .items
                    .iter()
                    .rposition(|it| entries.get(it.entry).is_some_and(|e| &e.id == target))
                else {
                    return Change::None;
                };
                match replacement {
                    None => {
                        self.items.remove(index);
                        Change::Omitted { index }
                    }
                    Some(content) => {
                        if let ItemKind::Message {
                            content: shown,
                            edited,
                            ..
                        } = &mut self.items[index].kind
                        {
                            *shown = content;
                            *edited = true;
                            Change::Edited { index }
                        } else {
                            Change::None
                        }
                    }
                }
            }
            EntryKind::Compaction(compaction) => {
                self.compact(pos, compaction);
                self.compactions.push(pos);
                Change::Reset
            }
            EntryKind::ModelChange { .. } | EntryKind::Usage { .. } | EntryKind::Event { .. } => {
                Change::None
            }
            // Window folding arrives with the engine (issue 3); until then a boot shows as a
            // message and a marker shows nothing.
            EntryKind::WindowMarker { .. } => Change::None,
            EntryKind::WindowBoot { message, .. } => {
                self.items.push(Item {
                    entry: pos,
                    kind: ItemKind::Message {
                        message,
                        content: &message.content,
                        edited: false,
                    },
                });
                Change::Added
            }
        }
    }

    fn compact(&mut self, pos: usize, compaction: &'a Compaction) {
        if let Some(replacement) = &compaction.replacement {
            self.items = replacement
                .iter()
                .map(|message| Item {
                    entry: pos,
                    kind: ItemKind::Message {
                        message,
                        content: &message.content,
                        edited: false,
                    },
                })
                .collect();
            return;
        }
        let entries = &self.session.entries;
        let kept_from = compaction.first_kept.as_ref().and_then(|first| {
            self.items
                .iter()
                .position(|it| entries.get(it.entry).is_some_and(|e| &e.id == first))
        });
        let kept = kept_from.map_or_else(Vec::new, |from| self.items.split_off(from));
        self.items = Vec::with_capacity(kept.len() + 1);
        self.items.push(Item {
            entry: pos,
            kind: ItemKind::Summary {
                kind: SummaryKind::Compaction,
                text: &compaction.summary,
            },
        });
        self.items.extend(kept);
    }
}

/// The projection of a branch (positions root first), as the model would see it now.
pub fn project<'a>(session: &'a Session, branch: &[usize]) -> Projector<'a> {
    let mut projector = Projector::new(session);
    for &pos in branch {
        projector.step(pos);
    }
    projector
}

/// Ids of entries, for tests and diagnostics.
pub fn entry_ids<'a>(session: &'a Session, items: &[Item<'_>]) -> Vec<&'a str> {
    items
        .iter()
        .filter_map(|it| session.entries.get(it.entry).map(|e| e.id.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Entry, EntryId, Role};
    use crate::tree::active_branch;

    fn push(session: &mut Session, id: &str, kind: EntryKind) {
        let parent = session.entries.last().map(|e| e.id.clone());
        session.entries.push(Entry {
            id: EntryId::new(id),
            parent,
            timestamp: None,
            sidechain: false,
            kind,
        });
    }

    fn msg(text: &str) -> EntryKind {
        EntryKind::Message(Message::text(Role::User, text))
    }

    #[test]
    fn edits_latest_wins_and_null_omits() {
        let mut s = Session::default();
        push(&mut s, "a", msg("one"));
        push(&mut s, "b", msg("two"));
        push(
            &mut s,
            "e1",
            EntryKind::ContextEdit {
                target: EntryId::new("a"),
                replacement: Some(vec![ContentBlock::text("first edit")]),
            },
        );
        push(
            &mut s,
            "e2",
            EntryKind::ContextEdit {
                target: EntryId::new("a"),
                replacement: Some(vec![ContentBlock::text("second edit")]),
            },
        );
        push(
            &mut s,
            "e3",
            EntryKind::ContextEdit {
                target: EntryId::new("b"),
                replacement: None,
            },
        );
        let p = project(&s, &active_branch(&s));
        assert_eq!(entry_ids(&s, &p.items), vec!["a"]);
        assert!(matches!(&p.items[0].kind,
            ItemKind::Message { content, edited: true, .. } if content[0] == ContentBlock::text("second edit")));
    }

    #[test]
    fn compaction_keeps_summary_and_tail() {
        let mut s = Session::default();
        push(&mut s, "a", msg("old"));
        push(&mut s, "b", msg("kept"));
        push(
            &mut s,
            "c",
            EntryKind::Compaction(Compaction {
                summary: "sum".into(),
                first_kept: Some(EntryId::new("b")),
                tokens_before: Some(10),
                replacement: None,
            }),
        );
        push(&mut s, "d", msg("new"));
        let p = project(&s, &active_branch(&s));
        assert_eq!(entry_ids(&s, &p.items), vec!["c", "b", "d"]);
        assert_eq!(p.compactions, vec![2]);
    }
}
