//! Multi-turn tool-using conversations on each API, streaming and not: the log holds each
//! message once, in order, with the provider's usage, and nothing goes upstream changed.

use serde_json::{json, Value};

use crate::support::{branch_messages, Rig};

/// Send `body` and return the parsed reply; for a stream, the raw SSE text as a string value.
async fn turn(rig: &Rig, path: &str, headers: &[(&str, &str)], body: &Value) -> Value {
    let resp = rig
        .post(path, headers, serde_json::to_vec(body).unwrap())
        .await;
    assert!(resp.status().is_success(), "{}", resp.status());
    let text = resp.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

fn anthropic_tools() -> Value {
    json!([{"name": "bash", "description": "Run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_three_turns_are_recorded_once_each() {
    let mut rig = Rig::start().await;
    let h = [("x-api-key", "sk-test"), ("x-ctxd-session", "conv-a")];
    let mut messages = vec![json!({"role": "user", "content": "list the files"})];
    let body = |messages: &Vec<Value>| {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "tools": anthropic_tools(),
            "system": "You are terse.", "messages": messages})
    };
    let r1 = turn(&rig, "/v1/messages", &h, &body(&messages)).await;
    assert_eq!(r1["content"][0]["type"], "tool_use");
    let call_id = r1["content"][0]["id"].as_str().unwrap().to_owned();
    messages.push(json!({"role": "assistant", "content": r1["content"].clone()}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call_id, "content": "README.md\nmain.py"}]}));
    // The second turn streams.
    let mut b2 = body(&messages);
    b2["stream"] = json!(true);
    let r2 = turn(&rig, "/v1/messages", &h, &b2).await;
    assert!(r2.as_str().unwrap().contains("message_stop"));
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]}));
    messages.push(json!({"role": "user", "content": "thanks"}));
    let _ = turn(&rig, "/v1/messages", &h, &body(&messages)).await;
    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 3);
    let stored = rig.stored().await;
    let sessions = stored.sessions();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].key, "conv-a");
    let session = stored.load(&sessions[0]);
    let got = branch_messages(&session);
    let roles: Vec<&str> = got.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        roles,
        [
            "User",
            "Assistant",
            "User",
            "Assistant",
            "User",
            "Assistant"
        ],
        "{got:?}"
    );
    assert!(got[1].1.contains("bash"));
    assert!(got[2].1.contains("main.py"));
    assert_eq!(got[3].1, "done");
    // The response entries carry the provider's usage.
    let with_usage = session
        .entries
        .iter()
        .filter(|e| matches!(&e.kind, ctxd_core::model::EntryKind::Message(m) if m.usage.is_some()))
        .count();
    assert_eq!(with_usage, 3);
    // No duplicates: system prompt, tools, 6 messages, and each request's record.
    let records = ctxd_core::savings::record::requests(&session).len();
    assert_eq!(records, 3);
    assert_eq!(session.entries.len(), 8 + records, "{:#?}", session.entries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_and_responses_tool_loops_stream_and_not() {
    let mut rig = Rig::start().await;
    let auth = [("authorization", "Bearer sk-openai")];
    // Chat Completions, streaming.
    let tools = json!([{"type": "function", "function": {"name": "bash", "description": "run",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]);
    let mut messages = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "list the files"}),
    ];
    let r = turn(
        &rig,
        "/v1/chat/completions",
        &auth,
        &json!({"model": "gpt-4o-mini",
        "messages": messages, "tools": tools}),
    )
    .await;
    let call = r["choices"][0]["message"]["tool_calls"][0].clone();
    messages.push(r["choices"][0]["message"].clone());
    messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "a.txt"}));
    let r = turn(
        &rig,
        "/v1/chat/completions",
        &auth,
        &json!({"model": "gpt-4o-mini",
        "messages": messages, "tools": tools, "stream": true,
        "stream_options": {"include_usage": true}}),
    )
    .await;
    assert!(r.as_str().unwrap().contains("[DONE]"));

    // Responses, streaming then not.
    let rtools = json!([{"type": "function", "name": "shell", "description": "run",
        "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}]);
    let mut input = vec![json!({"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "list the files"}]})];
    let r = turn(
        &rig,
        "/v1/responses",
        &auth,
        &json!({"model": "gpt-5-mini", "input": input,
        "tools": rtools, "stream": true, "instructions": "be brief"}),
    )
    .await;
    let sse = r.as_str().unwrap();
    // The function call item of the stream, as the client would echo it.
    let item = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["type"] == "response.output_item.done")
        .unwrap()["item"]
        .clone();
    input.push(item.clone());
    input.push(
        json!({"type": "function_call_output", "call_id": item["call_id"], "output": "a.txt"}),
    );
    let r = turn(
        &rig,
        "/v1/responses",
        &auth,
        &json!({"model": "gpt-5-mini", "input": input,
        "tools": rtools, "instructions": "be brief"}),
    )
    .await;
    assert_eq!(r["output"][0]["content"][0]["text"], "done");

    let stored = rig.stored().await;
    let sessions = stored.sessions();
    assert_eq!(sessions.len(), 2, "one chat and one responses conversation");
    for s in &sessions {
        let got: Vec<_> = branch_messages(&stored.load(s))
            .into_iter()
            .filter(|(role, _)| role != "System") // Chat keeps its system message in the array
            .collect();
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got.last().unwrap().1.contains("done"));
        assert_eq!(s.meta.agent.map(|a| a.as_str()), Some("api"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_health_and_metrics() {
    let rig = Rig::start().await;
    let head = rig.client.head(rig.url("/")).send().await.unwrap();
    assert_eq!(head.status(), 200, "Claude Code's preflight");
    let health: Value = serde_json::from_slice(
        &rig.client
            .get(rig.url("/healthz"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(health["status"], "ok");
    // A turn, then its figures in Prometheus text.
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hello"}]});
    let r = turn(&rig, "/v1/messages", &[("x-api-key", "k")], &body).await;
    assert_eq!(r["content"][0]["text"], "done");
    let models = rig
        .client
        .get(rig.url("/v1/models"))
        .header("x-api-key", "k")
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200, "passed through to the provider");
    assert_eq!(rig.mock.requests().last().unwrap().path, "/v1/models");
    let metrics = rig
        .client
        .get(rig.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "ctxd_requests_total",
        "ctxd_request_seconds_bucket",
        "ctxd_upstream_seconds_bucket",
        "ctxd_overhead_seconds_bucket",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    assert!(metrics.contains("route=\"messages\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unnamed_chat_conversations_with_one_system_prompt_stay_apart() {
    let mut rig = Rig::start().await;
    for text in ["first conversation", "second, unrelated conversation"] {
        let body = json!({"model": "gpt-4o-mini", "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": text}]});
        let _ = turn(
            &rig,
            "/v1/chat/completions",
            &[("authorization", "Bearer k")],
            &body,
        )
        .await;
    }
    let stored = rig.stored().await;
    assert_eq!(stored.sessions().len(), 2);
}
