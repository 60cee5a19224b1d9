//! Raw API request bodies: one body as a linear session, or a capture of many as one tree.
//!
//! A body is parsed by the wire parser of its API ([`crate::detect::api_of_body`] decides), so the
//! session holds exactly what the model was sent: system prompt, tool definitions, messages.
//!
//! A capture is JSONL, a line per request: `{ts, method, path, headers, body, reply}` as a
//! recording proxy writes it, or a bare body. Every request repeats the conversation so far, so
//! requests are merged by their shared prefix: each request's path (system prompt, tools, then
//! each message) is walked from the root, following an existing child with the same parsed content
//! (so wire-only fields such as `cache_control` do not split branches) and appending new entries
//! where it differs. Headers are never read: they hold API keys.

use std::collections::HashMap;

use serde_json::Value;

use ctxd_core::model::{
    Agent, ContentBlock, Entry, EntryId, EntryKind, Message, Role, Session, WireApi,
};

use crate::builder::Builder;
use crate::detect::{api_of_body, Format};
use crate::error::{ImportError, Warning};
use crate::jsonl::LineImporter;
use crate::util::str_field;
use crate::wire::{anthropic, gemini, openai_chat, openai_responses, Request};

fn parse(api: WireApi, body: &Value, path: &str) -> Request {
    match api {
        WireApi::AnthropicMessages => anthropic::request(body),
        WireApi::OpenaiChat => openai_chat::request(body),
        WireApi::OpenaiResponses => openai_responses::request(body),
        WireApi::GeminiGenerateContent => gemini::request(body, gemini_model_of_path(path)),
    }
}

/// The model a Gemini request names in its path: `/v1beta/models/{model}:generateContent`.
fn gemini_model_of_path(path: &str) -> Option<&str> {
    let path = path.split('?').next().unwrap_or_default();
    let after = &path[path.rfind("/models/")? + "/models/".len()..];
    let model = after.split(':').next().unwrap_or(after);
    (!model.is_empty()).then_some(model)
}

/// One request body as a linear session: system prompt, tools, messages (ids `L1`, `L2`, ...,
/// numbering the entries, as the document has no lines of its own).
pub(crate) fn import_body(
    api: WireApi,
    doc: &Value,
    _warnings: &mut Vec<Warning>,
) -> Result<Session, ImportError> {
    let request = parse(api, doc, "");
    let model = request.model.clone();
    let kinds = request.into_entry_kinds();
    if kinds.is_empty() {
        return Err(ImportError::Malformed {
            format: Format::ApiRequest(api).name(),
            message: "the request has no system prompt, tools or messages".into(),
        });
    }
    let mut builder = Builder::default();
    for (i, kind) in kinds.into_iter().enumerate() {
        builder.push_linear(i + 1, None, kind);
    }
    let mut session = builder.finish();
    session.meta.agent = Some(Agent::Api);
    session.meta.format = Format::ApiRequest(api).name().to_owned();
    session.meta.model = model;
    Ok(session)
}

/// A reply of the model, held until we know whether the next request repeats it.
struct Pending {
    line: usize,
    timestamp: Option<String>,
    message: Message,
}

/// Imports a capture of requests into one tree.
#[derive(Default)]
pub(crate) struct CaptureImporter {
    builder: Builder,
    /// Per entry (same index as `session.entries`): its children.
    children: Vec<Vec<usize>>,
    roots: Vec<usize>,
    /// The last node of the latest request.
    leaf: Option<usize>,
    /// The model's reply to a request, by the request's last node. Dropped when a later request
    /// continues from that node with the assistant message the client recorded (which has the
    /// real ids); appended at the end otherwise.
    pending: HashMap<usize, Pending>,
}

impl LineImporter for CaptureImporter {
    const FORMAT: &'static str = "captured requests";

    fn line(&mut self, line_no: usize, line: &str) -> Result<(), String> {
        let value: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
        let Value::Object(obj) = &value else {
            return Err("not a JSON object".into());
        };
        let captured = obj.contains_key("body") && obj.contains_key("method");
        let path = str_field(&value, "path").unwrap_or_default();
        let (body, timestamp, reply) = if captured {
            if str_field(&value, "method").is_some_and(|m| !m.eq_ignore_ascii_case("POST"))
                || path.contains("count_tokens")
                || path.contains(":countTokens")
            {
                // Preflights, model lists and token counts are not turns of the conversation.
                return Ok(());
            }
            (
                value.get("body").unwrap_or(&Value::Null),
                value.get("ts").and_then(timestamp_of),
                value.get("reply"),
            )
        } else {
            (&value, None, None)
        };
        let Some(api) = body.as_object().and_then(api_of_body) else {
            return Ok(());
        };
        let request = parse(api, body, path);
        if request.model.is_some() {
            self.builder.session.meta.model.clone_from(&request.model);
        }
        let kinds = request.into_entry_kinds();
        if kinds.is_empty() {
            return Ok(());
        }
        if self.builder.session.meta.started_at.is_none() {
            self.builder.session.meta.started_at.clone_from(&timestamp);
        }
        let mut cur: Option<usize> = None;
        for (index, kind) in kinds.into_iter().enumerate() {
            if let Some(node) = cur {
                if matches!(&kind, EntryKind::Message(m) if m.role == Role::Assistant) {
                    self.pending.remove(&node);
                }
            }
            cur = Some(self.child(cur, kind, line_no, index, &timestamp));
        }
        self.leaf = cur;
        if let (Some(node), Some(message)) = (cur, reply.and_then(|r| reply_message(api, r))) {
            self.pending.insert(
                node,
                Pending {
                    line: line_no,
                    timestamp,
                    message,
                },
            );
        }
        Ok(())
    }

    fn finish(mut self, _warnings: &mut Vec<Warning>) -> Result<Session, ImportError> {
        let mut pending: Vec<(usize, Pending)> = self.pending.drain().collect();
        pending.sort_by_key(|(_, p)| p.line);
        for (node, reply) in pending {
            let parent = self.builder.session.entries.get(node).map(|e| e.id.clone());
            // The last request's answer ends the conversation: it belongs on the active branch.
            if self.leaf == Some(node) {
                self.leaf = Some(self.builder.session.entries.len());
            }
            self.builder.push(Entry {
                id: EntryId(format!("r{}.reply", reply.line)),
                parent,
                timestamp: reply.timestamp,
                sidechain: false,
                kind: EntryKind::Message(reply.message),
            });
        }
        let leaf = self
            .leaf
            .and_then(|i| self.builder.session.entries.get(i))
            .map(|e| e.id.clone());
        let mut session = self.builder.finish();
        session.leaf = leaf;
        session.meta.agent = Some(Agent::Api);
        session.meta.format = Format::CapturedRequests.name().to_owned();
        Ok(session)
    }
}

impl CaptureImporter {
    /// The child of `parent` (a root when `None`) holding `kind`: an existing one with the same
    /// content, or a new entry `r<line>.<index>`.
    fn child(
        &mut self,
        parent: Option<usize>,
        kind: EntryKind,
        line_no: usize,
        index: usize,
        timestamp: &Option<String>,
    ) -> usize {
        let entries = &self.builder.session.entries;
        let siblings = match parent {
            Some(p) => self.children.get(p).map_or(&[][..], Vec::as_slice),
            None => &self.roots,
        };
        // Siblings are few (one, unless the conversation branched): comparing the parsed entries
        // directly is exact and cheaper than hashing every item of every request.
        if let Some(&found) = siblings
            .iter()
            .find(|&&c| entries.get(c).is_some_and(|e| e.kind == kind))
        {
            return found;
        }
        let new = entries.len();
        let parent_id = parent.and_then(|p| entries.get(p)).map(|e| e.id.clone());
        self.builder.push(Entry {
            id: EntryId(format!("r{line_no}.{index}")),
            parent: parent_id,
            timestamp: timestamp.clone(),
            sidechain: false,
            kind,
        });
        self.children.push(Vec::new());
        match parent.and_then(|p| self.children.get_mut(p)) {
            Some(list) => list.push(new),
            None => self.roots.push(new),
        }
        new
    }
}

/// The model's answer recorded beside a request: a recording mock's decision
/// (`["tool", name, arguments]` or `["text", text]`) or a whole non-streaming response.
fn reply_message(api: WireApi, reply: &Value) -> Option<Message> {
    match reply {
        Value::Array(parts) => match (parts.first().and_then(Value::as_str), parts.get(1)) {
            (Some("text"), Some(Value::String(text))) => {
                Some(Message::text(Role::Assistant, text.clone()))
            }
            (Some("tool"), Some(Value::String(name))) => Some(Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    // The mock does not record the id it made up; the next request has it.
                    id: String::new(),
                    name: name.clone(),
                    arguments: parts.get(2).cloned().unwrap_or(Value::Null),
                }],
            )),
            _ => None,
        },
        Value::Object(_) => response_message(api, reply),
        _ => None,
    }
}

/// A whole (non-streaming) response body of the request's API.
fn response_message(api: WireApi, r: &Value) -> Option<Message> {
    let mut message = match api {
        WireApi::AnthropicMessages => {
            r.get("content")?;
            let mut m = anthropic::message(r);
            m.usage = r.get("usage").map(anthropic::usage);
            m.stop_reason = str_field(r, "stop_reason").map(str::to_owned);
            m
        }
        WireApi::OpenaiChat => {
            let choice = r.get("choices")?.get(0)?;
            let mut m = openai_chat::message(choice.get("message")?);
            m.usage = r.get("usage").map(openai_chat::usage);
            m.stop_reason = str_field(choice, "finish_reason").map(str::to_owned);
            m
        }
        WireApi::OpenaiResponses => {
            let content: Vec<ContentBlock> = r
                .get("output")?
                .as_array()?
                .iter()
                .flat_map(|it| openai_responses::item(it).content)
                .collect();
            let mut m = Message::new(Role::Assistant, content);
            m.usage = r.get("usage").map(openai_responses::usage);
            m
        }
        WireApi::GeminiGenerateContent => {
            let candidate = r.get("candidates")?.get(0)?;
            let mut m = gemini::content(candidate.get("content")?);
            m.usage = r.get("usageMetadata").map(gemini::usage);
            m.stop_reason = str_field(candidate, "finishReason").map(str::to_owned);
            m.model = str_field(r, "modelVersion").map(str::to_owned);
            m.response_id = str_field(r, "responseId").map(str::to_owned);
            m.role = Role::Assistant;
            return Some(m);
        }
    };
    message.role = Role::Assistant;
    message.model = str_field(r, "model").map(str::to_owned);
    message.response_id = str_field(r, "id").map(str::to_owned);
    Some(message)
}

/// A capture's `ts`: Unix seconds (as the recording mock writes) or already a string.
fn timestamp_of(ts: &Value) -> Option<String> {
    match ts {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => n.as_f64().and_then(iso8601),
        _ => None,
    }
}

/// Unix seconds as ISO-8601 UTC with milliseconds.
fn iso8601(secs: f64) -> Option<String> {
    if !secs.is_finite() {
        return None;
    }
    crate::util::iso_from_unix_millis((secs * 1000.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_to_iso() {
        assert_eq!(iso8601(0.0).as_deref(), Some("1970-01-01T00:00:00.000Z"));
        assert_eq!(
            iso8601(1_796_073_529.564_123_6).as_deref(),
            Some("2026-11-30T21:18:49.564Z")
        );
        assert_eq!(
            iso8601(951_782_400.0).as_deref(),
            Some("2000-02-29T00:00:00.000Z")
        );
        assert_eq!(iso8601(f64::NAN), None);
    }

    #[test]
    fn volatile_wire_fields_do_not_split_branches() {
        let a = anthropic::message(&serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}));
        let b = anthropic::message(&serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": "hi"}]}));
        assert_eq!(EntryKind::Message(a), EntryKind::Message(b));
    }
}
