//! Anthropic Messages, JSON and SSE.

use ctxd_mock::{Config, Reasoning};
use serde_json::{json, Value};

use crate::support::{names, post, post_raw, start, start_with};

fn bash_tool() -> Value {
    json!({"name": "Bash", "description": "Run a command",
           "input_schema": {"type": "object", "properties": {"command": {"type": "string"},
           "description": {"type": "string"}}, "required": ["command"]}})
}

fn first_turn(stream: bool) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": stream,
           "tools": [bash_tool()],
           "messages": [{"role": "user", "content": [{"type": "text", "text": "list the files"}]}]})
}

fn second_turn(stream: bool) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": stream,
           "tools": [bash_tool()],
           "messages": [
             {"role": "user", "content": "list the files"},
             {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash",
               "input": {"command": "ls"}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
               "content": "README.md\nmain.py"}]}]})
}

#[tokio::test]
async fn json_tool_call_then_final_text() {
    let mock = start().await;
    let body = first_turn(false);
    let r = post(&mock, "/v1/messages", &body).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "application/json");
    let msg = r.json();
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["model"], "claude-sonnet-4-5");
    assert_eq!(msg["stop_reason"], "tool_use");
    let block = &msg["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert_eq!(block["name"], "Bash");
    assert_eq!(
        block["input"],
        json!({"command": "ls", "description": "List files in the current directory"})
    );
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
    let input_tokens = msg["usage"]["input_tokens"].as_u64().unwrap();
    assert_eq!(input_tokens as usize, body.to_string().len() / 4);

    let msg = post(&mock, "/v1/messages", &second_turn(false))
        .await
        .json();
    assert_eq!(msg["stop_reason"], "end_turn");
    assert_eq!(msg["content"], json!([{"type": "text", "text": "done"}]));
}

#[tokio::test]
async fn stream_follows_the_real_event_sequence() {
    let mock = start().await;
    let r = post(&mock, "/v1/messages?beta=true", &first_turn(true)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "text/event-stream; charset=utf-8");
    assert!(
        r.headers.get("content-length").is_none(),
        "SSE goes out chunked"
    );
    let events = r.events();
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for e in &events {
        assert_eq!(Some(e.data["type"].as_str().unwrap()), e.name.as_deref());
    }
    assert_eq!(events[0].data["message"]["usage"]["output_tokens"], 1);
    assert_eq!(events[1].data["content_block"]["input"], json!({}));
    let partial: String = events[3..5]
        .iter()
        .map(|e| e.data["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    let input: Value = serde_json::from_str(&partial).unwrap();
    assert_eq!(input["command"], "ls");
    assert_eq!(events[6].data["delta"]["stop_reason"], "tool_use");
    assert!(events[6].data["usage"]["output_tokens"].as_u64().unwrap() > 1);

    let events = post(&mock, "/v1/messages", &second_turn(true))
        .await
        .events();
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(
        events[3].data["delta"],
        json!({"type": "text_delta", "text": "done"})
    );
    assert_eq!(events[5].data["delta"]["stop_reason"], "end_turn");
}

#[tokio::test]
async fn system_entries_inside_messages_are_skipped() {
    let mock = start().await;
    let mut body = first_turn(false);
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "system", "content": "reminder"}));
    // The real API takes `system` entries in `messages` only with this beta (Claude Code's).
    let beta = [("anthropic-beta", "mid-conversation-system-2026-04-07")];
    let bytes = body.to_string().into_bytes();
    let msg = post_raw(&mock, "/v1/messages", bytes.clone(), &beta)
        .await
        .json();
    assert_eq!(msg["content"][0]["type"], "tool_use");
    let r = post_raw(&mock, "/v1/messages", bytes, &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.headers["x-mock-refused"], "anthropic.role");
}

#[tokio::test]
async fn thinking_block_when_asked() {
    let mock = start_with(Config {
        reasoning: Reasoning::WhenAsked,
        ..Config::default()
    })
    .await;
    let mut body = second_turn(false);
    let plain = post(&mock, "/v1/messages", &body).await.json();
    assert_eq!(plain["content"].as_array().unwrap().len(), 1);

    body["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    // With thinking enabled, the real API wants the tool loop's assistant turn to start with
    // its thinking block.
    body["messages"][1]["content"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"type": "redacted_thinking", "data": "opaque"}));
    let msg = post(&mock, "/v1/messages", &body).await.json();
    let thinking = &msg["content"][0];
    assert_eq!(thinking["type"], "thinking");
    assert!(!thinking["thinking"].as_str().unwrap().is_empty());
    assert!(!thinking["signature"].as_str().unwrap().is_empty());
    assert_eq!(msg["content"][1]["text"], "done");

    body["stream"] = json!(true);
    let events = post(&mock, "/v1/messages", &body).await.events();
    assert_eq!(
        events[1].data["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    assert_eq!(events[3].data["delta"]["type"], "thinking_delta");
    assert_eq!(events[4].data["delta"]["type"], "signature_delta");
    assert!(!events[4].data["delta"]["signature"]
        .as_str()
        .unwrap()
        .is_empty());
    assert_eq!(events[5].data["type"], "content_block_stop");
    assert_eq!(events[6].data["content_block"]["type"], "text");
    assert_eq!(events[6].data["index"], 1);
}

#[tokio::test]
async fn count_tokens_and_errors_in_anthropic_shape() {
    let mock = start().await;
    let body = first_turn(false);
    let r = post(&mock, "/v1/messages/count_tokens", &body).await;
    assert_eq!(
        r.json(),
        json!({"input_tokens": body.to_string().len() / 4})
    );

    let r = crate::support::post_raw(&mock, "/v1/messages", b"{not json".to_vec(), &[]).await;
    assert_eq!(r.status, 400);
    let err = r.json();
    assert_eq!(err["type"], "error");
    assert_eq!(err["error"]["type"], "invalid_request_error");
    assert!(err["request_id"].as_str().unwrap().starts_with("req_"));
}
