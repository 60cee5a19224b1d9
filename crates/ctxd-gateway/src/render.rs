//! Messages of the session model written back in a wire API's shape: what the gateway sends for
//! the elements it adds or changes (a window's boot, budget reminders, summaries, edited tool
//! results). Elements it does not change are never rendered: they go as the client's bytes.

use ctxd_core::model::{ContentBlock, Image, Message, Role};
use ctxd_formats::wire::gemini;
use ctxd_formats::wire::openai_chat::text_of;
use serde_json::{json, Value};

use crate::api::Api;

/// `message` as elements of `api`'s conversation array (Responses may need several items).
pub fn elements(api: Api, message: &Message) -> Vec<Value> {
    match api {
        Api::Anthropic => vec![anthropic(message)],
        Api::Chat => chat(message),
        Api::Responses => responses(message),
        Api::Gemini => vec![gemini(message)],
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Assistant => "assistant",
        Role::System => "system",
        Role::Developer => "developer",
        Role::Tool => "tool",
        Role::User => "user",
    }
}

fn anthropic(m: &Message) -> Value {
    let role = match m.role {
        Role::Assistant => "assistant",
        Role::System => "system",
        _ => "user",
    };
    let content: Vec<Value> = m.content.iter().map(anthropic_block).collect();
    json!({"role": role, "content": content})
}

fn anthropic_image(image: &Image) -> Value {
    match (&image.data, &image.url) {
        (Some(data), _) => json!({"type": "image", "source": {
            "type": "base64",
            "media_type": image.media_type.as_deref().unwrap_or("image/png"),
            "data": data,
        }}),
        (None, Some(url)) => json!({"type": "image", "source": {"type": "url", "url": url}}),
        (None, None) => json!({"type": "text", "text": "[image]"}),
    }
}

fn anthropic_block(b: &ContentBlock) -> Value {
    match b {
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::Thinking {
            redacted: true,
            signature,
            ..
        } => json!({"type": "redacted_thinking", "data": signature.as_deref().unwrap_or("")}),
        ContentBlock::Thinking {
            thinking,
            signature,
            ..
        } => match signature {
            Some(sig) => json!({"type": "thinking", "thinking": thinking, "signature": sig}),
            // Unsigned thinking cannot go back to Anthropic as thinking.
            None => json!({"type": "text", "text": thinking}),
        },
        ContentBlock::Image(image) => anthropic_image(image),
        ContentBlock::ToolCall {
            id,
            name,
            arguments,
        } => json!({"type": "tool_use", "id": id, "name": name, "input": arguments}),
        ContentBlock::ToolResult {
            call_id,
            content,
            is_error,
            ..
        } => {
            let inner: Vec<Value> = content.iter().map(anthropic_block).collect();
            let mut v = json!({"type": "tool_result", "tool_use_id": call_id, "content": inner});
            if *is_error {
                v["is_error"] = Value::Bool(true);
            }
            v
        }
    }
}

fn arguments_string(arguments: &Value) -> String {
    match arguments {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn chat(m: &Message) -> Vec<Value> {
    let mut out = Vec::new();
    // Tool results are messages of their own in Chat.
    for b in &m.content {
        if let ContentBlock::ToolResult {
            call_id, content, ..
        } = b
        {
            out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text_of(content)}));
        }
    }
    let calls: Vec<Value> = m
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => Some(json!({"id": id, "type": "function",
                "function": {"name": name, "arguments": arguments_string(arguments)}})),
            _ => None,
        })
        .collect();
    let text: Vec<&ContentBlock> = m
        .content
        .iter()
        .filter(|b| matches!(b, ContentBlock::Text { .. } | ContentBlock::Image(_)))
        .collect();
    if !out.is_empty() && text.is_empty() && calls.is_empty() {
        return out;
    }
    let has_image = text.iter().any(|b| matches!(b, ContentBlock::Image(_)));
    let content = if has_image {
        Value::Array(
            text.iter()
                .map(|b| match b {
                    ContentBlock::Image(Image {
                        data: Some(data),
                        media_type,
                        ..
                    }) => json!({"type": "image_url", "image_url": {"url": format!(
                        "data:{};base64,{data}", media_type.as_deref().unwrap_or("image/png"))}}),
                    ContentBlock::Image(Image { url: Some(url), .. }) => {
                        json!({"type": "image_url", "image_url": {"url": url}})
                    }
                    ContentBlock::Text { text } => json!({"type": "text", "text": text}),
                    _ => json!({"type": "text", "text": "[image]"}),
                })
                .collect(),
        )
    } else {
        let joined: Vec<&str> = text
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if joined.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            Value::String(joined.join("\n"))
        }
    };
    let role = match m.role {
        Role::Tool => "user",
        r => role_name(r),
    };
    let mut v = json!({"role": role, "content": content});
    if !calls.is_empty() {
        v["tool_calls"] = Value::Array(calls);
    }
    out.push(v);
    out
}

fn responses(m: &Message) -> Vec<Value> {
    let mut out = Vec::new();
    let mut parts: Vec<Value> = Vec::new();
    let role = match m.role {
        Role::Tool => "user",
        r => role_name(r),
    };
    let text_type = if m.role == Role::Assistant {
        "output_text"
    } else {
        "input_text"
    };
    let flush = |parts: &mut Vec<Value>, out: &mut Vec<Value>| {
        if !parts.is_empty() {
            out.push(json!({"type": "message", "role": role, "content": std::mem::take(parts)}));
        }
    };
    for b in &m.content {
        match b {
            ContentBlock::Text { text } => parts.push(json!({"type": text_type, "text": text})),
            ContentBlock::Image(image) => {
                let url = match (&image.data, &image.url) {
                    (Some(data), _) => format!(
                        "data:{};base64,{data}",
                        image.media_type.as_deref().unwrap_or("image/png")
                    ),
                    (None, Some(url)) => url.clone(),
                    (None, None) => continue,
                };
                parts.push(json!({"type": "input_image", "image_url": url}));
            }
            ContentBlock::Thinking {
                thinking,
                signature,
                ..
            } => {
                flush(&mut parts, &mut out);
                let mut item = json!({"type": "reasoning", "summary": []});
                if !thinking.is_empty() {
                    item["summary"] = json!([{"type": "summary_text", "text": thinking}]);
                }
                if let Some(sig) = signature {
                    item["encrypted_content"] = Value::String(sig.clone());
                }
                out.push(item);
            }
            // A freeform tool's call (Codex's `apply_patch`) has its input as a string where a
            // function call's arguments are a JSON object; write facts may edit either.
            ContentBlock::ToolCall {
                id,
                name,
                arguments: Value::String(input),
            } => {
                flush(&mut parts, &mut out);
                out.push(
                    json!({"type": "custom_tool_call", "call_id": id, "name": name,
                    "input": input}),
                );
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => {
                flush(&mut parts, &mut out);
                out.push(json!({"type": "function_call", "call_id": id, "name": name,
                    "arguments": arguments_string(arguments)}));
            }
            ContentBlock::ToolResult {
                call_id, content, ..
            } => {
                flush(&mut parts, &mut out);
                out.push(json!({"type": "function_call_output", "call_id": call_id,
                    "output": text_of(content)}));
            }
        }
    }
    flush(&mut parts, &mut out);
    out
}

/// A Gemini `Content`. A hidden thinking block that only carries a signature puts it back on
/// the part after it, where the provider had it; ids ctxd derived are left out, as the parts
/// came without them.
fn gemini(m: &Message) -> Value {
    let role = if m.role == Role::Assistant {
        "model"
    } else {
        "user"
    };
    let mut parts: Vec<Value> = Vec::new();
    let mut signature: Option<&str> = None;
    for b in &m.content {
        let mut part = match b {
            ContentBlock::Thinking {
                thinking,
                signature: sig,
                redacted: true,
            } if thinking.is_empty() => {
                signature = sig.as_deref().or(signature);
                continue;
            }
            ContentBlock::Thinking {
                thinking,
                signature: sig,
                ..
            } => {
                let mut p = json!({"text": thinking, "thought": true});
                if let Some(sig) = sig {
                    p["thoughtSignature"] = Value::from(sig.as_str());
                }
                p
            }
            ContentBlock::Text { text } => json!({"text": text}),
            ContentBlock::Image(image) => gemini_image(image),
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => {
                let mut call = json!({"name": name, "args": arguments});
                if !gemini::is_derived_id(id) {
                    call["id"] = Value::from(id.as_str());
                }
                json!({"functionCall": call})
            }
            ContentBlock::ToolResult {
                call_id,
                tool_name,
                content,
                is_error,
            } => {
                let name = tool_name
                    .clone()
                    .unwrap_or_else(|| gemini::name_of_id(call_id).to_owned());
                let key = if *is_error { "error" } else { "output" };
                let mut response = json!({"name": name, "response": {key: text_of(content)}});
                if !gemini::is_derived_id(call_id) {
                    response["id"] = Value::from(call_id.as_str());
                }
                json!({"functionResponse": response})
            }
        };
        if let Some(sig) = signature.take() {
            part["thoughtSignature"] = Value::from(sig);
        }
        parts.push(part);
    }
    if let Some(sig) = signature {
        parts.push(json!({"text": "", "thoughtSignature": sig}));
    }
    json!({"role": role, "parts": parts})
}

fn gemini_image(image: &Image) -> Value {
    let mime = image.media_type.as_deref().unwrap_or("image/png");
    match (&image.data, &image.url) {
        (Some(data), _) => json!({"inlineData": {"mimeType": mime, "data": data}}),
        (None, Some(url)) => json!({"fileData": {"mimeType": mime, "fileUri": url}}),
        (None, None) => json!({"text": "[image]"}),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_engine::turn::hash;

    /// What the gateway renders must read back, through the request parsers, as the message
    /// it rendered: otherwise the next request would not match it.
    #[test]
    fn rendered_elements_parse_back_to_the_same_message() {
        let messages = [
            Message::text(Role::User, "boot text"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text("calling"),
                    ContentBlock::ToolCall {
                        id: "c1".into(),
                        name: "bash".into(),
                        arguments: json!({"cmd": "ls"}),
                    },
                ],
            ),
        ];
        for api in [Api::Anthropic, Api::Chat] {
            for m in &messages {
                let els = elements(api, m);
                assert_eq!(els.len(), 1, "{api:?}");
                let back = api.parse_element(&els[0]);
                assert_eq!(hash::message(&back), hash::message(m), "{api:?} {els:?}");
            }
        }
        // Gemini's ids are ctxd's own, derived from the call: a message read from Gemini's
        // shape (signature and all) reads back the same once written.
        let gemini = Api::Gemini.parse_element(&json!({"role": "model", "parts": [
            {"text": "calling"},
            {"functionCall": {"name": "bash", "args": {"cmd": "ls"}}, "thoughtSignature": "c2ln"}]}));
        let els = elements(Api::Gemini, &gemini);
        assert_eq!(els[0]["parts"][1]["thoughtSignature"], "c2ln");
        assert!(els[0]["parts"][1]["functionCall"].get("id").is_none());
        assert_eq!(Api::Gemini.parse_element(&els[0]), gemini);
        let result = Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                call_id: "c1".into(),
                tool_name: None,
                content: vec![ContentBlock::text("[distilled]")],
                is_error: false,
            }],
        );
        let a = elements(Api::Anthropic, &result);
        assert_eq!(a[0]["content"][0]["tool_use_id"], "c1");
        let c = elements(Api::Chat, &result);
        assert_eq!(c[0]["role"], "tool");
        assert_eq!(c[0]["content"], "[distilled]");
        let r = elements(Api::Responses, &result);
        assert_eq!(r[0]["type"], "function_call_output");
        let g = elements(Api::Gemini, &result);
        assert_eq!(g[0]["role"], "user");
        assert_eq!(
            g[0]["parts"][0]["functionResponse"]["response"]["output"],
            "[distilled]"
        );
        let text = elements(Api::Responses, &messages[0]);
        assert_eq!(
            hash::message(&Api::Responses.parse_element(&text[0])),
            hash::message(&messages[0])
        );
    }
}
