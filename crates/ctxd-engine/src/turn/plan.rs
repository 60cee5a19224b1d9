//! What one request does to the log: [`plan_request`] maps the client's conversation (a
//! [`ClientRequest`]) onto the session's [`SessionLog`] by content hash (longest matching path),
//! appends what is new (system prompt and tools when they changed, then the new elements with
//! the client's bytes) and moves the leaf. A client's own compaction (Claude Code's, Codex's,
//! Pi's summary starting a new conversation) continues the session after a `Compaction` entry
//! under the old branch, so history search still reaches what came before.

use ctxd_core::model::{Compaction, Entry, EntryId, EntryKind, Message, Role, ToolDef};
use ctxd_store::NewEntry;

use super::hash::{self, Hash};
use super::log::{Match, SessionLog, SettingKind};

/// A client's request as planning reads it: its conversation array (each element's bytes, the
/// key of those bytes, the element as a message of the session model) and the system prompt
/// and tool definitions it states outside the array. The gateway's split request implements it
/// over the request's body; parsing is on demand, since most elements are recognised by the
/// key of their bytes alone.
pub trait ClientRequest {
    /// How many elements the conversation array has.
    fn element_count(&self) -> usize;
    /// The key of element `i`'s bytes ([`hash::raw`]).
    fn element_key(&self, i: usize) -> Hash;
    /// The client's bytes of element `i`.
    fn element_bytes(&self, i: usize) -> &[u8];
    /// Element `i` as a message of the session model.
    fn message(&self, i: usize) -> Message;
    /// The key of the system prompt's bytes, when the request states one outside the array.
    fn system_key(&self) -> Option<Hash>;
    /// The system prompt's text.
    fn system(&self) -> Option<String>;
    /// The key of the tool definitions' bytes, when the request has them.
    fn tools_key(&self) -> Option<Hash>;
    /// The tool definitions as the session model holds them.
    fn tools(&self) -> Vec<ToolDef>;
}

/// What [`plan_request`] changed.
#[derive(Debug, Default)]
pub struct RequestPlan {
    /// Entries appended to the log (already pushed into it), to be written in one batch.
    pub appended: Vec<NewEntry>,
    /// The entry of each element of the request.
    pub element_entries: Vec<usize>,
    /// The leaf moved to an existing entry without an append (a rewind or a retry).
    pub moved_leaf: Option<EntryId>,
    /// How many leading elements were already in the log.
    pub matched: usize,
}

/// Apply `req` to `log` (see the module docs). `now` stamps the new entries.
pub fn plan_request<R: ClientRequest>(log: &mut SessionLog, req: &R, now: &str) -> RequestPlan {
    let count = req.element_count();
    let mut parsed: Vec<Option<Message>> = Vec::with_capacity(count);
    let mut hashes: Vec<Hash> = Vec::with_capacity(count);
    for i in 0..count {
        let key = req.element_key(i);
        match log.known_raw(&key) {
            Some(h) => {
                hashes.push(h);
                parsed.push(None);
            }
            None => {
                let m = req.message(i);
                let h = hash::message(&m);
                log.remember_raw(key, h);
                hashes.push(h);
                parsed.push(Some(m));
            }
        }
    }
    let mut found = log.reconcile(&hashes);
    // A client that compacted on its own starts a new conversation from its summary: the same
    // session, continued after a compaction entry under the old branch (history tools still
    // reach what came before it; what goes upstream is the client's new conversation).
    let mut client_compaction = None;
    if log.leaf().is_some() && !conversation_matched(log, &found.matched) {
        match continued_after_compaction(log, &hashes) {
            Some(m) => found = m,
            None => {
                if let Some(summary) = client_summary(req, &mut parsed) {
                    client_compaction = Some((log.tail_after(log.leaf()), summary));
                    found = Match {
                        matched: Vec::new(),
                        parent: None,
                    };
                }
            }
        }
    }
    let matched = found.matched.len();
    let mut plan = RequestPlan {
        element_entries: found.matched,
        matched,
        ..RequestPlan::default()
    };
    let mut parent = found.parent;
    let stamp = Some(now.to_owned());
    let mut append = |log: &mut SessionLog, parent: &mut Option<usize>, kind, id, raw| {
        let entry = Entry {
            id,
            parent: parent.and_then(|p| log.entry(p)).map(|e| e.id.clone()),
            timestamp: stamp.clone(),
            sidechain: false,
            kind,
        };
        let pos = log.push(entry.clone());
        *parent = Some(pos);
        plan.appended.push(NewEntry { entry, raw });
        pos
    };
    if let Some((under, summary)) = client_compaction {
        parent = under;
        let h = hash::text(&summary);
        let id = log.new_id(parent, "client_compaction", &h);
        let kind = EntryKind::Compaction(Compaction {
            summary,
            first_kept: None,
            tokens_before: None,
            // Nothing before it is shown again: the client's conversation carries its summary.
            replacement: Some(Vec::new()),
        });
        append(log, &mut parent, kind, id, None);
    }
    if let Some(raw) = req.system_key() {
        let text = log.known_raw(&raw).map_or_else(|| req.system(), |_| None);
        let h = match &text {
            Some(t) => {
                let h = hash::text(t);
                log.remember_raw(raw, h);
                Some(h)
            }
            None => log.known_raw(&raw),
        };
        if let Some(h) = h.filter(|h| log.setting_at(parent, SettingKind::System) != Some(*h)) {
            let text = text.or_else(|| req.system()).unwrap_or_default();
            let id = log.new_id(parent, "system_prompt", &h);
            append(log, &mut parent, EntryKind::SystemPrompt { text }, id, None);
        }
    }
    if let Some(raw) = req.tools_key() {
        let tools = log
            .known_raw(&raw)
            .map_or_else(|| Some(req.tools()), |_| None);
        let h = match &tools {
            Some(t) if !t.is_empty() => {
                let h = hash::tools(t);
                log.remember_raw(raw, h);
                Some(h)
            }
            Some(_) => None,
            None => log.known_raw(&raw),
        };
        if let Some(h) = h.filter(|h| log.setting_at(parent, SettingKind::Tools) != Some(*h)) {
            let tools = tools.unwrap_or_else(|| req.tools());
            let id = log.new_id(parent, "tool_defs", &h);
            append(log, &mut parent, EntryKind::ToolDefs { tools }, id, None);
        }
    }
    for i in matched..count {
        let message = parsed[i].take().unwrap_or_else(|| req.message(i));
        let id = log.new_id(parent, "message", &hashes[i]);
        let raw = Some(req.element_bytes(i).to_vec());
        let pos = append(log, &mut parent, EntryKind::Message(message), id, raw);
        plan.element_entries.push(pos);
    }
    if plan.appended.is_empty() && log.leaf() != parent {
        if let Some(p) = parent {
            log.set_leaf(p);
            plan.moved_leaf = log.entry(p).map(|e| e.id.clone());
        }
    }
    plan
}

/// How clients begin the conversation that follows their own compaction (Claude Code, Codex,
/// Pi), in a user message's text.
const CLIENT_SUMMARY_PREFIXES: [&str; 3] = [
    "This session is being continued from a previous conversation",
    "Another language model started to solve this problem and produced a summary",
    "The conversation history before this point was compacted into the following summary",
];

/// Whether any matched entry is a conversation message other than a system prompt (Chat and
/// Responses clients send those in the array, and many conversations share them).
fn conversation_matched(log: &SessionLog, matched: &[usize]) -> bool {
    matched.iter().any(|&p| {
        matches!(log.entry(p).map(|e| &e.kind), Some(EntryKind::Message(m))
            if !matches!(m.role, Role::System | Role::Developer))
    })
}

/// The request continues a conversation already recorded after a client's compaction.
fn continued_after_compaction(log: &SessionLog, hashes: &[Hash]) -> Option<Match> {
    log.compactions()
        .iter()
        .rev()
        .map(|&c| log.reconcile_from(Some(c), hashes))
        .find(|m| conversation_matched(log, &m.matched))
}

/// The summary a client's compaction left at the start of this request, if any.
fn client_summary<R: ClientRequest>(req: &R, parsed: &mut [Option<Message>]) -> Option<String> {
    (0..req.element_count().min(8)).find_map(|i| {
        let m = parsed[i].get_or_insert_with(|| req.message(i));
        if m.role != Role::User {
            return None;
        }
        let text = ctxd_core::text::message_text(m);
        let trimmed = text.trim_start();
        CLIENT_SUMMARY_PREFIXES
            .iter()
            .any(|p| trimmed.starts_with(p))
            .then(|| trimmed.to_owned())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::turn::{upstream_parts, Part};

    /// A conversation as the gateway's split request presents it: element bytes as a client
    /// sends them (Anthropic's shape), a system prompt `sys`.
    struct Request {
        elements: Vec<(Vec<u8>, Message)>,
    }

    impl ClientRequest for Request {
        fn element_count(&self) -> usize {
            self.elements.len()
        }
        fn element_key(&self, i: usize) -> Hash {
            hash::raw(&self.elements[i].0)
        }
        fn element_bytes(&self, i: usize) -> &[u8] {
            &self.elements[i].0
        }
        fn message(&self, i: usize) -> Message {
            self.elements[i].1.clone()
        }
        fn system_key(&self) -> Option<Hash> {
            Some(hash::raw(b"\"sys\""))
        }
        fn system(&self) -> Option<String> {
            Some("sys".into())
        }
        fn tools_key(&self) -> Option<Hash> {
            None
        }
        fn tools(&self) -> Vec<ToolDef> {
            Vec::new()
        }
    }

    fn body(messages: &[&str]) -> Request {
        let elements = messages
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let role = if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                let name = if i % 2 == 0 { "user" } else { "assistant" };
                let bytes =
                    format!(r#"{{"role":"{name}","content":[{{"type":"text","text":"{t}"}}]}}"#);
                (bytes.into_bytes(), Message::text(role, *t))
            })
            .collect();
        Request { elements }
    }

    fn run(log: &mut SessionLog, req: &Request) -> (RequestPlan, Option<Vec<Part>>) {
        let plan = plan_request(log, req, "2026-12-01T00:00:00Z");
        let parts = upstream_parts(log, &plan.element_entries).unwrap();
        (plan, parts)
    }

    #[test]
    fn a_growing_conversation_appends_only_what_is_new_and_passes_through() {
        let mut log = SessionLog::default();
        let (p1, parts) = run(&mut log, &body(&["hi"]));
        assert_eq!(p1.appended.len(), 2, "system prompt + first message");
        assert!(parts.is_none());
        let (p2, parts) = run(&mut log, &body(&["hi", "hello", "next"]));
        assert_eq!(p2.matched, 1);
        assert_eq!(p2.appended.len(), 2);
        assert!(parts.is_none());
        assert_eq!(
            p2.appended[0].raw.as_deref(),
            Some(br#"{"role":"assistant","content":[{"type":"text","text":"hello"}]}"#.as_slice())
        );
        // The same request again (a retry): nothing new, nothing moved.
        let (p3, _) = run(&mut log, &body(&["hi", "hello", "next"]));
        assert!(p3.appended.is_empty());
        assert!(p3.moved_leaf.is_none());
        // A rewind: the leaf moves back, nothing is appended.
        let (p4, parts) = run(&mut log, &body(&["hi"]));
        assert!(p4.appended.is_empty());
        assert!(p4.moved_leaf.is_some());
        assert!(parts.is_none());
        assert_eq!(log.len(), 4);
    }

    #[test]
    fn an_edit_earlier_in_the_conversation_starts_a_branch() {
        let mut log = SessionLog::default();
        run(&mut log, &body(&["hi", "hello", "next"]));
        let (p, parts) = run(&mut log, &body(&["hi", "hello", "edited"]));
        assert_eq!(p.matched, 2);
        assert_eq!(p.appended.len(), 1);
        assert!(parts.is_none(), "the projection follows the new branch");
        assert_eq!(log.branch().len(), 4);
    }

    #[test]
    fn a_clients_own_compaction_continues_the_session_after_a_compaction_entry() {
        let mut log = SessionLog::default();
        run(&mut log, &body(&["hi", "hello", "work", "did it"]));
        let summary = "This session is being continued from a previous conversation that ran out of context. Summary: work done.";
        let (p, parts) = run(&mut log, &body(&[summary]));
        assert!(
            parts.is_none(),
            "upstream gets the client's conversation as it is"
        );
        let branch = log.branch();
        let kinds: Vec<&str> = branch
            .iter()
            .map(|&p| match &log.entry(p).unwrap().kind {
                EntryKind::Compaction(_) => "compaction",
                EntryKind::Message(_) => "message",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "other",
                "message",
                "message",
                "message",
                "message",
                "compaction",
                "message"
            ],
            "the old conversation stays on the branch, before the compaction"
        );
        assert_eq!(p.appended.len(), 2);
        // The next request finds the continued conversation; no second compaction.
        let (p2, parts) = run(&mut log, &body(&[summary, "ok", "next"]));
        assert_eq!(p2.matched, 1);
        assert!(parts.is_none());
        assert_eq!(log.compactions().len(), 1);
        // An unrelated new conversation in the same session still starts its own root.
        let (p3, _) = run(&mut log, &body(&["a title please"]));
        assert_eq!(p3.matched, 0);
        assert_eq!(log.compactions().len(), 1);
        assert_eq!(
            log.branch().len(),
            2,
            "system prompt + the new root message"
        );
    }

    #[test]
    fn a_new_window_folds_the_old_conversation_away() {
        let mut log = SessionLog::default();
        run(&mut log, &body(&["hi", "hello", "work"]));
        // The assistant answers; then ctxd opens a window: marker + boot under the answer.
        let b = body(&["hi", "hello", "work", "did it"]);
        run(&mut log, &b);
        let parent = log.leaf().and_then(|p| log.entry(p)).map(|e| e.id.clone());
        for kind in ctxd_core::windows::reset_drafts(
            "w2",
            ctxd_core::windows::ResetCause::Requested,
            "BOOT".into(),
        )
        .into_iter()
        .zip(["mk", "bt"])
        {
            let (kind, id) = kind;
            let e = Entry {
                id: EntryId::new(id),
                parent: log.leaf().and_then(|p| log.entry(p)).map(|e| e.id.clone()),
                timestamp: None,
                sidechain: false,
                kind,
            };
            log.push(e);
        }
        assert!(parent.is_some());
        let (p, parts) = run(&mut log, &body(&["hi", "hello", "work", "did it", "more"]));
        assert_eq!(p.matched, 4);
        let parts = parts.expect("rewritten");
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert!(
            matches!(&parts[0], Part::Rendered(m) if ctxd_core::text::message_text(m).contains("BOOT"))
        );
        assert_eq!(parts[1], Part::Client(4));
    }
}
