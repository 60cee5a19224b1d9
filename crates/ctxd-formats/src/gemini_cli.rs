//! Gemini CLI chat recordings (`~/.gemini/tmp/<project hash>/chats/`), both layouts.
//!
//! # Layouts
//! - **JSON** (`session-*.json`, up to 0.38): one object `{sessionId, projectHash, startTime,
//!   lastUpdated, kind?, summary?, directories?, messages}` rewritten whole on every update.
//!   Entries are linear, `L<n>` being the n-th message (`L<n>.1` the tool results made from it).
//! - **JSONL** (`session-*.jsonl`, from 0.39): a header line with the session fields, then one
//!   record a line: a message `{id, timestamp, type, ...}`, a patch of the session fields
//!   `{"$set": {...}}`, or a rewind `{"$rewindTo": id}`.
//!   - A message whose `id` was already written replaces the earlier copy: the CLI appends the
//!     whole message again each time it adds to it (tokens, tool calls, their results). The
//!     content of the **last** copy wins, at the position of the **first** one: that is what
//!     the CLI itself reads back (`loadConversationRecord` keeps the messages in a JavaScript
//!     `Map` keyed by id, and `Map.set` on a known key replaces the value without moving it;
//!     in memory, `pushMessage` replaces `messages[index]`). In the shared 0.39 file every
//!     re-appended gemini message is the same response with its tool calls added, so the first
//!     position is also the order the model saw. The entry id is `L<line of the first copy>`.
//!   - `$rewindTo: id` drops that message and every later one (`/rewind`): the next messages
//!     hang from the one before it, so the dropped ones stay in the log on a branch left
//!     behind (an unknown id drops everything, as the CLI does).
//!   - `$set` patches the session fields (`lastUpdated`, `summary`, ...). A `$set` of
//!     `messages` replaces the whole history (the CLI syncs its in-memory history after
//!     compressing or masking it): a [`EntryKind::Compaction`] whose `replacement` is those
//!     messages; a later copy of one of their ids updates it inside the compaction.
//!   - Lines that are none of these are skipped with a warning, like a corrupt line.
//!
//! # Messages
//! - `user` → a [`Role::User`] message of `content` (a string, or Gemini API parts: `text`,
//!   `inlineData` → image, `fileData` → image by URL or its JSON, `functionCall` /
//!   `functionResponse` → tool call / result, anything else as its JSON text). `content` is
//!   what the model saw; `displayContent` is what the CLI showed (`/init` for the expanded
//!   prompt, the typed line before `@file` expansion) and is UI only, so it is not kept, like
//!   Claude Code's `toolUseResult`. When it differs from `content`, the message was written by
//!   the CLI rather than typed as is: it is marked injected, `command` for a slash command,
//!   `expanded` otherwise.
//! - `gemini` → a [`Role::Assistant`] message: `thoughts` (thought summaries `{subject,
//!   description}`) as one thinking block (`subject: description`, blank-line separated, no
//!   signature: the CLI keeps none), `content` as text, each of `toolCalls` as a tool call
//!   with its `args`; `model`; `tokens` as usage (below). The calls' `result`s (the
//!   `functionResponse` parts the CLI sent back) follow as one [`Role::Tool`] message, as the
//!   Gemini API carries them in one turn: each a tool result naming its call and tool, its text
//!   `response.output` (or `response.error`, or the whole `response` as JSON), an error when
//!   the response has an `error` or `status` is `error` or `cancelled`. `resultDisplay`,
//!   `displayName`, `description` and `renderOutputAsMarkdown` are UI only: not kept (like
//!   Claude Code's `toolUseResult`). A call without a result gets no result (warned).
//!   A gemini message with nothing in it but usage becomes a [`EntryKind::Usage`] entry.
//! - `tokens{input, output, cached, thoughts, tool, total}` is the response's
//!   `usageMetadata`: `input` (`promptTokenCount`) includes `cached`, so usage `input` is
//!   `input - cached` (+ `tool`, the tool-use prompt, which `total` counts apart), `cache_read`
//!   is `cached`, and `output` is `output + thoughts` (Gemini bills thinking as output and
//!   reports it apart; the other APIs' output counts include it). All zeros (older files) is no
//!   usage.
//! - `info`, `error`, `warning`: notices the CLI showed, never sent to the model: an
//!   [`EntryKind::Event`] named after the type, its detail the record without id, timestamp and
//!   type. Unknown types are kept the same way, with one warning per type.
//!
//! # Metadata
//! `agent: GeminiCli`, `format` `gemini-cli/json` or `gemini-cli/jsonl`, `id` = `sessionId`,
//! `started_at` = `startTime`, `title` = `summary`, `model` = the first gemini message's model.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use ctxd_core::model::{
    Agent, Compaction, ContentBlock, EntryId, EntryKind, Image, Message, Role, Session,
    SessionMeta, Usage,
};

use crate::builder::Builder;
use crate::error::{ImportError, Warning};
use crate::jsonl::LineImporter;
use crate::util::{image_from_base64, parse_arguments, str_field, string_field, u64_field};
use crate::wire::json_text;

pub(crate) const JSON_FORMAT: &str = "gemini-cli/json";
pub(crate) const JSONL_FORMAT: &str = "gemini-cli/jsonl";

/// The message types the CLI records (`ConversationRecordExtra`).
pub(crate) const MESSAGE_TYPES: &[&str] = &["user", "gemini", "info", "error", "warning"];

/// Whether the first JSON line of `head` is a whole JSON-layout session written on one line
/// (rather than the header of a JSONL one).
pub(crate) fn is_one_document(head: &[u8]) -> bool {
    head.split(|&b| b == b'\n')
        .map(<[u8]>::trim_ascii)
        .find(|l| !l.is_empty())
        .and_then(|l| serde_json::from_slice::<Value>(l).ok())
        .is_some_and(|v| v.get("messages").is_some_and(Value::is_array))
}

/// What the mapping noticed on the way, said once per kind at the end.
#[derive(Default)]
struct Notes {
    unknown_types: BTreeMap<String, usize>,
    unanswered: usize,
}

impl Notes {
    fn into_warnings(self, warnings: &mut Vec<Warning>) {
        for (ty, n) in self.unknown_types {
            warnings.push(Warning::general(format!(
                "{n} message(s) of unknown type `{ty}` kept as events"
            )));
        }
        if self.unanswered > 0 {
            warnings.push(Warning::general(format!(
                "{} tool call(s) without a result",
                self.unanswered
            )));
        }
    }
}

/// The JSON layout: one document.
pub(crate) fn import(doc: &Value, warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
    let Some(obj) = doc.as_object() else {
        return Err(malformed("the document is not a JSON object"));
    };
    let Some(messages) = obj.get("messages").and_then(Value::as_array) else {
        return Err(malformed("`messages` is not a list"));
    };
    let mut b = Builder::default();
    b.session.meta.format = JSON_FORMAT.into();
    apply_meta(&mut b.session.meta, obj);
    let mut notes = Notes::default();
    for (i, rec) in messages.iter().enumerate() {
        let n = i + 1;
        if !rec.is_object() {
            warnings.push(Warning::general(format!(
                "message {n} is not an object: skipped"
            )));
            continue;
        }
        for (ts, kind) in record_kinds(rec, &mut notes) {
            b.push_linear(n, ts, kind);
        }
    }
    notes.into_warnings(warnings);
    Ok(finish_session(b.finish()))
}

fn malformed(message: &str) -> ImportError {
    ImportError::Malformed {
        format: "gemini-cli",
        message: message.into(),
    }
}

/// Agent, id, start, title; the model is the first gemini message's.
fn apply_meta(meta: &mut SessionMeta, obj: &Map<String, Value>) {
    meta.agent = Some(Agent::GeminiCli);
    if let Some(id) = obj.get("sessionId").and_then(Value::as_str) {
        meta.id = Some(id.to_owned());
    }
    if let Some(t) = obj.get("startTime").and_then(Value::as_str) {
        meta.started_at = Some(t.to_owned());
    }
    if let Some(s) = obj.get("summary").and_then(Value::as_str) {
        meta.title = Some(s.to_owned());
    }
}

fn finish_session(mut session: Session) -> Session {
    if session.meta.model.is_none() {
        session.meta.model = session.entries.iter().find_map(|e| match &e.kind {
            EntryKind::Message(m) if m.role == Role::Assistant => m.model.clone(),
            _ => None,
        });
    }
    session
}

/// One message record as entries (with their timestamps): a message and the tool results that
/// answer its calls, or an event.
fn record_kinds(rec: &Value, notes: &mut Notes) -> Vec<(Option<String>, EntryKind)> {
    let ts = string_field(rec, "timestamp");
    match str_field(rec, "type") {
        Some("user") => vec![(ts, EntryKind::Message(user(rec)))],
        Some("gemini") => gemini(rec, ts, notes),
        ty => {
            let name = ty.unwrap_or("message").to_owned();
            if !MESSAGE_TYPES.contains(&name.as_str()) {
                *notes.unknown_types.entry(name.clone()).or_default() += 1;
            }
            let mut detail = rec.as_object().cloned().unwrap_or_default();
            for key in ["id", "timestamp", "type"] {
                detail.remove(key);
            }
            vec![(
                ts,
                EntryKind::Event {
                    name,
                    detail: Some(Value::Object(detail)),
                },
            )]
        }
    }
}

fn user(rec: &Value) -> Message {
    let content = rec.get("content").unwrap_or(&Value::Null);
    let mut msg = Message::new(Role::User, parts(content));
    if let Some(display) = rec.get("displayContent").filter(|d| !d.is_null()) {
        if !same_parts(display, content) {
            let typed = parts(display);
            let command = typed.iter().any(
                |b| matches!(b, ContentBlock::Text { text } if text.trim_start().starts_with('/')),
            );
            msg.injected = Some(if command { "command" } else { "expanded" }.into());
        }
    }
    msg
}

/// Whether two `PartListUnion`s say the same (a string and `[{text}]` of it are the same).
fn same_parts(a: &Value, b: &Value) -> bool {
    a == b || parts(a) == parts(b)
}

fn gemini(rec: &Value, ts: Option<String>, notes: &mut Notes) -> Vec<(Option<String>, EntryKind)> {
    let mut content = Vec::new();
    if let Some(thinking) = thoughts(rec.get("thoughts")) {
        content.push(ContentBlock::Thinking {
            thinking,
            signature: None,
            redacted: false,
        });
    }
    content.extend(
        parts(rec.get("content").unwrap_or(&Value::Null))
            .into_iter()
            .filter(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty())),
    );
    let calls: &[Value] = rec
        .get("toolCalls")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    let mut results = Vec::new();
    let mut results_ts = None;
    for call in calls {
        let id = str_field(call, "id").unwrap_or_default().to_owned();
        let name = str_field(call, "name").unwrap_or_default().to_owned();
        content.push(ContentBlock::ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: call
                .get("args")
                .map_or_else(|| Value::Object(Map::new()), parse_arguments),
        });
        match call.get("result").filter(|r| !r.is_null()) {
            Some(result) => {
                let (blocks, failed) = result_blocks(result);
                let status = str_field(call, "status");
                results.push(ContentBlock::ToolResult {
                    call_id: id,
                    tool_name: Some(name),
                    content: blocks,
                    is_error: failed || matches!(status, Some("error" | "cancelled")),
                });
                if let Some(t) = string_field(call, "timestamp") {
                    results_ts = Some(t);
                }
            }
            None => notes.unanswered += 1,
        }
    }
    let usage = rec.get("tokens").and_then(usage);
    let mut kinds = Vec::with_capacity(2);
    if content.is_empty() {
        // Nothing the model wrote survived (an empty response): only its usage is a fact.
        if let Some(usage) = usage {
            kinds.push((ts.clone(), EntryKind::Usage { usage }));
        }
    } else {
        let mut msg = Message::new(Role::Assistant, content);
        msg.model = string_field(rec, "model");
        msg.usage = usage;
        kinds.push((ts.clone(), EntryKind::Message(msg)));
    }
    if !results.is_empty() {
        kinds.push((
            results_ts.or(ts),
            EntryKind::Message(Message::new(Role::Tool, results)),
        ));
    }
    kinds
}

/// Thought summaries as one text: `subject: description`, blank-line separated.
fn thoughts(v: Option<&Value>) -> Option<String> {
    let items = v?.as_array()?;
    let texts: Vec<String> = items
        .iter()
        .filter_map(|t| {
            let subject = str_field(t, "subject").unwrap_or_default().trim();
            let description = str_field(t, "description").unwrap_or_default().trim();
            match (subject.is_empty(), description.is_empty()) {
                (true, true) => None,
                (false, true) => Some(subject.to_owned()),
                (true, false) => Some(description.to_owned()),
                (false, false) => Some(format!("{subject}: {description}")),
            }
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// `tokens` (the response's `usageMetadata`) as usage; see the module doc. `None` when zero.
fn usage(t: &Value) -> Option<Usage> {
    let field = |k: &str| u64_field(t, k).unwrap_or(0);
    let input = field("input");
    let cached = field("cached").min(input);
    let usage = Usage {
        input: input - cached + field("tool"),
        output: field("output") + field("thoughts"),
        cache_read: cached,
        cache_write: 0,
    };
    (!usage.is_zero()).then_some(usage)
}

/// A `PartListUnion`: a string, one part, or a list of strings and parts.
fn parts(v: &Value) -> Vec<ContentBlock> {
    match v {
        Value::Null => Vec::new(),
        Value::String(s) => vec![ContentBlock::text(s.clone())],
        Value::Array(items) => items.iter().map(part).collect(),
        other => vec![part(other)],
    }
}

/// One Gemini API part.
fn part(p: &Value) -> ContentBlock {
    if let Value::String(s) = p {
        return ContentBlock::text(s.clone());
    }
    if let Some(text) = str_field(p, "text") {
        if p.get("thought").and_then(Value::as_bool) == Some(true) {
            return ContentBlock::Thinking {
                thinking: text.to_owned(),
                signature: string_field(p, "thoughtSignature"),
                redacted: false,
            };
        }
        return ContentBlock::text(text);
    }
    if let Some(data) = p.get("inlineData") {
        if let Some(b64) = str_field(data, "data") {
            return ContentBlock::Image(image_from_base64(str_field(data, "mimeType"), b64));
        }
    }
    if let Some(file) = p.get("fileData") {
        let mime = str_field(file, "mimeType");
        if let (Some(uri), true) = (
            str_field(file, "fileUri"),
            mime.is_some_and(|m| m.starts_with("image/")),
        ) {
            return ContentBlock::Image(Image {
                media_type: mime.map(str::to_owned),
                url: Some(uri.to_owned()),
                ..Image::default()
            });
        }
    }
    if let Some(call) = p.get("functionCall") {
        return ContentBlock::ToolCall {
            id: string_field(call, "id").unwrap_or_default(),
            name: string_field(call, "name").unwrap_or_default(),
            arguments: call
                .get("args")
                .map_or_else(|| Value::Object(Map::new()), parse_arguments),
        };
    }
    if let Some(resp) = p.get("functionResponse") {
        let (content, is_error) = function_response(resp);
        return ContentBlock::ToolResult {
            call_id: string_field(resp, "id").unwrap_or_default(),
            tool_name: string_field(resp, "name"),
            content,
            is_error,
        };
    }
    ContentBlock::text(json_text(p))
}

/// A tool call's `result`: the text of its `functionResponse` parts, and any other part (an
/// image the tool read, extra text) as its block; whether a response was an error.
fn result_blocks(result: &Value) -> (Vec<ContentBlock>, bool) {
    let items: Vec<&Value> = match result {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    };
    let mut blocks = Vec::new();
    let mut failed = false;
    for item in items {
        match item.get("functionResponse") {
            Some(resp) => {
                let (content, is_error) = function_response(resp);
                blocks.extend(content);
                failed |= is_error;
            }
            None => blocks.push(part(item)),
        }
    }
    (blocks, failed)
}

/// `functionResponse{id, name, response, parts?}`: `response.output` as text (or
/// `response.error`, or the whole `response` as JSON), then its multimodal `parts`.
fn function_response(resp: &Value) -> (Vec<ContentBlock>, bool) {
    let response = resp.get("response").unwrap_or(&Value::Null);
    let error = response.get("error").filter(|e| !e.is_null());
    let text = match (str_field(response, "output"), error) {
        (Some(output), _) => output.to_owned(),
        (None, Some(Value::String(e))) => e.clone(),
        (None, _) if response.is_null() => String::new(),
        (None, _) => json_text(response),
    };
    let mut blocks = vec![ContentBlock::text(text)];
    if let Some(extra) = resp.get("parts").and_then(Value::as_array) {
        blocks.extend(extra.iter().map(part));
    }
    (blocks, error.is_some())
}

/// Where a message id's latest copy goes.
#[derive(Clone, Copy)]
enum Slot {
    /// The n-th record.
    Record(usize),
    /// The i-th message of the n-th record, a `$set` of `messages`.
    Replaced(usize, usize),
}

enum Held {
    Message(Value),
    History(Vec<Value>),
}

struct Record {
    line_no: usize,
    parent: Option<usize>,
    held: Held,
}

/// The JSONL layout: records are held until the end, since a later copy of a message replaces
/// an earlier one in place.
#[derive(Default)]
pub(crate) struct Importer {
    meta: SessionMeta,
    records: Vec<Record>,
    /// The live (not rewound) messages by id.
    live: HashMap<String, Slot>,
    /// The last live record: the parent of the next new one.
    tip: Option<usize>,
}

impl LineImporter for Importer {
    const FORMAT: &'static str = "gemini-cli";

    fn line(&mut self, line_no: usize, line: &str) -> Result<(), String> {
        let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
        let Value::Object(obj) = value else {
            return Err("not a JSON object".into());
        };
        // In the order the CLI's own reader tries them.
        if let Some(to) = obj.get("$rewindTo").and_then(Value::as_str) {
            self.rewind(to);
            return Ok(());
        }
        if let Some(id) = obj.get("id").and_then(Value::as_str) {
            let id = id.to_owned();
            self.message(line_no, id, Value::Object(obj));
            return Ok(());
        }
        if let Some(Value::Object(set)) = obj.get("$set") {
            apply_meta(&mut self.meta, set);
            if let Some(messages) = set.get("messages").and_then(Value::as_array) {
                self.history(line_no, messages.clone());
            }
            return Ok(());
        }
        if obj.get("sessionId").is_some_and(Value::is_string)
            && obj.get("projectHash").is_some_and(Value::is_string)
        {
            apply_meta(&mut self.meta, &obj);
            return Ok(());
        }
        Err("not a Gemini CLI record (no id, $set, $rewindTo or session header)".into())
    }

    fn finish(self, warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
        let mut notes = Notes::default();
        let mut b = Builder::default();
        b.session.meta = self.meta;
        b.session.meta.agent = Some(Agent::GeminiCli);
        b.session.meta.format = JSONL_FORMAT.into();
        // The last entry made from each record (a record may make none).
        let mut last: Vec<Option<EntryId>> = Vec::with_capacity(self.records.len());
        for rec in self.records {
            let parent = rec.parent.and_then(|p| last[p].clone());
            let kinds = match rec.held {
                Held::Message(v) => record_kinds(&v, &mut notes),
                Held::History(messages) => {
                    let replacement = messages
                        .iter()
                        .flat_map(|m| record_kinds(m, &mut notes))
                        .filter_map(|(_, k)| match k {
                            EntryKind::Message(m) => Some(m),
                            _ => None,
                        })
                        .collect();
                    vec![(
                        None,
                        EntryKind::Compaction(Compaction {
                            summary: String::new(),
                            first_kept: None,
                            tokens_before: None,
                            replacement: Some(replacement),
                        }),
                    )]
                }
            };
            if kinds.is_empty() {
                last.push(parent);
                continue;
            }
            b.set_last(parent);
            let mut id = None;
            for (ts, kind) in kinds {
                id = Some(b.push_linear(rec.line_no, ts, kind));
            }
            last.push(id);
        }
        let leaf = self.tip.and_then(|t| last[t].clone());
        notes.into_warnings(warnings);
        let mut session = b.finish();
        session.leaf = match (leaf, session.entries.last()) {
            (Some(l), Some(e)) if l == e.id => None,
            (leaf, _) => leaf,
        };
        Ok(finish_session(session))
    }
}

impl Importer {
    fn message(&mut self, line_no: usize, id: String, value: Value) {
        match self.live.get(&id).copied() {
            Some(Slot::Record(n)) => {
                self.records[n].held = Held::Message(value);
            }
            Some(Slot::Replaced(n, i)) => {
                if let Held::History(messages) = &mut self.records[n].held {
                    messages[i] = value;
                }
            }
            None => {
                let n = self.records.len();
                self.records.push(Record {
                    line_no,
                    parent: self.tip,
                    held: Held::Message(value),
                });
                self.tip = Some(n);
                self.live.insert(id, Slot::Record(n));
            }
        }
    }

    /// A `$set` of `messages`: the whole history from here on.
    fn history(&mut self, line_no: usize, messages: Vec<Value>) {
        let n = self.records.len();
        self.live.clear();
        for (i, m) in messages.iter().enumerate() {
            if let Some(id) = str_field(m, "id") {
                self.live.insert(id.to_owned(), Slot::Replaced(n, i));
            }
        }
        self.records.push(Record {
            line_no,
            parent: self.tip,
            held: Held::History(messages),
        });
        self.tip = Some(n);
    }

    /// `$rewindTo`: drop `id` and every live message after it.
    fn rewind(&mut self, id: &str) {
        let target = match self.live.get(id) {
            Some(Slot::Record(n)) => Some(*n),
            // Inside a replaced history: the whole history goes (it is one compaction entry, so
            // keeping the messages before `id` would need a second one; a rewind into a
            // compacted history was not seen in a real file).
            Some(Slot::Replaced(n, _)) => Some(*n),
            // Unknown: the CLI drops everything.
            None => None,
        };
        let Some(target) = target else {
            self.live.clear();
            self.tip = None;
            return;
        };
        // Live records after the target on the chain from the tip.
        let mut dropped = Vec::new();
        let mut cur = self.tip;
        while let Some(n) = cur {
            dropped.push(n);
            if n == target {
                break;
            }
            cur = self.records[n].parent;
        }
        self.live.retain(|_, slot| {
            let n = match slot {
                Slot::Record(n) | Slot::Replaced(n, _) => *n,
            };
            !dropped.contains(&n)
        });
        self.tip = self.records[target].parent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jsonl(lines: &[&str]) -> (Session, Vec<Warning>) {
        let text = lines.join("\n");
        let mut warnings = Vec::new();
        let session = crate::jsonl::run(text.as_bytes(), Importer::default(), &mut warnings)
            .unwrap_or_else(|e| panic!("{e}"));
        (session, warnings)
    }

    fn messages(s: &Session) -> Vec<&Message> {
        s.entries
            .iter()
            .filter_map(|e| e.kind.as_message())
            .collect()
    }

    const HEADER: &str = r#"{"sessionId":"s1","projectHash":"h","startTime":"2026-04-23T12:00:00.000Z","lastUpdated":"x","kind":"main"}"#;

    #[test]
    fn a_reappended_id_keeps_its_first_position_and_last_content() {
        let (s, w) = jsonl(&[
            HEADER,
            r#"{"id":"u1","timestamp":"t1","type":"user","content":"hi"}"#,
            r#"{"id":"g1","timestamp":"t2","type":"gemini","content":"","thoughts":[{"subject":"S","description":"D"}],"tokens":{"input":100,"output":5,"cached":40,"thoughts":7,"tool":0,"total":112},"model":"m1"}"#,
            r#"{"$set":{"lastUpdated":"y","summary":"Title"}}"#,
            r#"{"id":"u2","timestamp":"t4","type":"info","content":"note"}"#,
            r#"{"id":"g1","timestamp":"t2","type":"gemini","content":"ok","thoughts":[{"subject":"S","description":"D"}],"tokens":{"input":100,"output":5,"cached":40,"thoughts":7,"tool":0,"total":112},"model":"m1","toolCalls":[{"id":"c1","name":"read_file","args":{"p":"a"},"status":"success","timestamp":"t3","resultDisplay":"UI","result":[{"functionResponse":{"id":"c1","name":"read_file","response":{"output":"file text"}}}]}]}"#,
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(s.meta.format, "gemini-cli/jsonl");
        assert_eq!(s.meta.id.as_deref(), Some("s1"));
        assert_eq!(s.meta.title.as_deref(), Some("Title"));
        assert_eq!(s.meta.model.as_deref(), Some("m1"));
        let ids: Vec<&str> = s.entries.iter().map(|e| e.id.as_str()).collect();
        // g1 at line 3 (its first copy), its results after it, the info event after them.
        assert_eq!(ids, ["L2", "L3", "L3.1", "L5"]);
        assert_eq!(
            s.entries[3].parent.as_ref().map(EntryId::as_str),
            Some("L3.1")
        );
        let m = messages(&s);
        assert_eq!(m[1].role, Role::Assistant);
        assert_eq!(
            m[1].content,
            vec![
                ContentBlock::Thinking {
                    thinking: "S: D".into(),
                    signature: None,
                    redacted: false
                },
                ContentBlock::text("ok"),
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: serde_json::json!({"p":"a"})
                },
            ]
        );
        assert_eq!(
            m[1].usage,
            Some(Usage {
                input: 60,
                output: 12,
                cache_read: 40,
                cache_write: 0
            })
        );
        assert_eq!(
            m[2].content,
            vec![ContentBlock::ToolResult {
                call_id: "c1".into(),
                tool_name: Some("read_file".into()),
                content: vec![ContentBlock::text("file text")],
                is_error: false
            }]
        );
        assert!(matches!(&s.entries[3].kind, EntryKind::Event { name, .. } if name == "info"));
    }

    #[test]
    fn rewinds_branch_and_set_messages_compacts() {
        let (s, w) = jsonl(&[
            HEADER,
            r#"{"id":"u1","timestamp":"t","type":"user","content":"one"}"#,
            r#"{"id":"g1","timestamp":"t","type":"gemini","content":"a1","model":"m"}"#,
            r#"{"id":"u2","timestamp":"t","type":"user","content":"two"}"#,
            r#"{"id":"g2","timestamp":"t","type":"gemini","content":"a2","model":"m"}"#,
            r#"{"$rewindTo":"u2"}"#,
            r#"{"id":"u3","timestamp":"t","type":"user","content":"three"}"#,
        ]);
        assert!(w.is_empty(), "{w:?}");
        let u3 = s.entries.iter().find(|e| e.id.as_str() == "L7").unwrap();
        assert_eq!(u3.parent.as_ref().map(EntryId::as_str), Some("L3"));
        assert_eq!(s.leaf, None, "the last entry is the leaf");

        let (s, _) = jsonl(&[
            HEADER,
            r#"{"id":"u1","timestamp":"t","type":"user","content":"one"}"#,
            r#"{"$set":{"messages":[{"id":"u1","type":"user","content":"one"},{"id":"g9","type":"gemini","content":"summary"}]}}"#,
            r#"{"id":"g9","type":"gemini","content":"summary, updated"}"#,
            r#"{"id":"u4","type":"user","content":"four"}"#,
        ]);
        let ids: Vec<&str> = s.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["L2", "L3", "L5"]);
        let EntryKind::Compaction(c) = &s.entries[1].kind else {
            panic!("{:?}", s.entries[1].kind)
        };
        let replacement = c.replacement.as_ref().unwrap();
        assert_eq!(replacement.len(), 2);
        assert_eq!(
            replacement[1].content,
            vec![ContentBlock::text("summary, updated")]
        );
    }

    #[test]
    fn bad_lines_and_unknown_types_warn() {
        let (s, w) = jsonl(&[
            HEADER,
            "{not json",
            r#"{"what":1}"#,
            r#"{"id":"x","type":"telepathy","content":"?"}"#,
            r#"{"id":"g","type":"gemini","content":"","toolCalls":[{"id":"c","name":"n","args":{},"status":"cancelled"}]}"#,
        ]);
        assert_eq!(s.entries.len(), 2);
        let text: Vec<String> = w.iter().map(ToString::to_string).collect();
        assert!(text[0].starts_with("line 2: skipped"), "{text:?}");
        assert!(text[1].starts_with("line 3: skipped"), "{text:?}");
        assert!(text.iter().any(|t| t.contains("`telepathy`")), "{text:?}");
        assert!(
            text.iter().any(|t| t.contains("without a result")),
            "{text:?}"
        );
    }

    #[test]
    fn user_parts_display_content_and_errors() {
        let doc = serde_json::json!({
            "sessionId": "s", "projectHash": "h", "startTime": "t0",
            "messages": [
                {"id": "1", "type": "user", "content": [{"text": "expanded prompt"}],
                 "displayContent": [{"text": "/init"}]},
                {"id": "2", "type": "user", "content": [{"text": "look"},
                    {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
                    {"videoMetadata": {}}],
                 "displayContent": "look"},
                {"id": "3", "type": "user", "content": "plain", "displayContent": [{"text": "plain"}]},
                {"id": "4", "type": "gemini", "content": "", "model": "m",
                 "tokens": {"input": 0, "output": 0, "cached": 0, "total": 0},
                 "toolCalls": [
                    {"id": "a", "name": "replace", "args": {}, "status": "error",
                     "result": [{"functionResponse": {"id": "a", "name": "replace",
                        "response": {"error": "no match"}}}]},
                    {"id": "b", "name": "ls", "args": {}, "status": "success",
                     "result": [{"functionResponse": {"id": "b", "name": "ls",
                        "response": {"files": 2}}}]}]},
                {"id": "5", "type": "gemini", "content": "", "thoughts": [],
                 "tokens": {"input": 10, "output": 1, "cached": 0}},
                {"id": "6", "type": "error", "content": "quota"}
            ]
        });
        let mut w = Vec::new();
        let s = import(&doc, &mut w).unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(s.meta.format, "gemini-cli/json");
        assert_eq!(s.meta.started_at.as_deref(), Some("t0"));
        let m = messages(&s);
        assert_eq!(m[0].injected.as_deref(), Some("command"));
        assert_eq!(m[1].injected.as_deref(), Some("expanded"));
        assert!(matches!(m[1].content[1], ContentBlock::Image(_)));
        assert!(
            matches!(&m[1].content[2], ContentBlock::Text { text } if text.contains("videoMetadata"))
        );
        assert_eq!(m[2].injected, None, "the same text is not a rewrite");
        assert_eq!(m[3].usage, None, "zero tokens are no usage");
        let ContentBlock::ToolResult {
            content, is_error, ..
        } = &m[4].content[0]
        else {
            panic!()
        };
        assert_eq!(
            (content.clone(), *is_error),
            (vec![ContentBlock::text("no match")], true)
        );
        let ContentBlock::ToolResult {
            content, is_error, ..
        } = &m[4].content[1]
        else {
            panic!()
        };
        assert_eq!(
            (content.clone(), *is_error),
            (vec![ContentBlock::text(r#"{"files":2}"#)], false)
        );
        assert!(matches!(s.entries[5].kind, EntryKind::Usage { usage } if usage.input == 10));
        assert!(matches!(&s.entries[6].kind, EntryKind::Event { name, .. } if name == "error"));
    }
}
