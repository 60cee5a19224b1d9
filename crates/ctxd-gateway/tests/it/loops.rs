//! Long tool loops through the gateway against the strict mock (which refuses what the real
//! APIs refuse, and prompts over the model's window): a coding agent's session of 60 turns,
//! every answer a tool call answered with ~20 KB of shell output. Each API, JSON and SSE.
//!
//! What must hold: every request the client sends is answered; nothing upstream is refused;
//! no upstream request is over the window; the window resets inside the loop (the boot goes
//! upstream, the old outputs do not); reminders sit after the batch's results.

use std::fmt::Write as _;

use ctxd_core::model::EntryKind;
use ctxd_formats::wire::stream::{assemble_json, Api as WireApi, Assembled, Assembler, SseParser};
use ctxd_mock::{Config, Reasoning, Reply};
use serde_json::{json, Value};

use crate::support::Rig;

const TURNS: usize = 60;
const OUTPUT_BYTES: usize = 20_000;
/// The mock's and ctxd's window for the models below.
const WINDOW: u64 = 200_000;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Api {
    Anthropic,
    Chat,
    Responses,
}

impl Api {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Api::Anthropic => "/v1/messages",
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
        }
    }

    pub(crate) fn wire(self) -> WireApi {
        match self {
            Api::Anthropic => WireApi::Anthropic,
            Api::Chat => WireApi::OpenAiChat,
            Api::Responses => WireApi::OpenAiResponses,
        }
    }

    pub(crate) fn model(self) -> &'static str {
        match self {
            Api::Anthropic => "claude-sonnet-4-5",
            // 200k in ctxd's table and in the mock's.
            Api::Chat | Api::Responses => "o3",
        }
    }

    pub(crate) fn headers(self) -> [(&'static str, &'static str); 2] {
        match self {
            Api::Anthropic => [("x-api-key", "sk-loop"), ("x-ctxd-session", "loop")],
            _ => [
                ("authorization", "Bearer sk-loop"),
                ("x-ctxd-session", "loop"),
            ],
        }
    }

    pub(crate) fn first_messages(self) -> Vec<Value> {
        let task = "Find why the test suite fails and fix it.";
        match self {
            Api::Anthropic => vec![json!({"role": "user", "content": task})],
            Api::Chat => vec![
                json!({"role": "system", "content": "You are a coding agent."}),
                json!({"role": "user", "content": task}),
            ],
            Api::Responses => vec![json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": task}]})],
        }
    }

    pub(crate) fn body(self, conversation: &[Value], stream: bool, thinking: bool) -> Value {
        let mut body = self.plain_body(conversation, stream);
        if thinking {
            match self {
                Api::Anthropic => {
                    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
                }
                Api::Responses => {
                    body["reasoning"] = json!({"effort": "medium"});
                    body["include"] = json!(["reasoning.encrypted_content"]);
                    body["store"] = json!(false);
                }
                Api::Chat => {}
            }
        }
        body
    }

    pub(crate) fn plain_body(self, conversation: &[Value], stream: bool) -> Value {
        match self {
            Api::Anthropic => json!({"model": self.model(), "max_tokens": 1024,
                "system": "You are a coding agent.", "stream": stream,
                "tools": [{"name": "bash", "description": "Run a shell command",
                    "input_schema": {"type": "object",
                        "properties": {"command": {"type": "string"}}, "required": ["command"]}}],
                "messages": conversation}),
            Api::Chat => {
                let mut b = json!({"model": self.model(), "stream": stream,
                    "tools": [{"type": "function", "function": {"name": "bash",
                        "description": "Run a shell command", "parameters": {"type": "object",
                        "properties": {"command": {"type": "string"}}}}}],
                    "messages": conversation});
                if stream {
                    b["stream_options"] = json!({"include_usage": true});
                }
                b
            }
            Api::Responses => json!({"model": self.model(), "stream": stream,
                "instructions": "You are a coding agent.",
                "tools": [{"type": "function", "name": "bash", "description": "Run a shell command",
                    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}],
                "input": conversation}),
        }
    }

    /// A user message (a prompt) in this API's conversation.
    pub(crate) fn user_message(self, text: &str) -> Value {
        match self {
            Api::Responses => json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]}),
            _ => json!({"role": "user", "content": text}),
        }
    }

    /// A client tool's definition in this API's shape.
    pub(crate) fn tool(self, name: &str, description: &str, schema: Value) -> Value {
        match self {
            Api::Anthropic => {
                json!({"name": name, "description": description, "input_schema": schema})
            }
            Api::Chat => json!({"type": "function", "function": {"name": name,
                "description": description, "parameters": schema}}),
            Api::Responses => json!({"type": "function", "name": name,
                "description": description, "parameters": schema}),
        }
    }

    /// The client's answer to each call of the response's elements.
    pub(crate) fn results(self, elements: &[Value], output: &str) -> Vec<Value> {
        let mut calls = Vec::new();
        for el in elements {
            match self {
                Api::Anthropic => {
                    for b in el["content"].as_array().into_iter().flatten() {
                        if b["type"] == "tool_use" {
                            calls.push(b["id"].as_str().unwrap().to_owned());
                        }
                    }
                }
                Api::Chat => {
                    for c in el["tool_calls"].as_array().into_iter().flatten() {
                        calls.push(c["id"].as_str().unwrap().to_owned());
                    }
                }
                Api::Responses => {
                    if el["type"] == "function_call" {
                        calls.push(el["call_id"].as_str().unwrap().to_owned());
                    }
                }
            }
        }
        assert!(!calls.is_empty(), "the model called no tool: {elements:?}");
        match self {
            Api::Anthropic => vec![
                json!({"role": "user", "content": calls.iter().map(|id| json!(
                {"type": "tool_result", "tool_use_id": id, "content": output})).collect::<Vec<_>>()}),
            ],
            Api::Chat => calls
                .iter()
                .map(|id| json!({"role": "tool", "tool_call_id": id, "content": output}))
                .collect(),
            Api::Responses => calls
                .iter()
                .map(|id| json!({"type": "function_call_output", "call_id": id, "output": output}))
                .collect(),
        }
    }
}

/// The mock's settings for a scripted loop: `script` answered in order, with a thinking block
/// on every answer when `thinking`.
pub(crate) fn scripted(script: Vec<Reply>, thinking: bool) -> Config {
    Config {
        script,
        reasoning: if thinking {
            Reasoning::Always
        } else {
            Reasoning::Off
        },
        ..Config::default()
    }
}

/// What `x-ctxd-tokens-saved-by` charges to `mechanism` in `headers` (0 when absent).
pub(crate) fn saved_by(headers: &reqwest::header::HeaderMap, mechanism: &str) -> i64 {
    headers
        .get("x-ctxd-tokens-saved-by")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix(mechanism)?.strip_prefix('='))
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One turn of a client's tool loop, the driver the loop tests share: `body` (the client's
/// request over `conversation`) posted, answered with a success (else the test fails with the
/// bytes), then the response's elements and the client's answer to each call (`output`)
/// appended to `conversation`. The response's headers and its reading.
pub(crate) async fn tool_turn(
    rig: &Rig,
    api: Api,
    conversation: &mut Vec<Value>,
    body: &Value,
    stream: bool,
    output: &str,
) -> (reqwest::header::HeaderMap, Assembled) {
    client_turn(rig, api, conversation, body, stream, Some(output)).await
}

/// [`tool_turn`], or with `output` `None` a turn the model ends with its answer: only the
/// response's elements are appended.
pub(crate) async fn client_turn(
    rig: &Rig,
    api: Api,
    conversation: &mut Vec<Value>,
    body: &Value,
    stream: bool,
    output: Option<&str>,
) -> (reqwest::header::HeaderMap, Assembled) {
    let resp = rig
        .post(
            api.path(),
            &api.headers(),
            serde_json::to_vec(body).unwrap(),
        )
        .await;
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.bytes().await.unwrap();
    assert!(
        status.is_success(),
        "{api:?} stream={stream} turn {}: {status} {}",
        conversation.len(),
        String::from_utf8_lossy(&text[..text.len().min(600)])
    );
    let assembled = read_response(api, stream, &text);
    let elements: Vec<Value> = assembled
        .elements
        .iter()
        .map(|e| serde_json::from_slice(&e.wire).unwrap())
        .collect();
    let results = output.map(|output| api.results(&elements, output));
    conversation.extend(elements);
    conversation.extend(results.into_iter().flatten());
    (headers, assembled)
}

/// The response as the client's SDK reads it (an SSE stream or a JSON body); a response that
/// does not read fails the test with the bytes.
pub(crate) fn read_response(api: Api, stream: bool, text: &[u8]) -> Assembled {
    let read = if stream {
        let mut parser = SseParser::new();
        let mut asm = Assembler::new(api.wire());
        for ev in parser.feed(text) {
            asm.push(&ev);
        }
        if let Some(ev) = parser.finish() {
            asm.push(&ev);
        }
        asm.finish()
    } else {
        assemble_json(api.wire(), text)
    };
    read.unwrap_or_else(|e| {
        panic!(
            "{api:?} stream={stream}: the response does not read: {e}\n{}",
            String::from_utf8_lossy(text)
        )
    })
}

/// ~`bytes` of plausible shell output (test names, paths, a few numbers), distinct per turn
/// (so nothing dedups by accident).
pub(crate) fn shell_output(turn: usize, bytes: usize) -> String {
    const WORDS: [&str; 16] = [
        "parser", "handles", "empty", "input", "returns", "error", "when", "token", "stream",
        "closes", "early", "nested", "block", "comment", "keeps", "position",
    ];
    let mut out = format!("$ cargo test --workspace  # run-{turn}-start\n");
    let mut n = turn * 7919;
    while out.len() < bytes {
        let w = |k: usize| WORDS[(n / k) % WORDS.len()];
        let _ = writeln!(
            out,
            "test {}::tests::{}_{}_{}_{} ... ok",
            w(1),
            w(3),
            w(5),
            w(7),
            w(11)
        );
        n += 1;
    }
    out
}

/// What one loop saw.
struct LoopReport {
    turns_per_window: Vec<usize>,
    largest_upstream_bytes: usize,
    largest_upstream_mock_tokens: u64,
    largest_upstream_ctxd_tokens: u64,
    upstream_chars: usize,
    client_chars: usize,
}

/// Which of ctxd's mechanisms keep the loop inside the window.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Keeper {
    /// Windows alone (distillation off): the loop must reset.
    Windows,
    /// Distillation on (the default): mid-run checkpoints take superseded outputs out.
    Distillation,
}

async fn run_loop(
    api: Api,
    stream: bool,
    thinking: bool,
    hidden_every: usize,
    keeper: Keeper,
) -> LoopReport {
    // Every answer is a tool call: the loop never ends by itself. With thinking, every answer
    // starts with a signed thinking block (Anthropic) or an encrypted reasoning item
    // (Responses), which the strict mock wants back unchanged in the ongoing tool loop. With
    // `hidden_every`, every so many turns the model first appends to a note (ctxd's tool, a
    // hidden round the gateway answers and continues) before its shell call.
    let hidden_turn = |i: usize| hidden_every > 0 && i % hidden_every == hidden_every - 1;
    let mut script = Vec::new();
    for i in 0..TURNS {
        if hidden_turn(i) {
            script.push(Reply::tool_call(
                "notes_append",
                json!({"path": "progress.md", "text": format!("turn {i}: still failing\n")}),
            ));
        }
        script.push(Reply::tool_call(
            "bash",
            json!({"command": format!("cargo test # {i}")}),
        ));
    }
    let hidden = (0..TURNS).filter(|&i| hidden_turn(i)).count();
    let config = scripted(script, thinking);
    let mut rig = Rig::with(config, |s| {
        s.management.mechanisms.distill = keeper == Keeper::Distillation;
        // What keeps this loop inside the window is the keeper's: digests (on by default)
        // would shrink every output first (`digest.rs` tests them).
        s.management.mechanisms.digests = false;
        // Deterministic: each request waits for the previous turn end's pass.
        s.distill_wait = std::time::Duration::from_secs(10);
    })
    .await;
    let headers = api.headers();
    let mut conversation = api.first_messages();
    let mut client_chars = 0usize;
    for turn in 0..TURNS {
        let body = serde_json::to_vec(&api.body(&conversation, stream, thinking)).unwrap();
        client_chars += body.len();
        let resp = rig.post(api.path(), &headers, body).await;
        let status = resp.status();
        let text = resp.bytes().await.unwrap();
        assert!(
            status.is_success(),
            "{api:?} stream={stream} turn {turn}: {status} {}",
            String::from_utf8_lossy(&text[..text.len().min(600)])
        );
        let assembled = read_response(api, stream, &text);
        let elements: Vec<Value> = assembled
            .elements
            .iter()
            .map(|e| serde_json::from_slice(&e.wire).unwrap())
            .collect();
        for el in &assembled.elements {
            for b in &el.message.content {
                if let ctxd_core::model::ContentBlock::ToolCall { name, .. } = b {
                    assert_eq!(
                        name, "bash",
                        "{api:?} turn {turn}: the client saw a ctxd call"
                    );
                }
            }
        }
        let results = api.results(&elements, &shell_output(turn, OUTPUT_BYTES));
        conversation.extend(elements);
        conversation.extend(results);
    }

    let sent = rig.mock.requests();
    assert_eq!(
        sent.len(),
        TURNS + hidden,
        "one upstream request per client request and per hidden round: nothing refused, nothing retried"
    );
    for (i, r) in sent.iter().enumerate() {
        assert!(
            r.refused.is_none(),
            "{api:?} request {i} refused: {:?}",
            r.refused
        );
    }
    let counter = ctxd_tokens::Tokenizer::for_model(Some(api.model()));
    let mut largest = (0usize, 0u64, 0u64);
    let mut upstream_chars = 0usize;
    let mut saw_boot_after_reset = false;
    let mut distilled_requests = 0usize;
    for (i, r) in sent.iter().enumerate() {
        let body: &[u8] = &r.body;
        upstream_chars += body.len();
        let mock_tokens = (body.len() / 4) as u64;
        assert!(
            mock_tokens <= WINDOW,
            "{api:?} request {i}: {mock_tokens} tokens upstream"
        );
        if body.len() > largest.0 {
            largest = (body.len(), mock_tokens, ctxd_estimate(body, &counter));
        }
        let text = String::from_utf8_lossy(body);
        if text.contains("[ctxd] Distilled output of")
            || text.contains("[ctxd] Omitted the output of")
        {
            distilled_requests += 1;
        }
        if text.contains("Your context was reset") {
            saw_boot_after_reset = true;
            assert!(
                !text.contains("run-0-start"),
                "{api:?} request {i}: the first window's outputs went upstream after the reset"
            );
        }
    }
    match keeper {
        Keeper::Windows => {
            assert!(saw_boot_after_reset, "{api:?}: no reset reached upstream");
            assert_eq!(distilled_requests, 0, "{api:?}: distillation is off");
        }
        Keeper::Distillation => assert!(
            distilled_requests >= TURNS / 2,
            "{api:?}: {distilled_requests} requests carried distilled outputs"
        ),
    }

    // The store: the windows, and where reminders sit.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let session = stored.load(&record);
    let branch = ctxd_core::tree::active_branch(&session);
    let mut turns_per_window = vec![0usize];
    let mut reminders = 0;
    for (i, &pos) in branch.iter().enumerate() {
        match &session.entries[pos].kind {
            EntryKind::WindowMarker { .. } => turns_per_window.push(0),
            // A turn is the model's call (Responses sends reasoning as an item of its own).
            EntryKind::Message(m)
                if m.role == ctxd_core::model::Role::Assistant
                    && m.content
                        .iter()
                        .any(|b| matches!(b, ctxd_core::model::ContentBlock::ToolCall { .. })) =>
            {
                *turns_per_window.last_mut().unwrap() += 1;
            }
            EntryKind::Message(m)
                if m.injected
                    .as_deref()
                    .is_some_and(|k| k.starts_with("ctxd/")) =>
            {
                reminders += 1;
                // After the results of the batch: the entry before it answers every call.
                let prev = &session.entries[branch[i - 1]].kind;
                assert!(
                    matches!(prev, EntryKind::Message(p) if p.content.iter().any(|b|
                        matches!(b, ctxd_core::model::ContentBlock::ToolResult { .. }))),
                    "{api:?}: reminder not after tool results: {prev:?}"
                );
            }
            _ => {}
        }
    }
    if keeper == Keeper::Windows {
        assert!(turns_per_window.len() >= 2, "{api:?}: no window opened");
        assert!(reminders >= 1, "{api:?}: no reminder");
    } else {
        let records = session
            .entries
            .iter()
            .filter(|e| matches!(&e.kind, EntryKind::Event { name, .. } if name == ctxd_core::distill::record::EVENT))
            .count();
        assert!(records >= 1, "{api:?}: no distillation record in the store");
    }
    LoopReport {
        turns_per_window,
        largest_upstream_bytes: largest.0,
        largest_upstream_mock_tokens: largest.1,
        largest_upstream_ctxd_tokens: largest.2,
        upstream_chars,
        client_chars,
    }
}

/// ctxd's estimate of a request body: what its report counts (content, not JSON syntax).
fn ctxd_estimate(body: &[u8], counter: &dyn ctxd_core::tokens::TokenCounter) -> u64 {
    let import = ctxd_formats::import_reader(std::io::Cursor::new(body)).unwrap();
    let options = ctxd_core::report::Options {
        at_turn: None,
        largest: 0,
        window: Some(WINDOW),
    };
    ctxd_core::report::build(&import.session, counter, &options)
        .headline
        .tokens
        .unwrap_or_default()
}

async fn check(api: Api, stream: bool) {
    check_with(api, stream, false, 0).await;
}

async fn check_with(api: Api, stream: bool, thinking: bool, hidden_every: usize) {
    check_kept(api, stream, thinking, hidden_every, Keeper::Windows).await;
}

async fn check_kept(api: Api, stream: bool, thinking: bool, hidden_every: usize, keeper: Keeper) {
    let r = run_loop(api, stream, thinking, hidden_every, keeper).await;
    eprintln!(
        "loop {api:?} stream={stream} thinking={thinking} {keeper:?}: turns per window {:?}; largest upstream request {} bytes, \
         {} tokens by the mock's estimate, {} by ctxd's; upstream/client bytes {}/{} ({:.2})",
        r.turns_per_window,
        r.largest_upstream_bytes,
        r.largest_upstream_mock_tokens,
        r.largest_upstream_ctxd_tokens,
        r.upstream_chars,
        r.client_chars,
        r.upstream_chars as f64 / r.client_chars as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_json_tool_loop_stays_inside_the_window() {
    check(Api::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sse_tool_loop_stays_inside_the_window() {
    check(Api::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_json_tool_loop_stays_inside_the_window() {
    check(Api::Chat, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_sse_tool_loop_stays_inside_the_window() {
    check(Api::Chat, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_json_tool_loop_stays_inside_the_window() {
    check(Api::Responses, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sse_tool_loop_stays_inside_the_window() {
    check(Api::Responses, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_thinking_tool_loop_keeps_signed_blocks_across_the_reset() {
    check_with(Api::Anthropic, true, true, 0).await;
    check_with(Api::Anthropic, false, true, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_reasoning_tool_loop_keeps_encrypted_items_across_the_reset() {
    check_with(Api::Responses, true, true, 0).await;
    check_with(Api::Responses, false, true, 0).await;
}

/// The same loops with a hidden round (ctxd's `notes_append`, answered by the gateway and
/// continued upstream) every seventh turn, across the window's resets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_loops_with_hidden_rounds_stay_valid_on_every_api() {
    for api in [Api::Anthropic, Api::Chat, Api::Responses] {
        check_with(api, true, false, 7).await;
        check_with(api, false, false, 7).await;
    }
    check_with(Api::Anthropic, true, true, 7).await;
    check_with(Api::Responses, true, true, 7).await;
}

/// The same loops with distillation on (the default): mid-run checkpoints take the superseded
/// outputs (the same command run again) out of the model's view, so the loop stays inside its
/// window, every edited request accepted by the strict mock; thinking and reasoning intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distilled_tool_loops_stay_valid_on_every_api() {
    for api in [Api::Anthropic, Api::Chat, Api::Responses] {
        check_kept(api, true, false, 0, Keeper::Distillation).await;
        check_kept(api, false, false, 7, Keeper::Distillation).await;
    }
    check_kept(Api::Anthropic, true, true, 7, Keeper::Distillation).await;
    check_kept(Api::Responses, false, true, 0, Keeper::Distillation).await;
}
