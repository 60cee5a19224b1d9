//! Write facts through the gateway against the strict mock: a tool loop whose every other
//! answer writes a file of a few KB (with thinking on Anthropic and Responses, so the stripped
//! message carries a signed block the mock wants back unchanged). Each API, JSON and SSE.
//!
//! What must hold: nothing refused; from the request that brings a write's result on, the
//! write's content is not upstream and its fact is, on every later request; each upstream
//! request's bytes start with the previous one's conversation (the stripped message was the
//! previous request's output, never part of its input).

use ctxd_mock::Reply;
use serde_json::{json, value::RawValue, Value};

use crate::loops::{scripted, tool_turn, Api};
use crate::support::Rig;

const TURNS: usize = 12;

/// The file write turn `i` writes: a docstring, then distinct lines with a marker only it has.
fn file(i: usize) -> String {
    let mut s = format!("\"\"\"Module {i}: parses the config.\"\"\"\n");
    for l in 0..120 {
        s.push_str(&format!("value_{l} = compute({l}, {i})  # BODY-{i}-MARK\n"));
    }
    s
}

fn is_write(i: usize) -> bool {
    i.is_multiple_of(2)
}

/// The conversation array's bytes in an upstream body, and where it starts.
fn conversation(api: Api, body: &[u8]) -> (usize, usize) {
    let key = match api {
        Api::Responses => "input",
        _ => "messages",
    };
    let map: std::collections::BTreeMap<String, &RawValue> = serde_json::from_slice(body).unwrap();
    let raw = map[key].get().as_bytes();
    let start = raw.as_ptr() as usize - body.as_ptr() as usize;
    (start, raw.len())
}

/// The client's `write` tool beside `bash`.
fn with_write_tool(api: Api, body: &mut Value) {
    let schema = json!({"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]});
    let tool = api.tool("write", "Write a file", schema);
    body["tools"].as_array_mut().unwrap().push(tool);
}

async fn run(api: Api, stream: bool) {
    let mut script = Vec::new();
    for i in 0..TURNS {
        script.push(if is_write(i) {
            Reply::tool_call(
                "write",
                json!({"path": format!("src/mod_{i}.py"), "content": file(i)}),
            )
        } else {
            Reply::tool_call(
                "bash",
                json!({"command": format!("python -m pytest # {i}")}),
            )
        });
    }
    let thinking = !matches!(api, Api::Chat);
    let config = scripted(script, thinking);
    // Distillation off: its edits of earlier outputs change the prefix on purpose.
    let mut rig = Rig::with(config, |s| {
        s.management.mechanisms.distill = false;
    })
    .await;
    let mut conversation_so_far = api.first_messages();
    for turn in 0..TURNS {
        let mut body = api.body(&conversation_so_far, stream, thinking);
        with_write_tool(api, &mut body);
        let output = if is_write(turn) {
            "File written successfully".to_owned()
        } else {
            format!("collected 12 items\n12 passed in 0.{turn}s\n")
        };
        tool_turn(&rig, api, &mut conversation_so_far, &body, stream, &output).await;
    }

    let sent = rig.mock.requests();
    assert_eq!(
        sent.len(),
        TURNS,
        "{api:?}: one upstream request per client request"
    );
    for (i, r) in sent.iter().enumerate() {
        assert!(
            r.refused.is_none(),
            "{api:?} request {i} refused: {:?}",
            r.refused
        );
    }
    for (i, r) in sent.iter().enumerate() {
        let text = String::from_utf8_lossy(&r.body);
        for w in (0..i).filter(|&w| is_write(w)) {
            // Request w + 1 brings write w's result: from there on, the fact, not the content.
            assert!(
                !text.contains(&format!("BODY-{w}-MARK")),
                "{api:?} stream={stream} request {i}: write {w}'s content went upstream"
            );
            assert!(
                text.contains(&format!(
                    "[Wrote src/mod_{w}.py — Module {w}: parses the config., ~121 lines]"
                )),
                "{api:?} stream={stream} request {i}: write {w}'s fact is missing"
            );
        }
    }
    // The prefix: each request starts with the previous one's bytes up to the end of its
    // conversation's last element.
    for i in 1..sent.len() {
        let (prev, next) = (&sent[i - 1].body[..], &sent[i].body[..]);
        let (start, len) = conversation(api, prev);
        let head = &prev[..start + len - 1];
        assert!(
            next.starts_with(head),
            "{api:?} stream={stream}: request {i} changed the previous request's prefix"
        );
    }
    // The store: one args edit per write, after that write's result.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let session = stored.load(&record);
    let edits = session
        .entries
        .iter()
        .filter(|e| matches!(e.kind, ctxd_core::model::EntryKind::ArgsEdit { .. }))
        .count();
    assert_eq!(
        edits,
        (0..TURNS - 1).filter(|&i| is_write(i)).count(),
        "{api:?}"
    );
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_facts_anthropic_json() {
    run(Api::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_facts_anthropic_sse() {
    run(Api::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_facts_chat_json() {
    run(Api::Chat, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_facts_chat_sse() {
    run(Api::Chat, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_facts_responses_json() {
    run(Api::Responses, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_facts_responses_sse() {
    run(Api::Responses, true).await;
}
