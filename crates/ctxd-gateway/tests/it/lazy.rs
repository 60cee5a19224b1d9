//! Lazy tools through the gateway against the strict mock: a client offering `bash` and three
//! more tools, `bash` the base set. Two tasks (user prompts); in the first, the model calls
//! `find_capability`, then the tool it found, then `bash` for a while. Each API, JSON and SSE
//! (thinking on Anthropic and Responses).
//!
//! What must hold: nothing refused; the tools not activated never go upstream; after
//! `find_capability` (a hidden round) the found tool's definition is in the continuation and
//! the model calls it; at the next prompt the base set is back; consecutive upstream requests
//! with the same set carry the same `tools` bytes; the client never sees `find_capability`;
//! the tokens avoided are charged to `lazy-tools`; the activation is a record in the log.

use std::collections::BTreeMap;

use ctxd_mock::Reply;
use serde_json::{json, value::RawValue, Value};

use crate::loops::{read_response, saved_by, scripted, tool_turn, Api};
use crate::support::Rig;

/// `bash` turns after the found tool's call, in the first task; and in the second.
const FIRST_TASK_BASH: usize = 8;
const SECOND_TASK_BASH: usize = 6;

const FIND: &str = "find_capability";
const FOUND: &str = "web_fetch";
const NEVER: [&str; 2] = ["notebook_edit", "cron_create"];

/// The client's tools beyond `bash`, with descriptions long enough to matter.
fn extra_tools(api: Api) -> Vec<Value> {
    let schema = json!({"type": "object", "properties": {"target": {"type": "string"}}});
    let filler =
        " It follows the session's permission rules and reports errors plainly.".repeat(12);
    [
        (FOUND, "Fetch a web page by URL and return its text."),
        ("notebook_edit", "Replace a cell of a Jupyter notebook."),
        (
            "cron_create",
            "Schedule a prompt to run later on a cron schedule.",
        ),
    ]
    .into_iter()
    .map(|(name, desc)| api.tool(name, &format!("{desc}{filler}"), schema.clone()))
    .collect()
}

/// The `tools` value of an upstream body: its names and its raw bytes.
fn tools_of(body: &[u8]) -> (Vec<String>, String) {
    let map: BTreeMap<String, &RawValue> = serde_json::from_slice(body).unwrap();
    let raw = map["tools"].get().to_owned();
    let tools: Vec<Value> = serde_json::from_str(&raw).unwrap();
    let names = tools
        .iter()
        .map(|t| {
            t.get("name")
                .or_else(|| t.pointer("/function/name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    (names, raw)
}

/// The mock's replies: the scripted tool (or `None`, a final answer) of each upstream request.
fn script() -> Vec<Option<(&'static str, Value)>> {
    let bash = |i: usize| Some(("bash", json!({"command": format!("cargo test # {i}")})));
    let mut s = vec![
        bash(0),
        Some((FIND, json!({"query": "fetch a web page"}))),
        Some((FOUND, json!({"target": "https://example.com/docs"}))),
    ];
    s.extend((1..=FIRST_TASK_BASH).map(bash));
    s.push(None);
    s.extend((0..SECOND_TASK_BASH).map(|i| bash(100 + i)));
    s.push(None);
    s
}

async fn run(api: Api, stream: bool) {
    let script = script();
    let replies = script
        .iter()
        .map(|s| match s {
            Some((name, args)) => Reply::tool_call(*name, args.clone()),
            None => Reply::text("Done."),
        })
        .collect();
    let thinking = !matches!(api, Api::Chat);
    let mut rig = Rig::with(scripted(replies, thinking), |s| {
        s.management.mechanisms.lazy_tools = true;
        s.management.lazy_base.other = vec!["bash".to_owned()];
    })
    .await;
    let headers = api.headers();
    let mut conversation = api.first_messages();
    let client_body = |conversation: &[Value]| {
        let mut body = api.body(conversation, stream, thinking);
        body["tools"]
            .as_array_mut()
            .unwrap()
            .extend(extra_tools(api));
        body
    };
    // Client requests: every tool-call reply but `find_capability` (answered by ctxd), then
    // each task's final answer, after which the user sends the next prompt.
    let mut seen = Vec::new();
    let mut reply = 0;
    while reply < script.len() {
        let body = client_body(conversation.as_slice());
        match &script[reply] {
            Some(_) => {
                let (h, assembled) =
                    tool_turn(&rig, api, &mut conversation, &body, stream, "ok").await;
                assert!(
                    saved_by(&h, "lazy-tools") > 0,
                    "{api:?} stream={stream}: nothing charged to lazy-tools"
                );
                seen.extend(assembled.elements.iter().map(|e| e.wire.clone()));
                reply += if script[reply].as_ref().is_some_and(|(n, _)| *n == FIND) {
                    2
                } else {
                    1
                };
            }
            None => {
                let resp = rig
                    .post(api.path(), &headers, serde_json::to_vec(&body).unwrap())
                    .await;
                assert!(resp.status().is_success(), "{api:?}: {}", resp.status());
                let text = resp.bytes().await.unwrap();
                let assembled = read_response(api, stream, &text);
                for e in &assembled.elements {
                    conversation.push(serde_json::from_slice(&e.wire).unwrap());
                    seen.push(e.wire.clone());
                }
                conversation.push(api.user_message("Now check the docs for the next release."));
                reply += 1;
            }
        }
    }
    for wire in &seen {
        assert!(
            !String::from_utf8_lossy(wire).contains(FIND),
            "{api:?} stream={stream}: the client saw {FIND}"
        );
    }

    let sent = rig.mock.requests();
    assert_eq!(sent.len(), script.len(), "{api:?} stream={stream}");
    let second_task = script.iter().position(Option::is_none).unwrap() + 1;
    let found_at = script
        .iter()
        .position(|s| s.as_ref().is_some_and(|(n, _)| *n == FIND))
        .unwrap();
    let mut previous: Option<(Vec<String>, String)> = None;
    for (i, r) in sent.iter().enumerate() {
        assert!(
            r.refused.is_none(),
            "{api:?} stream={stream} request {i} refused: {:?}",
            r.refused
        );
        let (names, raw) = tools_of(&r.body);
        let has = |n: &str| names.iter().any(|m| m == n);
        assert!(has("bash") && has(FIND), "{api:?} request {i}: {names:?}");
        for n in NEVER {
            assert!(!has(n), "{api:?} request {i}: {n} went upstream");
        }
        let active = i > found_at && i < second_task;
        assert_eq!(
            has(FOUND),
            active,
            "{api:?} stream={stream} request {i}: {FOUND} upstream={}",
            has(FOUND)
        );
        // The model's call names a tool the request offered.
        if let Some((name, _)) = &script[i] {
            assert!(has(*name), "{api:?} request {i}: {name} not offered");
        }
        if let Some((prev_names, prev_raw)) = &previous {
            if *prev_names == names {
                assert_eq!(
                    *prev_raw, raw,
                    "{api:?} stream={stream} request {i}: same tools, other bytes"
                );
            }
        }
        previous = Some((names, raw));
    }
    // The activation, recorded once.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let session = stored.load(&record);
    let records: Vec<_> = session
        .entries
        .iter()
        .filter_map(|e| ctxd_core::wm::lazy::Record::from_entry(&e.kind))
        .collect();
    assert_eq!(records.len(), 1, "{api:?}");
    assert_eq!(records[0].activated, [FOUND]);
    rig.stop().await;
}

/// Every captured real request with lazy tools on: accepted; upstream, the client's tools
/// that are kept (the base set, and what is not a plain function) with their own bytes in the
/// client's order, then `find_capability` among ctxd's. Prints what was left out per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captured_requests_keep_the_base_set() {
    let rig = Rig::with(ctxd_mock::Config::default(), |s| {
        s.management.mechanisms.lazy_tools = true;
    })
    .await;
    let ours: Vec<&str> = ctxd_engine::tools::specs().iter().map(|s| s.name).collect();
    let mut lazy = 0;
    for (file, path, headers, body) in &crate::passthrough::captured() {
        let got = crate::passthrough::send_captured(&rig, file, path, headers, body).await;
        assert!(got[0].refused.is_none(), "{file}: {:?}", got[0].refused);
        let sent: Value = serde_json::from_slice(body).unwrap();
        let Some(client) = sent.get("tools").and_then(Value::as_array) else {
            continue;
        };
        if client.is_empty() {
            continue;
        }
        let (names, _) = tools_of(&got[0].body);
        if !names.iter().any(|n| n == FIND) {
            continue; // nothing beyond the base set (Pi)
        }
        lazy += 1;
        let upstream: Value = serde_json::from_slice(&got[0].body).unwrap();
        let upstream = upstream["tools"].as_array().unwrap();
        let first_ours = names
            .iter()
            .position(|n| ours.contains(&n.as_str()))
            .unwrap();
        let kept = &upstream[..first_ours];
        // The kept ones are the client's, in its order.
        let mut rest = client.iter();
        for k in kept {
            assert!(
                rest.any(|c| c == k),
                "{file}: {k} is not the client's, in order"
            );
        }
        let bytes = |v: &[Value]| v.iter().map(|t| t.to_string().len()).sum::<usize>();
        eprintln!(
            "{file}: {} of {} client tools kept, {} of {} bytes of definitions left out",
            kept.len(),
            client.len(),
            bytes(client) - bytes(kept),
            bytes(client)
        );
        assert!(kept.len() < client.len());
    }
    assert!(lazy >= 2, "{lazy} captured requests had tools left out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_tools_anthropic_json() {
    run(Api::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_tools_anthropic_sse() {
    run(Api::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_tools_chat_json() {
    run(Api::Chat, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_tools_chat_sse() {
    run(Api::Chat, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_tools_responses_json() {
    run(Api::Responses, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_tools_responses_sse() {
    run(Api::Responses, true).await;
}
