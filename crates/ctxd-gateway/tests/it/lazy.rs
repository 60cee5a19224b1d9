//! Lazy tools through the gateway against the strict mock: a client offering `bash` and three
//! more tools, `bash` the base set. Two tasks (user prompts). In the first the model calls
//! `find_capability` alone (a hidden round), then the tool it found, then `bash` for a while;
//! in the second it calls `find_capability` beside `bash` (a mixed response: ctxd answers its
//! call at once, the client gets `bash`), then the tool found, then a tool it was never offered
//! (which reaches the client and is offered from then on), then `bash`. Each API, JSON and SSE
//! (thinking on Anthropic and Responses).
//!
//! What must hold: nothing refused; the tools not activated never go upstream; a tool found (or
//! called unoffered) is upstream from the next request (the hidden round's continuation, or
//! the client's next request) to the next prompt, and the model's other calls only name tools
//! their request offered;
//! consecutive upstream requests with the same set carry the same `tools` bytes; the client
//! never sees `find_capability`; the tokens avoided are charged to `lazy-tools`; each
//! activation is one record in the log.

use std::collections::{BTreeMap, BTreeSet};

use ctxd_mock::{Part, Reply};
use serde_json::{json, value::RawValue, Value};

use crate::loops::{read_response, saved_by, scripted, tool_turn, Api};
use crate::support::Rig;

/// `bash` turns after the found tool's call, in each task.
const BASH_TURNS: usize = 20;

const FIND: &str = "find_capability";
/// The client's tools beyond `bash`, and the query that finds each (`None`: never searched, the
/// model calls it without being offered it).
const EXTRA: [(&str, Option<&str>); 3] = [
    ("web_fetch", Some("fetch a web page")),
    ("cron_create", Some("cron schedule")),
    ("notebook_edit", None),
];

/// The client's tools beyond `bash`, with descriptions long enough to matter.
fn extra_tools(api: Api) -> Vec<Value> {
    let schema = json!({"type": "object", "properties": {"target": {"type": "string"}}});
    let filler =
        " It follows the session's permission rules and reports errors plainly.".repeat(12);
    [
        "Fetch a web page by URL and return its text.",
        "Schedule a prompt to run later on a cron schedule.",
        "Replace a cell of a Jupyter notebook.",
    ]
    .into_iter()
    .zip(EXTRA)
    .map(|(desc, (name, _))| api.tool(name, &format!("{desc}{filler}"), schema.clone()))
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

type Calls = Vec<(&'static str, Value)>;

/// The mock's reply to each upstream request: its calls (none: a final answer).
fn script() -> Vec<Calls> {
    let bash = |i: usize| ("bash", json!({"command": format!("cargo test # {i}")}));
    let find = |tool: usize| (FIND, json!({"query": EXTRA[tool].1.unwrap()}));
    let use_tool = |tool: usize| (EXTRA[tool].0, json!({"target": "https://example.com/docs"}));
    let mut s = vec![vec![bash(0)], vec![find(0)], vec![use_tool(0)]];
    s.extend((1..=BASH_TURNS).map(|i| vec![bash(i)]));
    s.push(Vec::new());
    s.push(vec![bash(100)]);
    s.push(vec![find(1), bash(101)]);
    s.push(vec![use_tool(1)]);
    s.push(vec![use_tool(2)]);
    s.extend((1..=BASH_TURNS).map(|i| vec![bash(101 + i)]));
    s.push(Vec::new());
    s
}

/// The tools each upstream request must carry beyond the base set: what `find_capability`
/// found, and what the model called, earlier in its task.
fn expected_active(script: &[Calls]) -> Vec<BTreeSet<&'static str>> {
    let mut active = BTreeSet::new();
    let mut out = Vec::new();
    for calls in script {
        out.push(active.clone());
        if calls.is_empty() {
            active.clear();
        }
        for (name, args) in calls {
            if *name == FIND {
                let q = args["query"].as_str().unwrap();
                active.extend(EXTRA.iter().filter(|(_, f)| *f == Some(q)).map(|(n, _)| *n));
            } else if *name != "bash" {
                active.insert(*name);
            }
        }
    }
    out
}

async fn run(api: Api, stream: bool) {
    let script = script();
    let replies = script
        .iter()
        .map(|calls| match calls.as_slice() {
            [] => Reply::text("Done."),
            [(name, args)] => Reply::tool_call(*name, args.clone()),
            many => Reply::parts(
                many.iter()
                    .map(|(name, args)| Part::ToolCall {
                        name: (*name).to_owned(),
                        args: args.clone(),
                    })
                    .collect(),
            ),
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
    // One client request per reply, but a hidden round's: its continuation's reply answers the
    // same client request. After a final answer the user sends the next prompt.
    let mut seen = Vec::new();
    let mut reply = 0;
    while reply < script.len() {
        let body = client_body(conversation.as_slice());
        let calls = &script[reply];
        if calls.is_empty() {
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
            continue;
        }
        let (h, assembled) = tool_turn(&rig, api, &mut conversation, &body, stream, "ok").await;
        assert!(
            saved_by(&h, "lazy-tools") > 0,
            "{api:?} stream={stream}: nothing charged to lazy-tools"
        );
        seen.extend(assembled.elements.iter().map(|e| e.wire.clone()));
        reply += if calls.iter().all(|(n, _)| *n == FIND) {
            2
        } else {
            1
        };
    }
    for wire in &seen {
        assert!(
            !String::from_utf8_lossy(wire).contains(FIND),
            "{api:?} stream={stream}: the client saw {FIND}"
        );
    }

    let sent = rig.mock.requests();
    assert_eq!(sent.len(), script.len(), "{api:?} stream={stream}");
    let expected = expected_active(&script);
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
        for (tool, _) in EXTRA {
            assert_eq!(
                has(tool),
                expected[i].contains(tool),
                "{api:?} stream={stream} request {i}: {tool} upstream={}",
                has(tool)
            );
        }
        // The model's calls name tools the request offered, but the one it is never offered.
        for (name, _) in &script[i] {
            let never = EXTRA.iter().any(|(n, f)| n == name && f.is_none());
            assert_eq!(has(name), !never, "{api:?} request {i}: {name}");
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
    // The activations, one record each.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let session = stored.load(&record);
    let records: Vec<Vec<String>> = session
        .entries
        .iter()
        .filter_map(|e| ctxd_core::mechanisms::lazy::Record::from_entry(&e.kind))
        .map(|r| r.activated)
        .collect();
    assert_eq!(records, [["web_fetch"], ["cron_create"]], "{api:?}");
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
