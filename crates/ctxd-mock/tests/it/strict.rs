//! Strict mode over HTTP: each API's refusals with the provider's status and error body, the
//! context windows, thinking signatures round-tripping, the record, and lax mode.

use ctxd_mock::{Config, Reasoning, Reply};
use serde_json::{json, Value};

use crate::support::{post, post_raw, start, start_with, Reply as Res};

const MESSAGES: &str = "/v1/messages";
const CHAT: &str = "/v1/chat/completions";
const RESPONSES: &str = "/v1/responses";

/// A 400 with Anthropic's error shape, the rule in the header; returns the message.
fn anthropic_refusal(r: &Res, rule: &str) -> String {
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.headers["x-mock-refused"], rule);
    let b = r.json();
    assert_eq!(b["type"], "error");
    assert_eq!(b["error"]["type"], "invalid_request_error");
    assert!(b["request_id"].as_str().unwrap().starts_with("req_"));
    assert_eq!(b.as_object().unwrap().len(), 3, "{b}");
    b["error"]["message"].as_str().unwrap().to_owned()
}

/// A 400 with OpenAI's error shape, the rule in the header; returns the `error` object.
fn openai_refusal(r: &Res, rule: &str) -> Value {
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.headers["x-mock-refused"], rule);
    let b = r.json();
    let e = &b["error"];
    assert_eq!(e["type"], "invalid_request_error");
    let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "param", "type"]);
    e.clone()
}

fn ok(r: &Res) {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.headers.get("x-mock-refused").is_none());
}

fn claude(messages: Value) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": messages})
}

fn tool_use(id: &str) -> Value {
    json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}})
}

fn tool_result(id: &str) -> Value {
    json!({"type": "tool_result", "tool_use_id": id, "content": "a"})
}

#[tokio::test]
async fn anthropic_turn_rules() {
    let mock = start().await;
    let user = json!({"role": "user", "content": "list"});
    let call = json!({"role": "assistant", "content": [tool_use("toolu_1")]});

    ok(&post(&mock, MESSAGES, &claude(json!([user]))).await);
    let m = anthropic_refusal(
        &post(&mock, MESSAGES, &claude(json!([]))).await,
        "anthropic.messages",
    );
    assert_eq!(m, "messages: at least one message is required");
    let m = anthropic_refusal(
        &post(
            &mock,
            MESSAGES,
            &claude(json!([{"role": "assistant", "content": "x"}])),
        )
        .await,
        "anthropic.first_role",
    );
    assert_eq!(m, "messages: first message must use the \"user\" role");
    anthropic_refusal(
        &post(
            &mock,
            MESSAGES,
            &claude(json!([{"role": "tool", "content": "x"}])),
        )
        .await,
        "anthropic.role",
    );

    let answered = json!([user, call, {"role": "user", "content": [tool_result("toolu_1"),
        {"type": "text", "text": "and then?"}]}]);
    ok(&post(&mock, MESSAGES, &claude(answered)).await);
    let unanswered = json!([user, call, {"role": "user", "content": "go on"}]);
    let m = anthropic_refusal(
        &post(&mock, MESSAGES, &claude(unanswered)).await,
        "anthropic.tool_use_unanswered",
    );
    assert_eq!(
        m,
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: \
         toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the \
         next message."
    );
    let stray = json!([user, {"role": "user", "content": [tool_result("toolu_x")]}]);
    let m = anthropic_refusal(
        &post(&mock, MESSAGES, &claude(stray)).await,
        "anthropic.tool_result_unexpected",
    );
    assert_eq!(
        m,
        "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x. \
         Each `tool_result` block must have a corresponding `tool_use` block in the previous \
         message."
    );
    let m = anthropic_refusal(
        &post(
            &mock,
            MESSAGES,
            &claude(json!([{"role": "user", "content": [
            {"type": "text", "text": ""}]}])),
        )
        .await,
        "anthropic.empty_text",
    );
    assert_eq!(m, "messages: text content blocks must be non-empty");
    anthropic_refusal(
        &post(
            &mock,
            MESSAGES,
            &claude(json!([user, {"role": "assistant", "content": []},
            {"role": "user", "content": "x"}])),
        )
        .await,
        "anthropic.empty_content",
    );
    // A final (prefill) assistant message may be empty, not hold an unanswered tool_use.
    ok(&post(
        &mock,
        MESSAGES,
        &claude(json!([user, {"role": "assistant", "content": ""}])),
    )
    .await);
    anthropic_refusal(
        &post(&mock, MESSAGES, &claude(json!([user, call]))).await,
        "anthropic.tool_use_unanswered",
    );
}

#[tokio::test]
async fn thinking_signatures_round_trip() {
    let mock = start_with(Config {
        reasoning: Reasoning::WhenAsked,
        ..Config::default()
    })
    .await;
    let tools = json!([{"name": "Bash", "input_schema": {"type": "object",
        "properties": {"command": {"type": "string"}}}}]);
    let ask = json!({"role": "user", "content": "list the files"});
    let body = |messages: Value, stream: bool| {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 4096, "stream": stream,
               "thinking": {"type": "enabled", "budget_tokens": 2048},
               "tools": tools, "messages": messages})
    };
    let first = post(&mock, MESSAGES, &body(json!([ask]), false))
        .await
        .json();
    let content = first["content"].clone();
    assert_eq!(content[0]["type"], "thinking");
    assert_eq!(content[1]["type"], "tool_use");
    let id = content[1]["id"].as_str().unwrap().to_owned();
    let second = |content: Value| {
        json!([ask, {"role": "assistant", "content": content},
               {"role": "user", "content": [tool_result(&id)]}])
    };

    // Sent back unchanged: accepted.
    let r = post(&mock, MESSAGES, &body(second(content.clone()), false)).await;
    ok(&r);
    assert_eq!(r.json()["content"][1]["text"], "done");

    // The streamed signature is the same kind: it verifies too.
    let events = post(&mock, MESSAGES, &body(json!([ask]), true))
        .await
        .events();
    let sig = events
        .iter()
        .find(|e| e.data["delta"]["type"] == "signature_delta")
        .map(|e| e.data["delta"]["signature"].as_str().unwrap().to_owned())
        .unwrap();
    let text: String = events
        .iter()
        .filter(|e| e.data["delta"]["type"] == "thinking_delta")
        .map(|e| e.data["delta"]["thinking"].as_str().unwrap())
        .collect();
    let mut streamed = content.clone();
    streamed[0] = json!({"type": "thinking", "thinking": text, "signature": sig});
    ok(&post(&mock, MESSAGES, &body(second(streamed), false)).await);

    // Its text edited: refused.
    let mut tampered = content.clone();
    tampered[0]["thinking"] = json!("I decided something else.");
    let m = anthropic_refusal(
        &post(&mock, MESSAGES, &body(second(tampered), false)).await,
        "anthropic.thinking_signature",
    );
    assert_eq!(
        m,
        "messages.1.content.0: Invalid `signature` in `thinking` block"
    );

    // A signature the mock did not issue (a real provider's): not the mock's to judge.
    let mut foreign = content.clone();
    foreign[0]["signature"] = json!("ErUBCkYIBxgCIkB1c2VyIGFza2VkIGZvciBzb21ldGhpbmc=");
    ok(&post(&mock, MESSAGES, &body(second(foreign), false)).await);

    // The thinking block dropped from the tool loop: refused (thinking enabled).
    let m = anthropic_refusal(
        &post(&mock, MESSAGES, &body(second(json!([content[1]])), false)).await,
        "anthropic.thinking_missing",
    );
    assert!(
        m.starts_with(
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found \
             `tool_use`. When `thinking` is enabled, a final `assistant` message must start \
             with a thinking block"
        ),
        "{m}"
    );
}

#[tokio::test]
async fn chat_tool_message_rules() {
    let mock = start().await;
    let chat = |messages: Value| json!({"model": "gpt-4o-mini", "messages": messages});
    let user = json!({"role": "user", "content": "list"});
    let call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
        {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]});
    let tool = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "a"});
    let sys = json!({"role": "developer", "content": "be brief"});

    ok(&post(
        &mock,
        CHAT,
        &chat(json!([user, call, tool("call_2"), sys, tool("call_1")])),
    )
    .await);
    let e = openai_refusal(
        &post(
            &mock,
            CHAT,
            &chat(json!([user, call, tool("call_1"), user])),
        )
        .await,
        "chat.tool_calls_unanswered",
    );
    assert_eq!(
        e,
        json!({"message": "An assistant message with 'tool_calls' must be followed by tool \
            messages responding to each 'tool_call_id'. The following tool_call_ids did not \
            have response messages: call_2",
            "type": "invalid_request_error", "param": "messages.[1].role", "code": null})
    );
    let e = openai_refusal(
        &post(&mock, CHAT, &chat(json!([user, tool("call_1")]))).await,
        "chat.tool_message_unexpected",
    );
    assert_eq!(
        e,
        json!({"message": "Invalid parameter: messages with role 'tool' must be a response to \
            a preceeding message with 'tool_calls'.",
            "type": "invalid_request_error", "param": "messages.[1].role", "code": null})
    );
    let e = openai_refusal(&post(&mock, CHAT, &chat(json!([]))).await, "chat.messages");
    assert_eq!(e["code"], "empty_array");
}

#[tokio::test]
async fn chat_top_logprobs_rules() {
    let mock = start().await;
    let chat = |extra: Value| {
        let mut b =
            json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    ok(&post(
        &mock,
        CHAT,
        &chat(json!({"logprobs": true, "top_logprobs": 20})),
    )
    .await);
    let e = openai_refusal(
        &post(&mock, CHAT, &chat(json!({"top_logprobs": 5}))).await,
        "chat.top_logprobs_without_logprobs",
    );
    assert_eq!(
        e,
        json!({"message": "The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled.",
            "type": "invalid_request_error", "param": "top_logprobs", "code": null})
    );
    let e = openai_refusal(
        &post(
            &mock,
            CHAT,
            &chat(json!({"logprobs": true, "top_logprobs": 21})),
        )
        .await,
        "chat.top_logprobs_range",
    );
    assert_eq!(e["code"], "integer_above_max_value");
    assert_eq!(e["param"], "top_logprobs");
}

#[tokio::test]
async fn responses_call_output_pairing() {
    let mock = start().await;
    let resp = |input: Value| json!({"model": "gpt-5", "input": input});
    let user = json!({"type": "message", "role": "user", "content": "list"});
    let call = json!({"type": "function_call", "call_id": "call_1", "name": "exec_command",
        "arguments": "{}"});
    let output = json!({"type": "function_call_output", "call_id": "call_1", "output": "a"});

    ok(&post(&mock, RESPONSES, &resp(json!([user, call, output]))).await);
    let e = openai_refusal(
        &post(&mock, RESPONSES, &resp(json!([user, call]))).await,
        "responses.call_unanswered",
    );
    assert_eq!(
        e,
        json!({"message": "No tool output found for function call call_1.",
            "type": "invalid_request_error", "param": "input", "code": null})
    );
    let e = openai_refusal(
        &post(&mock, RESPONSES, &resp(json!([user, output]))).await,
        "responses.output_unexpected",
    );
    assert_eq!(
        e["message"],
        "No tool call found for function call output with call_id call_1."
    );
    // The call may be in the previous response, kept by the server: not checked.
    let mut chained = resp(json!([output]));
    chained["previous_response_id"] = json!("resp_1");
    ok(&post(&mock, RESPONSES, &chained).await);
}

#[tokio::test]
async fn context_windows_per_api() {
    let mock = start_with(Config {
        windows: vec![("small".into(), 50)],
        ..Config::default()
    })
    .await;
    let filler = "x".repeat(400); // ~100+ tokens
    let claude =
        json!({"model": "small-claude", "messages": [{"role": "user", "content": filler}]});
    let body_tokens = claude.to_string().len() / 4;
    let m = anthropic_refusal(&post(&mock, MESSAGES, &claude).await, "context_window");
    assert_eq!(
        m,
        format!("prompt is too long: {body_tokens} tokens > 50 maximum")
    );
    let chat = json!({"model": "small", "messages": [{"role": "user", "content": filler}]});
    let tokens = chat.to_string().len() / 4;
    let e = openai_refusal(&post(&mock, CHAT, &chat).await, "context_window");
    assert_eq!(
        e,
        json!({"message": format!("This model's maximum context length is 50 tokens. However, \
            your messages resulted in {tokens} tokens. Please reduce the length of the \
            messages."),
            "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded"})
    );
    let resp = json!({"model": "small", "input": filler});
    let e = openai_refusal(&post(&mock, RESPONSES, &resp).await, "context_window");
    assert_eq!(
        e,
        json!({"message": "Your input exceeds the context window of this model. Please adjust \
            your input and try again.",
            "type": "invalid_request_error", "param": "input",
            "code": "context_length_exceeded"})
    );
    // Other models: the table (gpt-4 has 8,192 tokens; claude 200k, or 1M when asked).
    let big = "y".repeat(40_000);
    let gpt4 = json!({"model": "gpt-4", "messages": [{"role": "user", "content": big}]});
    openai_refusal(&post(&mock, CHAT, &gpt4).await, "context_window");
    let huge = "z".repeat(1_000_000);
    let long =
        json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": huge}]});
    anthropic_refusal(&post(&mock, MESSAGES, &long).await, "context_window");
    let beta = [("anthropic-beta", "context-1m-2025-08-07")];
    let bytes = long.to_string().into_bytes();
    ok(&post_raw(&mock, MESSAGES, bytes, &beta).await);
}

#[tokio::test]
async fn refusals_are_recorded_and_consume_no_script() {
    let mock = start().await;
    mock.script().push(Reply::text("scripted"));
    let bad = claude(json!([{"role": "assistant", "content": "x"}]));
    anthropic_refusal(&post(&mock, MESSAGES, &bad).await, "anthropic.first_role");
    let good = claude(json!([{"role": "user", "content": "x"}]));
    let r = post(&mock, MESSAGES, &good).await;
    assert_eq!(r.json()["content"][0]["text"], "scripted");
    // Scripted errors still come after validation.
    mock.script().push(Reply::error(529, "busy"));
    anthropic_refusal(&post(&mock, MESSAGES, &bad).await, "anthropic.first_role");
    assert_eq!(post(&mock, MESSAGES, &good).await.status, 529);

    let recs = mock.requests();
    assert_eq!(recs.len(), 4);
    assert_eq!(recs[0].refused.as_deref(), Some("anthropic.first_role"));
    assert_eq!(recs[1].refused, None);
    assert_eq!(recs[0].to_json()["refused"], "anthropic.first_role");
}

#[tokio::test]
async fn lax_mode_accepts_what_strict_refuses() {
    // Lax on purpose: this test is about lax mode.
    let mock = start_with(Config {
        strict: false,
        windows: vec![("small".into(), 1)],
        ..Config::default()
    })
    .await;
    let bodies = [
        (
            MESSAGES,
            claude(json!([{"role": "assistant", "content": [tool_use("t")]}])),
        ),
        (
            MESSAGES,
            claude(json!([{"role": "user", "content": [tool_result("t")]}])),
        ),
        (
            CHAT,
            json!({"model": "small", "messages": [{"role": "tool", "tool_call_id": "c",
                   "content": "a"}]}),
        ),
        (
            RESPONSES,
            json!({"model": "small", "input": [{"type": "function_call", "call_id": "c",
                   "name": "f", "arguments": "{}"}]}),
        ),
    ];
    let strict = start().await;
    for (path, body) in &bodies {
        ok(&post(&mock, path, body).await);
        assert_eq!(post(&strict, path, body).await.status, 400, "{path} {body}");
    }
}

/// More than 4 `cache_control` blocks (nested and system ones count) are refused with
/// Anthropic's message; up to 4 are served, and the simulated cache reports what it wrote and
/// read in the usage, JSON and SSE.
#[tokio::test]
async fn anthropic_breakpoints_are_capped_and_the_cache_is_simulated() {
    let mock = start().await;
    let mark = json!({"type": "ephemeral"});
    let big = "x".repeat(8_000);
    let text = |t: &str, marked: bool| {
        let mut b = json!({"type": "text", "text": t});
        if marked {
            b["cache_control"] = mark.clone();
        }
        b
    };
    let body = |n: usize, stream: bool| {
        let messages: Vec<Value> = (0..n)
            .map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": [text(&format!("{i} {big}"), i == n - 1)]})
            })
            .collect();
        let mut b = claude(json!(messages));
        b["system"] = json!([text("one", true), text("two", true)]);
        b["stream"] = json!(stream);
        b
    };
    let mut five = body(3, false);
    five["messages"][0]["content"][0]["cache_control"] = mark.clone();
    five["messages"][1]["content"][0]["cache_control"] = mark.clone();
    let m = anthropic_refusal(
        &post(&mock, MESSAGES, &five).await,
        "anthropic.cache_control_limit",
    );
    assert_eq!(
        m,
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    );

    let first = post(&mock, MESSAGES, &body(3, false)).await;
    ok(&first);
    let u = &first.json()["usage"];
    assert_eq!(u["cache_read_input_tokens"], 0);
    let written = u["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(written > 5_000, "{u}");
    // The same prefix and two more messages: read back, the rest written (SSE).
    let second = post(&mock, MESSAGES, &body(5, true)).await;
    ok(&second);
    let events = second.events();
    let start = &events[0].data["message"]["usage"];
    assert_eq!(start["cache_read_input_tokens"].as_u64(), Some(written));
    let end = &events
        .iter()
        .rev()
        .find(|e| e.data["type"] == "message_delta")
        .unwrap()
        .data;
    assert_eq!(
        end["usage"]["cache_read_input_tokens"].as_u64(),
        Some(written)
    );
    assert!(
        end["usage"]["cache_creation_input_tokens"]
            .as_u64()
            .unwrap()
            > 3_000
    );
}
