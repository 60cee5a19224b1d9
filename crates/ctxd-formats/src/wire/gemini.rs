//! Google's Gemini API (`generateContent`): contents and their parts, `systemInstruction`,
//! `tools.functionDeclarations`, `usageMetadata`.
//!
//! Gemini pairs a `functionResponse` with its `functionCall` by name and order, in the content
//! right after the call. An `id` is optional and clients disagree on it: the API sends calls
//! without one, Gemini CLI adds its own to the call it echoes and to its response, Pi and the
//! SDKs send none. So the session model's ids are ctxd's own, derived from what a call says
//! ([`derived_call_id`]), whatever `id` the part carries: the call read from the provider's
//! response and the same call echoed by any client are one message. A response takes the id of
//! the call it answers when the content before it is known ([`content_after`]). The parts'
//! own ids stay in the client's bytes, which go upstream unchanged.
//!
//! A `thoughtSignature` rides on the part it belongs to (a function call, a text, a thought).
//! In the session model it becomes a hidden [`ContentBlock::Thinking`] right before that part,
//! so a message written back in Gemini's shape carries it on the same part again. A thought
//! part (`thought: true`) is output only: the API does not need it back (it validates the
//! signatures on function calls), and Gemini CLI does not echo it. The model's raw bytes keep
//! it; the conversation does not, so every client's echo reads as the message recorded.

use serde_json::Value;

use ctxd_core::model::{ContentBlock, Message, Role, ToolDef, Usage};

use super::{json_text, Request};
use crate::util::{image_from_base64, image_from_url, str_field, string_field, u64_field};

/// The prefix of the ids ctxd derives. Such an id is never sent to a provider: written back,
/// a part goes without an `id`.
pub const DERIVED_ID_PREFIX: &str = "~";

/// Whether `id` was derived by ctxd rather than sent by the client or the provider.
pub fn is_derived_id(id: &str) -> bool {
    id.starts_with(DERIVED_ID_PREFIX)
}

/// The id of a call without one: its name and a digest of its arguments, and its rank among
/// identical calls of the same content, so that the call parsed from a response and the same
/// call echoed back by the client get the same id.
pub fn derived_call_id(name: &str, args: &Value, rank: usize) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(name.as_bytes());
    hasher.update(&[0]);
    hasher.update(args.to_string().as_bytes());
    let digest = hasher.finalize();
    let short = &digest.to_hex()[..12];
    if rank == 0 {
        format!("{DERIVED_ID_PREFIX}{name}~{short}")
    } else {
        format!("{DERIVED_ID_PREFIX}{name}~{short}~{rank}")
    }
}

/// The tool's name in an id [`derived_call_id`] made (`~name~digest`), or the id itself.
pub fn name_of_id(id: &str) -> &str {
    id.strip_prefix(DERIVED_ID_PREFIX)
        .and_then(|rest| rest.split('~').next())
        .unwrap_or(id)
}

/// The calls of one content as they are read in order: each one's name, arguments and id, the
/// id ranked among the identical calls before it.
#[derive(Default)]
struct Calls {
    seen: Vec<(String, String)>,
}

impl Calls {
    fn read(&mut self, call: &Value) -> (String, Value, String) {
        let name = string_field(call, "name").unwrap_or_default();
        let args = call.get("args").cloned().unwrap_or(Value::Null);
        let key = (name.clone(), args.to_string());
        let rank = self.seen.iter().filter(|k| **k == key).count();
        self.seen.push(key);
        let id = derived_call_id(&name, &args, rank);
        (name, args, id)
    }
}

/// The `functionCall`s of a content, in order: (name, id as this module reads it).
pub fn call_ids(content: &Value) -> Vec<(String, String)> {
    let mut calls = Calls::default();
    parts_of(content)
        .filter_map(|part| part.get("functionCall"))
        .map(|call| {
            let (name, _, id) = calls.read(call);
            (name, id)
        })
        .collect()
}

fn non_empty(v: &Value, key: &str) -> Option<String> {
    string_field(v, key).filter(|s| !s.is_empty())
}

fn parts_of(content: &Value) -> impl Iterator<Item = &Value> {
    content
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// One `Content` on its own. A `functionResponse` without the content before it keeps its own
/// `id`, or one derived from its name.
pub fn content(c: &Value) -> Message {
    content_after(None, c)
}

/// One `Content`, after `previous` (the element before it in `contents`): each
/// `functionResponse` takes the id of the call it answers there, matched by name and order.
pub fn content_after(previous: Option<&Value>, c: &Value) -> Message {
    let role = match str_field(c, "role") {
        Some("model") => Role::Assistant,
        Some("system") => Role::System,
        _ => Role::User,
    };
    let calls = previous.map(call_ids).unwrap_or_default();
    let mut answered = vec![false; calls.len()];
    let mut own_calls = Calls::default();
    let mut blocks = Vec::new();
    for part in parts_of(c) {
        if is_thought(part) {
            continue;
        }
        let signature = non_empty(part, "thoughtSignature");
        if let Some(text) = plain_text(part) {
            push_text(&mut blocks, text, signature);
            continue;
        }
        if let Some(sig) = signature {
            blocks.push(bare_signature(sig));
        }
        if let Some(call) = part.get("functionCall") {
            let (name, args, id) = own_calls.read(call);
            blocks.push(ContentBlock::ToolCall {
                id,
                name,
                arguments: args,
            });
        } else if let Some(response) = part.get("functionResponse") {
            let name = string_field(response, "name").unwrap_or_default();
            let matched = calls
                .iter()
                .zip(answered.iter_mut())
                .find(|((call_name, _), done)| !**done && *call_name == name)
                .map(|((_, id), done)| {
                    *done = true;
                    id.clone()
                });
            let call_id = matched.unwrap_or_else(|| format!("{DERIVED_ID_PREFIX}{name}"));
            blocks.push(function_response(response, call_id, name));
        } else if let Some(block) = data_part(part) {
            blocks.push(block);
        }
    }
    Message::new(role, blocks)
}

fn bare_signature(sig: String) -> ContentBlock {
    ContentBlock::Thinking {
        thinking: String::new(),
        signature: Some(sig),
        redacted: true,
    }
}

fn is_bare_signature(b: &ContentBlock) -> bool {
    matches!(b, ContentBlock::Thinking { thinking, signature: Some(_), redacted: true } if thinking.is_empty())
}

/// A part that only holds text (not a thought): its text.
fn plain_text(part: &Value) -> Option<&str> {
    let o = part.as_object()?;
    let text = o.get("text")?.as_str()?;
    o.keys()
        .all(|k| matches!(k.as_str(), "text" | "thoughtSignature"))
        .then_some(text)
}

/// Adds a text part, joined to the text before it, its signature (if any) before the joined
/// text unless that text has one: how the stream assembler joins a response's text deltas, so
/// a client keeping every chunk's part (the Python SDK's stream) and one keeping them joined
/// send back the same message.
fn push_text(blocks: &mut Vec<ContentBlock>, text: &str, signature: Option<String>) {
    let n = blocks.len();
    let last_is_text = matches!(blocks.last(), Some(ContentBlock::Text { .. }));
    let last_is_signed = n >= 2 && is_bare_signature(&blocks[n - 2]);
    if last_is_text && (signature.is_none() || !last_is_signed) {
        if let Some(sig) = signature {
            blocks.insert(n - 1, bare_signature(sig));
        }
        if let Some(ContentBlock::Text { text: last }) = blocks.last_mut() {
            last.push_str(text);
        }
        return;
    }
    if let Some(sig) = signature {
        blocks.push(bare_signature(sig));
    }
    if !text.is_empty() {
        blocks.push(ContentBlock::text(text));
    }
}

fn is_thought(part: &Value) -> bool {
    part.get("thought").and_then(Value::as_bool) == Some(true)
}

/// A part that is neither a call nor a response. `None` for an empty text that only carried a
/// signature (the signature is already a block of its own).
fn data_part(part: &Value) -> Option<ContentBlock> {
    if is_thought(part) {
        return None;
    }
    if let Some(text) = str_field(part, "text") {
        if text.is_empty() && part.get("thoughtSignature").is_some() {
            return None;
        }
        return Some(ContentBlock::text(text));
    }
    if let Some(data) = part.get("inlineData") {
        return Some(ContentBlock::Image(image_from_base64(
            str_field(data, "mimeType"),
            str_field(data, "data").unwrap_or_default(),
        )));
    }
    if let Some(file) = part.get("fileData") {
        if str_field(file, "mimeType").is_some_and(|m| m.starts_with("image/")) {
            return Some(ContentBlock::Image(image_from_url(
                str_field(file, "fileUri").unwrap_or_default(),
            )));
        }
    }
    Some(ContentBlock::text(json_text(&without_signature(part))))
}

fn without_signature(part: &Value) -> Value {
    let mut part = part.clone();
    if let Some(o) = part.as_object_mut() {
        o.remove("thoughtSignature");
    }
    part
}

/// A `functionResponse` as a tool result: the `output` (or `content`) string when the tool
/// wrote one, else the whole `response` as JSON; `error` marks a failed call. Parts beside the
/// response (multimodal results) follow as their blocks.
fn function_response(response: &Value, call_id: String, name: String) -> ContentBlock {
    let body = response.get("response").unwrap_or(&Value::Null);
    let is_error = body.get("error").is_some_and(|e| !e.is_null());
    let text = str_field(body, "output")
        .or_else(|| str_field(body, "content"))
        .or_else(|| str_field(body, "error"))
        .map(str::to_owned)
        .unwrap_or_else(|| match body {
            Value::Null => String::new(),
            other => json_text(other),
        });
    let mut content = vec![ContentBlock::text(text)];
    content.extend(
        response
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(data_part),
    );
    ContentBlock::ToolResult {
        call_id,
        tool_name: Some(name),
        content,
        is_error,
    }
}

/// `systemInstruction` as text: its text parts, joined.
pub fn system(v: &Value) -> Option<String> {
    let text: Vec<&str> = match v {
        Value::String(s) => vec![s.as_str()],
        _ => parts_of(v).filter_map(|p| str_field(p, "text")).collect(),
    };
    (!text.is_empty()).then(|| text.join("\n"))
}

/// `tools`: each function declaration by name; other tools (`googleSearch`, `codeExecution`,
/// ...) keep their whole definition as the schema.
pub fn tools(v: &Value) -> Vec<ToolDef> {
    let mut out = Vec::new();
    for tool in v.as_array().into_iter().flatten() {
        match tool.get("functionDeclarations").and_then(Value::as_array) {
            Some(decls) => out.extend(decls.iter().map(|d| {
                ToolDef {
                    name: string_field(d, "name").unwrap_or_default(),
                    description: string_field(d, "description").unwrap_or_default(),
                    schema: d
                        .get("parametersJsonSchema")
                        .or_else(|| d.get("parameters"))
                        .cloned()
                        .unwrap_or(Value::Null),
                }
            })),
            None => out.push(ToolDef {
                name: tool
                    .as_object()
                    .and_then(|o| o.keys().next().cloned())
                    .unwrap_or_default(),
                description: String::new(),
                schema: tool.clone(),
            }),
        }
    }
    out
}

/// `usageMetadata`. `promptTokenCount` includes the cached tokens (and tool-use prompt tokens
/// are extra input); thoughts are output.
pub fn usage(u: &Value) -> Usage {
    let prompt = u64_field(u, "promptTokenCount").unwrap_or(0)
        + u64_field(u, "toolUsePromptTokenCount").unwrap_or(0);
    let cached = u64_field(u, "cachedContentTokenCount").unwrap_or(0);
    Usage {
        input: prompt.saturating_sub(cached),
        output: u64_field(u, "candidatesTokenCount").unwrap_or(0)
            + u64_field(u, "thoughtsTokenCount").unwrap_or(0),
        cache_read: cached,
        cache_write: 0,
    }
}

/// The contents of a request, each read after the one before it.
pub fn contents(v: &Value) -> Vec<Message> {
    let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .enumerate()
        .map(|(i, c)| content_after(i.checked_sub(1).map(|p| &items[p]), c))
        .collect()
}

/// A whole request body. The model is named in the URL, not the body.
pub fn request(body: &Value, model: Option<&str>) -> Request {
    Request {
        model: model.map(str::to_owned),
        system: body.get("systemInstruction").and_then(system),
        tools: body.get("tools").map(tools).unwrap_or_default(),
        messages: body.get("contents").map(contents).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_response_takes_the_id_of_the_call_it_answers() {
        let call = json!({"role": "model", "parts": [
            {"functionCall": {"name": "read_file", "args": {"path": "a"}}, "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "read_file", "args": {"path": "b"}}}
        ]});
        let answer = json!({"role": "user", "parts": [
            {"functionResponse": {"id": "cli-1", "name": "read_file", "response": {"output": "A"}}},
            {"functionResponse": {"id": "cli-2", "name": "read_file", "response": {"error": "no b"}}}
        ]});
        let m = content(&call);
        assert_eq!(m.role, Role::Assistant);
        let ids: Vec<&str> = m
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.iter().all(|id| is_derived_id(id)));
        assert_ne!(ids[0], ids[1]);
        assert!(matches!(&m.content[0],
            ContentBlock::Thinking { signature: Some(s), redacted: true, .. } if s == "c2ln"));
        let r = content_after(Some(&call), &answer);
        let results: Vec<(&str, bool)> = r
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult {
                    call_id, is_error, ..
                } => Some((call_id.as_str(), *is_error)),
                _ => None,
            })
            .collect();
        assert_eq!(results, vec![(ids[0], false), (ids[1], true)]);
        // The ids the parts carry are not the model's: an echo with Gemini CLI's own reads as
        // the call the provider sent.
        let mut echoed = call.clone();
        echoed["parts"][0]["functionCall"]["id"] = json!("read_file_1_0");
        assert_eq!(content(&echoed), m);
    }

    #[test]
    fn text_deltas_kept_apart_read_as_the_joined_text() {
        let joined = content(&json!({"role": "model", "parts": [
            {"text": "Hello", "thoughtSignature": "s"},
            {"functionCall": {"name": "ls", "args": {}}}]}));
        let apart = content(&json!({"role": "model", "parts": [
            {"text": "Hel"}, {"text": "lo"}, {"text": "", "thoughtSignature": "s"},
            {"functionCall": {"name": "ls", "args": {}}}]}));
        assert_eq!(joined, apart);
        let late = content(&json!({"role": "model", "parts": [
            {"text": "Hel"}, {"text": "lo", "thoughtSignature": "s"},
            {"functionCall": {"name": "ls", "args": {}}}]}));
        assert_eq!(joined, late);
    }

    #[test]
    fn identical_calls_in_one_content_get_distinct_ids() {
        let call = json!({"role": "model", "parts": [
            {"functionCall": {"name": "ls", "args": {}}},
            {"functionCall": {"name": "ls", "args": {}}}
        ]});
        let ids = call_ids(&call);
        assert_ne!(ids[0].1, ids[1].1);
        let answer = json!({"role": "user", "parts": [
            {"functionResponse": {"name": "ls", "response": {"output": "1"}}},
            {"functionResponse": {"name": "ls", "response": {"output": "2"}}}
        ]});
        let r = content_after(Some(&call), &answer);
        assert!(matches!(&r.content[1],
            ContentBlock::ToolResult { call_id, .. } if *call_id == ids[1].1));
    }

    #[test]
    fn thoughts_text_and_media() {
        let m = content(&json!({"role": "model", "parts": [
            {"text": "unsigned summary", "thought": true},
            {"text": "planning", "thought": true, "thoughtSignature": "s1"},
            {"text": "answer"},
            {"text": "", "thoughtSignature": "s2"},
            {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
            {"executableCode": {"language": "PYTHON", "code": "1"}}
        ]}));
        // Thought parts are output only, signed or not.
        // A signature after a text is the text's (as the stream assembler joins it).
        assert!(matches!(&m.content[0],
            ContentBlock::Thinking { redacted: true, signature: Some(s), .. } if s == "s2"));
        assert_eq!(m.content[1], ContentBlock::text("answer"));
        assert!(matches!(&m.content[2], ContentBlock::Image(_)));
        assert!(
            matches!(&m.content[3], ContentBlock::Text { text } if text.contains("executableCode"))
        );
        assert_eq!(m.content.len(), 4);
    }

    #[test]
    fn request_usage_and_tools() {
        let body = json!({
            "systemInstruction": {"parts": [{"text": "be brief"}, {"text": "be kind"}]},
            "tools": [{"functionDeclarations": [
                {"name": "read_file", "description": "reads", "parametersJsonSchema": {"type": "object"}},
                {"name": "ls", "parameters": {"type": "OBJECT"}}
            ]}, {"googleSearch": {}}],
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}]
        });
        let r = request(&body, Some("gemini-2.5-pro"));
        assert_eq!(r.system.as_deref(), Some("be brief\nbe kind"));
        let names: Vec<&str> = r.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["read_file", "ls", "googleSearch"]);
        assert_eq!(r.messages.len(), 1);
        let u = usage(
            &json!({"promptTokenCount": 120, "cachedContentTokenCount": 100,
            "candidatesTokenCount": 5, "thoughtsTokenCount": 7, "totalTokenCount": 132}),
        );
        assert_eq!((u.input, u.cache_read, u.output), (20, 100, 12));
        assert_eq!(u.prompt_tokens(), 120);
    }
}
