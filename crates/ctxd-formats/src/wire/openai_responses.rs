//! OpenAI Responses: input items, instructions, tools, usage. Codex rollouts store the same items.

use serde_json::Value;

use ctxd_core::model::{ContentBlock, Message, Role, ToolDef, Usage};

use super::{json_text, openai_chat, Request};
use crate::util::{image_from_url, parse_arguments, str_field, string_field, u64_field};

/// Content parts of a message item.
pub fn parts(content: &Value) -> Vec<ContentBlock> {
    match content {
        Value::Array(items) => items
            .iter()
            .map(|p| match str_field(p, "type") {
                Some("input_text" | "output_text" | "text" | "summary_text" | "reasoning_text") => {
                    ContentBlock::text(str_field(p, "text").unwrap_or_default())
                }
                Some("input_image") => ContentBlock::Image(image_from_url(
                    str_field(p, "image_url").unwrap_or_default(),
                )),
                Some("refusal") => ContentBlock::text(str_field(p, "refusal").unwrap_or_default()),
                _ => ContentBlock::text(json_text(p)),
            })
            .collect(),
        other => openai_chat::parts(other),
    }
}

/// One input or output item as a message. Items that are not messages (calls, outputs,
/// reasoning) become a message of the role that produced them.
pub fn item(it: &Value) -> Message {
    let ty = str_field(it, "type").unwrap_or("message");
    match ty {
        "message" => {
            let role = match str_field(it, "role") {
                Some("assistant") => Role::Assistant,
                Some("system") => Role::System,
                Some("developer") => Role::Developer,
                _ => Role::User,
            };
            Message::new(role, parts(it.get("content").unwrap_or(&Value::Null)))
        }
        "reasoning" => {
            let summary: Vec<&str> = it
                .get("summary")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| str_field(s, "text"))
                .collect();
            let content: Vec<&str> = it
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| str_field(s, "text"))
                .collect();
            let text = if content.is_empty() { summary } else { content };
            let encrypted = string_field(it, "encrypted_content");
            Message::new(
                Role::Assistant,
                vec![ContentBlock::Thinking {
                    thinking: text.join("\n"),
                    redacted: encrypted.is_some(),
                    signature: encrypted,
                }],
            )
        }
        "function_call" => Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: call_id(it),
                name: string_field(it, "name").unwrap_or_default(),
                arguments: parse_arguments(it.get("arguments").unwrap_or(&Value::Null)),
            }],
        ),
        "custom_tool_call" => Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: call_id(it),
                name: string_field(it, "name").unwrap_or_default(),
                arguments: it.get("input").cloned().unwrap_or(Value::Null),
            }],
        ),
        "local_shell_call" => Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: call_id(it),
                name: "local_shell".into(),
                arguments: it.get("action").cloned().unwrap_or(Value::Null),
            }],
        ),
        "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
            let output = it.get("output").unwrap_or(&Value::Null);
            let content = match output {
                Value::String(s) => vec![ContentBlock::text(s.clone())],
                Value::Array(_) => parts(output),
                // Legacy Codex: `{content, success}`.
                Value::Object(o) => match o.get("content") {
                    Some(Value::String(s)) => vec![ContentBlock::text(s.clone())],
                    _ => vec![ContentBlock::text(json_text(output))],
                },
                _ => Vec::new(),
            };
            let is_error = output
                .get("success")
                .and_then(Value::as_bool)
                .is_some_and(|ok| !ok);
            Message::new(
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    call_id: call_id(it),
                    tool_name: None,
                    content,
                    is_error,
                }],
            )
        }
        // Hosted tool calls (web search, file search, image generation, ...) carry their own
        // results: kept whole as the assistant's.
        _ => Message::new(Role::Assistant, vec![ContentBlock::text(json_text(it))]),
    }
}

fn call_id(it: &Value) -> String {
    string_field(it, "call_id")
        .or_else(|| string_field(it, "id"))
        .unwrap_or_default()
}

/// Tool definitions: function tools by name; other kinds (`custom`, `web_search`, `namespace`,
/// ...) keep their whole definition as the schema.
pub fn tools(v: &Value) -> Vec<ToolDef> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|t| match str_field(t, "type") {
            Some("function") => ToolDef {
                name: string_field(t, "name").unwrap_or_default(),
                description: string_field(t, "description").unwrap_or_default(),
                schema: t.get("parameters").cloned().unwrap_or(Value::Null),
            },
            other => ToolDef {
                name: string_field(t, "name")
                    .or_else(|| other.map(str::to_owned))
                    .unwrap_or_default(),
                description: string_field(t, "description").unwrap_or_default(),
                schema: t.clone(),
            },
        })
        .collect()
}

/// `usage` of a response; `input_tokens` include the cached ones, which are split out.
pub fn usage(u: &Value) -> Usage {
    let input = u64_field(u, "input_tokens").unwrap_or(0);
    let cached = u
        .get("input_tokens_details")
        .and_then(|d| u64_field(d, "cached_tokens"))
        .or_else(|| u64_field(u, "cached_input_tokens"))
        .unwrap_or(0)
        .min(input);
    Usage {
        input: input - cached,
        output: u64_field(u, "output_tokens").unwrap_or(0),
        cache_read: cached,
        cache_write: 0,
    }
}

/// A whole request body: `instructions` is the system prompt; `input` a string or items.
pub fn request(body: &Value) -> Request {
    let messages = match body.get("input") {
        Some(Value::String(s)) => vec![Message::text(Role::User, s.clone())],
        Some(Value::Array(items)) => items.iter().map(item).collect(),
        _ => Vec::new(),
    };
    Request {
        model: string_field(body, "model"),
        system: string_field(body, "instructions"),
        tools: body.get("tools").map(tools).unwrap_or_default(),
        messages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn items_map_to_messages() {
        let body = json!({"model": "gpt-5", "instructions": "sys", "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}], "encrypted_content": "enc"},
            {"type": "function_call", "call_id": "c", "name": "exec", "arguments": "{\"cmd\":[\"ls\"]}"},
            {"type": "function_call_output", "call_id": "c", "output": "files"},
            {"type": "web_search_call", "id": "w", "status": "completed"}
        ], "tools": [{"type": "function", "name": "exec", "parameters": {}}, {"type": "web_search"}]});
        let r = request(&body);
        assert_eq!(r.system.as_deref(), Some("sys"));
        assert_eq!(r.messages.len(), 6);
        assert_eq!(r.messages[0].role, Role::Developer);
        assert!(
            matches!(&r.messages[2].content[0], ContentBlock::Thinking { signature: Some(s), .. } if s == "enc")
        );
        assert!(
            matches!(&r.messages[4].content[0], ContentBlock::ToolResult { call_id, .. } if call_id == "c")
        );
        assert_eq!(r.tools[1].name, "web_search");
    }

    #[test]
    fn cached_input_is_split_out() {
        let u = usage(&json!({"input_tokens": 50, "output_tokens": 2,
            "input_tokens_details": {"cached_tokens": 30}}));
        assert_eq!((u.input, u.cache_read), (20, 30));
    }
}
