//! Pi session JSONL: v1 (linear, no entry ids), v2 (an `id`/`parentId` tree) and v3 (the
//! `hookMessage` role renamed `custom`).
//!
//! Line 1 is the `session` header (meta only, not an entry). Every other line is one entry; v2+
//! entries keep Pi's ids and parents, v1 entries get `L<line>` ids chained in file order. Pi's
//! leaf is the last entry of the file, which is the model's default (`Session.leaf = None`).
//!
//! Speed: `message` lines, the bulk of a session, are deserialised straight into typed structs
//! (module `fast`), picked by their prefix (Pi writes `type` first). Other lines, and messages
//! those structs do not fit, are parsed into a `serde_json::Value` whose strings are then moved
//! (not copied) into the model. Either way a line is parsed once, except a message line the typed
//! structs reject (an unknown block type, an odd field type), which is parsed again as a `Value`.

use serde_json::{Map, Value};

use ctxd_core::model::{
    Agent, Compaction, ContentBlock, Entry, EntryId, EntryKind, Message, Role, Session, Usage,
};

use crate::builder::Builder;
use crate::error::{ImportError, Warning};
use crate::jsonl::LineImporter;
use crate::util::{image_from_base64, iso_from_unix_millis, parse_arguments};

#[derive(Default)]
pub(crate) struct Importer {
    builder: Builder,
    header_seen: bool,
    /// The header's `version`; `None` with a header means v1.
    version: Option<u64>,
    /// Ids of the accepted entries in Pi's own entry order, slot 0 being the header: v1
    /// compactions name their first kept entry by this index (`firstKeptEntryIndex`).
    v1_ids: Vec<Option<EntryId>>,
    /// The model of the first assistant message, used when the header names none.
    first_model: Option<String>,
    first_timestamp: Option<String>,
}

impl LineImporter for Importer {
    const FORMAT: &'static str = "pi";

    fn line(&mut self, line_no: usize, line: &str) -> Result<(), String> {
        // Everything that can fail happens before the importer's state changes.
        let fast = if line.starts_with(r#"{"type":"message""#) {
            fast::message_line(line)
        } else {
            None
        };
        let parsed = match fast {
            Some(parsed) => parsed,
            None => match self.value_line(line)? {
                Some(parsed) => parsed,
                None => return Ok(()), // the header
            },
        };
        self.record(line_no, parsed);
        Ok(())
    }

    fn finish(self, warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
        let header_seen = self.header_seen;
        let version = self.version;
        let first_model = self.first_model;
        let first_timestamp = self.first_timestamp;
        let mut session = self.builder.finish();
        let meta = &mut session.meta;
        meta.agent = Some(Agent::Pi);
        meta.format = if header_seen {
            format!("pi/v{}", version.unwrap_or(1))
        } else {
            warnings.push(Warning::general(
                "no Pi session header line: session id, cwd and version are unknown",
            ));
            String::from("pi")
        };
        if meta.model.is_none() {
            meta.model = first_model;
        }
        if meta.started_at.is_none() {
            meta.started_at = first_timestamp;
        }
        Ok(session)
    }
}

/// One parsed entry line: its id and parent (v2+), timestamp, what it records, and the model
/// of an assistant message.
struct Parsed {
    id: Option<String>,
    parent: Option<String>,
    timestamp: Option<String>,
    kind: EntryKind,
    model: Option<String>,
}

impl Importer {
    /// The general path: any line, through a `serde_json::Value`. `None` for the header.
    fn value_line(&mut self, line: &str) -> Result<Option<Parsed>, String> {
        let value: Value =
            serde_json::from_str(line).map_err(|e| format!("not valid JSON ({e})"))?;
        let Value::Object(mut obj) = value else {
            return Err("not a JSON object".into());
        };
        let ty = match obj.get("type") {
            Some(Value::String(t)) => t.clone(),
            Some(_) => return Err("`type` is not a string".into()),
            None => return Err("no `type` field".into()),
        };
        if ty == "session" && !self.header_seen {
            self.header(obj);
            return Ok(None);
        }
        let timestamp = entry_timestamp(&obj);
        let id = take_string(&mut obj, "id");
        let parent = take_string(&mut obj, "parentId");
        let (kind, model) = self.entry_kind(&ty, obj)?;
        Ok(Some(Parsed {
            id,
            parent,
            timestamp,
            kind,
            model,
        }))
    }

    fn record(&mut self, line_no: usize, p: Parsed) {
        if self.first_model.is_none() {
            self.first_model = p.model;
        }
        if self.first_timestamp.is_none() {
            self.first_timestamp.clone_from(&p.timestamp);
        }
        if let EntryKind::Event { name, detail } = &p.kind {
            if name == "session_info" {
                if let Some(title) = detail.as_ref().and_then(|d| d.get("name")) {
                    self.builder.session.meta.title = title
                        .as_str()
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned);
                }
            }
        }
        let id = match p.id {
            Some(id) => {
                let id = EntryId(id);
                self.builder.push(Entry {
                    id: id.clone(),
                    parent: p.parent.map(EntryId),
                    timestamp: p.timestamp,
                    sidechain: false,
                    kind: p.kind,
                });
                id
            }
            None => self.builder.push_linear(line_no, p.timestamp, p.kind),
        };
        if self.version.unwrap_or(1) < 2 {
            self.v1_ids.push(Some(id));
        }
    }

    fn header(&mut self, mut obj: Map<String, Value>) {
        self.header_seen = true;
        self.version = obj.get("version").and_then(Value::as_u64);
        // Pi's entry index 0 is the header.
        self.v1_ids.push(None);
        let meta = &mut self.builder.session.meta;
        meta.id = take_string(&mut obj, "id");
        meta.cwd = take_string(&mut obj, "cwd");
        meta.started_at = take_string(&mut obj, "timestamp");
        meta.parent_session = take_string(&mut obj, "parentSession");
        // v1 headers carry the session's starting model.
        meta.model = take_string(&mut obj, "modelId").or_else(|| take_string(&mut obj, "model"));
    }

    /// The entry a line records, and the model it names when it is an assistant message.
    fn entry_kind(
        &self,
        ty: &str,
        mut obj: Map<String, Value>,
    ) -> Result<(EntryKind, Option<String>), String> {
        let kind = match ty {
            "message" => {
                let message = match obj.remove("message") {
                    Some(Value::Object(m)) => m,
                    Some(_) => return Err("`message` is not an object".into()),
                    None => return Err("a `message` entry without a `message`".into()),
                };
                return message_kind(message);
            }
            "model_change" => EntryKind::ModelChange {
                provider: take_string(&mut obj, "provider"),
                model: take_string(&mut obj, "modelId")
                    .or_else(|| take_string(&mut obj, "model"))
                    .ok_or("a `model_change` without `modelId`")?,
            },
            "compaction" => {
                let first_kept = match take_string(&mut obj, "firstKeptEntryId") {
                    Some(id) => Some(EntryId(id)),
                    // v1: the index of the first kept entry among the file's entries.
                    None => obj
                        .get("firstKeptEntryIndex")
                        .and_then(Value::as_u64)
                        .and_then(|i| usize::try_from(i).ok())
                        .and_then(|i| self.v1_ids.get(i).cloned().flatten()),
                };
                EntryKind::Compaction(Compaction {
                    summary: take_string(&mut obj, "summary").unwrap_or_default(),
                    first_kept,
                    tokens_before: obj.get("tokensBefore").and_then(as_u64),
                    replacement: None,
                })
            }
            "branch_summary" => EntryKind::BranchSummary {
                from: take_string(&mut obj, "fromId").map(EntryId),
                summary: take_string(&mut obj, "summary").unwrap_or_default(),
            },
            "context_edit" => {
                let target = take_string(&mut obj, "targetId")
                    .ok_or("a `context_edit` without `targetId`")?;
                let replacement = match obj.remove("replacement") {
                    None | Some(Value::Null) => None,
                    Some(Value::Object(mut r)) => {
                        Some(blocks(r.remove("content").unwrap_or(Value::Null)))
                    }
                    // A bare string or block list: take it as the content.
                    Some(other) => Some(blocks(other)),
                };
                EntryKind::ContextEdit {
                    target: EntryId(target),
                    replacement,
                }
            }
            "custom_message" => {
                let custom_type =
                    take_string(&mut obj, "customType").unwrap_or_else(|| "custom".into());
                let content = blocks(obj.remove("content").unwrap_or(Value::Null));
                EntryKind::Message(Message::new(Role::User, content).injected(custom_type))
            }
            "usage" => {
                let usage = match obj.remove("usage") {
                    Some(Value::Object(u)) => pi_usage(&u),
                    _ => pi_usage(&obj),
                };
                EntryKind::Usage { usage }
            }
            "thinking_level_change" | "label" | "session_info" | "custom" => {
                obj.remove("type");
                obj.remove("timestamp");
                EntryKind::Event {
                    name: ty.to_owned(),
                    detail: Some(Value::Object(obj)),
                }
            }
            // Unknown entry types (and a second header) are kept whole as events.
            other => EntryKind::Event {
                name: other.to_owned(),
                detail: Some(Value::Object(obj)),
            },
        };
        Ok((kind, None))
    }
}

/// A `message` entry's message: the model's message roles, Pi's extended ones (bash executions,
/// extension messages, summaries), and unknown roles kept as events.
fn message_kind(mut m: Map<String, Value>) -> Result<(EntryKind, Option<String>), String> {
    let role = match m.get("role") {
        Some(Value::String(r)) => r.clone(),
        _ => return Err("a message without a `role`".into()),
    };
    let kind = match role.as_str() {
        "user" => EntryKind::Message(Message::new(
            Role::User,
            blocks(m.remove("content").unwrap_or(Value::Null)),
        )),
        "assistant" => {
            let mut msg = Message::new(
                Role::Assistant,
                blocks(m.remove("content").unwrap_or(Value::Null)),
            );
            msg.model = take_string(&mut m, "model");
            msg.response_id = take_string(&mut m, "responseId");
            msg.stop_reason = take_string(&mut m, "stopReason");
            msg.usage = match m.get("usage") {
                Some(Value::Object(u)) => Some(pi_usage(u)),
                _ => None,
            };
            let model = msg.model.clone();
            return Ok((EntryKind::Message(msg), model));
        }
        "toolResult" => EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: take_string(&mut m, "toolCallId").unwrap_or_default(),
                tool_name: take_string(&mut m, "toolName"),
                content: blocks(m.remove("content").unwrap_or(Value::Null)),
                is_error: m.get("isError").and_then(Value::as_bool).unwrap_or(false),
            }],
        )),
        "bashExecution" => {
            if m.get("excludeFromContext").and_then(Value::as_bool) == Some(true) {
                // A `!!` command: shown to the user, never sent to the model.
                m.remove("timestamp");
                EntryKind::Event {
                    name: "bash_execution".into(),
                    detail: Some(Value::Object(m)),
                }
            } else {
                let text = bash_execution_text(&m);
                EntryKind::Message(Message::text(Role::User, text).injected("bash-execution"))
            }
        }
        "custom" | "hookMessage" => {
            let custom_type = take_string(&mut m, "customType").unwrap_or_else(|| role.clone());
            let content = blocks(m.remove("content").unwrap_or(Value::Null));
            EntryKind::Message(Message::new(Role::User, content).injected(custom_type))
        }
        "branchSummary" => EntryKind::BranchSummary {
            from: take_string(&mut m, "fromId").map(EntryId),
            summary: take_string(&mut m, "summary").unwrap_or_default(),
        },
        "compactionSummary" => EntryKind::Compaction(Compaction {
            summary: take_string(&mut m, "summary").unwrap_or_default(),
            first_kept: None,
            tokens_before: m.get("tokensBefore").and_then(as_u64),
            replacement: None,
        }),
        // Pi drops roles it does not know when it builds the model's context.
        _ => EntryKind::Event {
            name: format!("message:{role}"),
            detail: Some(Value::Object(m)),
        },
    };
    Ok((kind, None))
}

/// The user-message text Pi sends for a bash execution (`bashExecutionToText` in Pi's
/// coding-agent `messages.ts`).
fn bash_execution_text(m: &Map<String, Value>) -> String {
    let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default();
    let command = s("command");
    let output = s("output");
    let mut text = String::with_capacity(command.len() + output.len() + 32);
    text.push_str("Ran `");
    text.push_str(command);
    text.push_str("`\n");
    if output.is_empty() {
        text.push_str("(no output)");
    } else {
        text.push_str("```\n");
        text.push_str(output);
        text.push_str("\n```");
    }
    let exit_code = m.get("exitCode").and_then(Value::as_i64);
    if m.get("cancelled").and_then(Value::as_bool) == Some(true) {
        text.push_str("\n\n(command cancelled)");
    } else if let Some(code) = exit_code.filter(|c| *c != 0) {
        text.push_str(&format!("\n\nCommand exited with code {code}"));
    }
    let full = s("fullOutputPath");
    if m.get("truncated").and_then(Value::as_bool) == Some(true) && !full.is_empty() {
        text.push_str(&format!("\n\n[Output truncated. Full output: {full}]"));
    }
    text
}

/// Pi's content: a string, or blocks `text`, `thinking`, `image{data,mimeType}`,
/// `toolCall{id,name,arguments}`. An unknown block is kept as its JSON text.
fn blocks(content: Value) -> Vec<ContentBlock> {
    match content {
        Value::String(text) => vec![ContentBlock::Text { text }],
        Value::Array(items) => items.into_iter().map(block).collect(),
        Value::Null => Vec::new(),
        other => vec![ContentBlock::text(other.to_string())],
    }
}

fn block(b: Value) -> ContentBlock {
    let Value::Object(mut o) = b else {
        return match b {
            Value::String(text) => ContentBlock::Text { text },
            other => ContentBlock::text(other.to_string()),
        };
    };
    let ty = match o.remove("type") {
        Some(Value::String(t)) => t,
        Some(other) => {
            o.insert("type".into(), other);
            return ContentBlock::text(Value::Object(o).to_string());
        }
        None => String::new(),
    };
    match ty.as_str() {
        "text" => ContentBlock::Text {
            text: take_string(&mut o, "text").unwrap_or_default(),
        },
        "thinking" => ContentBlock::Thinking {
            thinking: take_string(&mut o, "thinking").unwrap_or_default(),
            // Anthropic's signature, or the OpenAI reasoning item Pi stores as JSON text.
            signature: take_string(&mut o, "thinkingSignature")
                .or_else(|| take_string(&mut o, "signature")),
            redacted: o.get("redacted").and_then(Value::as_bool).unwrap_or(false),
        },
        "image" => ContentBlock::Image(image_from_base64(
            o.get("mimeType").and_then(Value::as_str),
            o.get("data").and_then(Value::as_str).unwrap_or_default(),
        )),
        "toolCall" => ContentBlock::ToolCall {
            id: take_string(&mut o, "id").unwrap_or_default(),
            name: take_string(&mut o, "name").unwrap_or_default(),
            arguments: match o.remove("arguments") {
                Some(args @ Value::String(_)) => parse_arguments(&args),
                Some(args) => args,
                None => Value::Object(Map::new()),
            },
        },
        _ => {
            if !ty.is_empty() {
                o.insert("type".into(), Value::String(ty));
            }
            ContentBlock::text(Value::Object(o).to_string())
        }
    }
}

/// Pi's `usage{input, output, cacheRead, cacheWrite, totalTokens}`. Pi's providers already report
/// `input` without cached tokens, except Pi's Google providers before the fix for
/// double-counted cache reads (pi-mono #1487 / #2588), whose `input` includes `cacheRead`. That
/// case shows in the numbers: the four parts exceed `totalTokens` by the cache read, so it is
/// taken out again.
fn pi_usage(u: &Map<String, Value>) -> Usage {
    let n = |k: &str| u.get(k).and_then(as_u64).unwrap_or(0);
    normalise_usage(
        Usage {
            input: n("input"),
            output: n("output"),
            cache_read: n("cacheRead"),
            cache_write: n("cacheWrite"),
        },
        n("totalTokens"),
    )
}

fn normalise_usage(mut usage: Usage, total: u64) -> Usage {
    let sum = usage
        .input
        .saturating_add(usage.output)
        .saturating_add(usage.cache_read)
        .saturating_add(usage.cache_write);
    if total > 0
        && usage.cache_read > 0
        && usage.input >= usage.cache_read
        && sum >= total.saturating_add(usage.cache_read)
    {
        usage.input -= usage.cache_read;
    }
    usage
}

/// The entry's ISO timestamp, or its message's Unix-milliseconds one.
fn entry_timestamp(obj: &Map<String, Value>) -> Option<String> {
    match obj.get("timestamp") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => n.as_i64().and_then(iso_from_unix_millis),
        _ => obj
            .get("message")
            .and_then(|m| m.get("timestamp"))
            .and_then(Value::as_i64)
            .and_then(iso_from_unix_millis),
    }
}

/// Move a string field out of an object.
fn take_string(obj: &mut Map<String, Value>, key: &str) -> Option<String> {
    match obj.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            obj.insert(key.to_owned(), other);
            None
        }
        None => None,
    }
}

fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

/// The fast path for the bulk of a session: `message` lines of the model's own roles (user,
/// assistant, toolResult), deserialised straight into typed structs. Anything else, or anything
/// these structs do not fit (an unknown block type, a field of an unexpected type), returns
/// `None` and takes the general `Value` path, which keeps it whole or reports it.
mod fast {
    use std::fmt;

    use serde::de::{self, Deserializer, SeqAccess, Visitor};
    use serde::Deserialize;
    use serde_json::Value;

    use ctxd_core::model::{ContentBlock, EntryKind, Message, Role, Usage};

    use super::{normalise_usage, Parsed};
    use crate::util::{image_from_base64, iso_from_unix_millis, parse_arguments};

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Line {
        #[serde(rename = "type")]
        ty: String,
        id: Option<String>,
        parent_id: Option<String>,
        timestamp: Option<Value>,
        message: Option<Msg>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Msg {
        role: String,
        #[serde(default)]
        content: Content,
        model: Option<String>,
        response_id: Option<String>,
        stop_reason: Option<String>,
        usage: Option<PiUsage>,
        tool_call_id: Option<String>,
        tool_name: Option<String>,
        is_error: Option<bool>,
        timestamp: Option<Value>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct PiUsage {
        input: Option<f64>,
        output: Option<f64>,
        cache_read: Option<f64>,
        cache_write: Option<f64>,
        total_tokens: Option<f64>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Block {
        #[serde(rename = "type")]
        ty: String,
        text: Option<String>,
        thinking: Option<String>,
        thinking_signature: Option<String>,
        signature: Option<String>,
        redacted: Option<bool>,
        data: Option<String>,
        mime_type: Option<String>,
        id: Option<String>,
        name: Option<String>,
        arguments: Option<Value>,
    }

    /// Pi content: a string, a list of blocks, or null.
    #[derive(Default)]
    struct Content(Vec<Block>, Option<String>);

    impl<'de> Deserialize<'de> for Content {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Content;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string or a list of content blocks")
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Content, E> {
                    Ok(Content(Vec::new(), Some(s.to_owned())))
                }
                fn visit_string<E: de::Error>(self, s: String) -> Result<Content, E> {
                    Ok(Content(Vec::new(), Some(s)))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Content, E> {
                    Ok(Content::default())
                }
                fn visit_none<E: de::Error>(self) -> Result<Content, E> {
                    Ok(Content::default())
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                    let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(2));
                    while let Some(b) = seq.next_element::<Block>()? {
                        blocks.push(b);
                    }
                    Ok(Content(blocks, None))
                }
            }
            d.deserialize_any(V)
        }
    }

    /// A `message` line of a model role, or `None` for the general path.
    pub(super) fn message_line(line: &str) -> Option<Parsed> {
        let l: Line = serde_json::from_str(line).ok()?;
        if l.ty != "message" {
            return None;
        }
        let m = l.message?;
        let role = match m.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "toolResult" => Role::Tool,
            _ => return None,
        };
        let content = blocks(m.content)?;
        let timestamp = match l.timestamp.or(m.timestamp) {
            Some(Value::String(s)) => Some(s),
            Some(Value::Number(n)) => n.as_i64().and_then(iso_from_unix_millis),
            _ => None,
        };
        let mut model = None;
        let msg = match role {
            Role::Tool => Message::new(
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    call_id: m.tool_call_id.unwrap_or_default(),
                    tool_name: m.tool_name,
                    content,
                    is_error: m.is_error.unwrap_or(false),
                }],
            ),
            Role::Assistant => {
                let mut msg = Message::new(Role::Assistant, content);
                msg.model = m.model;
                msg.response_id = m.response_id;
                msg.stop_reason = m.stop_reason;
                msg.usage = m.usage.map(|u| {
                    let n = |v: Option<f64>| v.filter(|f| *f >= 0.0).map_or(0, |f| f as u64);
                    normalise_usage(
                        Usage {
                            input: n(u.input),
                            output: n(u.output),
                            cache_read: n(u.cache_read),
                            cache_write: n(u.cache_write),
                        },
                        n(u.total_tokens),
                    )
                });
                model.clone_from(&msg.model);
                msg
            }
            _ => Message::new(role, content),
        };
        Some(Parsed {
            id: l.id,
            parent: l.parent_id,
            timestamp,
            kind: EntryKind::Message(msg),
            model,
        })
    }

    fn blocks(content: Content) -> Option<Vec<ContentBlock>> {
        if let Some(text) = content.1 {
            return Some(vec![ContentBlock::Text { text }]);
        }
        content.0.into_iter().map(block).collect()
    }

    fn block(b: Block) -> Option<ContentBlock> {
        Some(match b.ty.as_str() {
            "text" => ContentBlock::Text {
                text: b.text.unwrap_or_default(),
            },
            "thinking" => ContentBlock::Thinking {
                thinking: b.thinking.unwrap_or_default(),
                signature: b.thinking_signature.or(b.signature),
                redacted: b.redacted.unwrap_or(false),
            },
            "image" => ContentBlock::Image(image_from_base64(
                b.mime_type.as_deref(),
                b.data.as_deref().unwrap_or_default(),
            )),
            "toolCall" => ContentBlock::ToolCall {
                id: b.id.unwrap_or_default(),
                name: b.name.unwrap_or_default(),
                arguments: match b.arguments {
                    Some(args @ Value::String(_)) => parse_arguments(&args),
                    Some(args) => args,
                    None => Value::Object(serde_json::Map::new()),
                },
            },
            // Kept whole by the general path.
            _ => return None,
        })
    }
}
