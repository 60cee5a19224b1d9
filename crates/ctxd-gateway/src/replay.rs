//! A recorded session as the requests its client would have sent, in one API's wire format: the
//! same inputs for the gateway over HTTP (`crates/ctxd-cli/tests/equivalence.rs`) and for
//! `ctxd eval` in process, so the two can be compared request by request.
//!
//! The split is the eval's: the session's active branch, one request per assistant response
//! (consecutive assistant messages sharing a `response_id` are one response: Claude Code
//! writes a response as one line per content block). The conversation a request carries is the
//! client's own projection of the branch up to that response (the branch copied linearly into a
//! [`Session`] and [`view::project_checked`]: the agent's own compactions honoured), the eval's
//! "everything sent" variant. Each message is rendered by the gateway's own renderer
//! ([`render::elements`]), except that the messages of one response go as one message on the
//! APIs that answer with one (Anthropic, Chat): that is how the client received it and how it
//! echoes it, so the gateway finds its recorded response in the next request.
//!
//! The system prompt and tool definitions are the projection's when the session recorded them.
//! Session files mostly do not record tool definitions: then the tools are made up from the
//! names the branch calls (sorted, a minimal object schema, a description naming the tool;
//! on Responses a tool called with a string is a `custom` tool), so a request offers tools as
//! the real client's did (ctxd adds its own tools only beside a client's).
//!
//! [`measure_body`] counts an upstream body the way both sides of the comparison count it.

use std::collections::BTreeMap;

use ctxd_core::model::{ContentBlock, Entry, EntryKind, Message, Role, Session, ToolDef};
use ctxd_core::tokens::{blocks_tokens, tool_def_tokens, TokenCounter};
use ctxd_core::tree::active_branch;
use ctxd_core::view;
use serde_json::{json, Value};

use crate::api::Api;
use crate::render;
use crate::request::ParsedRequest;

/// `max_tokens` of an Anthropic request (required there; the other APIs go without).
pub const MAX_TOKENS: u64 = 16_384;

/// One request of the client's, and what answered it.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientTurn {
    /// The JSON request body (non-streaming).
    pub body: Vec<u8>,
    /// The recorded response, one message per element the client sends back in its next
    /// request (Anthropic and Chat: one message; Responses: one per output item), each as the
    /// gateway's parser reads that element, with the recorded response's model, response id
    /// and stop reason (and its usage on the last): what a provider replaying the recording
    /// would answer, and what the gateway records of it.
    pub reply: Vec<Message>,
}

/// The path a client's request of `api` to `model` goes to: Gemini names the model there.
pub fn path(api: Api, model: &str) -> String {
    match api {
        Api::Anthropic => "/v1/messages".into(),
        Api::Chat => "/v1/chat/completions".into(),
        Api::Responses => "/v1/responses".into(),
        Api::Gemini => format!("/v1beta/models/{model}:generateContent"),
    }
}

/// The requests `session`'s client would have sent over `api` to `model`, in order (see the
/// module docs). A response whose conversation would be empty, or whose branch has no
/// projection (a window marker without its boot), has no request; its messages still join the
/// conversation of the next.
pub fn client_turns(api: Api, session: &Session, model: &str) -> Vec<ClientTurn> {
    let branch = active_branch(session);
    let entries: Vec<&Entry> = branch.iter().map(|&p| &session.entries[p]).collect();
    let made_up = made_up_tools(api, &entries);
    let mut linear = Session {
        meta: session.meta.clone(),
        ..Session::default()
    };
    let push = |linear: &mut Session, entry: &Entry| {
        let mut copy = entry.clone();
        copy.parent = linear.entries.last().map(|e| e.id.clone());
        copy.sidechain = false;
        linear.entries.push(copy);
    };
    let mut turns = Vec::new();
    let mut k = 0;
    while k < entries.len() {
        let Some(first) = assistant(entries[k]) else {
            push(&mut linear, entries[k]);
            k += 1;
            continue;
        };
        let mut end = k + 1;
        while entries
            .get(end)
            .and_then(|e| assistant(e))
            .is_some_and(|m| same_response(first, m))
        {
            end += 1;
        }
        let all: Vec<usize> = (0..linear.entries.len()).collect();
        if let Ok(p) = view::project_checked(&linear, &all) {
            let items: Vec<Message> = p.items.iter().map(view::Item::to_message).collect();
            let conversation = conversation(api, p.system.map(|(_, s)| s), &items);
            if !conversation.is_empty() {
                let tools = match p.tools {
                    Some((_, defs)) if !defs.is_empty() => {
                        defs.iter().map(|t| tool_json(api, t)).collect()
                    }
                    _ => made_up.clone(),
                };
                let group: Vec<&Message> = entries[k..end]
                    .iter()
                    .filter_map(|e| assistant(e))
                    .collect();
                turns.push(ClientTurn {
                    body: body(api, model, p.system.map(|(_, s)| s), &tools, &conversation),
                    reply: reply(api, &group),
                });
            }
        }
        for entry in &entries[k..end] {
            push(&mut linear, entry);
        }
        k = end;
    }
    turns
}

fn assistant(e: &Entry) -> Option<&Message> {
    match &e.kind {
        EntryKind::Message(m) if m.role == Role::Assistant => Some(m),
        _ => None,
    }
}

fn same_response(a: &Message, b: &Message) -> bool {
    a.response_id.is_some() && a.response_id == b.response_id
}

/// Whether `api` answers a response as one message (Responses: one item per output).
fn one_message_per_response(api: Api) -> bool {
    matches!(api, Api::Anthropic | Api::Chat | Api::Gemini)
}

/// `m` as a client can send it: without empty text blocks, which the APIs refuse (they
/// weigh nothing and hash as nothing); `None` when nothing is left (Pi records an aborted
/// response with no content, and sends none).
fn sendable(m: &Message) -> Option<Message> {
    fn blocks(content: &[ContentBlock]) -> Vec<ContentBlock> {
        content
            .iter()
            .filter(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty()))
            .map(|b| match b {
                ContentBlock::ToolResult {
                    call_id,
                    tool_name,
                    content,
                    is_error,
                } => ContentBlock::ToolResult {
                    call_id: call_id.clone(),
                    tool_name: tool_name.clone(),
                    content: blocks(content),
                    is_error: *is_error,
                },
                other => other.clone(),
            })
            .collect()
    }
    let content = blocks(&m.content);
    (!content.is_empty()).then(|| Message {
        content,
        ..m.clone()
    })
}

/// `messages` as the client sends them ([`sendable`]), each run of one response's messages
/// as one message on the APIs that answer with one.
fn merged(api: Api, messages: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    for m in messages.iter().filter_map(sendable) {
        match out.last_mut() {
            Some(prev)
                if one_message_per_response(api)
                    && prev.role == Role::Assistant
                    && m.role == Role::Assistant
                    && same_response(prev, &m) =>
            {
                prev.content.extend(m.content);
                if m.usage.is_some() {
                    prev.usage = m.usage;
                }
                if m.stop_reason.is_some() {
                    prev.stop_reason.clone_from(&m.stop_reason);
                }
            }
            _ => out.push(m),
        }
    }
    out
}

/// The conversation array: a Chat system message for the system prompt, then the messages.
fn conversation(api: Api, system: Option<&str>, items: &[Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(items.len() + 1);
    if let (Api::Chat, Some(system)) = (api, system) {
        out.push(json!({"role": "system", "content": system}));
    }
    for m in merged(api, items) {
        out.extend(render::elements(api, &m));
    }
    out
}

/// The response as the client echoes it: each element as the gateway parses it, with the
/// recorded response's metadata.
fn reply(api: Api, group: &[&Message]) -> Vec<Message> {
    let owned: Vec<Message> = group.iter().map(|m| (*m).clone()).collect();
    let mut out = Vec::new();
    for m in merged(api, &owned) {
        let parsed: Vec<Message> = render::elements(api, &m)
            .iter()
            .map(|e| api.parse_element(e))
            .collect();
        let n = parsed.len();
        for (i, mut p) in parsed.into_iter().enumerate() {
            p.model.clone_from(&m.model);
            p.response_id.clone_from(&m.response_id);
            p.stop_reason.clone_from(&m.stop_reason);
            p.injected.clone_from(&m.injected);
            if i + 1 == n {
                p.usage = m.usage;
            }
            out.push(p);
        }
    }
    out
}

/// A request body in `api`'s shape, its fields in the order clients write them.
fn body(
    api: Api,
    model: &str,
    system: Option<&str>,
    tools: &[Value],
    conversation: &[Value],
) -> Vec<u8> {
    if api == Api::Gemini {
        return gemini_body(system, tools, conversation);
    }
    let mut fields: Vec<(&str, Value)> = vec![("model", json!(model))];
    match api {
        Api::Anthropic => {
            fields.push(("max_tokens", json!(MAX_TOKENS)));
            if let Some(s) = system {
                fields.push(("system", json!(s)));
            }
        }
        Api::Responses => {
            if let Some(s) = system {
                fields.push(("instructions", json!(s)));
            }
        }
        Api::Chat | Api::Gemini => {} // in the conversation
    }
    if !tools.is_empty() {
        fields.push(("tools", Value::Array(tools.to_vec())));
    }
    fields.push((api.array_field(), Value::Array(conversation.to_vec())));
    fields.push(("stream", json!(false)));
    let mut out = Vec::with_capacity(4096);
    out.push(b'{');
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(json!(key).to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(value.to_string().as_bytes());
    }
    out.push(b'}');
    out
}

/// A Gemini body as Gemini CLI writes one: the model is in the URL, the system prompt a
/// content of its own, the function declarations one tool (other tools their own).
fn gemini_body(system: Option<&str>, tools: &[Value], conversation: &[Value]) -> Vec<u8> {
    let mut body = serde_json::Map::new();
    body.insert("contents".into(), Value::Array(conversation.to_vec()));
    if let Some(s) = system {
        body.insert(
            "systemInstruction".into(),
            json!({"role": "user", "parts": [{"text": s}]}),
        );
    }
    let (declarations, others): (Vec<&Value>, Vec<&Value>) =
        tools.iter().partition(|t| t.get("name").is_some());
    if !tools.is_empty() {
        let mut all = Vec::new();
        if !declarations.is_empty() {
            all.push(json!({"functionDeclarations": declarations}));
        }
        all.extend(others.into_iter().cloned());
        body.insert("tools".into(), Value::Array(all));
    }
    Value::Object(body).to_string().into_bytes()
}

/// A recorded tool definition in `api`'s shape: the parsers keep a definition that is not a
/// plain function (a server tool, a custom tool) whole as its schema, so it goes back as is.
fn tool_json(api: Api, t: &ToolDef) -> Value {
    let whole = t
        .schema
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|ty| ty != "object");
    if whole {
        return t.schema.clone();
    }
    let schema = if t.schema.is_null() {
        None
    } else {
        Some(t.schema.clone())
    };
    match api {
        Api::Anthropic => json!({
            "name": t.name,
            "description": t.description,
            "input_schema": schema.unwrap_or_else(|| json!({"type": "object"})),
        }),
        Api::Chat => {
            let mut f = json!({"name": t.name, "description": t.description});
            if let Some(s) = schema {
                f["parameters"] = s;
            }
            json!({"type": "function", "function": f})
        }
        Api::Responses => {
            let mut f = json!({"type": "function", "name": t.name, "description": t.description});
            if let Some(s) = schema {
                f["parameters"] = s;
            }
            f
        }
        Api::Gemini => {
            let mut f = json!({"name": t.name, "description": t.description});
            if let Some(s) = schema {
                f["parametersJsonSchema"] = s;
            }
            f
        }
    }
}

/// Tool definitions for the names the branch calls, sorted: a minimal object schema and a
/// description naming the tool; on Responses a tool called with a string (Codex's
/// `apply_patch`) is a `custom` tool, as its calls are `custom_tool_call` items.
fn made_up_tools(api: Api, entries: &[&Entry]) -> Vec<Value> {
    // name → called with a string at least once
    let mut names: BTreeMap<&str, bool> = BTreeMap::new();
    for e in entries {
        if let Some(m) = assistant(e) {
            for b in &m.content {
                if let ContentBlock::ToolCall {
                    name, arguments, ..
                } = b
                {
                    *names.entry(name.as_str()).or_default() |= arguments.is_string();
                }
            }
        }
    }
    names
        .into_iter()
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, freeform)| {
            let description = format!("The {name} tool.");
            let schema = json!({"type": "object"});
            match api {
                Api::Anthropic => {
                    json!({"name": name, "description": description, "input_schema": schema})
                }
                Api::Chat => json!({"type": "function", "function": {
                    "name": name, "description": description, "parameters": schema}}),
                Api::Responses if freeform => {
                    json!({"type": "custom", "name": name, "description": description})
                }
                Api::Responses => json!({"type": "function", "name": name,
                    "description": description, "parameters": schema}),
                Api::Gemini => json!({"name": name, "description": description,
                    "parametersJsonSchema": schema}),
            }
        })
        .collect()
}

/// The session key a replay of `session` goes under (`x-ctxd-session`): the gateway's
/// requests and the eval's name it alike, since notes homes and boots may quote it.
pub fn session_key(session: &Session) -> String {
    format!("eval-{}", session.meta.id.as_deref().unwrap_or("session"))
}

/// The tokens of an upstream (or client) body, by part.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BodyTokens {
    /// The system prompt outside the conversation (Anthropic `system`, Responses
    /// `instructions`; Chat keeps its system message in the conversation, counted there).
    pub system: u64,
    /// Every tool definition, the client's and ctxd's.
    pub tools: u64,
    /// Each element of the conversation array, in order, as a message of the session model.
    pub messages: Vec<u64>,
}

impl BodyTokens {
    pub fn total(&self) -> u64 {
        self.system + self.tools + self.messages.iter().sum::<u64>()
    }
}

/// `body` parsed with the gateway's parser and counted with `counter`: the system prompt's
/// text, the tool definitions ([`tool_def_tokens`]) and each conversation element's content
/// ([`blocks_tokens`]). The one measure of a body for the gateway's side and the eval's (which
/// keeps a [`Meter`] across a session's requests).
pub fn measure_body(
    api: Api,
    body: &[u8],
    counter: &dyn TokenCounter,
) -> Result<BodyTokens, String> {
    Meter::new(counter).measure(api, body).map(|m| m.tokens)
}

/// A body measured by a [`Meter`]: its tokens, the key and tokens of each part in prompt order
/// (system prompt, tools, then each element; a prompt cache reads the longest shared prefix of
/// these), and its elements as messages.
#[derive(Clone, Debug)]
pub struct Measured {
    pub tokens: BodyTokens,
    pub keys: Vec<(u128, u64)>,
    pub messages: Vec<Message>,
}

impl Measured {
    /// How many keys come before the elements' (system prompt, tools).
    pub fn head(&self) -> usize {
        self.keys.len() - self.messages.len()
    }
}

/// [`measure_body`] over many bodies: each part's tokens remembered by its bytes' key (a
/// conversation's elements repeat at every request, and are counted once).
pub struct Meter<'a> {
    counter: &'a dyn TokenCounter,
    memo: std::collections::HashMap<u128, u64>,
}

impl<'a> Meter<'a> {
    pub fn new(counter: &'a dyn TokenCounter) -> Self {
        Meter {
            counter,
            memo: Default::default(),
        }
    }

    /// The tokens remembered for `key`, else `count`'s, remembered.
    pub fn remember(&mut self, key: u128, count: impl FnOnce(&dyn TokenCounter) -> u64) -> u64 {
        let counter = self.counter;
        *self.memo.entry(key).or_insert_with(|| count(counter))
    }

    pub fn measure(&mut self, api: Api, body: &[u8]) -> Result<Measured, String> {
        let key = |bytes: &[u8]| u128::from_le_bytes(ctxd_engine::turn::hash::raw(bytes));
        let req = ParsedRequest::parse_after(api, body, None).map_err(|e| e.to_string())?;
        let mut keys = Vec::with_capacity(req.elements.len() + 2);
        let mut tokens = BodyTokens::default();
        if let Some(system) = req.system(body) {
            let k = key(system.as_bytes());
            tokens.system = self.remember(k, |c| c.count(&system));
            keys.push((k, tokens.system));
        }
        if let Some((range, _)) = &req.tools_raw {
            let k = key(body.get(range.clone()).unwrap_or_default());
            let defs = req.tools(body);
            tokens.tools = self.remember(k, |c| defs.iter().map(|t| tool_def_tokens(c, t)).sum());
            keys.push((k, tokens.tools));
        }
        let mut messages = Vec::with_capacity(req.elements.len());
        for (i, e) in req.elements.iter().enumerate() {
            let k = u128::from_le_bytes(e.raw_hash);
            let m = req.message(body, i);
            let t = self.remember(k, |c| blocks_tokens(c, &m.content));
            tokens.messages.push(t);
            keys.push((k, t));
            messages.push(m);
        }
        Ok(Measured {
            tokens,
            keys,
            messages,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
