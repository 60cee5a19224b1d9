//! What one request does to the log, and what goes upstream: pure functions over the session's
//! [`SessionLog`] and the client's [`ParsedRequest`].
//!
//! 1. [`plan_request`]: map the request's elements onto the log (content hashes, longest
//!    matching path), append what is new (system prompt and tools when they changed, then the
//!    new elements with the client's bytes), move the leaf.
//! 2. [`upstream_parts`]: the projection of the resulting branch, as a list of parts: the
//!    client's own elements (by index) and messages ctxd renders. `None` when the projection is
//!    exactly the client's elements in order: the body then goes upstream untouched.

use ctxd_core::model::{Compaction, Entry, EntryId, EntryKind, Message, Role};
use ctxd_core::view::{project_checked, ItemKind, ProjectionError};
use ctxd_store::NewEntry;

use crate::hash::{self, Hash};
use crate::log::{SessionLog, SettingKind};
use crate::request::ParsedRequest;

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
pub fn plan_request(
    log: &mut SessionLog,
    req: &ParsedRequest,
    body: &[u8],
    now: &str,
) -> RequestPlan {
    let mut parsed: Vec<Option<Message>> = Vec::with_capacity(req.elements.len());
    let mut hashes: Vec<Hash> = Vec::with_capacity(req.elements.len());
    for (i, element) in req.elements.iter().enumerate() {
        match log.known_raw(&element.raw_hash) {
            Some(h) => {
                hashes.push(h);
                parsed.push(None);
            }
            None => {
                let m = req.message(body, i);
                let h = hash::message(&m);
                log.remember_raw(element.raw_hash, h);
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
                if let Some(summary) = client_summary(req, body, &mut parsed) {
                    client_compaction = Some((log.tail_after(log.leaf()), summary));
                    found = crate::log::Match {
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
    if let Some((_, raw)) = req.system_raw {
        let text = log
            .known_raw(&raw)
            .map_or_else(|| req.system(body), |_| None);
        let h = match &text {
            Some(t) => {
                let h = hash::text(t);
                log.remember_raw(raw, h);
                Some(h)
            }
            None => log.known_raw(&raw),
        };
        if let Some(h) = h.filter(|h| log.setting_at(parent, SettingKind::System) != Some(*h)) {
            let text = text.or_else(|| req.system(body)).unwrap_or_default();
            let id = log.new_id(parent, "system_prompt", &h);
            append(log, &mut parent, EntryKind::SystemPrompt { text }, id, None);
        }
    }
    if let Some((_, raw)) = req.tools_raw {
        let tools = log
            .known_raw(&raw)
            .map_or_else(|| Some(req.tools(body)), |_| None);
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
            let tools = tools.unwrap_or_else(|| req.tools(body));
            let id = log.new_id(parent, "tool_defs", &h);
            append(log, &mut parent, EntryKind::ToolDefs { tools }, id, None);
        }
    }
    for i in matched..req.elements.len() {
        let message = parsed[i].take().unwrap_or_else(|| req.message(body, i));
        let id = log.new_id(parent, "message", &hashes[i]);
        let raw = Some(req.element_bytes(body, i).to_vec());
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
fn continued_after_compaction(log: &SessionLog, hashes: &[Hash]) -> Option<crate::log::Match> {
    log.compactions()
        .iter()
        .rev()
        .map(|&c| log.reconcile_from(Some(c), hashes))
        .find(|m| conversation_matched(log, &m.matched))
}

/// The summary a client's compaction left at the start of this request, if any.
fn client_summary(
    req: &ParsedRequest,
    body: &[u8],
    parsed: &mut [Option<Message>],
) -> Option<String> {
    (0..req.elements.len().min(8)).find_map(|i| {
        let m = parsed[i].get_or_insert_with(|| req.message(body, i));
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

/// One element of the upstream conversation array.
#[derive(Debug, PartialEq)]
pub enum Part {
    /// The client's element at this index, as its own bytes.
    Client(usize),
    /// A message ctxd shows (boot, reminder, summary, edited content).
    Rendered(Message),
}

/// The projection of `log`'s branch as parts; `Ok(None)` when it is exactly the client's
/// elements in order (nothing to rewrite). `element_entries` is the log entry of each of the
/// request's elements ([`RequestPlan::element_entries`]).
pub fn upstream_parts(
    log: &SessionLog,
    element_entries: &[usize],
) -> Result<Option<Vec<Part>>, ProjectionError> {
    let branch = log.branch();
    let projection = project_checked(&log.session, &branch)?;
    // Entry position → the request's element showing it.
    let mut element_of: Vec<Option<usize>> = vec![None; log.len()];
    for (i, &pos) in element_entries.iter().enumerate() {
        if let Some(slot) = element_of.get_mut(pos) {
            *slot = Some(i);
        }
    }
    let parts: Vec<Part> = projection
        .items
        .iter()
        .map(
            |item| match (&item.kind, element_of.get(item.entry).copied().flatten()) {
                (ItemKind::Message { edited: false, .. }, Some(i)) => Part::Client(i),
                _ => Part::Rendered(item.to_message()),
            },
        )
        .collect();
    let unchanged = parts.len() == element_entries.len()
        && parts
            .iter()
            .enumerate()
            .all(|(n, p)| matches!(p, Part::Client(i) if *i == n));
    Ok(if unchanged { None } else { Some(parts) })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::api::Api;

    fn body(messages: &[&str]) -> Vec<u8> {
        let els: Vec<String> = messages
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                format!(r#"{{"role":"{role}","content":[{{"type":"text","text":"{t}"}}]}}"#)
            })
            .collect();
        format!(
            r#"{{"model":"claude-sonnet-4-5","system":"sys","messages":[{}]}}"#,
            els.join(",")
        )
        .into_bytes()
    }

    fn run(log: &mut SessionLog, b: &[u8]) -> (RequestPlan, Option<Vec<Part>>) {
        let req = ParsedRequest::parse(Api::Anthropic, b).unwrap();
        let plan = plan_request(log, &req, b, "2026-12-01T00:00:00Z");
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
            matches!(&parts[0], Part::Rendered(m) if ctxd_formats::wire::openai_chat::text_of(&m.content).contains("BOOT"))
        );
        assert_eq!(parts[1], Part::Client(4));
    }
}
