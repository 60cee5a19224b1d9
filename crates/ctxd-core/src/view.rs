//! What the model sees of a branch: the projection, built by one forward walk.
//!
//! The walk applies, in branch order: the system prompt and tool definitions in effect;
//! messages; context edits (a later edit of a target replaces an earlier one; `None` omits the
//! target); compactions (everything before is replaced by the summary, plus the entries from
//! `first_kept` on, or exactly Codex's `replacement` messages); branch summaries; context
//! windows (a [`EntryKind::WindowMarker`] and the [`EntryKind::WindowBoot`] with the same
//! `window_id`: everything before the boot folds away except the system prompt, the tool
//! definitions and the client's instructions that open the conversation (Chat's system message,
//! Responses' developer message), and the entries after the boot follow in order). Injected messages are messages
//! like any other. The walk reports each change, so the report can follow the context size turn
//! by turn without rebuilding it.
//!
//! Two rules keep what the model sees well-formed:
//! - an assistant message is shown as written or not at all: a replacement edit of an assistant
//!   message is ignored, and so is an edit that would change which tool calls or results a
//!   message carries;
//! - the one exception, [`EntryKind::ArgsEdit`], replaces only named arguments of named tool
//!   calls ([`args_edit_fits`]: every other block, id, name, thinking block and signature stays
//!   as written, and each argument keeps its JSON type); an args edit that would change more is
//!   ignored;
//! - a tool call and its result are shown together or not at all ([`Projector::finish`]): an
//!   assistant message with a call that has no later result is left out, and so is a message
//!   carrying a result whose call is not shown before it, until nothing changes. (Omitting one
//!   of the pair by an edit thus omits the other.)
//!
//! A marker whose boot is missing is an error of [`Projector::finish`] / [`project_checked`],
//! never silently the raw history. The report, which must show broken logs too, reads the walk
//! step by step and can ask [`Projector::missing_boot`].

use rustc_hash::FxHashMap;

use crate::model::{
    Compaction, ContentBlock, EditedArg, EntryKind, Message, Role, Session, ToolDef,
};

/// One item of the projection.
#[derive(Clone, Debug, PartialEq)]
pub struct Item<'a> {
    /// Position in `session.entries` of the entry this item shows.
    pub entry: usize,
    pub kind: ItemKind<'a>,
}

impl<'a> Item<'a> {
    /// The message the model is shown for this item: the content it sees (an edit's), and a
    /// summary as a user message. What every renderer of a projection sends.
    pub fn to_message(&self) -> Message {
        match &self.kind {
            ItemKind::Message {
                message, content, ..
            } => Message {
                content: content.to_vec(),
                ..(*message).clone()
            },
            ItemKind::Summary { text, .. } => {
                Message::new(Role::User, vec![ContentBlock::text(*text)])
            }
        }
    }

    /// A message shown as it was written (no edit).
    /// A system or developer message the client wrote (not one ctxd injected): its
    /// instructions, which a window keeps as it keeps the system prompt.
    pub fn is_client_instructions(&self) -> bool {
        matches!(&self.kind, ItemKind::Message { message, .. }
            if matches!(message.role, Role::System | Role::Developer) && message.injected.is_none())
    }

    pub fn as_written(entry: usize, message: &'a Message) -> Self {
        Item {
            entry,
            kind: ItemKind::Message {
                message,
                content: &message.content,
                edited: false,
            },
        }
    }
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
    /// A window boot: the items were replaced by the boot alone.
    Window,
}

/// The context window the walk is in: the latest marker on the branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowState<'a> {
    pub window_id: &'a str,
    /// Position of the marker in `session.entries`.
    pub marker: usize,
    /// Position of its boot, once met.
    pub boot: Option<usize>,
}

/// Why a branch has no projection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectionError {
    /// A window marker whose boot is not on the branch after it.
    MissingBoot {
        window_id: String,
        /// The marker's entry id.
        marker: String,
    },
}

impl std::fmt::Display for ProjectionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProjectionError::MissingBoot { window_id, marker } => write!(
                f,
                "context window {window_id} (marker {marker}) has no boot message: \
                 refusing to send the raw history"
            ),
        }
    }
}

impl std::error::Error for ProjectionError {}

/// The finished projection: what the model sees, well-formed.
#[derive(Clone, Debug, PartialEq)]
pub struct Projection<'a> {
    pub system: Option<(usize, &'a str)>,
    pub tools: Option<(usize, &'a [ToolDef])>,
    pub items: Vec<Item<'a>>,
    /// The window in effect (`None`: the root window, no marker on the branch).
    pub window: Option<WindowState<'a>>,
    /// Items left out by the pairing rule (call without result, result without call).
    pub unpaired: Vec<usize>,
}

/// The projection under construction. Feed it the branch with [`Projector::step`].
pub struct Projector<'a> {
    session: &'a Session,
    pub system: Option<(usize, &'a str)>,
    pub tools: Option<(usize, &'a [ToolDef])>,
    pub items: Vec<Item<'a>>,
    /// Positions of the compactions met so far.
    pub compactions: Vec<usize>,
    /// The latest window marker met, and its boot once met.
    pub window: Option<WindowState<'a>>,
    /// Entry id → its position in the session ([`AMBIGUOUS`] when several entries share it),
    /// built at the first context edit: finding an edit's target compares positions, not ids
    /// (comparing ids item by item was a third of `ctxd eval`'s time).
    positions: Option<FxHashMap<&'a str, usize>>,
    /// Omitted items are marked [`DEAD`] and dropped at the end ([`project`]), rather than
    /// removed one by one; only for walks that read no [`Change`] index.
    tombstones: bool,
}

/// See [`Projector::positions`].
const AMBIGUOUS: usize = usize::MAX;
/// See [`Projector::tombstones`]: an item's entry position, never a real one.
const DEAD: usize = usize::MAX;

impl<'a> Projector<'a> {
    pub fn new(session: &'a Session) -> Self {
        Self {
            session,
            system: None,
            tools: None,
            items: Vec::new(),
            compactions: Vec::new(),
            window: None,
            positions: None,
            tombstones: false,
        }
    }

    /// The index of the last item showing the entry with id `target`.
    fn find(&mut self, target: &crate::model::EntryId) -> Option<usize> {
        let entries = &self.session.entries;
        let positions = self.positions.get_or_insert_with(|| {
            let mut map = FxHashMap::with_capacity_and_hasher(entries.len(), Default::default());
            for (pos, e) in entries.iter().enumerate() {
                map.entry(e.id.as_str())
                    .and_modify(|p| *p = AMBIGUOUS)
                    .or_insert(pos);
            }
            map
        });
        match positions.get(target.as_str()) {
            None => None,
            Some(&AMBIGUOUS) => self
                .items
                .iter()
                .rposition(|it| entries.get(it.entry).is_some_and(|e| &e.id == target)),
            Some(&pos) => self.items.iter().rposition(|it| it.entry == pos),
        }
    }

    /// The latest marker on the walk so far, when its boot has not followed it.
    pub fn missing_boot(&self) -> Option<&WindowState<'a>> {
        self.window.as_ref().filter(|w| w.boot.is_none())
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
                self.items.push(Item::as_written(pos, message));
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
            } => self.context_edit(target, replacement.as_deref()),
            EntryKind::ArgsEdit {
                target,
                replacement,
                args,
            } => self.args_edit(target, replacement, args),
            EntryKind::Compaction(compaction) => {
                self.compact(pos, compaction);
                self.compactions.push(pos);
                Change::Reset
            }
            EntryKind::ModelChange { .. } | EntryKind::Usage { .. } | EntryKind::Event { .. } => {
                Change::None
            }
            EntryKind::WindowMarker { window_id, .. } => {
                self.window = Some(WindowState {
                    window_id,
                    marker: pos,
                    boot: None,
                });
                Change::None
            }
            EntryKind::WindowBoot { window_id, message } => {
                self.window_boot(pos, window_id, message)
            }
        }
    }

    /// A context edit of the entry `target`: its item omitted (`None`), or its content
    /// replaced.
    fn context_edit(
        &mut self,
        target: &crate::model::EntryId,
        replacement: Option<&'a [ContentBlock]>,
    ) -> Change {
        let Some(index) = self.find(target) else {
            return Change::None;
        };
        match replacement {
            None => {
                if self.tombstones {
                    self.items[index].entry = DEAD;
                } else {
                    self.items.remove(index);
                }
                Change::Omitted { index }
            }
            Some(content) => {
                if let ItemKind::Message {
                    message,
                    content: shown,
                    edited,
                } = &mut self.items[index].kind
                {
                    // Assistant content is shown as written or not at all, and an edit
                    // never changes which calls and results a message carries.
                    if message.role == Role::Assistant || tool_ids(shown) != tool_ids(content) {
                        return Change::None;
                    }
                    *shown = content;
                    *edited = true;
                    Change::Edited { index }
                } else {
                    Change::None
                }
            }
        }
    }

    /// An edit of the arguments of the assistant message `target`'s calls, applied when it
    /// fits what is shown.
    fn args_edit(
        &mut self,
        target: &crate::model::EntryId,
        replacement: &'a [ContentBlock],
        args: &[EditedArg],
    ) -> Change {
        let Some(index) = self.find(target) else {
            return Change::None;
        };
        if let ItemKind::Message {
            message,
            content: shown,
            edited,
        } = &mut self.items[index].kind
        {
            if message.role != Role::Assistant || !args_edit_fits(shown, replacement, args) {
                return Change::None;
            }
            *shown = replacement;
            *edited = true;
            Change::Edited { index }
        } else {
            Change::None
        }
    }

    /// A window's boot message: the new window's first item when its marker is pending, else
    /// an item as written.
    fn window_boot(&mut self, pos: usize, window_id: &str, message: &'a Message) -> Change {
        let item = Item::as_written(pos, message);
        if let Some(w) = self
            .window
            .as_mut()
            .filter(|w| w.boot.is_none() && w.window_id == window_id)
        {
            // Everything before the boot folds away; the system prompt, the tools and
            // the client's instructions that open the conversation (Chat's system
            // message, Responses' developer message) stay.
            w.boot = Some(pos);
            let lead = self
                .items
                .iter()
                .take_while(|it| it.entry == DEAD || it.is_client_instructions())
                .count();
            self.items.truncate(lead);
            self.items.push(item);
            return Change::Window;
        }
        // A boot no pending marker asks for (the root window's, or a copy): shown in
        // place, as written.
        self.items.push(Item::as_written(pos, message));
        Change::Added
    }

    fn compact(&mut self, pos: usize, compaction: &'a Compaction) {
        if let Some(replacement) = &compaction.replacement {
            self.items = replacement
                .iter()
                .map(|message| Item::as_written(pos, message))
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

impl<'a> Projector<'a> {
    /// The finished projection: an error when the latest marker has no boot, else the items
    /// with the pairing rule applied.
    pub fn finish(self) -> Result<Projection<'a>, ProjectionError> {
        if let Some(w) = self.missing_boot() {
            return Err(ProjectionError::MissingBoot {
                window_id: w.window_id.to_owned(),
                marker: self
                    .session
                    .entries
                    .get(w.marker)
                    .map(|e| e.id.0.clone())
                    .unwrap_or_default(),
            });
        }
        let (items, unpaired) = pair(self.items);
        Ok(Projection {
            system: self.system,
            tools: self.tools,
            items,
            window: self.window,
            unpaired,
        })
    }
}

/// Whether `replacement` changes only the arguments `args` names of what `shown` shows: the
/// same blocks in the same order, each identical except tool calls named in `args`, which keep
/// their id and name and change only the named arguments (each to a value of the same JSON
/// type: a string stays a string, so the tool's schema still holds). A key-less [`EditedArg`]
/// names a call's whole arguments, which must be a string on both sides.
pub fn args_edit_fits(
    shown: &[ContentBlock],
    replacement: &[ContentBlock],
    args: &[EditedArg],
) -> bool {
    fn same_type(a: &serde_json::Value, b: &serde_json::Value) -> bool {
        std::mem::discriminant(a) == std::mem::discriminant(b)
    }
    shown.len() == replacement.len()
        && shown.iter().zip(replacement).all(|(a, b)| {
            if a == b {
                return true;
            }
            let (
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments: was,
                },
                ContentBlock::ToolCall {
                    id: id2,
                    name: name2,
                    arguments: now,
                },
            ) = (a, b)
            else {
                return false;
            };
            if id != id2 || name != name2 {
                return false;
            }
            let mut named = args.iter().filter(|e| &e.call == id).peekable();
            if named.peek().is_none() {
                return false;
            }
            if named.clone().any(|e| e.key.is_none()) {
                return was.is_string() && now.is_string();
            }
            let keys: Vec<&str> = named.filter_map(|e| e.key.as_deref()).collect();
            match (was, now) {
                (serde_json::Value::Object(w), serde_json::Value::Object(n)) => {
                    w.len() == n.len()
                        && w.iter().all(|(k, v)| match n.get(k) {
                            None => false,
                            Some(nv) if keys.contains(&k.as_str()) => same_type(v, nv),
                            Some(nv) => v == nv,
                        })
                }
                _ => false,
            }
        })
}

/// The ids of the tool calls and results a list of blocks carries, in order.
fn tool_ids(blocks: &[ContentBlock]) -> Vec<(bool, &str)> {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall { id, .. } => Some((true, id.as_str())),
            ContentBlock::ToolResult { call_id, .. } => Some((false, call_id.as_str())),
            _ => None,
        })
        .collect()
}

/// The kept items and the entry positions of those the pairing rule leaves out.
fn pair(items: Vec<Item<'_>>) -> (Vec<Item<'_>>, Vec<usize>) {
    let drop = unpaired(&items);
    if drop.is_empty() {
        return (items, Vec::new());
    }
    let mut kept = Vec::with_capacity(items.len() - drop.len());
    let mut dropped = Vec::with_capacity(drop.len());
    let mut next = drop.iter().peekable();
    for (i, item) in items.into_iter().enumerate() {
        if next.next_if_eq(&&i).is_some() {
            dropped.push(item.entry);
        } else {
            kept.push(item);
        }
    }
    (kept, dropped)
}

/// The pairing rule: indices (ascending) of the items to leave out, found until nothing
/// changes: assistant messages with a call that has no later result, and messages carrying a
/// result whose call is not shown before it. A result answers the latest call of its id
/// still unanswered before it: ids repeat where the API has none of its own (Gemini's are
/// derived from what a call says, so two identical calls share one). Public for the report,
/// which counts what [`Projector::finish`] would send.
pub fn unpaired(items: &[Item<'_>]) -> Vec<usize> {
    // The tool ids each item carries, read once (item, is a call, id): the content blocks are
    // scattered over the heap, and this runs on every request the gateway plans.
    let mut ids: Vec<(usize, bool, &str)> = Vec::new();
    for (at, item) in items.iter().enumerate() {
        if let ItemKind::Message {
            message, content, ..
        } = &item.kind
        {
            for b in content.iter() {
                match b {
                    ContentBlock::ToolCall { id, .. } if message.role == Role::Assistant => {
                        ids.push((at, true, id.as_str()));
                    }
                    ContentBlock::ToolResult { call_id, .. } => {
                        ids.push((at, false, call_id.as_str()));
                    }
                    _ => {}
                }
            }
        }
    }
    let mut alive = vec![true; items.len()];
    let mut dropped = Vec::new();
    loop {
        // FxHash: SipHash on the ids was a fifth of `ctxd eval`'s time in this function.
        // Per id, the items of its calls still waiting for a result, in order.
        let mut waiting: FxHashMap<&str, Vec<usize>> =
            FxHashMap::with_capacity_and_hasher(ids.len(), Default::default());
        let mut broken: Vec<usize> = Vec::new();
        for &(at, is_call, id) in ids.iter().filter(|(at, _, _)| alive[*at]) {
            let calls = waiting.entry(id).or_default();
            if is_call {
                calls.push(at);
            } else if calls.last().is_some_and(|&c| c < at) {
                calls.pop();
            } else {
                broken.push(at);
            }
        }
        broken.extend(waiting.into_values().flatten());
        broken.sort_unstable();
        if broken.is_empty() {
            dropped.sort_unstable();
            return dropped;
        }
        broken.dedup();
        for at in broken {
            alive[at] = false;
            dropped.push(at);
        }
    }
}

/// The projection of a branch (positions root first), as the walk leaves it (tolerant: a
/// marker without its boot shows what the walk saw; see [`Projector::missing_boot`]).
pub fn project<'a>(session: &'a Session, branch: &[usize]) -> Projector<'a> {
    let mut projector = Projector::new(session);
    projector.tombstones = true;
    for &pos in branch {
        projector.step(pos);
    }
    projector.items.retain(|it| it.entry != DEAD);
    projector.tombstones = false;
    projector
}

/// The projection of a branch as the model is to be sent it: windows folded, calls and results
/// paired; a marker without its boot is an error.
pub fn project_checked<'a>(
    session: &'a Session,
    branch: &[usize],
) -> Result<Projection<'a>, ProjectionError> {
    project(session, branch).finish()
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
    fn a_window_keeps_the_clients_leading_instructions() {
        let mut s = Session::default();
        push(
            &mut s,
            "sys",
            EntryKind::Message(Message::text(Role::System, "You are a coding agent.")),
        );
        push(
            &mut s,
            "dev",
            EntryKind::Message(Message::text(Role::Developer, "Be brief.")),
        );
        push(&mut s, "u1", msg("do it"));
        push(
            &mut s,
            "later",
            EntryKind::Message(Message::text(Role::System, "a system note mid-way")),
        );
        push(
            &mut s,
            "m",
            EntryKind::WindowMarker {
                window_id: "w1".into(),
                reason: "new_context".into(),
            },
        );
        push(
            &mut s,
            "b",
            EntryKind::WindowBoot {
                window_id: "w1".into(),
                message: Message::text(Role::User, "boot"),
            },
        );
        let branch = active_branch(&s);
        let texts: Vec<String> = project_checked(&s, &branch)
            .unwrap()
            .items
            .iter()
            .map(|it| crate::text::message_text(&it.to_message()))
            .collect();
        assert_eq!(texts, ["You are a coding agent.", "Be brief.", "boot"]);
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
    fn edits_find_their_target_by_position_and_omissions_are_final() {
        let edit = |target: &str, text: Option<&str>| EntryKind::ContextEdit {
            target: EntryId::new(target),
            replacement: text.map(|t| vec![ContentBlock::text(t)]),
        };
        let mut s = Session::default();
        push(&mut s, "a", msg("one"));
        push(&mut s, "b", msg("two"));
        push(&mut s, "c", msg("three"));
        // Omitted, then edited: the omission stands.
        push(&mut s, "e1", edit("b", None));
        push(&mut s, "e2", edit("b", Some("back")));
        // Two entries share the id `d`: the later one's item takes the edit.
        push(&mut s, "d", msg("first d"));
        push(&mut s, "d", msg("second d"));
        push(&mut s, "e3", edit("d", Some("edited d")));
        push(&mut s, "e4", edit("a", None));
        // An id nobody has.
        push(&mut s, "e5", edit("zz", None));
        let branch: Vec<usize> = (0..s.entries.len()).collect();
        let p = project(&s, &branch);
        assert_eq!(entry_ids(&s, &p.items), vec!["c", "d", "d"]);
        let shown = |i: usize| match &p.items[i].kind {
            ItemKind::Message { content, .. } => content[0].clone(),
            ItemKind::Summary { .. } => ContentBlock::text(""),
        };
        assert_eq!(shown(1), ContentBlock::text("first d"));
        assert_eq!(shown(2), ContentBlock::text("edited d"));
        // Step by step (what the report walks, reading each change's index): the same items.
        let mut walk = Projector::new(&s);
        let mut omitted = Vec::new();
        for &pos in &branch {
            if let Change::Omitted { index } = walk.step(pos) {
                omitted.push(index);
            }
        }
        assert_eq!(omitted, vec![1, 0]);
        assert_eq!(
            entry_ids(&s, &walk.items),
            entry_ids(&s, &p.items),
            "step and project agree"
        );
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

    #[test]
    fn a_result_answers_the_latest_call_of_its_id_before_it() {
        let call = || {
            EntryKind::Message(Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    id: "~ls~same".into(),
                    name: "ls".into(),
                    arguments: serde_json::json!({}),
                }],
            ))
        };
        let result = || {
            EntryKind::Message(Message::new(
                Role::User,
                vec![ContentBlock::ToolResult {
                    call_id: "~ls~same".into(),
                    tool_name: Some("ls".into()),
                    content: vec![ContentBlock::text("a")],
                    is_error: false,
                }],
            ))
        };
        let mut s = Session::default();
        push(&mut s, "u", msg("list"));
        push(&mut s, "c1", call());
        push(&mut s, "r1", result());
        push(&mut s, "u2", msg("again"));
        push(&mut s, "c2", call());
        push(&mut s, "r2", result());
        let p = project_checked(&s, &active_branch(&s)).unwrap();
        assert_eq!(
            entry_ids(&s, &p.items),
            ["u", "c1", "r1", "u2", "c2", "r2"],
            "two identical calls, each answered"
        );
        // A call left unanswered before the same call answered: the unanswered one goes.
        let mut s = Session::default();
        push(&mut s, "u", msg("list"));
        push(&mut s, "c1", call());
        push(&mut s, "u2", msg("again"));
        push(&mut s, "c2", call());
        push(&mut s, "r2", result());
        let p = project_checked(&s, &active_branch(&s)).unwrap();
        assert_eq!(entry_ids(&s, &p.items), ["u", "u2", "c2", "r2"]);
    }
}
