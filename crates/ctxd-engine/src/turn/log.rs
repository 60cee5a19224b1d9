//! The session view a turn runs over: one session's log as the gateway holds it (the store's
//! entries plus the ones queued for writing), with the indices reconciliation needs (children
//! of each entry, the hash of each conversation message). The gateway rebuilds it from the store
//! whenever a write fails, so the store stays the truth and this is only ever a cache of it.

use std::collections::HashMap;

use ctxd_core::model::{ContentBlock, Entry, EntryId, EntryKind, Role, Session};

use super::client_view::read_view;
use super::hash::{self, Hash};

/// A session's log with reconciliation indices.
#[derive(Debug, Default)]
pub struct SessionLog {
    pub session: Session,
    positions: HashMap<EntryId, usize>,
    /// Children of each entry (`None`: roots), in append order.
    children: Vec<Vec<usize>>,
    /// Entries without a parent, in append order.
    roots: Vec<usize>,
    /// Hash of each conversation message (what a client sends); `None` for everything else.
    hashes: Vec<Option<Hash>>,
    /// Position of each entry's parent (resolved once, on push: paths are walked every request).
    parents: Vec<Option<usize>>,
    /// The system prompt and tool definitions in force at each entry (the latest of each kind on
    /// its path), carried down on push so a request's check is O(1), not a walk to the root.
    in_force: Vec<InForce>,
    /// Element bytes already seen → message hash (skips parsing resent elements).
    raw_index: HashMap<Hash, Hash>,
    leaf: Option<usize>,
    /// Positions of compaction entries (a client's own compaction continues its session after
    /// one: [`plan_request`](super::plan_request)).
    compactions: Vec<usize>,
    /// The largest prompt (tokens) a provider reported for this session: the model's window is
    /// at least that.
    accepted_tokens: u64,
    /// What the entries hold in memory, roughly ([`entry_bytes`]): the gateway's session cache
    /// is bounded by the sum over its sessions.
    bytes: usize,
}

/// Bytes an entry holds in memory: its texts, arguments and inlined images, its blocks and ids,
/// and a fixed share for the entry itself and this log's indexes of it (`tests/memory.rs` in the
/// gateway checks the sum against what a loaded log holds on the heap).
pub fn entry_bytes(entry: &Entry) -> usize {
    /// The entry and its slots in the log's indexes (positions, children, hashes, parents, what
    /// is in force), with their vectors' and map's spare capacity.
    const PER_ENTRY: usize = std::mem::size_of::<Entry>() + 560;
    const PER_BLOCK: usize = std::mem::size_of::<ContentBlock>();
    fn opt(s: &Option<String>) -> usize {
        s.as_ref().map_or(0, String::len)
    }
    fn blocks(content: &[ContentBlock]) -> usize {
        content
            .iter()
            .map(|b| {
                PER_BLOCK
                    + match b {
                        ContentBlock::Text { text } => text.len(),
                        ContentBlock::Thinking {
                            thinking,
                            signature,
                            ..
                        } => thinking.len() + opt(signature),
                        ContentBlock::Image(img) => opt(&img.data) + opt(&img.url),
                        ContentBlock::ToolCall {
                            id,
                            name,
                            arguments,
                            ..
                        } => id.len() + name.len() + value_bytes(arguments),
                        ContentBlock::ToolResult { content, .. } => 64 + blocks(content),
                    }
            })
            .sum()
    }
    fn value_bytes(v: &serde_json::Value) -> usize {
        match v {
            serde_json::Value::String(s) => s.len() + 32,
            serde_json::Value::Array(a) => 32 + a.iter().map(value_bytes).sum::<usize>(),
            serde_json::Value::Object(o) => {
                64 + o
                    .iter()
                    .map(|(k, v)| 48 + k.len() + value_bytes(v))
                    .sum::<usize>()
            }
            _ => 32,
        }
    }
    // The id twice (the entry's and the positions map's key), the parent, the timestamp.
    let ids = 2 * entry.id.as_str().len()
        + entry.parent.as_ref().map_or(0, |p| p.as_str().len())
        + opt(&entry.timestamp);
    PER_ENTRY
        + ids
        + match &entry.kind {
            EntryKind::Message(m) => {
                blocks(&m.content)
                    + opt(&m.injected)
                    + opt(&m.model)
                    + opt(&m.response_id)
                    + opt(&m.stop_reason)
            }
            EntryKind::WindowBoot { message, .. } => blocks(&message.content),
            EntryKind::SystemPrompt { text } => text.len(),
            EntryKind::ToolDefs { tools } => tools
                .iter()
                .map(|t| 80 + t.name.len() + t.description.len() + value_bytes(&t.schema))
                .sum(),
            EntryKind::ContextEdit {
                replacement: Some(r),
                ..
            } => blocks(r),
            EntryKind::ArgsEdit { replacement, .. } => blocks(replacement),
            EntryKind::Compaction(c) => {
                c.summary.len()
                    + c.replacement
                        .iter()
                        .flatten()
                        .map(|m| blocks(&m.content))
                        .sum::<usize>()
            }
            EntryKind::BranchSummary { summary, .. } => summary.len(),
            EntryKind::Event {
                detail: Some(d), ..
            } => value_bytes(d),
            _ => 0,
        }
}

/// Hashes of the system prompt and tool definitions in force at an entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct InForce {
    system: Option<Hash>,
    tools: Option<Hash>,
}

/// Where a request's conversation meets the log.
#[derive(Debug, PartialEq, Eq)]
pub struct Match {
    /// Entry positions of the leading elements found in the log, in order.
    pub matched: Vec<usize>,
    /// Where the first unmatched element goes: the last match, followed down through ctxd's own
    /// entries after it (reminders, window marker and boot); `None` for a new root.
    pub parent: Option<usize>,
}

/// A message a client sends or echoes; ctxd's own injected messages are not.
pub fn is_conversation(entry: &Entry) -> bool {
    match &entry.kind {
        EntryKind::Message(m) => !m
            .injected
            .as_deref()
            .is_some_and(|k| k.starts_with("ctxd/")),
        _ => false,
    }
}

impl SessionLog {
    pub fn new(session: Session) -> Self {
        let Session {
            meta,
            entries,
            leaf,
        } = session;
        let mut log = SessionLog {
            session: Session {
                meta,
                entries: Vec::with_capacity(entries.len()),
                leaf: None,
            },
            ..SessionLog::default()
        };
        for entry in entries {
            log.push(entry);
        }
        if let Some(pos) = leaf.as_ref().and_then(|id| log.position(id)) {
            log.set_leaf(pos);
        }
        log
    }

    pub fn position(&self, id: &EntryId) -> Option<usize> {
        self.positions.get(id).copied()
    }

    pub fn entry(&self, pos: usize) -> Option<&Entry> {
        self.session.entries.get(pos)
    }

    pub fn leaf(&self) -> Option<usize> {
        self.leaf
    }

    pub fn len(&self) -> usize {
        self.session.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.session.entries.is_empty()
    }

    /// Append `entry` (its parent must be in the log or absent) and make it the leaf.
    pub fn push(&mut self, entry: Entry) -> usize {
        let pos = self.session.entries.len();
        let parent = entry.parent.as_ref().and_then(|p| self.position(p));
        match parent {
            Some(p) => self.children[p].push(pos),
            None => self.roots.push(pos),
        }
        self.children.push(Vec::new());
        self.positions.insert(entry.id.clone(), pos);
        let mut in_force = parent.map_or_else(InForce::default, |p| self.in_force[p]);
        match &entry.kind {
            EntryKind::SystemPrompt { text } => in_force.system = Some(hash::text(text)),
            EntryKind::ToolDefs { tools } => in_force.tools = Some(hash::tools(tools)),
            EntryKind::Compaction(_) => self.compactions.push(pos),
            _ => {}
        }
        self.parents.push(parent);
        self.in_force.push(in_force);
        let usage = match &entry.kind {
            EntryKind::Message(m) => m.usage.as_ref(),
            EntryKind::Usage { usage } => Some(usage),
            _ => None,
        };
        if let Some(u) = usage {
            self.accepted_tokens = self.accepted_tokens.max(u.prompt_tokens());
        }
        let own_hash = match &entry.kind {
            EntryKind::Message(m) if is_conversation(&entry) => Some(hash::message(m)),
            EntryKind::Event { .. } => read_view(&entry).map(|(shown, covers)| {
                // A hidden exchange: the client echoes what it was shown (this event), never
                // the entries it stands for, which become ctxd's own (followed through).
                for id in covers {
                    if let Some(&p) = self.positions.get(&EntryId::new(id)) {
                        self.hashes[p] = None;
                    }
                }
                hash::message(&shown)
            }),
            _ => None,
        };
        self.hashes.push(own_hash);
        self.bytes += entry_bytes(&entry);
        self.session.leaf = Some(entry.id.clone());
        self.session.entries.push(entry);
        self.leaf = Some(pos);
        pos
    }

    /// Bytes the log holds in memory, roughly ([`entry_bytes`]).
    pub fn approx_bytes(&self) -> usize {
        self.bytes
    }

    /// The largest prompt a provider reported accepting in this session, in tokens.
    pub fn accepted_tokens(&self) -> u64 {
        self.accepted_tokens
    }

    pub fn set_leaf(&mut self, pos: usize) {
        if let Some(e) = self.session.entries.get(pos) {
            self.session.leaf = Some(e.id.clone());
            self.leaf = Some(pos);
        }
    }

    /// Positions from the root to the leaf.
    pub fn branch(&self) -> Vec<usize> {
        self.path_to(self.leaf)
    }

    /// Positions from the root to `pos`, root first.
    pub fn path_to(&self, pos: Option<usize>) -> Vec<usize> {
        let mut path = Vec::new();
        let mut cur = pos;
        while let Some(p) = cur {
            if path.len() > self.session.entries.len() {
                break; // a cycle in a corrupt log: stop rather than loop
            }
            path.push(p);
            cur = self.parents[p];
        }
        path.reverse();
        path
    }

    pub fn remember_raw(&mut self, raw: Hash, message: Hash) {
        self.raw_index.insert(raw, message);
    }

    pub fn known_raw(&self, raw: &Hash) -> Option<Hash> {
        self.raw_index.get(raw).copied()
    }

    /// The children of `pos` (`None`: the roots), in append order.
    fn children_of(&self, pos: Option<usize>) -> &[usize] {
        match pos {
            Some(p) => self.children.get(p).map_or(&[], Vec::as_slice),
            None => &self.roots,
        }
    }

    /// The latest conversation message with hash `h` right after `from` (through ctxd's own
    /// entries). Runs once per element of every request: the common case (a child that is the
    /// message itself) allocates nothing.
    pub fn find_next(&self, from: Option<usize>, h: &Hash) -> Option<usize> {
        let children = self.children_of(from);
        let mut best = None;
        let mut own: Vec<usize> = Vec::new();
        for &c in children {
            match &self.hashes[c] {
                Some(ch) if ch == h => best = best.max(Some(c)),
                Some(_) => {}
                None => own.push(c),
            }
        }
        // ctxd's own chains (reminders, window marker and boot) are a handful of entries long.
        let mut visited = 0usize;
        while let Some(c) = own.pop() {
            visited += 1;
            if visited > 4096 {
                break;
            }
            for &g in &self.children[c] {
                match &self.hashes[g] {
                    Some(gh) if gh == h => best = best.max(Some(g)),
                    Some(_) => {}
                    None => own.push(g),
                }
            }
        }
        best
    }

    /// The longest prefix of `elements` (message hashes) found as a path in the log, and where
    /// the rest goes. Among equal candidates the latest appended wins.
    pub fn reconcile(&self, elements: &[Hash]) -> Match {
        self.reconcile_from(None, elements)
    }

    /// Compaction entries, oldest first.
    pub fn compactions(&self) -> &[usize] {
        &self.compactions
    }

    /// [`SessionLog::reconcile`] below `start` (`None`: from the roots).
    pub fn reconcile_from(&self, start: Option<usize>, elements: &[Hash]) -> Match {
        let mut matched = Vec::new();
        let mut cur: Option<usize> = start;
        for h in elements {
            match self.find_next(cur, h) {
                Some(c) => {
                    matched.push(c);
                    cur = Some(c);
                }
                None => break,
            }
        }
        Match {
            parent: if matched.is_empty() && start.is_some() {
                start
            } else {
                self.tail_after(cur)
            },
            matched,
        }
    }

    /// `pos` followed down through ctxd's own entries (latest child first): where the next
    /// conversation message attaches. A hidden exchange (an assistant message the client never
    /// saw, with what followed it) is not followed: a request that ends where one began is a
    /// retry or a regeneration, and must end with the client's message, not with ctxd's round
    /// or the answer the client is asking again for.
    pub fn tail_after(&self, pos: Option<usize>) -> Option<usize> {
        let mut cur = pos;
        for _ in 0..64 {
            let next = self
                .children_of(cur)
                .iter()
                .rev()
                .find(|&&c| self.hashes[c].is_none())
                .copied()
                .filter(|&c| !self.is_hidden_answer(c));
            match next {
                // At the root nothing is followed: a new conversation starts its own chain.
                Some(n) if cur.is_some() => cur = Some(n),
                _ => break,
            }
        }
        cur
    }

    /// An assistant message among ctxd's own entries: the start of a hidden exchange (ctxd
    /// injects only user messages of its own).
    fn is_hidden_answer(&self, pos: usize) -> bool {
        matches!(self.entry(pos).map(|e| &e.kind),
            Some(EntryKind::Message(m)) if m.role == Role::Assistant)
    }

    /// The system prompt or tool definitions hash in force at `pos` (the latest entry of that
    /// kind on its path).
    pub fn setting_at(&self, pos: Option<usize>, kind: SettingKind) -> Option<Hash> {
        let in_force = self.in_force.get(pos?)?;
        match kind {
            SettingKind::System => in_force.system,
            SettingKind::Tools => in_force.tools,
        }
    }

    /// Append a new entry of `kind` under `parent` (its id derived from `tag` and `content`, see
    /// [`SessionLog::new_id`]); it becomes the leaf. Returns its position and a copy for the
    /// store.
    pub fn append_under(
        &mut self,
        parent: Option<usize>,
        tag: &str,
        content: &Hash,
        kind: EntryKind,
        timestamp: Option<String>,
    ) -> (usize, Entry) {
        let entry = Entry {
            id: self.new_id(parent, tag, content),
            parent: parent.and_then(|p| self.entry(p)).map(|e| e.id.clone()),
            timestamp,
            sidechain: false,
            kind,
        };
        (self.push(entry.clone()), entry)
    }

    /// An id for a new entry under `parent`, derived from its content so the same message under
    /// the same parent is recognised rather than duplicated.
    pub fn new_id(&self, parent: Option<usize>, tag: &str, content: &Hash) -> EntryId {
        let parent_id = parent
            .and_then(|p| self.session.entries.get(p))
            .map_or("", |e| e.id.as_str());
        let mut h = blake3::Hasher::new();
        h.update(parent_id.as_bytes());
        h.update(b"\x1f");
        h.update(tag.as_bytes());
        h.update(content);
        let digest = h.finalize();
        let base = format!("g-{}", &digest.to_hex()[..20]);
        let mut id = EntryId::new(base.clone());
        let mut n = 1;
        while self.positions.contains_key(&id) {
            n += 1;
            id = EntryId::new(format!("{base}-{n}"));
        }
        id
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettingKind {
    System,
    Tools,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::model::{Message, Role};

    fn msg(id: &str, parent: Option<&str>, role: Role, text: &str) -> Entry {
        Entry {
            id: EntryId::new(id),
            parent: parent.map(EntryId::new),
            timestamp: None,
            sidechain: false,
            kind: EntryKind::Message(Message::text(role, text)),
        }
    }

    fn own(id: &str, parent: &str) -> Entry {
        Entry {
            id: EntryId::new(id),
            parent: Some(EntryId::new(parent)),
            timestamp: None,
            sidechain: false,
            kind: EntryKind::WindowMarker {
                window_id: "w".into(),
                reason: "requested".into(),
            },
        }
    }

    fn h(role: Role, text: &str) -> Hash {
        hash::message(&Message::text(role, text))
    }

    fn log() -> SessionLog {
        SessionLog::new(Session {
            entries: vec![
                msg("u1", None, Role::User, "hi"),
                msg("a1", Some("u1"), Role::Assistant, "hello"),
                own("m1", "a1"),
            ],
            ..Session::default()
        })
    }

    #[test]
    fn a_request_extending_the_branch_attaches_after_ctxds_own_entries() {
        let log = log();
        let m = log.reconcile(&[
            h(Role::User, "hi"),
            h(Role::Assistant, "hello"),
            h(Role::User, "next"),
        ]);
        assert_eq!(m.matched, vec![0, 1]);
        assert_eq!(m.parent, Some(2), "after the marker, not beside it");
    }

    #[test]
    fn a_divergence_branches_at_the_last_match() {
        let log = log();
        let m = log.reconcile(&[h(Role::User, "hi"), h(Role::Assistant, "other")]);
        assert_eq!(m.matched, vec![0]);
        assert_eq!(m.parent, Some(0));
        let fresh = log.reconcile(&[h(Role::User, "new conversation")]);
        assert_eq!(fresh.matched, Vec::<usize>::new());
        assert_eq!(fresh.parent, None);
    }

    #[test]
    fn interleaved_threads_each_find_their_own_path() {
        let mut log = log();
        log.push(msg("u2", None, Role::User, "title please"));
        // The leaf is now on the second thread; the first still matches whole.
        let m = log.reconcile(&[h(Role::User, "hi"), h(Role::Assistant, "hello")]);
        assert_eq!(m.matched, vec![0, 1]);
    }

    #[test]
    fn ids_are_derived_from_content_and_never_collide() {
        let mut log = log();
        let a = log.new_id(Some(1), "message", &h(Role::User, "x"));
        assert_eq!(a, log.new_id(Some(1), "message", &h(Role::User, "x")));
        assert_ne!(a, log.new_id(Some(0), "message", &h(Role::User, "x")));
        let mut e = msg("placeholder", Some("a1"), Role::User, "x");
        e.id = a.clone();
        log.push(e);
        assert_ne!(a, log.new_id(Some(1), "message", &h(Role::User, "x")));
    }
}
