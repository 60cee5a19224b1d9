//! OpenAI Chat Completions: messages, tool calls, tools, usage.

use serde_json::Value;

use ctxd_core::model::{ContentBlock, Message, Role, ToolDef, Usage};

use super::{json_text, Request};
use crate::util::{image_from_url, parse_arguments, str_field, string_field, u64_field};

/// Content parts (a string, or an array of `text` / `image_url` parts).
pub fn parts(content: &Value) -> Vec<ContentBlock> {
    match content {
        Value::String(s) => vec![ContentBlock::text(s.clone())],
        Value::Array(items) => items
            .iter()
            .map(|p| match str_field(p, "type") {
                Some("text" | "input_text" | "output_text") => {
                    ContentBlock::text(str_field(p, "text").unwrap_or_default())
                }
                Some("image_url") => {
                    let url = p
                        .get("image_url")
                        .and_then(|u| u.get("url").or(Some(u)))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    ContentBlock::Image(image_from_url(url))
                }
                Some("refusal") => ContentBlock::text(str_field(p, "refusal").unwrap_or_default()),
                _ => ContentBlock::text(json_text(p)),
            })
            .collect(),
        Value::Null => Vec::new(),
        other => vec![ContentBlock::text(json_text(other))],
    }
}

/// One message. A `tool` message becomes a [`Role::Tool`] message holding one tool result.
pub fn message(m: &Value) -> Message {
    let content = parts(m.get("content").unwrap_or(&Value::Null));
    match str_field(m, "role") {
        Some("tool") | Some("function") => Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: string_field(m, "tool_call_id").unwrap_or_default(),
                tool_name: string_field(m, "name"),
                content,
                is_error: false,
            }],
        ),
        Some("assistant") => {
            let mut blocks = Vec::new();
            if let Some(r) = str_field(m, "reasoning_content").filter(|r| !r.is_empty()) {
                blocks.push(ContentBlock::Thinking {
                    thinking: r.to_owned(),
                    signature: None,
                    redacted: false,
                });
            }
            blocks.extend(content);
            for call in m
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let function = call.get("function").unwrap_or(&Value::Null);
                blocks.push(ContentBlock::ToolCall {
                    id: string_field(call, "id").unwrap_or_default(),
                    name: string_field(function, "name").unwrap_or_default(),
                    arguments: parse_arguments(function.get("arguments").unwrap_or(&Value::Null)),
                });
            }
            Message::new(Role::Assistant, blocks)
        }
        Some("system") => Message::new(Role::System, content),
        Some("developer") => Message::new(Role::Developer, content),
        _ => Message::new(Role::User, content),
    }
}

/// Tool definitions: `{type: "function", function: {name, description, parameters}}`.
pub fn tools(v: &Value) -> Vec<ToolDef> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|t| match t.get("function") {
            Some(f) => ToolDef {
                name: string_field(f, "name").unwrap_or_default(),
                description: string_field(f, "description").unwrap_or_default(),
                schema: f.get("parameters").cloned().unwrap_or(Value::Null),
            },
            None => ToolDef {
                name: string_field(t, "name")
                    .or_else(|| string_field(t, "type"))
                    .unwrap_or_default(),
                description: string_field(t, "description").unwrap_or_default(),
                schema: t.clone(),
            },
        })
        .collect()
}

/// `usage` of a completion; `prompt_tokens` include the cached ones, which are split out.
pub fn usage(u: &Value) -> Usage {
    let prompt = u64_field(u, "prompt_tokens").unwrap_or(0);
    let cached = u
        .get("prompt_tokens_details")
        .and_then(|d| u64_field(d, "cached_tokens"))
        .unwrap_or(0)
        .min(prompt);
    Usage {
        input: prompt - cached,
        output: u64_field(u, "completion_tokens").unwrap_or(0),
        cache_read: cached,
        cache_write: 0,
    }
}

/// A whole request body. Leading `system`/`developer` messages are the system prompt; later
/// ones stay in place as messages.
pub fn request(body: &Value) -> Request {
    let mut messages: Vec<Message> = body
        .get("messages")
        .and_then(Value::as_array)
        .map(|ms| ms.iter().map(message).collect())
        .unwrap_or_default();
    let leading = messages
        .iter()
        .take_while(|m| matches!(m.role, Role::System | Role::Developer))
        .count();
    let system = (leading > 0).then(|| {
        messages
            .drain(..leading)
            .map(|m| text_of(&m.content))
            .collect::<Vec<_>>()
            .join("\n\n")
    });
    Request {
        model: string_field(body, "model"),
        system,
        tools: body.get("tools").map(tools).unwrap_or_default(),
        messages,
    }
}

/// The text blocks of a message, one a line (other blocks say nothing here).
pub fn text_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_calls_and_results() {
        let body = json!({"model": "gpt-4o", "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "list"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a b"}
        ], "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]});
        let r = request(&body);
        assert_eq!(r.system.as_deref(), Some("be brief"));
        assert_eq!(r.messages.len(), 3);
        assert!(matches!(&r.messages[1].content[0],
            ContentBlock::ToolCall { arguments, .. } if arguments["cmd"] == "ls"));
        assert_eq!(r.messages[2].role, Role::Tool);
        assert_eq!(r.tools[0].name, "bash");
    }

    #[test]
    fn cached_tokens_are_split_out() {
        let u = usage(&json!({"prompt_tokens": 100, "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 60}}));
        assert_eq!((u.input, u.cache_read, u.prompt_tokens()), (40, 60, 100));
    }
}
