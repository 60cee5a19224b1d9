//! Real client requests (`shared/clients/captured/*.jsonl`, recorded against the Python mock
//! with the reply it chose) replayed here with their headers: strict mode accepts every one
//! and gives the same decision; a mock that gives thinking blocks refuses the one the real API
//! refuses too (see [`REFUSED`]).

use std::path::PathBuf;

use serde_json::{json, Value};

use ctxd_mock::{Config, Reasoning};

use crate::support::{post_raw, start, start_with};

/// Captures the real API would refuse, by (file, POST number in the file, rule). Claude Code's
/// second Sonnet request has `thinking: {type: enabled}` and answers a `tool_use` turn without a
/// thinking block: the Python mock it was recorded against sent none. The real API always
/// sends one with thinking enabled and refuses the turn sent back without it ("Expected
/// `thinking` or `redacted_thinking`, but found `tool_use`"); so does this mock when it gives
/// thinking blocks itself (`Reasoning::WhenAsked`), not by default (`Reasoning::Off`).
const REFUSED: [(&str, usize, &str); 1] = [(
    "requests_claude_sonnet.jsonl",
    1,
    "anthropic.thinking_missing",
)];

/// The captured headers worth replaying (`anthropic-beta` decides rules), without transport
/// ones: the body is re-sent as plain JSON.
fn replayed(headers: &Value) -> Vec<(String, String)> {
    let skip = [
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "accept-encoding",
        "connection",
    ];
    headers
        .as_object()
        .map(|h| {
            h.iter()
                .filter(|(k, _)| !skip.contains(&k.to_ascii_lowercase().as_str()))
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

struct Capture {
    file: String,
    /// Its number among the file's POSTs.
    nth: usize,
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
    reply: Value,
}

use ctxd_test_support::shared;

/// Every captured POST with the Python mock's reply.
fn captured() -> Vec<Capture> {
    let dir = shared().join("clients/captured");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let mut nth = 0;
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let rec: Value = serde_json::from_str(line).unwrap();
            if rec["method"] == "POST" {
                out.push(Capture {
                    file: name.clone(),
                    nth,
                    path: rec["path"].as_str().unwrap().to_owned(),
                    headers: replayed(&rec["headers"]),
                    body: rec["body"].clone(),
                    reply: rec["reply"].clone(),
                });
                nth += 1;
            }
        }
    }
    out
}

/// The Python mock's `reply` form of a JSON reply: ["tool", name, args] or ["text", text].
fn decision(path: &str, reply: &Value) -> Value {
    if path.starts_with("/v1/messages") {
        let block = reply["content"].as_array().unwrap().last().unwrap();
        return match block["type"].as_str().unwrap() {
            "tool_use" => json!(["tool", block["name"], block["input"]]),
            _ => json!(["text", block["text"]]),
        };
    }
    if path.starts_with("/v1/chat") {
        let msg = &reply["choices"][0]["message"];
        return match msg.get("tool_calls") {
            Some(calls) => {
                let f = &calls[0]["function"];
                let args: Value = serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
                json!(["tool", f["name"], args])
            }
            None => json!(["text", msg["content"]]),
        };
    }
    let item = reply["output"].as_array().unwrap().last().unwrap();
    match item["type"].as_str().unwrap() {
        "function_call" => {
            let args: Value = serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
            json!(["tool", item["name"], args])
        }
        _ => json!(["text", item["content"][0]["text"]]),
    }
}

#[tokio::test]
async fn every_captured_request_gets_the_python_mocks_reply() {
    let mock = start().await;
    let thinking = start_with(Config {
        reasoning: Reasoning::WhenAsked,
        ..Config::default()
    })
    .await;
    let all = captured();
    assert!(all.len() >= 12, "captures missing: {}", all.len());
    let mut refused = 0;
    for c in all {
        let (file, path, expected) = (&c.file, &c.path, &c.reply);
        let headers: Vec<(&str, &str)> = c
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let send = |mock, body: &Value| {
            let body = body.to_string().into_bytes();
            post_raw(mock, path, body, &headers)
        };
        let mut json_body = c.body.clone();
        json_body["stream"] = json!(false);
        let r = send(&mock, &json_body).await;
        assert_eq!(
            r.status,
            200,
            "{file} {path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(decision(path, &r.json()), *expected, "{file} {path}");

        // As sent (streaming): a complete stream ending in the API's terminal event.
        let r = send(&mock, &c.body).await;
        assert_eq!(r.status, 200, "{file} {path}");
        let events = r.events();
        let last = events.last().unwrap();
        let terminal = if path.starts_with("/v1/messages") {
            last.name.as_deref() == Some("message_stop")
        } else if path.starts_with("/v1/chat") {
            last.data == json!("[DONE]")
        } else {
            last.name.as_deref() == Some("response.completed")
        };
        assert!(terminal, "{file} {path}: ends with {last:?}");

        // A mock giving thinking blocks refuses what the real API refuses, only that.
        let known = REFUSED
            .iter()
            .find(|(f, n, _)| f == file && *n == c.nth)
            .map(|(_, _, rule)| *rule);
        let r = send(&thinking, &json_body).await;
        match known {
            Some(rule) => {
                assert_eq!(r.status, 400, "{file} {path}");
                assert_eq!(r.headers["x-mock-refused"], rule, "{file} {path}");
                assert_eq!(r.json()["error"]["type"], "invalid_request_error");
                refused += 1;
            }
            None => assert_eq!(r.status, 200, "{file} {path}"),
        }
    }
    assert_eq!(refused, REFUSED.len(), "a known refusal was not seen");
    // The record holds each body exactly as sent.
    let recs = mock.requests();
    assert!(recs.iter().all(|r| r.json().is_some()));
}
