//! Anthropic Messages: content blocks, messages, system, tools, usage.

use serde_json::{Map, Value};

use ctxd_core::model::{ContentBlock, Message, Role, ToolDef, Usage};

use super::{json_text, Request};
use crate::util::{image_from_base64, image_from_url, str_field, string_field, u64_field};

/// Content blocks from a `content` value (a string or an array of blocks).
pub fn blocks(content: &Value) -> Vec<ContentBlock> {
    blocks_owned(content.clone())
}

/// Like [`blocks`], moving the strings out of `content` instead of copying them (importers
/// parse a line once and hand it over).
pub fn blocks_owned(content: Value) -> Vec<ContentBlock> {
    match content {
        Value::String(s) => vec![ContentBlock::text(s)],
        Value::Array(items) => items.into_iter().map(block_owned).collect(),
        Value::Null => Vec::new(),
        other => vec![ContentBlock::text(json_text(&other))],
    }
}

/// One content block.
pub fn block(b: &Value) -> ContentBlock {
    block_owned(b.clone())
}

fn take_string(o: &mut Map<String, Value>, key: &str) -> Option<String> {
    match o.remove(key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// One content block, moving its strings.
pub fn block_owned(b: Value) -> ContentBlock {
    let Value::Object(mut o) = b else {
        return ContentBlock::text(json_text(&b));
    };
    let ty = match o.get("type") {
        Some(Value::String(t)) => t.clone(),
        _ => return ContentBlock::text(json_text(&Value::Object(o))),
    };
    match ty.as_str() {
        "text" => ContentBlock::text(take_string(&mut o, "text").unwrap_or_default()),
        "thinking" => ContentBlock::Thinking {
            thinking: take_string(&mut o, "thinking").unwrap_or_default(),
            signature: take_string(&mut o, "signature"),
            redacted: false,
        },
        "redacted_thinking" => ContentBlock::Thinking {
            thinking: String::new(),
            signature: take_string(&mut o, "data"),
            redacted: true,
        },
        "image" => ContentBlock::Image(image(o.get("source").unwrap_or(&Value::Null))),
        "tool_use" | "server_tool_use" | "mcp_tool_use" => ContentBlock::ToolCall {
            id: take_string(&mut o, "id").unwrap_or_default(),
            name: take_string(&mut o, "name").unwrap_or_default(),
            arguments: o.remove("input").unwrap_or(Value::Null),
        },
        "tool_result" | "mcp_tool_result" => ContentBlock::ToolResult {
            call_id: take_string(&mut o, "tool_use_id").unwrap_or_default(),
            tool_name: None,
            is_error: o.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            content: blocks_owned(o.remove("content").unwrap_or(Value::Null)),
        },
        t if t.ends_with("_tool_result") => ContentBlock::ToolResult {
            call_id: take_string(&mut o, "tool_use_id").unwrap_or_default(),
            tool_name: None,
            content: vec![ContentBlock::text(json_text(
                o.get("content").unwrap_or(&Value::Null),
            ))],
            is_error: false,
        },
        "document" => ContentBlock::text(document_text(&Value::Object(o))),
        _ => ContentBlock::text(json_text(&Value::Object(o))),
    }
}

fn image(source: &Value) -> ctxd_core::model::Image {
    match str_field(source, "type") {
        Some("base64") => image_from_base64(
            str_field(source, "media_type"),
            str_field(source, "data").unwrap_or_default(),
        ),
        Some("url") => image_from_url(str_field(source, "url").unwrap_or_default()),
        _ => ctxd_core::model::Image::default(),
    }
}

fn document_text(b: &Value) -> String {
    let source = b.get("source").unwrap_or(&Value::Null);
    match str_field(source, "type") {
        Some("text") => string_field(source, "data").unwrap_or_default(),
        _ => json_text(source),
    }
}

/// One message `{role, content}`, moving its content.
pub fn message_owned(mut m: Value) -> Message {
    let role = match str_field(&m, "role") {
        Some("assistant") => Role::Assistant,
        Some("system") => Role::System,
        _ => Role::User,
    };
    let content = m
        .as_object_mut()
        .and_then(|o| o.remove("content"))
        .unwrap_or(Value::Null);
    Message::new(role, blocks_owned(content))
}

/// One message `{role, content}`.
pub fn message(m: &Value) -> Message {
    let role = match str_field(m, "role") {
        Some("assistant") => Role::Assistant,
        Some("system") => Role::System,
        _ => Role::User,
    };
    Message::new(role, blocks(m.get("content").unwrap_or(&Value::Null)))
}

/// The `system` field: a string or text blocks, joined as the model reads them.
pub fn system(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => Some(
            items
                .iter()
                .filter_map(|b| str_field(b, "text"))
                .collect::<Vec<_>>()
                .join("\n\n"),
        ),
        _ => None,
    }
}

/// Tool definitions; server tools (web search, code execution, ...) keep their whole definition.
pub fn tools(v: &Value) -> Vec<ToolDef> {
    let Some(items) = v.as_array() else {
        return Vec::new();
    };
    items
        .iter()
        .map(|t| match t.get("input_schema") {
            Some(schema) => ToolDef {
                name: string_field(t, "name").unwrap_or_default(),
                description: string_field(t, "description").unwrap_or_default(),
                schema: schema.clone(),
            },
            None => ToolDef {
                name: string_field(t, "name")
                    .or_else(|| string_field(t, "type"))
                    .unwrap_or_default(),
                description: String::new(),
                schema: t.clone(),
            },
        })
        .collect()
}

/// `usage` of a response (or of a `message_start`/`message_delta` event).
pub fn usage(u: &Value) -> Usage {
    Usage {
        input: u64_field(u, "input_tokens").unwrap_or(0),
        output: u64_field(u, "output_tokens").unwrap_or(0),
        cache_read: u64_field(u, "cache_read_input_tokens").unwrap_or(0),
        cache_write: u64_field(u, "cache_creation_input_tokens").unwrap_or(0),
    }
}

/// A whole request body.
pub fn request(body: &Value) -> Request {
    Request {
        model: string_field(body, "model"),
        system: body.get("system").and_then(system),
        tools: body.get("tools").map(tools).unwrap_or_default(),
        messages: body
            .get("messages")
            .and_then(Value::as_array)
            .map(|ms| ms.iter().map(message).collect())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_every_block_type() {
        let content = json!([
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "xyz"},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
            {"type": "tool_result", "tool_use_id": "t1", "content": "a\nb", "is_error": true},
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
            {"type": "mystery", "x": 1}
        ]);
        let b = blocks(&content);
        assert_eq!(b.len(), 7);
        assert_eq!(b[0], ContentBlock::text("hi"));
        assert!(matches!(&b[1], ContentBlock::Thinking { signature: Some(s), .. } if s == "sig"));
        assert!(matches!(
            &b[2],
            ContentBlock::Thinking { redacted: true, .. }
        ));
        assert!(matches!(&b[3], ContentBlock::ToolCall { name, .. } if name == "Bash"));
        assert!(
            matches!(&b[4], ContentBlock::ToolResult { is_error: true, content, .. } if content.len() == 1)
        );
        assert!(matches!(&b[5], ContentBlock::Image(i) if i.url.is_some()));
        assert!(matches!(&b[6], ContentBlock::Text { text } if text.contains("mystery")));
    }

    #[test]
    fn usage_keeps_cache_apart() {
        let u = usage(&json!({"input_tokens": 3, "output_tokens": 5,
            "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}));
        assert_eq!(u.prompt_tokens(), 123);
    }
}
