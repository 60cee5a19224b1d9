//! Claude Code transcripts (`~/.claude/projects/<cwd>/<session>.jsonl`), 1.0.x and 2.x, and 2.x
//! subagent files (`<session>/subagents/agent-*.jsonl`).
//!
//! Every line is one JSON object with a `type`. The rules below were checked against real files:
//! the two 1.0.x transcripts in `shared/sessions/claude-code/` (1.0.98, 1.0.108) and a transcript
//! written by Claude Code 2.1.197 against the local mock (`tests/fixtures/claude_code/`).
//!
//! # Tree
//! - Lines with a `uuid` keep it as the entry id, and `parentUuid` as the parent. A parent that is
//!   not in the file (a trimmed or continued transcript) becomes `None`, with one warning giving
//!   the count. A repeated `uuid` is skipped with a warning naming the line.
//! - 2.x writes each result of a response's parallel calls as a child of its own call's line;
//!   those results are chained after the response's last line instead, in file order, so the
//!   active branch holds every call and every result (`Importer::chained_result_parent`).
//! - `isSidechain: true` marks the entry [`Entry::sidechain`]: 1.0.x writes subagent (Task)
//!   conversations inline, each a chain whose root has `parentUuid: null`.
//! - [`Session::leaf`] is set to the last non-sidechain entry that came from a `uuid` line, so that
//!   entries with synthesised ids (`summary` events) never become the active leaf.
//!
//! # Line types
//! - `user` / `assistant`: `message{role, content}` through [`wire::anthropic::message`]. The
//!   agent's own view of a tool result (`toolUseResult`, about a quarter to a third of a 1.0.x
//!   file) is not what the model saw: it is skipped unread. The model's view is the `tool_result`
//!   block in `message.content`. `requestId`, `gitBranch`, `userType` and the like are dropped.
//! - Assistant lines: `message.id` becomes [`Message::response_id`], plus `model` and
//!   `stop_reason`. One API response is written as one line per content block, all sharing
//!   `message.id` and repeating the same `usage`, except that `output_tokens` grows: each line
//!   holds the count as of the moment its block was written. In both 1.0.x files (190 responses)
//!   `output_tokens` never decreases along a response and its last line holds the maximum, so the
//!   **usage is attached to the last line of each response only** (moved there from the earlier
//!   lines as they arrive, field by field maximum); earlier lines have `usage: None`. Lines of one
//!   response need not be adjacent (parallel subagents interleave).
//! - Assistant lines with model `<synthetic>` were written by Claude Code, not the model
//!   ("No response requested.", API error notices): injected `"synthetic"`, usage dropped (it is
//!   all zeros), and never the session's model.
//! - `summary{summary, leafUuid}` (1.0.x): the conversation title Claude Code shows in its resume
//!   list, not a compaction (the 1.0.98 file starts with one whose `leafUuid` is not even in the
//!   file: it titles another transcript's leaf). An [`EntryKind::Event`] `"summary"` with id
//!   `L<line>`, parented on `leafUuid` when that entry was already read (else a root). The
//!   session title is the summary of the final leaf if any, else one whose leaf is in the file,
//!   else the last one.
//! - `system` with subtype `compact_boundary` (2.x): `parentUuid` is null and `logicalParentUuid`
//!   names the last entry before the compaction; it becomes [`EntryKind::Compaction`] parented on
//!   `logicalParentUuid` (the old history stays on the branch), `tokens_before =
//!   compactMetadata.preTokens`. 2.1.x keeps the newest messages through a compaction and says
//!   so in `compactMetadata.preservedSegment{headUuid, tailUuid}`; the request sent after the
//!   compaction was checked to be `[summary, head..=tail, what follows]`, which is exactly what
//!   `first_kept = headUuid` means in the model, so `first_kept` is set to `headUuid` when that
//!   entry is in the file and the segment ends at `logicalParentUuid` (else `None`).
//!   The next `user` line with `isCompactSummary: true` carries the summary text: it is written
//!   into that compaction, and the line itself becomes an `Event` `"compact_summary"` (kept so
//!   the entries after it stay connected) rather than a user message. An `isCompactSummary` line
//!   with no boundary before it (older layout) becomes the compaction itself.
//! - Other `system` subtypes (`microcompact_boundary`, `turn_duration`, `local_command`, ...),
//!   `progress`, `attachment` and any other line that has a `uuid`: an `Event` named after the
//!   subtype (system lines) or the type, keeping uuid and parent so chains pass through them. Its
//!   detail is the line without the bookkeeping fields (ids, cwd, version, branch, ...).
//! - Lines without a `uuid` (`file-history-snapshot`, `queue-operation`, `last-prompt`, `mode`,
//!   ...) are skipped silently: they are editor state, not part of the conversation tree.
//! - A `user`/`assistant`/`system` line without a `uuid` or `message`, or anything that is not a
//!   JSON object with a string `type`, is an error for that line (skipped with a warning).
//!
//! # Injected context (user lines that are not tool results)
//! - `isMeta: true` → `"meta"` (expanded slash-command prompts, the `<local-command-caveat>`,
//!   "Continue from where you left off.").
//! - Every block is text and every text starts with `<system-reminder>` → `"system-reminder"`.
//! - First text starts with `<command-name>`, `<command-message>`, `<command-args>`,
//!   `<local-command-stdout>`, `<local-command-stderr>` or `<local-command-caveat>` →
//!   `"command"` (the slash command the user ran and its local output, e.g. `/compact` →
//!   `Compacted`).
//! - `<bash-input>`, `<bash-stdout>`, `<bash-stderr>` (the `!` shell mode) → `"bash"`.
//! - `<task-notification>` (background task notices) → `"task-notification"`.
//! - `[Request interrupted by user...]` → `"interrupt"`.
//! - Anything with a non-text block (tool results, images) is not injected.
//!
//! # Metadata
//! `agent: ClaudeCode`, `id` = first `sessionId`, `cwd`, `started_at` = first timestamp, `format`
//! = `claude-code/<first version>`, `model` = the first non-synthetic assistant model.
//!
//! # Subagent files
//! A file with no non-sidechain message or compaction (2.x `subagents/agent-*.jsonl`, every line
//! `isSidechain: true`) is the subagent's own session: the sidechain flags are cleared,
//! `parent_session` = its `sessionId` (the parent session) and `id` = its `agentId` when present.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use ctxd_core::model::Agent;
use ctxd_core::model::{
    Compaction, ContentBlock, Entry, EntryId, EntryKind, Message, Role, Session, Usage,
};

use crate::builder::Builder;
use crate::error::{ImportError, Warning};
use crate::jsonl::LineImporter;
use crate::wire;

/// Fields every line repeats (besides those [`Line`] reads): skipped unread, so they are not in
/// an event's detail.
const BOOKKEEPING: &[&str] = &["gitBranch", "userType", "entrypoint", "slug", "requestId"];

#[derive(Default)]
pub(crate) struct Importer {
    builder: Builder,
    /// Every uuid imported so far.
    ids: HashSet<String>,
    /// Response id -> index of the entry that holds the response's usage (its latest line).
    responses: HashMap<String, usize>,
    /// A compaction waiting for its summary line: (entry index).
    pending_compaction: Option<usize>,
    /// The last non-sidechain entry read from a uuid line, and the last of any kind.
    last_main: Option<EntryId>,
    last_uuid: Option<EntryId>,
    has_main_context: bool,
    has_sidechain: bool,
    session_id: Option<String>,
    agent_id: Option<String>,
    version: Option<String>,
    /// `summary` lines: (leafUuid, summary).
    titles: Vec<(String, String)>,
    orphans: usize,
    /// The main-chain response being read: its id, its lines' uuids, its last line; and the
    /// last tool-result line chained after it ([`Importer::chained_result_parent`]).
    response_lines: Option<(String, HashSet<String>, String)>,
    result_tail: Option<String>,
}

impl LineImporter for Importer {
    const FORMAT: &'static str = "claude_code";

    fn line(&mut self, line_no: usize, line: &str) -> Result<(), String> {
        let mut line: Line = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        let ty = line.ty.take().ok_or("no string `type`")?;
        if ty == "summary" {
            return self.summary(line_no, line);
        }
        let uuid = match line.uuid.take() {
            Some(u) if !u.is_empty() => u,
            _ if matches!(ty.as_str(), "user" | "assistant" | "system") => {
                return Err(format!("`{ty}` line without a uuid"));
            }
            // Editor state outside the conversation tree (file-history-snapshot,
            // queue-operation, last-prompt, mode, ...).
            _ => return Ok(()),
        };
        if self.ids.contains(&uuid) {
            return Err(format!("duplicate uuid {uuid}"));
        }
        let sidechain = line.is_sidechain;
        let timestamp = line.timestamp.take();
        let mut parent_uuid = line.parent_uuid.take();
        let read = self.read_kind(&ty, &mut line, &mut parent_uuid)?;
        let facts = Facts {
            session_id: line.session_id,
            cwd: line.cwd,
            version: line.version,
            agent_id: line.agent_id,
        };

        // The line is valid: from here on, update the state.
        if !sidechain {
            parent_uuid = self.chained_result_parent(
                &read.kind,
                read.response.as_deref(),
                &uuid,
                parent_uuid,
            );
        }
        let parent = match parent_uuid {
            Some(p) if self.ids.contains(&p) => Some(EntryId(p)),
            Some(_) => {
                self.orphans += 1;
                None
            }
            None => None,
        };
        self.note_meta(facts, timestamp.as_deref());
        let kind = self.settle(read);
        if sidechain {
            self.has_sidechain = true;
        } else if matches!(kind, EntryKind::Message(_) | EntryKind::Compaction(_)) {
            self.has_main_context = true;
        }
        let id = EntryId(uuid.clone());
        self.ids.insert(uuid);
        if !sidechain {
            self.last_main = Some(id.clone());
        }
        self.last_uuid = Some(id.clone());
        self.builder.push(Entry {
            id,
            parent,
            timestamp,
            sidechain,
            kind,
        });
        Ok(())
    }

    fn finish(mut self, warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
        if self.orphans > 0 {
            warnings.push(Warning::general(format!(
                "{} entries name a parent that is not in the file; imported as roots",
                self.orphans
            )));
        }
        let subagent = !self.has_main_context && self.has_sidechain;
        let leaf = if subagent {
            for entry in &mut self.builder.session.entries {
                entry.sidechain = false;
            }
            self.last_uuid.clone()
        } else {
            self.last_main.clone()
        };
        let title = pick_title(&self.titles, leaf.as_ref(), &self.ids);
        let meta = &mut self.builder.session.meta;
        meta.agent = Some(Agent::ClaudeCode);
        meta.format = match &self.version {
            Some(v) => format!("claude-code/{v}"),
            None => "claude-code".into(),
        };
        meta.title = title;
        if subagent {
            meta.parent_session = self.session_id.clone();
            if let Some(agent) = self.agent_id.take() {
                meta.id = Some(agent);
            }
        }
        self.builder.session.leaf = leaf;
        Ok(self.builder.finish())
    }
}

const SYNTHETIC: &str = "<synthetic>";

/// Session facts a line states.
struct Facts {
    session_id: Option<String>,
    cwd: Option<String>,
    version: Option<String>,
    agent_id: Option<String>,
}

/// What a line's own fields make of it, before the importer's state changes.
struct Read {
    kind: EntryKind,
    /// The response an assistant message belongs to.
    response: Option<String>,
    /// A compact summary's text, for the compaction waiting for it.
    fills_compaction: Option<String>,
}

impl Importer {
    /// Claude Code 2.x writes a response's parallel tool calls one line each, chained, and each
    /// result as a child of its own call's line: the last result's chain holds every call but
    /// only that result, so the conversation the model saw (all calls, then all results) is no
    /// branch of the file's tree. The results of one response are chained instead, in file
    /// order, after the response's last line: the active branch then holds every call and every
    /// result. A result line whose parent is not a line of the response being read keeps it.
    fn chained_result_parent(
        &mut self,
        kind: &EntryKind,
        response: Option<&str>,
        uuid: &str,
        parent: Option<String>,
    ) -> Option<String> {
        let EntryKind::Message(msg) = kind else {
            return parent;
        };
        if let Some(id) = response {
            match &mut self.response_lines {
                Some((current, lines, last)) if current == id => {
                    lines.insert(uuid.to_owned());
                    uuid.clone_into(last);
                }
                _ => {
                    let lines = HashSet::from([uuid.to_owned()]);
                    self.response_lines = Some((id.to_owned(), lines, uuid.to_owned()));
                    self.result_tail = None;
                }
            }
            return parent;
        }
        let results_only = msg.role == Role::User
            && !msg.content.is_empty()
            && msg
                .content
                .iter()
                .all(|b| matches!(b, ContentBlock::ToolResult { .. }));
        let Some((_, lines, last)) = &self.response_lines else {
            return parent;
        };
        let under_response = parent.as_ref().is_some_and(|p| lines.contains(p));
        let after_tail = parent.is_some() && parent == self.result_tail;
        if !results_only || !(under_response || after_tail) {
            self.response_lines = None;
            self.result_tail = None;
            return parent;
        }
        let chained = self.result_tail.clone().unwrap_or_else(|| last.clone());
        self.result_tail = Some(uuid.to_owned());
        Some(chained)
    }

    /// The entry a `user`, `assistant`, `system` or other uuid line makes; a compact
    /// boundary may re-parent it (`parent_uuid`).
    fn read_kind(
        &self,
        ty: &str,
        line: &mut Line,
        parent_uuid: &mut Option<String>,
    ) -> Result<Read, String> {
        let kind = match ty {
            "user" | "assistant" => return self.read_message(ty, line),
            "system" if line.subtype.as_deref() == Some("compact_boundary") => {
                self.compact_boundary(line, parent_uuid)
            }
            _ => {
                let name = match (ty, &line.subtype) {
                    ("system", Some(_)) => line.subtype.take().unwrap_or_default(),
                    _ => ty.to_owned(),
                };
                EntryKind::Event {
                    name,
                    detail: Some(line.detail()),
                }
            }
        };
        Ok(Read {
            kind,
            response: None,
            fills_compaction: None,
        })
    }

    /// A `user` or `assistant` line's message; a compact summary is a compaction, or the
    /// summary of the compaction waiting for it.
    fn read_message(&self, ty: &str, line: &mut Line) -> Result<Read, String> {
        let message = match line.message.take() {
            Some(m @ Value::Object(_)) => m,
            _ => return Err(format!("`{ty}` line without a message object")),
        };
        let mut response: Option<String> = None;
        let mut fills_compaction: Option<String> = None;
        let kind = if ty == "user" {
            let mut msg = wire::anthropic::message_owned(message);
            msg.role = Role::User;
            if line.is_compact_summary {
                let text = joined_text(&msg.content);
                if self.pending_compaction.is_some() {
                    fills_compaction = Some(text);
                    EntryKind::Event {
                        name: "compact_summary".into(),
                        detail: None,
                    }
                } else {
                    EntryKind::Compaction(Compaction {
                        summary: text,
                        first_kept: None,
                        tokens_before: None,
                        replacement: None,
                    })
                }
            } else {
                msg.injected = user_injected(line.is_meta, &msg.content).map(str::to_owned);
                EntryKind::Message(msg)
            }
        } else {
            let msg = assistant(message);
            response.clone_from(&msg.response_id);
            EntryKind::Message(msg)
        };
        Ok(Read {
            kind,
            response,
            fills_compaction,
        })
    }

    /// A compaction's boundary: its logical parent, and the segment it keeps when the file
    /// holds it.
    fn compact_boundary(&self, line: &mut Line, parent_uuid: &mut Option<String>) -> EntryKind {
        if line.logical_parent_uuid.is_some() {
            *parent_uuid = line.logical_parent_uuid.take();
        }
        let metadata = line.compact_metadata.as_ref();
        let tokens_before = metadata.and_then(|m| crate::util::u64_field(m, "preTokens"));
        let segment = metadata.and_then(|m| m.get("preservedSegment"));
        let head = segment
            .and_then(|s| s.get("headUuid"))
            .and_then(Value::as_str);
        let tail = segment
            .and_then(|s| s.get("tailUuid"))
            .and_then(Value::as_str);
        let first_kept = match (head, tail) {
            (Some(head), Some(tail))
                if self.ids.contains(head) && Some(tail) == parent_uuid.as_deref() =>
            {
                Some(EntryId::new(head))
            }
            _ => None,
        };
        EntryKind::Compaction(Compaction {
            summary: String::new(),
            first_kept,
            tokens_before,
            replacement: None,
        })
    }

    /// The new entry's kind once it is valid: a message carries its response's usage and may
    /// name the session's model; a compact summary fills the compaction waiting for it; a
    /// compaction without a summary waits for one.
    fn settle(&mut self, read: Read) -> EntryKind {
        let Read {
            mut kind,
            response,
            fills_compaction,
        } = read;
        let index = self.builder.session.entries.len();
        if let EntryKind::Message(msg) = &mut kind {
            if let Some(id) = &response {
                self.carry_usage(id, index, msg);
            }
            if msg.role == Role::Assistant && self.builder.session.meta.model.is_none() {
                if let Some(model) = msg.model.as_deref().filter(|m| *m != SYNTHETIC) {
                    self.builder.session.meta.model = Some(model.to_owned());
                }
            }
        }
        if let Some(text) = fills_compaction {
            if let Some(EntryKind::Compaction(c)) = self
                .pending_compaction
                .take()
                .and_then(|i| self.builder.session.entries.get_mut(i))
                .map(|e| &mut e.kind)
            {
                c.summary = text;
            }
        }
        if let EntryKind::Compaction(c) = &kind {
            if c.summary.is_empty() {
                self.pending_compaction = Some(index);
            }
        }
        kind
    }

    fn summary(&mut self, line_no: usize, line: Line) -> Result<(), String> {
        let summary = line.summary.ok_or("`summary` line without its text")?;
        let leaf = line.leaf_uuid;
        let parent = leaf
            .as_ref()
            .filter(|l| self.ids.contains(l.as_str()))
            .map(|l| EntryId(l.clone()));
        let mut detail = Map::new();
        detail.insert("summary".into(), Value::String(summary.clone()));
        if let Some(l) = &leaf {
            detail.insert("leafUuid".into(), Value::String(l.clone()));
        }
        self.titles.push((leaf.unwrap_or_default(), summary));
        let entry = Entry {
            id: EntryId(format!("L{line_no}")),
            parent,
            timestamp: None,
            sidechain: false,
            kind: EntryKind::Event {
                name: "summary".into(),
                detail: Some(Value::Object(detail)),
            },
        };
        self.builder.push(entry);
        Ok(())
    }

    /// Session facts from the first line that states them.
    fn note_meta(&mut self, facts: Facts, timestamp: Option<&str>) {
        let meta = &mut self.builder.session.meta;
        if self.session_id.is_none() {
            self.session_id = facts.session_id;
            meta.id.clone_from(&self.session_id);
        }
        if meta.cwd.is_none() {
            meta.cwd = facts.cwd;
        }
        if meta.started_at.is_none() {
            meta.started_at = timestamp.map(str::to_owned);
        }
        if self.version.is_none() {
            self.version = facts.version;
        }
        if self.agent_id.is_none() {
            self.agent_id = facts.agent_id;
        }
    }

    /// Keep one usage per response: on its latest line. An earlier line's usage moves here.
    fn carry_usage(&mut self, response_id: &str, index: usize, msg: &mut Message) {
        if let Some(previous) = self.responses.get_mut(response_id) {
            if let Some(EntryKind::Message(prev)) = self
                .builder
                .session
                .entries
                .get_mut(*previous)
                .map(|e| &mut e.kind)
            {
                if let Some(old) = prev.usage.take() {
                    let new = msg.usage.get_or_insert_with(Usage::default);
                    new.input = new.input.max(old.input);
                    new.output = new.output.max(old.output);
                    new.cache_read = new.cache_read.max(old.cache_read);
                    new.cache_write = new.cache_write.max(old.cache_write);
                }
            }
            *previous = index;
        } else {
            self.responses.insert(response_id.to_owned(), index);
        }
    }
}

/// An assistant message with its response id, model, stop reason and usage.
fn assistant(message: Value) -> Message {
    let model = crate::util::string_field(&message, "model");
    let response_id = crate::util::string_field(&message, "id");
    let stop_reason = crate::util::string_field(&message, "stop_reason");
    let usage = message.get("usage").map(wire::anthropic::usage);
    let mut msg = wire::anthropic::message_owned(message);
    msg.role = Role::Assistant;
    if model.as_deref() == Some(SYNTHETIC) {
        msg.injected = Some("synthetic".into());
    } else {
        msg.usage = usage;
    }
    msg.model = model;
    msg.response_id = response_id;
    msg.stop_reason = stop_reason;
    msg
}

/// Which kind of injected context a user message is, if any (see the module doc).
fn user_injected(is_meta: bool, content: &[ContentBlock]) -> Option<&'static str> {
    if is_meta {
        return Some("meta");
    }
    let mut texts = Vec::with_capacity(content.len());
    for block in content {
        match block {
            ContentBlock::Text { text } => texts.push(text.trim_start()),
            _ => return None,
        }
    }
    let first = *texts.first()?;
    if texts.iter().all(|t| t.starts_with("<system-reminder>")) {
        return Some("system-reminder");
    }
    const COMMAND: &[&str] = &[
        "<command-name>",
        "<command-message>",
        "<command-args>",
        "<local-command-stdout>",
        "<local-command-stderr>",
        "<local-command-caveat>",
    ];
    if COMMAND.iter().any(|p| first.starts_with(p)) {
        return Some("command");
    }
    if ["<bash-input>", "<bash-stdout>", "<bash-stderr>"]
        .iter()
        .any(|p| first.starts_with(p))
    {
        return Some("bash");
    }
    if first.starts_with("<task-notification>") {
        return Some("task-notification");
    }
    if first.starts_with("[Request interrupted by user") {
        return Some("interrupt");
    }
    None
}

/// The session title: the summary of the final leaf, else of any entry in the file, else the
/// last summary line.
fn pick_title(
    titles: &[(String, String)],
    leaf: Option<&EntryId>,
    ids: &HashSet<String>,
) -> Option<String> {
    let of_leaf = leaf.and_then(|leaf| {
        titles
            .iter()
            .rev()
            .find(|(l, _)| l.as_str() == leaf.as_str())
    });
    of_leaf
        .or_else(|| titles.iter().rev().find(|(l, _)| ids.contains(l)))
        .or_else(|| titles.last())
        .map(|(_, s)| s.clone())
}

fn joined_text(content: &[ContentBlock]) -> String {
    let mut out = String::new();
    for block in content {
        if let ContentBlock::Text { text } = block {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(text);
        }
    }
    out
}

/// The fields of one line, read in one pass: the ones the importer uses typed, the agent's own
/// copy of a tool result (`toolUseResult`, often a third of the file) skipped unread, and the
/// rest kept for an event's detail. Scalars of an unexpected JSON type read as absent.
#[derive(Default)]
struct Line {
    ty: Option<String>,
    uuid: Option<String>,
    parent_uuid: Option<String>,
    logical_parent_uuid: Option<String>,
    is_sidechain: bool,
    is_meta: bool,
    is_compact_summary: bool,
    session_id: Option<String>,
    cwd: Option<String>,
    version: Option<String>,
    agent_id: Option<String>,
    timestamp: Option<String>,
    subtype: Option<String>,
    summary: Option<String>,
    leaf_uuid: Option<String>,
    message: Option<Value>,
    compact_metadata: Option<Value>,
    rest: Map<String, Value>,
}

impl Line {
    /// An event's detail: the line without the fields every line repeats.
    fn detail(&mut self) -> Value {
        let mut rest = std::mem::take(&mut self.rest);
        if let Some(m) = self.message.take() {
            rest.insert("message".into(), m);
        }
        if let Some(m) = self.compact_metadata.take() {
            rest.insert("compactMetadata".into(), m);
        }
        for (key, value) in [
            ("subtype", self.subtype.take()),
            ("summary", self.summary.take()),
            ("leafUuid", self.leaf_uuid.take()),
        ] {
            if let Some(v) = value {
                rest.insert(key.into(), Value::String(v));
            }
        }
        Value::Object(rest)
    }
}

impl<'de> Deserialize<'de> for Line {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(LineVisitor)
    }
}

struct LineVisitor;

impl<'de> Visitor<'de> for LineVisitor {
    type Value = Line;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Line, A::Error> {
        let mut line = Line::default();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let slot = match key.as_ref() {
                "type" => &mut line.ty,
                "uuid" => &mut line.uuid,
                "parentUuid" => &mut line.parent_uuid,
                "logicalParentUuid" => &mut line.logical_parent_uuid,
                "sessionId" => &mut line.session_id,
                "cwd" => &mut line.cwd,
                "version" => &mut line.version,
                "agentId" => &mut line.agent_id,
                "timestamp" => &mut line.timestamp,
                "subtype" => &mut line.subtype,
                "summary" => &mut line.summary,
                "leafUuid" => &mut line.leaf_uuid,
                "isSidechain" => {
                    line.is_sidechain = map.next_value::<Value>()?.as_bool() == Some(true);
                    continue;
                }
                "isMeta" => {
                    line.is_meta = map.next_value::<Value>()?.as_bool() == Some(true);
                    continue;
                }
                "isCompactSummary" => {
                    line.is_compact_summary = map.next_value::<Value>()?.as_bool() == Some(true);
                    continue;
                }
                "message" => {
                    line.message = Some(map.next_value()?);
                    continue;
                }
                "compactMetadata" => {
                    line.compact_metadata = Some(map.next_value()?);
                    continue;
                }
                "toolUseResult" => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                k if BOOKKEEPING.contains(&k) => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                _ => {
                    let value = map.next_value()?;
                    line.rest.insert(key.into_owned(), value);
                    continue;
                }
            };
            *slot = match map.next_value::<Value>()? {
                Value::String(s) => Some(s),
                _ => None,
            };
        }
        Ok(line)
    }
}

/// An object key, borrowed from the input when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(ts: &[&str]) -> Vec<ContentBlock> {
        ts.iter().map(|t| ContentBlock::text(*t)).collect()
    }

    #[test]
    fn classifies_injected_user_messages() {
        let cases: &[(&[&str], Option<&str>)] = &[
            (&["fix the bug"], None),
            (
                &[
                    "<system-reminder>a</system-reminder>",
                    " <system-reminder>b",
                ],
                Some("system-reminder"),
            ),
            (
                &["<system-reminder>a</system-reminder>", "and a question"],
                None,
            ),
            (&["<command-name>/clear</command-name>"], Some("command")),
            (
                &["<local-command-stdout>ok</local-command-stdout>"],
                Some("command"),
            ),
            (&["<bash-input>ls</bash-input>"], Some("bash")),
            (
                &["<task-notification>done</task-notification>"],
                Some("task-notification"),
            ),
            (
                &["[Request interrupted by user for tool use]"],
                Some("interrupt"),
            ),
            (&[], None),
        ];
        for (content, want) in cases {
            assert_eq!(user_injected(false, &texts(content)), *want, "{content:?}");
        }
        assert_eq!(user_injected(true, &texts(&["anything"])), Some("meta"));
        let with_result = vec![
            ContentBlock::text("<system-reminder>x</system-reminder>"),
            ContentBlock::ToolResult {
                call_id: "t".into(),
                tool_name: None,
                content: Vec::new(),
                is_error: false,
            },
        ];
        assert_eq!(user_injected(false, &with_result), None);
    }

    #[test]
    fn a_line_reads_in_one_pass() {
        let line: Result<Line, _> = serde_json::from_str(
            r#"{"type":"progress","uuid":"u","parentUuid":null,"isSidechain":"yes",
                "toolUseResult":{"big":[1,2,3]},"gitBranch":"main","data":{"k":1},"cwd":5}"#,
        );
        let Ok(mut line) = line else {
            panic!("{line:?}", line = line.err())
        };
        assert_eq!(line.ty.as_deref(), Some("progress"));
        assert_eq!(line.parent_uuid, None);
        assert!(!line.is_sidechain);
        assert_eq!(line.cwd, None);
        assert_eq!(line.detail(), serde_json::json!({"data": {"k": 1}}));
        assert!(serde_json::from_str::<Line>("[1]").is_err());
    }
}
