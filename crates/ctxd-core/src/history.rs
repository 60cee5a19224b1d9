//! History: the windows and items of a session as the history tools show them (pure rules).
//!
//! - An **item** is an entry that says something: a message, a compaction or branch summary, a
//!   window boot. Other entries (system prompt, tool definitions, edits, usage, events) are not
//!   items, but they still carry the tree.
//! - A **window** starts at a root entry (no known parent) or at a [`EntryKind::WindowMarker`];
//!   every other entry belongs to its parent's window, so windows follow the tree and a branch
//!   never inherits a window opened on another branch.
//! - **Ids** are opaque and stable: a hash of the store's session id and the entry id, with a
//!   `w_` or `i_` prefix. They never change when entries are appended; they resolve only inside
//!   the caller's own session, so an id is useless to another tenant.
//! - **Lanes** make "is this entry on the active branch?" an O(1) test without walking the tree:
//!   an entry continues its parent's lane when it is the parent's first child, else starts a lane
//!   (named by its own sequence number). A lane is a chain, so the active branch is a short list of
//!   (lane, last sequence number) pairs: one per fork on the way from the leaf to the root.

use std::collections::HashMap;

use crate::model::{ContentBlock, EntryKind};
use crate::text::push_blocks_text;

/// Prefix of window ids.
pub const WINDOW_PREFIX: &str = "w_";
/// Prefix of item ids.
pub const ITEM_PREFIX: &str = "i_";

/// Default and maximum number of results of a listing or search.
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 500;
/// Default and maximum characters of an item shown in a listing (a preview).
pub const DEFAULT_ITEM_CHARS: usize = 500;
pub const MAX_ITEM_CHARS: usize = 20_000;
/// Default and maximum characters returned by one read of an item.
pub const DEFAULT_READ_CHARS: usize = 10_000;
pub const MAX_READ_CHARS: usize = 50_000;
/// The longest search query.
pub const MAX_QUERY_CHARS: usize = 1_000;
/// Characters of context on each side of a search hit in its excerpt.
pub const EXCERPT_CONTEXT_CHARS: usize = 80;

const DOMAIN_WINDOW: u8 = b'w';
const DOMAIN_ITEM: u8 = b'i';

/// FNV-1a (64 bits) over a domain byte, the session id and the entry id. Stable across builds
/// and platforms (unlike `std`'s hasher), which is what a persistent id needs.
fn key(domain: u8, session: i64, entry_id: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    let mut feed = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    };
    feed(domain);
    for b in session.to_le_bytes() {
        feed(b);
    }
    feed(0xff);
    for &b in entry_id.as_bytes() {
        feed(b);
    }
    // A final avalanche (splitmix64's) so that near-identical entry ids give unrelated ids.
    let mut z = h;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of the item shown for entry `entry_id` of store session `session`.
pub fn item_key(session: i64, entry_id: &str) -> u64 {
    key(DOMAIN_ITEM, session, entry_id)
}

/// The key of the window that starts at entry `entry_id` of store session `session`.
pub fn window_key(session: i64, entry_id: &str) -> u64 {
    key(DOMAIN_WINDOW, session, entry_id)
}

/// `i_` + 16 hex digits.
pub fn item_id(key: u64) -> String {
    format!("{ITEM_PREFIX}{key:016x}")
}

/// `w_` + 16 hex digits.
pub fn window_id(key: u64) -> String {
    format!("{WINDOW_PREFIX}{key:016x}")
}

/// The key in an item id, or an error naming what is wrong.
pub fn parse_item_id(id: &str) -> Result<u64, String> {
    parse(id, ITEM_PREFIX, "item_id")
}

/// The key in a window id, or an error naming what is wrong.
pub fn parse_window_id(id: &str) -> Result<u64, String> {
    parse(id, WINDOW_PREFIX, "window_id")
}

fn parse(id: &str, prefix: &str, what: &str) -> Result<u64, String> {
    let hex = id
        .strip_prefix(prefix)
        .filter(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            format!(
                "{what} {id:?} is not an id ctxd gave: ids look like {prefix}0123456789abcdef \
                 (take them from history_list_windows / history_list_items)"
            )
        })?;
    u64::from_str_radix(hex, 16).map_err(|e| format!("{what} {id:?}: {e}"))
}

/// What history knows of an entry that is an item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemFacts {
    /// `message`, `boot`, `compaction` or `branch_summary`.
    pub kind: &'static str,
    /// The message role (`user`, `assistant`, `tool`, `system`, `developer`), or `summary`.
    pub role: &'static str,
    /// Names of the tools this item calls or holds results of (sorted, unique).
    pub tools: Vec<String>,
    /// The searchable text.
    pub text: String,
}

/// The facts of an entry when it is an item, else `None`. `call_name` resolves a tool result's
/// call id to the tool's name when the result does not record it.
pub fn item_facts(
    kind: &EntryKind,
    call_name: &dyn Fn(&str) -> Option<String>,
) -> Option<ItemFacts> {
    let (kind_name, role, blocks): (&'static str, &'static str, Option<&[ContentBlock]>) =
        match kind {
            EntryKind::Message(m) => ("message", m.role.as_str(), Some(&m.content)),
            EntryKind::WindowBoot { message, .. } => {
                ("boot", message.role.as_str(), Some(&message.content))
            }
            EntryKind::Compaction(_) => ("compaction", "summary", None),
            EntryKind::BranchSummary { .. } => ("branch_summary", "summary", None),
            _ => return None,
        };
    let mut tools = Vec::new();
    let mut text = String::new();
    match blocks {
        Some(blocks) => {
            collect_tools(blocks, call_name, &mut tools);
            push_blocks_text(blocks, &mut text);
        }
        None => text = crate::text::entry_text(kind),
    }
    tools.sort();
    tools.dedup();
    Some(ItemFacts {
        kind: kind_name,
        role,
        tools,
        text,
    })
}

/// Tool calls' (id, name) pairs of an entry, so later results can be named.
pub fn tool_calls(kind: &EntryKind) -> Vec<(&str, &str)> {
    let blocks: &[ContentBlock] = match kind {
        EntryKind::Message(m) => &m.content,
        EntryKind::WindowBoot { message, .. } => &message.content,
        _ => return Vec::new(),
    };
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall { id, name, .. } => Some((id.as_str(), name.as_str())),
            _ => None,
        })
        .collect()
}

fn collect_tools(
    blocks: &[ContentBlock],
    call_name: &dyn Fn(&str) -> Option<String>,
    out: &mut Vec<String>,
) {
    for b in blocks {
        match b {
            ContentBlock::ToolCall { name, .. } => out.push(name.clone()),
            ContentBlock::ToolResult {
                call_id, tool_name, ..
            } => {
                if let Some(name) = tool_name.clone().or_else(|| call_name(call_id)) {
                    out.push(name);
                }
            }
            _ => {}
        }
    }
}

/// Whether an entry opens a window (besides a root).
pub fn starts_window(kind: &EntryKind) -> bool {
    matches!(kind, EntryKind::WindowMarker { .. })
}

/// Where an entry sits in the history index, given its parent's place (`None` for a root or an
/// entry whose parent is unknown).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub lane: i64,
    /// The sequence number of the entry that opened its window.
    pub window_seq: i64,
}

/// What the index knows of a parent when a child is appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParentPlace {
    pub place: Place,
    /// The parent already has a child (this entry forks).
    pub has_child: bool,
}

/// The place of the entry with sequence number `seq`.
pub fn place(seq: i64, kind: &EntryKind, parent: Option<ParentPlace>) -> Place {
    let lane = match parent {
        Some(p) if !p.has_child => p.place.lane,
        _ => seq,
    };
    let window_seq = match parent {
        Some(p) if !starts_window(kind) => p.place.window_seq,
        _ => seq,
    };
    Place { lane, window_seq }
}

/// The active branch as lanes: lane → last sequence number of that lane on the branch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BranchLanes {
    lanes: HashMap<i64, i64>,
}

impl BranchLanes {
    /// Add lane `lane` up to (and including) `last_seq`. The first call is the leaf's lane.
    pub fn push(&mut self, lane: i64, last_seq: i64) {
        self.lanes.entry(lane).or_insert(last_seq);
    }

    pub fn contains(&self, lane: i64, seq: i64) -> bool {
        self.lanes.get(&lane).is_some_and(|&last| seq <= last)
    }

    /// (lane, last sequence number) pairs, lanes in ascending order.
    pub fn lanes(&self) -> Vec<(i64, i64)> {
        let mut v: Vec<(i64, i64)> = self.lanes.iter().map(|(&l, &s)| (l, s)).collect();
        v.sort_unstable();
        v
    }

    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }
}

/// One indexed item, as a filter sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemRow<'a> {
    pub lane: i64,
    pub seq: i64,
    pub window_seq: i64,
    pub role: &'a str,
    pub tools: &'a [String],
    pub sidechain: bool,
}

/// Which items a listing or search keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ItemFilter {
    /// Only this window (its start's sequence number, resolved from the window id).
    pub window_seq: Option<i64>,
    pub role: Option<String>,
    pub tool: Option<String>,
    /// `false`: only the main chain (what the session's agent wrote); `true`: only subagent
    /// sidechains; `None`: both. Set from `agent_name` by [`agent_scope`].
    pub sidechain: Option<bool>,
}

impl ItemFilter {
    pub fn accepts(&self, row: &ItemRow<'_>, branch: Option<&BranchLanes>) -> bool {
        if let Some(b) = branch {
            if !b.contains(row.lane, row.seq) {
                return false;
            }
        }
        if self.window_seq.is_some_and(|w| w != row.window_seq) {
            return false;
        }
        if self.role.as_deref().is_some_and(|r| r != row.role) {
            return false;
        }
        if let Some(t) = &self.tool {
            if !row.tools.iter().any(|n| n == t) {
                return false;
            }
        }
        if self.sidechain.is_some_and(|s| s != row.sidechain) {
            return false;
        }
        true
    }
}

/// Which part of a session `agent_name` names: the session's own agent (`Some(false)`: the main
/// chain), `subagent` (`Some(true)`: sidechains), or an error listing the names that work.
pub fn agent_scope(agent_name: &str, session_agent: Option<&str>) -> Result<bool, String> {
    if agent_name == "subagent" {
        return Ok(true);
    }
    if session_agent == Some(agent_name) || agent_name == "main" {
        return Ok(false);
    }
    Err(format!(
        "agent_name {agent_name:?} has no history in this session: use {}\"main\" or \"subagent\"",
        session_agent.map_or(String::new(), |a| format!("{a:?}, "))
    ))
}

/// Roles the `role` filter accepts.
pub const ROLES: &[&str] = &[
    "user",
    "assistant",
    "tool",
    "system",
    "developer",
    "summary",
];

/// Check a role filter.
pub fn check_role(role: &str) -> Result<(), String> {
    if ROLES.contains(&role) {
        Ok(())
    } else {
        Err(format!("role {role:?} is not one of {}", ROLES.join(", ")))
    }
}

/// A part of a text, cut on character boundaries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CharSlice<'a> {
    pub text: &'a str,
    /// Characters in the whole text.
    pub total_chars: usize,
    /// The offset to read from next, when there is more.
    pub next_offset: Option<usize>,
}

/// Characters `offset..offset+limit` of `text` (character offsets, never splitting one).
pub fn slice_chars(text: &str, offset: usize, limit: usize) -> CharSlice<'_> {
    let total_chars = text.chars().count();
    let start = byte_at_char(text, offset);
    let end_char = offset.saturating_add(limit);
    let end = byte_at_char(text, end_char);
    CharSlice {
        text: &text[start..end],
        total_chars,
        next_offset: (end_char < total_chars).then_some(end_char),
    }
}

/// The byte index of character `n` (the end when the text is shorter).
fn byte_at_char(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

/// The first `max_chars` characters of `text`, and whether anything was cut.
pub fn preview(text: &str, max_chars: usize) -> (&str, bool) {
    let end = byte_at_char(text, max_chars);
    (&text[..end], end < text.len())
}

/// A case-sensitive literal search: the byte position of the first occurrence.
pub fn find_literal(text: &str, query: &str) -> Option<usize> {
    if query.is_empty() {
        return None;
    }
    text.find(query)
}

/// A one-line excerpt around bytes `at..at+len` of `text`, with `…` where it was cut and line
/// breaks shown as `⏎`.
pub fn excerpt(text: &str, at: usize, len: usize) -> String {
    let at = floor_boundary(text, at.min(text.len()));
    let end = floor_boundary(text, at.saturating_add(len).min(text.len()));
    let before: Vec<(usize, char)> = text[..at].char_indices().collect();
    let start = before
        .len()
        .checked_sub(EXCERPT_CONTEXT_CHARS)
        .and_then(|i| before.get(i))
        .map_or(0, |&(i, _)| i);
    let stop = end + byte_at_char(&text[end..], EXCERPT_CONTEXT_CHARS);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&text[start..stop].replace('\n', "⏎"));
    if stop < text.len() {
        out.push('…');
    }
    out
}

fn floor_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// An excerpt around the first word of a ranked query found in `text` (case-insensitive), or
/// the text's start when none is (the index also matches words across punctuation).
pub fn ranked_excerpt(text: &str, query: &str) -> String {
    RankedExcerpts::new(query).excerpt(text)
}

/// [`ranked_excerpt`] for many texts of one query: the words' pattern is built once (building
/// it costs about as much as a search of a million items, per hit).
pub struct RankedExcerpts {
    words: Option<regex::Regex>,
}

impl RankedExcerpts {
    pub fn new(query: &str) -> Self {
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(regex::escape)
            .collect();
        let words = regex::RegexBuilder::new(&words.join("|"))
            .case_insensitive(true)
            .build()
            .ok()
            .filter(|_| !words.is_empty());
        Self { words }
    }

    pub fn excerpt(&self, text: &str) -> String {
        let found = self
            .words
            .as_ref()
            .and_then(|re| re.find(text).map(|m| (m.start(), m.len())));
        let (at, len) = found.unwrap_or((0, 0));
        excerpt(text, at, len)
    }
}

/// Check a search query: not empty, not over [`MAX_QUERY_CHARS`].
pub fn check_query(query: &str) -> Result<(), String> {
    if query.is_empty() {
        return Err("query is empty: give the text to search for".into());
    }
    let n = query.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(format!(
            "query is {n} characters; the limit is {MAX_QUERY_CHARS}"
        ));
    }
    Ok(())
}

/// The words of a text as ranked (full-text) search sees them: runs of letters and digits.
/// Stores index an item's text by these words and match a [`RankedQuery`]'s words against them.
pub fn ranked_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
}

/// A ranked (full-text) query: its words, all required. Typed so the core knows no SQL dialect:
/// each store writes it in its own (FTS5 phrases, a PostgreSQL `tsquery`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankedQuery {
    words: Vec<String>,
}

impl RankedQuery {
    /// The words of `query` ([`ranked_words`]); an error when it has none.
    pub fn parse(query: &str) -> Result<Self, String> {
        let words: Vec<String> = ranked_words(query).map(str::to_owned).collect();
        if words.is_empty() {
            return Err(format!(
                "query {query:?} has no word to rank by: use literal search for punctuation"
            ));
        }
        Ok(Self { words })
    }

    /// The words as written (not case-folded), in query order; never empty.
    pub fn words(&self) -> &[String] {
        &self.words
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EntryId, Message, Role};

    #[test]
    fn ids_are_stable_distinct_and_parse_back() {
        let a = item_key(1, "e1");
        assert_eq!(a, item_key(1, "e1"));
        assert_ne!(a, item_key(2, "e1"), "another session, another id");
        assert_ne!(a, item_key(1, "e2"));
        assert_ne!(item_key(1, "e1"), window_key(1, "e1"));
        // Pinned: ids are persistent, a change of hash would break saved references.
        expect_test::expect!["i_c55ebe458259689a"].assert_eq(&item_id(item_key(7, "abc")));
        let id = item_id(a);
        assert!(id.starts_with("i_") && id.len() == 18);
        assert_eq!(parse_item_id(&id), Ok(a));
        let w = window_id(window_key(1, "root"));
        assert_eq!(parse_window_id(&w), Ok(window_key(1, "root")));
        assert!(parse_item_id(&w)
            .unwrap_err()
            .contains("not an id ctxd gave"));
        assert!(parse_item_id("i_12").is_err());
        assert!(parse_item_id("i_zzzzzzzzzzzzzzzz").is_err());
    }

    fn msg(role: Role, blocks: Vec<ContentBlock>) -> EntryKind {
        EntryKind::Message(Message::new(role, blocks))
    }

    #[test]
    fn items_are_entries_that_say_something() {
        let none = |_: &str| None;
        let call = msg(
            Role::Assistant,
            vec![
                ContentBlock::text("let me look"),
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    arguments: serde_json::json!({"cmd": "ls"}),
                },
            ],
        );
        let f = item_facts(&call, &none).unwrap();
        assert_eq!((f.kind, f.role), ("message", "assistant"));
        assert_eq!(f.tools, vec!["bash"]);
        assert_eq!(f.text, "let me look\nbash {\"cmd\":\"ls\"}");
        assert_eq!(tool_calls(&call), vec![("c1", "bash")]);

        let result = msg(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: "c1".into(),
                tool_name: None,
                content: vec![ContentBlock::text("a.txt")],
                is_error: false,
            }],
        );
        let named = |id: &str| (id == "c1").then(|| "bash".to_string());
        assert_eq!(item_facts(&result, &named).unwrap().tools, vec!["bash"]);
        assert!(item_facts(&result, &none).unwrap().tools.is_empty());

        let boot = EntryKind::WindowBoot {
            window_id: "w".into(),
            message: Message::text(Role::User, "boot"),
        };
        assert_eq!(item_facts(&boot, &none).unwrap().kind, "boot");
        let summary = EntryKind::BranchSummary {
            from: None,
            summary: "left".into(),
        };
        let f = item_facts(&summary, &none).unwrap();
        assert_eq!((f.role, f.text.as_str()), ("summary", "left"));
        for kind in [
            EntryKind::SystemPrompt { text: "sys".into() },
            EntryKind::ContextEdit {
                target: EntryId::new("a"),
                replacement: None,
            },
            EntryKind::WindowMarker {
                window_id: "w".into(),
                reason: "new_context".into(),
            },
        ] {
            assert!(item_facts(&kind, &none).is_none());
        }
    }

    #[test]
    fn lanes_and_windows_follow_the_tree() {
        let m = msg(Role::User, vec![ContentBlock::text("x")]);
        let marker = EntryKind::WindowMarker {
            window_id: "w".into(),
            reason: "r".into(),
        };
        // 1 root; 2 child of 1; 3 second child of 1 (fork); 4 marker under 3; 5 under 4.
        let p1 = place(1, &m, None);
        assert_eq!(
            p1,
            Place {
                lane: 1,
                window_seq: 1
            }
        );
        let p2 = place(
            2,
            &m,
            Some(ParentPlace {
                place: p1,
                has_child: false,
            }),
        );
        assert_eq!(
            p2,
            Place {
                lane: 1,
                window_seq: 1
            }
        );
        let p3 = place(
            3,
            &m,
            Some(ParentPlace {
                place: p1,
                has_child: true,
            }),
        );
        assert_eq!(
            p3,
            Place {
                lane: 3,
                window_seq: 1
            }
        );
        let p4 = place(
            4,
            &marker,
            Some(ParentPlace {
                place: p3,
                has_child: false,
            }),
        );
        assert_eq!(
            p4,
            Place {
                lane: 3,
                window_seq: 4
            }
        );
        let p5 = place(
            5,
            &m,
            Some(ParentPlace {
                place: p4,
                has_child: false,
            }),
        );
        assert_eq!(
            p5,
            Place {
                lane: 3,
                window_seq: 4
            }
        );

        // Branch of leaf 5: lane 3 up to 5, then lane 1 up to the fork point 1.
        let mut b = BranchLanes::default();
        b.push(3, 5);
        b.push(1, 1);
        assert!(b.contains(1, 1) && b.contains(3, 3) && b.contains(3, 5));
        assert!(
            !b.contains(1, 2),
            "the other child of the fork is off the branch"
        );
        assert_eq!(b.lanes(), vec![(1, 1), (3, 5)]);
    }

    #[test]
    fn filters_combine() {
        let tools = vec!["bash".to_string()];
        let row = ItemRow {
            lane: 1,
            seq: 4,
            window_seq: 2,
            role: "assistant",
            tools: &tools,
            sidechain: false,
        };
        assert!(ItemFilter::default().accepts(&row, None));
        let f = ItemFilter {
            window_seq: Some(2),
            role: Some("assistant".into()),
            tool: Some("bash".into()),
            sidechain: Some(false),
        };
        assert!(f.accepts(&row, None));
        assert!(!ItemFilter {
            role: Some("user".into()),
            ..f.clone()
        }
        .accepts(&row, None));
        assert!(!ItemFilter {
            tool: Some("read".into()),
            ..f.clone()
        }
        .accepts(&row, None));
        assert!(!ItemFilter {
            window_seq: Some(1),
            ..f.clone()
        }
        .accepts(&row, None));
        assert!(!ItemFilter {
            sidechain: Some(true),
            ..f.clone()
        }
        .accepts(&row, None));
        let mut b = BranchLanes::default();
        b.push(1, 3);
        assert!(
            !f.accepts(&row, Some(&b)),
            "seq 4 is past the branch's end of lane 1"
        );
        assert_eq!(agent_scope("subagent", Some("pi")), Ok(true));
        assert_eq!(agent_scope("pi", Some("pi")), Ok(false));
        assert!(agent_scope("codex", Some("pi"))
            .unwrap_err()
            .contains("\"pi\""));
        assert!(check_role("summary").is_ok());
        assert!(check_role("robot").is_err());
    }

    #[test]
    fn char_slices_never_split_a_character() {
        let t = "héllo wörld";
        let s = slice_chars(t, 0, 2);
        assert_eq!((s.text, s.total_chars, s.next_offset), ("hé", 11, Some(2)));
        let s = slice_chars(t, 7, 100);
        assert_eq!((s.text, s.next_offset), ("örld", None));
        let s = slice_chars(t, 50, 10);
        assert_eq!((s.text, s.next_offset), ("", None));
        assert_eq!(preview("日本語", 2), ("日本", true));
        assert_eq!(preview("日本語", 3), ("日本語", false));
    }

    #[test]
    fn literal_search_is_case_sensitive_and_excerpts_are_one_line() {
        assert_eq!(find_literal("TypeError here", "Error"), Some(4));
        assert_eq!(find_literal("TypeError here", "error"), None);
        assert_eq!(find_literal("x", ""), None);
        let long = format!("{}needle\nafter", "a".repeat(200));
        let e = excerpt(&long, 200, 6);
        assert!(e.starts_with('…') && e.contains("needle⏎after"), "{e}");
        assert_eq!(
            e.chars().filter(|&c| c == 'a').count(),
            80 + 1,
            "80 before, 1 in \"after\""
        );
        assert_eq!(excerpt("ééé", 2, 2), "ééé");
    }

    #[test]
    fn ranked_excerpts_find_a_word_whatever_its_case() {
        let text = format!("{}Disk full on /dev/sda", "x ".repeat(100));
        let e = ranked_excerpt(&text, "disk-FULL");
        assert!(e.starts_with('…') && e.contains("Disk full"), "{e}");
        assert_eq!(ranked_excerpt("short", "absent"), "short");
    }

    #[test]
    fn queries_are_checked_and_quoted() {
        assert!(check_query("").is_err());
        assert!(check_query(&"x".repeat(MAX_QUERY_CHARS + 1)).is_err());
        assert_eq!(
            RankedQuery::parse("disk-full error!").unwrap().words(),
            ["disk", "full", "error"]
        );
        assert!(RankedQuery::parse("--- !!").is_err());
    }
}
