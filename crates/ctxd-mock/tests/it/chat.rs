//! OpenAI Chat Completions, JSON and SSE.

use serde_json::{json, Value};

use crate::support::{post, post_raw, start};

fn body(stream: bool, done: bool) -> Value {
    let mut messages = vec![
        json!({"role": "system", "content": "be brief"}),
        json!({"role": "user", "content": "list the files"}),
    ];
    if done {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
            "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "README.md"}));
    }
    json!({"model": "gpt-4o-mini", "stream": stream, "messages": messages,
           "tools": [{"type": "function", "function": {"name": "bash",
             "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
             "required": ["command"]}}}]})
}

#[tokio::test]
async fn json_tool_call_then_final_text() {
    let mock = start().await;
    let b = body(false, false);
    let c = post(&mock, "/v1/chat/completions", &b).await.json();
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["model"], "gpt-4o-mini");
    let choice = &c["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "bash");
    assert_eq!(call["function"]["arguments"], "{\"command\":\"ls\"}");
    let usage = &c["usage"];
    assert_eq!(
        usage["prompt_tokens"].as_u64().unwrap() as usize,
        b.to_string().len() / 4
    );
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );

    let c = post(&mock, "/v1/chat/completions", &body(false, true))
        .await
        .json();
    assert_eq!(c["choices"][0]["finish_reason"], "stop");
    assert_eq!(c["choices"][0]["message"]["content"], "done");
    assert!(c["choices"][0]["message"].get("tool_calls").is_none());
}

#[tokio::test]
async fn stream_chunks_usage_and_done() {
    let mock = start().await;
    let mut b = body(true, false);
    b["stream_options"] = json!({"include_usage": true});
    let events = post(&mock, "/v1/chat/completions", &b).await.events();
    assert!(
        events.iter().all(|e| e.name.is_none()),
        "chat events are unnamed"
    );
    assert_eq!(events.len(), 6, "{events:?}");
    assert_eq!(
        events[0].data["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let head = &events[1].data["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(head["function"], json!({"name": "bash", "arguments": ""}));
    assert!(head["id"].as_str().unwrap().starts_with("call_"));
    let args = &events[2].data["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"];
    assert_eq!(args, "{\"command\":\"ls\"}");
    assert_eq!(events[3].data["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(events[4].data["choices"], json!([]));
    assert!(events[4].data["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(events[5].data, json!("[DONE]"));
    let ids: Vec<&Value> = events[..5].iter().map(|e| &e.data["id"]).collect();
    assert!(
        ids.windows(2).all(|w| w[0] == w[1]),
        "one id per completion"
    );

    let events = post(&mock, "/v1/chat/completions", &body(true, true))
        .await
        .events();
    assert_eq!(events.len(), 4, "no usage chunk unless asked: {events:?}");
    assert_eq!(
        events[1].data["choices"][0]["delta"],
        json!({"content": "done"})
    );
    assert_eq!(events[2].data["choices"][0]["finish_reason"], "stop");
    assert_eq!(events[3].data, json!("[DONE]"));
}

#[tokio::test]
async fn errors_in_openai_shape() {
    let mock = start().await;
    let r = post_raw(&mock, "/v1/chat/completions", b"[1,".to_vec(), &[]).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = post(&mock, "/v1/nowhere", &json!({})).await;
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/v1/nowhere"));
    let r = crate::support::client()
        .get(format!("{}/v1/chat/completions", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
}
