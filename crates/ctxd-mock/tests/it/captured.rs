//! Real client requests (`shared/clients/captured/*.jsonl`, recorded against the Python mock
//! with the reply it chose) replayed here: the same decision for every one.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::{post, start};

fn shared() -> PathBuf {
    std::env::var("CTXD_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared")))
}

/// (file, path, body, the Python mock's reply) of every captured POST.
fn captured() -> Vec<(String, String, Value, Value)> {
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
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let rec: Value = serde_json::from_str(line).unwrap();
            if rec["method"] == "POST" {
                let path = rec["path"].as_str().unwrap().to_owned();
                out.push((
                    name.clone(),
                    path,
                    rec["body"].clone(),
                    rec["reply"].clone(),
                ));
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
    let all = captured();
    assert!(all.len() >= 12, "captures missing: {}", all.len());
    for (file, path, body, expected) in all {
        let mut json_body = body.clone();
        json_body["stream"] = json!(false);
        let r = post(&mock, &path, &json_body).await;
        assert_eq!(r.status, 200, "{file} {path}");
        assert_eq!(decision(&path, &r.json()), expected, "{file} {path}");

        // As sent (streaming): a complete stream ending in the API's terminal event.
        let r = post(&mock, &path, &body).await;
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
    }
    // The record holds each body exactly as sent.
    let recs = mock.requests();
    assert!(recs.iter().all(|r| r.json().is_some()));
}
