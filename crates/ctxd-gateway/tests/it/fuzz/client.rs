//! The client the harness plays, per API: its system prompt and tools, the elements it
//! appends (prompts, images, tool results), the requests it sends, and how it reads an
//! answer or an error. Also the readers the invariants use on upstream bodies.

use ctxd_formats::wire::stream::{
    assemble_json, Assembled, Assembler, JsonArraySplitter, SseEvent, SseParser, StreamError,
};
use serde_json::{json, Value};

use super::gen::{Agent, Api, Env, Window};

/// The client's system prompt (Anthropic `system`, Chat's leading system message, Responses
/// `instructions`): every upstream request must carry it.
pub const SYSTEM: &str = "You are a coding agent. FUZZ-SYSTEM-PROMPT-7f3a.";

/// The client's tools.
pub const CLIENT_TOOLS: [&str; 3] = ["Bash", "Write", "Read"];

/// The start of Claude Code's summary message after its own compaction.
pub const COMPACTION: &str = "This session is being continued from a previous conversation \
    that ran out of context. The conversation is summarized below:";

/// A 1x1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

pub fn model(api: Api, env: &Env) -> &'static str {
    match (api, env.window) {
        (Api::Anthropic, _) => "claude-sonnet-4-5",
        // 1,048,576 in ctxd's table and in the mock's.
        (Api::Gemini, _) => "gemini-2.5-flash",
        _ => "o3",
    }
}

pub fn headers(api: Api, env: &Env, session: &str) -> Vec<(String, String)> {
    let mut h = vec![("x-ctxd-session".to_owned(), session.to_owned())];
    match api {
        Api::Anthropic => h.push(("x-api-key".into(), "sk-fuzz".into())),
        // Gemini CLI, Pi and the SDKs all send the key in this header (never `?key=`).
        Api::Gemini => h.push(("x-goog-api-key".into(), "AIza-fuzz".into())),
        _ => h.push(("authorization".into(), "Bearer sk-fuzz".into())),
    }
    let model = model(api, env);
    match env.agent {
        Agent::GeminiCli => {
            h.push((
                "user-agent".into(),
                format!("GeminiCLI-tui/0.61.0/{model} (linux; x64; terminal)"),
            ));
            h.push((
                "x-goog-api-client".into(),
                "google-genai-sdk/1.30.0 gl-node/v20.20.2".into(),
            ));
        }
        Agent::Pi => {
            for k in ["user-agent", "x-goog-api-client"] {
                h.push((k.into(), "google-genai-sdk/1.52.0 gl-node/v20.20.2".into()));
            }
        }
        Agent::Sdk if api == Api::Gemini => {
            for k in ["user-agent", "x-goog-api-client"] {
                h.push((k.into(), "google-genai-sdk/3.6.1 gl-python/3.11.7".into()));
            }
        }
        Agent::ClaudeCode => h.push((
            "user-agent".into(),
            "claude-cli/2.1.0 (external, cli)".into(),
        )),
        Agent::Codex => h.push(("user-agent".into(), "codex_cli_rs/0.50.0".into())),
        Agent::Sdk => h.push(("user-agent".into(), "fuzz-sdk/1.0".into())),
    }
    if matches!(api, Api::Anthropic) {
        h.push(("anthropic-version".into(), "2023-06-01".into()));
        if env.window == Window::OneM {
            h.push(("anthropic-beta".into(), "context-1m-2025-08-07".into()));
        }
    }
    h
}

/// The conversation a new session starts with (Chat's system message is its first element).
pub fn start(api: Api) -> Vec<Value> {
    match api {
        Api::Chat => vec![json!({"role": "system", "content": SYSTEM})],
        _ => Vec::new(),
    }
}

fn tool_defs(api: Api) -> Vec<Value> {
    let schemas = [
        (
            "Bash",
            "Run a shell command",
            json!({"type": "object", "properties": {"command": {"type": "string"}},
                "required": ["command"]}),
        ),
        (
            "Write",
            "Write a file",
            json!({"type": "object", "properties": {"file_path": {"type": "string"},
                "content": {"type": "string"}}, "required": ["file_path", "content"]}),
        ),
        (
            "Read",
            "Read a file",
            json!({"type": "object", "properties": {"file_path": {"type": "string"}},
                "required": ["file_path"]}),
        ),
    ];
    schemas
        .into_iter()
        .map(|(name, description, schema)| match api {
            Api::Anthropic => {
                json!({"name": name, "description": description, "input_schema": schema})
            }
            Api::Chat => json!({"type": "function", "function": {"name": name,
                "description": description, "parameters": schema}}),
            Api::Responses => json!({"type": "function", "name": name,
                "description": description, "parameters": schema}),
            Api::Gemini => json!({"name": name, "description": description,
                "parametersJsonSchema": schema}),
        })
        .collect()
}

pub fn body(api: Api, env: &Env, conversation: &[Value], stream: bool) -> Value {
    let model = model(api, env);
    let mut b = match api {
        Api::Anthropic => json!({"model": model, "max_tokens": 2048, "system": SYSTEM,
            "stream": stream, "tools": tool_defs(api), "messages": conversation}),
        Api::Chat => json!({"model": model, "stream": stream, "tools": tool_defs(api),
            "messages": conversation}),
        Api::Responses => json!({"model": model, "stream": stream, "instructions": SYSTEM,
            "tools": tool_defs(api), "input": conversation}),
        // The model and the streaming are in the URL. Gemini CLI's and Pi's keys, in their order.
        Api::Gemini => {
            let mut b = json!({"contents": conversation,
                "systemInstruction": {"role": "user", "parts": [{"text": SYSTEM}]},
                "tools": [{"functionDeclarations": tool_defs(api)}]});
            b["generationConfig"] = match env.agent {
                Agent::GeminiCli => json!({"temperature": 1, "topP": 0.95, "topK": 64}),
                Agent::Pi => json!({"maxOutputTokens": 32000}),
                _ => json!({"temperature": 0.2, "maxOutputTokens": 2048}),
            };
            b
        }
    };
    if stream && matches!(api, Api::Chat) {
        b["stream_options"] = json!({"include_usage": true});
    }
    if env.thinking {
        match api {
            Api::Anthropic => b["thinking"] = json!({"type": "enabled", "budget_tokens": 1024}),
            Api::Responses => {
                b["reasoning"] = json!({"effort": "medium"});
                b["include"] = json!(["reasoning.encrypted_content"]);
                b["store"] = json!(false);
            }
            Api::Gemini => {
                b["generationConfig"]["thinkingConfig"] =
                    json!({"includeThoughts": true, "thinkingBudget": 8192});
            }
            Api::Chat => {}
        }
    }
    b
}

/// A prompt carrying `text`, with a small PNG when `image`.
pub fn prompt(api: Api, text: &str, image: bool) -> Value {
    let data_url = format!("data:image/png;base64,{PNG}");
    match (api, image) {
        (Api::Responses, false) => json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]}),
        (Api::Responses, true) => json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text},
                {"type": "input_image", "image_url": data_url}]}),
        (Api::Gemini, false) => json!({"role": "user", "parts": [{"text": text}]}),
        (Api::Gemini, true) => json!({"role": "user", "parts": [{"text": text},
            {"inlineData": {"mimeType": "image/png", "data": PNG}}]}),
        (_, false) => json!({"role": "user", "content": text}),
        (Api::Anthropic, true) => json!({"role": "user", "content": [
            {"type": "text", "text": text},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}),
        (Api::Chat, true) => json!({"role": "user", "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": data_url}}]}),
    }
}

/// The client's results for `calls` (id, name), each `output`. Gemini: one user content of
/// `functionResponse` parts, the result under `response.output`; with the call's `id` when
/// the client gave the call one (Gemini CLI).
pub fn results(
    api: Api,
    env: &Env,
    calls: &[(String, String)],
    output: &dyn Fn(usize) -> String,
) -> Vec<Value> {
    let calls_with_ids = calls;
    let calls: Vec<String> = calls_with_ids.iter().map(|(id, _)| id.clone()).collect();
    match api {
        Api::Gemini => vec![
            json!({"role": "user", "parts": calls_with_ids.iter().enumerate()
            .map(|(i, (id, name))| {
                let mut r = json!({"name": name, "response": {"output": output(i)}});
                if env.agent.gemini_cli() {
                    r["id"] = json!(id);
                }
                json!({"functionResponse": r})
            }).collect::<Vec<_>>()}),
        ],
        Api::Anthropic => vec![json!({"role": "user", "content": calls.iter().enumerate()
            .map(|(i, id)| json!({"type": "tool_result", "tool_use_id": id,
                "content": output(i)})).collect::<Vec<_>>()})],
        Api::Chat => calls
            .iter()
            .enumerate()
            .map(|(i, id)| json!({"role": "tool", "tool_call_id": id, "content": output(i)}))
            .collect(),
        Api::Responses => calls
            .iter()
            .enumerate()
            .map(|(i, id)| {
                json!({"type": "function_call_output", "call_id": id,
                "output": output(i)})
            })
            .collect(),
    }
}

/// One tool call of a conversation element: (id, name).
pub fn calls_of(api: Api, el: &Value) -> Vec<(String, String)> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match api {
        Api::Anthropic => el["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| (s(&b["id"]), s(&b["name"])))
            .collect(),
        Api::Chat => el["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (s(&c["id"]), s(&c["function"]["name"])))
            .collect(),
        Api::Responses if el["type"] == "function_call" => {
            vec![(s(&el["call_id"]), s(&el["name"]))]
        }
        Api::Responses => Vec::new(),
        // The call's `id` on the wire (Gemini CLI's own), else the one ctxd's parser derives
        // (its name and arguments).
        Api::Gemini if el["role"] == "model" => {
            let wire_ids = el["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("functionCall"))
                .map(|c| c["id"].as_str().map(str::to_owned));
            ctxd_formats::wire::gemini::call_ids(el)
                .into_iter()
                .zip(wire_ids)
                .map(|((name, derived), wire)| (wire.unwrap_or(derived), name))
                .collect()
        }
        Api::Gemini => Vec::new(),
    }
}

/// The call ids a conversation element answers.
pub fn results_of(api: Api, el: &Value) -> Vec<String> {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match api {
        Api::Anthropic => el["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| s(&b["tool_use_id"]))
            .collect(),
        Api::Chat if el["role"] == "tool" => vec![s(&el["tool_call_id"])],
        Api::Responses if el["type"] == "function_call_output" => vec![s(&el["call_id"])],
        // Alone, a response names its call by its `id` or its name: [`results_at`] pairs it
        // with the call it answers.
        Api::Gemini => parts(el)
            .filter_map(|p| p.get("functionResponse"))
            .map(|r| {
                r["id"]
                    .as_str()
                    .filter(|id| !id.is_empty())
                    .map_or_else(|| s(&r["name"]), str::to_owned)
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The call ids element `i` of `up` answers: Gemini's responses paired, by name and order,
/// with the calls of the content before them (as ctxd's parser and Google pair them).
pub fn results_at(api: Api, up: &[Value], i: usize) -> Vec<String> {
    if api != Api::Gemini {
        return results_of(api, &up[i]);
    }
    let previous = i.checked_sub(1).map(|p| &up[p]);
    ctxd_formats::wire::gemini::content_after(previous, &up[i])
        .content
        .iter()
        .filter_map(|b| match b {
            ctxd_core::model::ContentBlock::ToolResult { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect()
}

/// The parts of a Gemini content.
fn parts(el: &Value) -> impl Iterator<Item = &Value> {
    el["parts"].as_array().into_iter().flatten()
}

/// The model's content as the client keeps it for its next request: Gemini CLI drops the
/// thought parts and gives each call an id of its own (`<tool>_<epoch-ms>_<n>`); the others
/// keep it as it came.
pub fn echo(api: Api, env: &Env, el: Value, clock: u64) -> Value {
    if api != Api::Gemini || !env.agent.gemini_cli() {
        return el;
    }
    let mut el = el;
    let kept: Vec<Value> = parts(&el)
        .filter(|p| p["thought"] != true)
        .cloned()
        .enumerate()
        .map(|(n, mut p)| {
            if let Some(call) = p.get_mut("functionCall") {
                let name = call["name"].as_str().unwrap_or_default().to_owned();
                call["id"] = json!(format!("{name}_{clock}_{n}"));
            }
            p
        })
        .collect();
    if !kept.is_empty() {
        el["parts"] = Value::Array(kept);
    }
    el
}

/// Appends the client's next user element. Gemini's roles alternate: a prompt after a user
/// content (the request before failed) joins it, as the clients keep one user turn.
pub fn push_user(api: Api, conversation: &mut Vec<Value>, el: Value) {
    if api == Api::Gemini {
        if let Some(last) = conversation.last_mut().filter(|l| l["role"] == "user") {
            let more: Vec<Value> = parts(&el).cloned().collect();
            if let Some(p) = last["parts"].as_array_mut() {
                p.extend(more);
                return;
            }
        }
    }
    conversation.push(el);
}

/// Whether an element is the model's (an assistant message, a Responses output item).
pub fn is_assistant(api: Api, el: &Value) -> bool {
    match api {
        Api::Responses => {
            el["role"] == "assistant"
                || matches!(
                    el["type"].as_str(),
                    Some("function_call" | "reasoning" | "custom_tool_call")
                )
        }
        Api::Gemini => el["role"] == "model",
        _ => el["role"] == "assistant",
    }
}

/// The conversation array of a request body.
pub fn conversation(api: Api, body: &Value) -> Vec<Value> {
    let key = match api {
        Api::Responses => "input",
        Api::Gemini => "contents",
        _ => "messages",
    };
    body[key].as_array().cloned().unwrap_or_default()
}

/// All text a value holds (strings anywhere inside it), joined.
pub fn all_text(v: &Value) -> String {
    let mut out = String::new();
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

/// What the client made of a response.
pub enum Outcome {
    Answer {
        assembled: Assembled,
        elements: Vec<Value>,
    },
    /// An HTTP error status.
    HttpError {
        status: u16,
        retry_after: Option<String>,
        body: String,
    },
    /// A 200 stream or body that reports the provider's error (or was cut).
    StreamError { error: StreamError, raw: String },
}

pub fn read(
    api: Api,
    stream: bool,
    status: u16,
    headers: &reqwest::header::HeaderMap,
    bytes: &[u8],
) -> Outcome {
    let raw = || String::from_utf8_lossy(&bytes[..bytes.len().min(1500)]).into_owned();
    if status != 200 {
        return Outcome::HttpError {
            status,
            retry_after: headers
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: String::from_utf8_lossy(bytes).into_owned(),
        };
    }
    let is_sse = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"));
    // Gemini's stream without `alt=sse`: one JSON array, each element a chunk.
    let json_array = stream && api == Api::Gemini && bytes.trim_ascii_start().starts_with(b"[");
    let read = if json_array {
        let mut asm = Assembler::new(api.wire());
        for element in JsonArraySplitter::new().feed(bytes) {
            asm.push(&SseEvent {
                event: None,
                data: String::from_utf8_lossy(&element).into_owned(),
            });
        }
        asm.finish()
    } else if stream && is_sse {
        let mut parser = SseParser::new();
        let mut asm = Assembler::new(api.wire());
        for ev in parser.feed(bytes) {
            asm.push(&ev);
        }
        if let Some(ev) = parser.finish() {
            asm.push(&ev);
        }
        asm.finish()
    } else {
        assemble_json(api.wire(), bytes)
    };
    match read {
        Ok(assembled) => {
            let elements = assembled
                .elements
                .iter()
                .map(|e| serde_json::from_slice(&e.wire).unwrap_or(Value::Null))
                .collect();
            Outcome::Answer {
                assembled,
                elements,
            }
        }
        Err(error) => Outcome::StreamError { error, raw: raw() },
    }
}

/// Whether an HTTP error body is in the API's own error shape.
pub fn error_shape_ok(api: Api, body: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return false;
    };
    match api {
        Api::Anthropic => {
            v["type"] == "error"
                && v["error"]["type"].is_string()
                && v["error"]["message"].is_string()
        }
        // Google's: `{"error": {"code": 429, "message", "status": "RESOURCE_EXHAUSTED"}}`.
        Api::Gemini => {
            v["error"]["code"].is_u64()
                && v["error"]["message"].is_string()
                && v["error"]["status"].is_string()
        }
        _ => v["error"]["message"].is_string() && v["error"]["type"].is_string(),
    }
}
