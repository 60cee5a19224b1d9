//! OpenAI Chat Completions, JSON and SSE.

use ctxd_mock::Reply;
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

/// A judging request: logprobs asked, no tools.
fn judge(text: &str, stream: bool) -> Value {
    json!({"model": "judge", "stream": stream, "max_tokens": 1, "temperature": 0,
           "logprobs": true, "top_logprobs": 5,
           "messages": [{"role": "system", "content": "answer Yes or No"},
                        {"role": "user", "content": text}]})
}

#[tokio::test]
async fn logprobs_answer_judging_requests_deterministically() {
    let mock = start().await;
    let c = post(
        &mock,
        "/v1/chat/completions",
        &judge("Keep it? mock:p=0.8", false),
    )
    .await
    .json();
    let choice = &c["choices"][0];
    assert_eq!(choice["message"]["content"], "Yes");
    let first = &choice["logprobs"]["content"][0];
    assert_eq!(first["token"], "Yes");
    assert_eq!(first["bytes"], json!([89, 101, 115]));
    let top = first["top_logprobs"].as_array().unwrap();
    assert_eq!(top.len(), 5, "top_logprobs is honoured");
    let p = |t: &str| -> f64 {
        top.iter()
            .filter(|a| a["token"] == t)
            .map(|a| a["logprob"].as_f64().unwrap().exp())
            .sum()
    };
    assert!((p("Yes") - 0.97 * 0.8 * 0.92).abs() < 1e-9);
    assert!((p("No") - 0.97 * 0.2 * 0.92).abs() < 1e-9);
    assert_eq!(choice["logprobs"]["refusal"], Value::Null);

    // The same request, the same numbers; options get a letter.
    let again = post(
        &mock,
        "/v1/chat/completions",
        &judge("Keep it? mock:p=0.8", false),
    )
    .await
    .json();
    assert_eq!(again["choices"][0]["logprobs"], choice["logprobs"]);
    let c = post(
        &mock,
        "/v1/chat/completions",
        &judge("Which?\nA) chunk_1\nB) whole\nC) none\nmock:pick=B", false),
    )
    .await
    .json();
    assert_eq!(c["choices"][0]["message"]["content"], "B");

    // Streamed: one content chunk per token, each with its logprobs.
    let events = post(
        &mock,
        "/v1/chat/completions",
        &judge("Keep it? mock:p=0.1", true),
    )
    .await
    .events();
    let content: Vec<&crate::support::Event> = events
        .iter()
        .filter(|e| {
            e.data["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
        })
        .collect();
    assert_eq!(content.len(), 1);
    assert_eq!(content[0].data["choices"][0]["delta"]["content"], "No");
    assert_eq!(
        content[0].data["choices"][0]["logprobs"]["content"][0]["token"],
        "No"
    );

    // Without logprobs, no logprobs (and the built-in final text).
    let mut plain = judge("Keep it?", false);
    plain.as_object_mut().unwrap().remove("logprobs");
    plain.as_object_mut().unwrap().remove("top_logprobs");
    let c = post(&mock, "/v1/chat/completions", &plain).await.json();
    assert_eq!(c["choices"][0]["logprobs"], Value::Null);
    assert_eq!(c["choices"][0]["message"]["content"], "done");
}

#[tokio::test]
async fn scripted_distributions_and_texts_carry_logprobs() {
    let mock = start().await;
    mock.script().push(Reply::sampled(&[
        ("No", 0.55),
        (" Yes", 0.4),
        ("yes", 0.05),
    ]));
    mock.script().push(Reply::text("It is done."));
    let c = post(&mock, "/v1/chat/completions", &judge("anything", false))
        .await
        .json();
    let lp = &c["choices"][0]["logprobs"]["content"];
    assert_eq!(c["choices"][0]["message"]["content"], "No");
    let tokens: Vec<&str> = lp[0]["top_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token"].as_str().unwrap())
        .collect();
    assert_eq!(tokens, ["No", " Yes", "yes"]);
    assert!((lp[0]["logprob"].as_f64().unwrap() - 0.55f64.ln()).abs() < 1e-12);

    let c = post(&mock, "/v1/chat/completions", &judge("anything", false))
        .await
        .json();
    let lp = c["choices"][0]["logprobs"]["content"].as_array().unwrap();
    let tokens: Vec<&str> = lp.iter().map(|t| t["token"].as_str().unwrap()).collect();
    assert_eq!(tokens, ["It", " is", " done", "."]);
    for t in lp {
        assert_eq!(t["top_logprobs"][0]["token"], t["token"]);
        assert_eq!(t["top_logprobs"].as_array().unwrap().len(), 5);
        assert!(t["logprob"].as_f64().unwrap() < 0.0);
    }
}
