//! Scripted replies: content, errors, delays, truncation, padding.

use std::time::{Duration, Instant};

use ctxd_mock::{Config, Part, Reply, Shape};
use serde_json::{json, Value};

use crate::support::{client, names, post, read_until_break, sse, start, start_with};

fn anthropic(stream: bool) -> Value {
    json!({"model": "claude-sonnet-4-5", "stream": stream,
           "messages": [{"role": "user", "content": "hi"}]})
}

fn chat(stream: bool) -> Value {
    json!({"model": "gpt-4o-mini", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

fn responses(stream: bool) -> Value {
    json!({"model": "gpt-5", "stream": stream, "input": "hi",
           "tools": [{"type": "custom", "name": "apply_patch"}]})
}

/// A request body, streaming or not.
type BodyFn = fn(bool) -> Value;

const ROUTES: [(&str, BodyFn); 3] = [
    ("/v1/messages", anthropic),
    ("/v1/chat/completions", chat),
    ("/v1/responses", responses),
];

#[tokio::test]
async fn replies_are_used_in_order_then_the_default() {
    let mock = start().await;
    mock.script().push(Reply::text("first"));
    mock.script()
        .push(Reply::tool_call("Read", json!({"path": "a.txt"})));
    assert_eq!(mock.script().len(), 2);
    let m = post(&mock, "/v1/messages", &anthropic(false)).await.json();
    assert_eq!(m["content"], json!([{"type": "text", "text": "first"}]));
    let m = post(&mock, "/v1/messages", &anthropic(false)).await.json();
    assert_eq!(m["content"][0]["name"], "Read");
    assert_eq!(m["content"][0]["input"], json!({"path": "a.txt"}));
    assert_eq!(m["stop_reason"], "tool_use");
    assert!(mock.script().is_empty());
    let m = post(&mock, "/v1/messages", &anthropic(false)).await.json();
    assert_eq!(m["content"][0]["text"], "done");
    // count_tokens and models never take a scripted reply
    mock.script().push(Reply::text("kept"));
    post(&mock, "/v1/messages/count_tokens", &anthropic(false)).await;
    client()
        .get(format!("{}/v1/models", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(mock.script().len(), 1);
}

#[tokio::test]
async fn parallel_tool_calls_in_each_api() {
    let mock = start().await;
    let parts = vec![
        Part::Text("Looking.".into()),
        Part::ToolCall {
            name: "Read".into(),
            args: json!({"path": "a"}),
        },
        Part::ToolCall {
            name: "apply_patch".into(),
            args: json!("*** Begin Patch"),
        },
    ];
    mock.script().extend([
        Reply::parts(parts.clone()),
        Reply::parts(parts.clone()),
        Reply::parts(parts),
    ]);
    let m = post(&mock, "/v1/messages", &anthropic(false)).await.json();
    let kinds: Vec<&str> = m["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["text", "tool_use", "tool_use"]);
    let c = post(&mock, "/v1/chat/completions", &chat(true))
        .await
        .events();
    let calls: Vec<&Value> = c
        .iter()
        .filter_map(|e| {
            e.data["choices"][0]["delta"]["tool_calls"][0]["id"]
                .as_str()
                .map(|_| &e.data)
        })
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1]["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
    let r = post(&mock, "/v1/responses", &responses(false)).await.json();
    let kinds: Vec<&str> = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    // apply_patch is offered as a custom tool, so its call is a custom_tool_call
    assert_eq!(kinds, ["message", "function_call", "custom_tool_call"]);
    assert_eq!(r["output"][2]["input"], "*** Begin Patch");
}

/// A recorded response replayed exactly: the call ids the client sends back, and thinking
/// blocks / reasoning items in their place, JSON and SSE.
#[tokio::test]
async fn recorded_ids_and_thinking_in_each_api() {
    let mock = start().await;
    let parts = vec![
        Part::Thinking {
            text: "plan".into(),
            signature: Some("sig-1".into()),
            redacted: false,
        },
        Part::Thinking {
            text: String::new(),
            signature: Some("opaque".into()),
            redacted: true,
        },
        Part::Text("Looking.".into()),
        Part::ToolCallWithId {
            id: "toolu_recorded".into(),
            name: "Read".into(),
            args: json!({"path": "a"}),
        },
        Part::ToolCallWithId {
            id: "call_patch".into(),
            name: "apply_patch".into(),
            args: json!("*** Begin Patch"),
        },
    ];
    for _ in 0..6 {
        mock.script().push(Reply::parts(parts.clone()));
    }
    let m = post(&mock, "/v1/messages", &anthropic(false)).await.json();
    assert_eq!(
        m["content"][0],
        json!({"type": "thinking", "thinking": "plan", "signature": "sig-1"})
    );
    assert_eq!(
        m["content"][1],
        json!({"type": "redacted_thinking", "data": "opaque"})
    );
    assert_eq!(m["content"][3]["id"], "toolu_recorded");
    assert_eq!(m["content"][4]["id"], "call_patch");
    let events = sse(&post(&mock, "/v1/messages", &anthropic(true)).await.body);
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_start"))
        .map(|e| &e.data["content_block"])
        .collect();
    assert_eq!(
        starts[1],
        &json!({"type": "redacted_thinking", "data": "opaque"})
    );
    assert_eq!(starts[3]["id"], "toolu_recorded");
    assert!(events
        .iter()
        .any(|e| e.data["delta"]["signature"] == "sig-1"));

    let c = post(&mock, "/v1/chat/completions", &chat(false))
        .await
        .json();
    let message = &c["choices"][0]["message"];
    assert_eq!(message["content"], "Looking.");
    assert_eq!(message["tool_calls"][0]["id"], "toolu_recorded");
    assert_eq!(message["tool_calls"][1]["id"], "call_patch");
    post(&mock, "/v1/chat/completions", &chat(true)).await;

    let r = post(&mock, "/v1/responses", &responses(false)).await.json();
    let output = r["output"].as_array().unwrap();
    assert_eq!(output[0]["type"], "reasoning");
    assert_eq!(output[0]["summary"][0]["text"], "plan");
    assert_eq!(output[0]["encrypted_content"], "sig-1");
    assert_eq!(output[1]["summary"], json!([]));
    assert_eq!(output[3]["call_id"], "toolu_recorded");
    assert_eq!(output[4]["type"], "custom_tool_call");
    assert_eq!(output[4]["call_id"], "call_patch");
    let events = sse(&post(&mock, "/v1/responses", &responses(true)).await.body);
    let done: Vec<&Value> = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("response.output_item.done"))
        .map(|e| &e.data["item"])
        .collect();
    assert_eq!(done[0]["encrypted_content"], "sig-1");
    assert_eq!(done[4]["call_id"], "call_patch");
    assert!(mock.script().is_empty());
}

#[tokio::test]
async fn http_errors_in_each_api_shape() {
    let mock = start().await;
    for (path, body) in ROUTES {
        mock.script().push(Reply::error(529, "overloaded"));
        let r = post(&mock, path, &body(true)).await;
        assert_eq!(r.status, 529, "{path}");
        assert_eq!(r.content_type(), "application/json");
        let e = r.json();
        if path == "/v1/messages" {
            assert_eq!(e["error"]["type"], "overloaded_error");
        } else {
            assert_eq!(e["error"]["type"], "server_error");
        }
        assert_eq!(e["error"]["message"], "overloaded");
    }
}

#[tokio::test]
async fn replies_carry_extra_headers_and_the_record_notes_status_and_usage() {
    let mock = start().await;
    for (path, body) in ROUTES {
        mock.clear();
        mock.script()
            .push(Reply::error(429, "slow down").header("retry-after", "7"));
        let r = post(&mock, path, &body(false)).await;
        assert_eq!(r.status, 429, "{path}");
        assert_eq!(r.headers["retry-after"], "7", "{path}");
        mock.script().push(Reply::text("fine"));
        let r = post(&mock, path, &body(true)).await;
        assert_eq!(r.status, 200, "{path}");
        assert!(r.headers.get("x-mock-usage").is_none(), "{path}: internal");
        let rec = mock.requests();
        assert_eq!(rec[0].status, Some(429), "{path}");
        assert_eq!(rec[0].usage, None, "{path}: an error bills nothing");
        assert_eq!(rec[1].status, Some(200), "{path}");
        let usage = rec[1].usage.unwrap_or_else(|| panic!("{path}: no usage"));
        assert!(usage.input > 0 && usage.output > 0, "{path}: {usage:?}");
        // Cut: nothing complete reached the client, nothing billed on the record.
        mock.script()
            .push(Reply::text("cut short").truncate_after_events(1));
        let cut = client()
            .post(format!("{}{path}", mock.base_url()))
            .header("content-type", "application/json")
            .body(body(true).to_string())
            .send()
            .await;
        if let Ok(r) = cut {
            let _ = r.bytes().await;
        }
        assert_eq!(mock.requests()[2].usage, None, "{path}");
    }
}

#[tokio::test]
async fn failure_mid_stream_in_each_api() {
    let mock = start().await;
    mock.script()
        .extend((0..4).map(|_| Reply::fail_mid_stream("went away")));
    let a = post(&mock, "/v1/messages", &anthropic(true)).await.events();
    assert_eq!(names(&a), ["message_start", "ping", "error"]);
    assert_eq!(a[2].data["error"]["message"], "went away");
    let c = post(&mock, "/v1/chat/completions", &chat(true))
        .await
        .events();
    assert_eq!(c.last().unwrap().data["error"]["message"], "went away");
    assert!(c.iter().all(|e| e.data != json!("[DONE]")));
    let r = post(&mock, "/v1/responses", &responses(true))
        .await
        .events();
    assert_eq!(
        names(&r),
        [
            "response.created",
            "response.in_progress",
            "response.failed"
        ]
    );
    assert_eq!(r[2].data["response"]["error"]["message"], "went away");
    let j = post(&mock, "/v1/messages", &anthropic(false)).await;
    assert_eq!(j.status, 500);
}

#[tokio::test]
async fn first_byte_and_event_delays() {
    let mock = start().await;
    mock.script()
        .push(Reply::text("slow").first_byte_delay(Duration::from_millis(150)));
    let t = Instant::now();
    post(&mock, "/v1/messages", &anthropic(false)).await;
    assert!(t.elapsed() >= Duration::from_millis(150));

    // 7 events, 6 gaps of 40 ms; the first event arrives long before the last.
    mock.script()
        .push(Reply::text("paced").event_delay(Duration::from_millis(40)));
    let t = Instant::now();
    let mut res = client()
        .post(format!("{}/v1/messages", mock.base_url()))
        .body(anthropic(true).to_string())
        .send()
        .await
        .unwrap();
    let first = res.chunk().await.unwrap().unwrap();
    let to_first = t.elapsed();
    assert!(String::from_utf8_lossy(&first).starts_with("event: message_start"));
    let (rest, broke) = read_until_break(res).await;
    let total = t.elapsed();
    assert!(!broke);
    assert!(total >= Duration::from_millis(240), "{total:?}");
    assert!(
        to_first < total - Duration::from_millis(150),
        "{to_first:?} vs {total:?}"
    );
    let mut all = first.to_vec();
    all.extend(rest);
    assert_eq!(sse(&all).len(), 7);
}

#[tokio::test]
async fn truncated_streams_close_the_connection() {
    let mock = start().await;
    for (path, body) in ROUTES {
        mock.script()
            .push(Reply::default_turn().truncate_after_events(2));
        let res = client()
            .post(format!("{}{path}", mock.base_url()))
            .body(body(true).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let (got, broke) = read_until_break(res).await;
        assert!(broke, "{path}: the connection must break");
        assert_eq!(sse(&got).len(), 2, "{path}");
    }
    mock.script()
        .push(Reply::text("cut").truncate_after_bytes(10));
    let res = client()
        .post(format!("{}/v1/messages", mock.base_url()))
        .body(anthropic(false).to_string())
        .send()
        .await
        .unwrap();
    let full: usize = res.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let (got, broke) = read_until_break(res).await;
    assert!(broke);
    assert_eq!(got.len(), 10);
    assert!(full > 10);
    // The server is still fine afterwards.
    assert_eq!(
        post(&mock, "/v1/messages", &anthropic(false)).await.status,
        200
    );
}

#[tokio::test]
async fn padding_gives_exact_sizes() {
    let mock = start().await;
    for (path, body) in ROUTES {
        for stream in [false, true] {
            for target in [5_000, 1 << 20] {
                mock.script().push(Reply::text("padded").pad_to(target));
                let r = post(&mock, path, &body(stream)).await;
                assert_eq!(r.body.len(), target, "{path} stream={stream}");
                if stream {
                    assert!(r.events().len() > 3);
                    if target > 100_000 {
                        // Responses repeats the text in five events, so its text is a fifth.
                        assert!(
                            r.events().len() > 15,
                            "{path}: a large text streams as many deltas"
                        );
                    }
                } else {
                    r.json();
                }
            }
        }
    }
    // A tool call alone gets a text to carry the padding.
    mock.script()
        .push(Reply::tool_call("Bash", json!({"command": "ls"})).pad_to(4096));
    let r = post(&mock, "/v1/messages", &anthropic(false)).await;
    assert_eq!(r.body.len(), 4096);
    assert_eq!(r.json()["content"][1]["name"], "Bash");
    // Smaller than the natural size: left as is.
    mock.script().push(Reply::text("x").pad_to(10));
    assert!(
        post(&mock, "/v1/messages", &anthropic(false))
            .await
            .body
            .len()
            > 10
    );
}

#[tokio::test]
async fn config_shape_applies_to_unscripted_replies() {
    let shape = Shape {
        pad_to: Some(2048),
        ..Shape::default()
    };
    let mock = start_with(Config {
        shape,
        final_text: "fin".into(),
        ..Config::default()
    })
    .await;
    let r = post(&mock, "/v1/chat/completions", &chat(false)).await;
    assert_eq!(r.body.len(), 2048);
    assert!(r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .starts_with("fin"));
    mock.script().push(Reply::text("scripted"));
    let r = post(&mock, "/v1/chat/completions", &chat(false)).await;
    assert!(r.body.len() < 2048, "a scripted reply brings its own shape");
}

/// `POST /_mock/script`: specs as `--reply` takes them, queued in order, all or none.
async fn push_specs(mock: &ctxd_mock::MockServer, specs: Value) -> (reqwest::StatusCode, Value) {
    let res = client()
        .post(format!("{}/_mock/script", mock.base_url()))
        .body(specs.to_string())
        .send()
        .await
        .unwrap();
    let status = res.status();
    (
        status,
        serde_json::from_slice(&res.bytes().await.unwrap()).unwrap(),
    )
}

#[tokio::test]
async fn replies_are_queued_over_http() {
    let mock = start().await;
    mock.script().push(Reply::text("first"));
    let (status, body) = push_specs(
        &mock,
        json!(["text:second", r#"tool:Read:{"path":"a.txt"}"#]),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"queued": 3}));
    let m = post(&mock, "/v1/messages", &anthropic(false)).await.json();
    assert_eq!(m["content"][0]["text"], "first", "after those queued");
    let m = post(&mock, "/v1/messages", &anthropic(false)).await.json();
    assert_eq!(m["content"][0]["text"], "second");
    let m = post(&mock, "/v1/messages", &anthropic(false)).await.json();
    assert_eq!(m["content"][0]["input"], json!({"path": "a.txt"}));

    // A bad spec queues nothing and names itself; so does a body that is not a list of specs.
    let (status, body) = push_specs(&mock, json!(["text:ok", "tool:"])).await;
    assert_eq!(status, 400);
    assert!(
        body["error"].as_str().unwrap().contains("\"tool:\""),
        "{body}"
    );
    let (status, _) = push_specs(&mock, json!({"reply": "text:x"})).await;
    assert_eq!(status, 400);
    assert!(mock.script().is_empty());

    // DELETE forgets what is queued; the control routes are not recorded.
    push_specs(&mock, json!(["text:never"])).await;
    let res = client()
        .delete(format!("{}/_mock/script", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 204);
    assert!(mock.script().is_empty());
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn a_wait_holds_the_request_until_its_reply_is_pushed() {
    let mock = start().await;
    for (path, body) in ROUTES {
        let (_, queued) = push_specs(&mock, json!(["wait:10000"])).await;
        assert_eq!(queued, json!({"queued": 1}));
        let url = mock.base_url();
        let held = tokio::spawn(async move {
            let res = client()
                .post(format!("{url}{path}"))
                .header("content-type", "application/json")
                .body(body(false).to_string())
                .send()
                .await
                .unwrap();
            serde_json::from_slice::<Value>(&res.bytes().await.unwrap()).unwrap()
        });
        // The request is recorded while it is held: the test reads it, then answers.
        let deadline = Instant::now() + Duration::from_secs(10);
        while mock.requests().iter().all(|r| r.path != path) {
            assert!(Instant::now() < deadline, "{path} never arrived");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !held.is_finished(),
            "{path} answered before its reply was queued"
        );
        push_specs(&mock, json!(["text:answered later"])).await;
        let reply = held.await.unwrap().to_string();
        assert!(reply.contains("answered later"), "{path}: {reply}");
        assert!(mock.script().is_empty(), "taken by the held request");
    }
}

#[tokio::test]
async fn a_wait_with_nothing_pushed_is_a_clear_400() {
    let mock = start().await;
    mock.script().push("wait:50".parse().unwrap());
    let started = Instant::now();
    let res = post(&mock, "/v1/chat/completions", &chat(true)).await;
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(res.status, 400);
    let body = res.json();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("wait") && message.contains("50 ms"),
        "{message}"
    );
    // Nothing is left waiting: the next request gets the built-in logic.
    let m = post(&mock, "/v1/chat/completions", &chat(false))
        .await
        .json();
    assert_eq!(m["choices"][0]["message"]["content"], "done");
}
