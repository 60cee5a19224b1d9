//! Gemini's API through the gateway, against the strict mock: pass-through bytes when ctxd
//! changes nothing, the three response framings relayed and recorded (JSON, SSE, the JSON-array
//! stream), `?key=` kept out of every path and the store, `countTokens` and the model list
//! relayed, Google's error shape, and ctxd's tools in hidden rounds (a note, then a reset in the
//! middle of the client's tool loop) with every upstream request accepted, the model's
//! `thoughtSignature`s back on their parts, roles alternating.

use ctxd_core::model::{ContentBlock, EntryKind, Role};
use ctxd_formats::wire::stream::{
    assemble_json, Api as WireApi, Assembled, Assembler, JsonArraySplitter, SseEvent, SseParser,
};
use ctxd_gateway::config::ToolsSetting;
use ctxd_mock::{Config, Part, Reasoning, Reply};
use serde_json::{json, Value};

use crate::support::Rig;

const MODEL: &str = "gemini-2.5-pro";

fn path(stream: bool) -> String {
    if stream {
        format!("/v1beta/models/{MODEL}:streamGenerateContent?alt=sse")
    } else {
        format!("/v1beta/models/{MODEL}:generateContent")
    }
}

const HEADERS: [(&str, &str); 2] = [("x-goog-api-key", "AIza-test-key"), ("x-ctxd-session", "g")];

fn tools() -> Value {
    json!([{"functionDeclarations": [{"name": "run_shell_command",
        "description": "Run a shell command",
        "parametersJsonSchema": {"type": "object",
            "properties": {"command": {"type": "string"}}, "required": ["command"]}}]}])
}

fn body(contents: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "contents": contents,
        "systemInstruction": {"role": "user", "parts": [{"text": "You are a coding agent."}]},
        "tools": tools(),
        "generationConfig": {"temperature": 1, "thinkingConfig": {"includeThoughts": true}},
    }))
    .unwrap()
}

fn user(text: &str) -> Value {
    json!({"role": "user", "parts": [{"text": text}]})
}

/// How a client echoes the model's content: as it came (Pi, the SDKs), or as Gemini CLI does,
/// without the thought parts and with its own id on each call (and on the response).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Echo {
    AsReceived,
    GeminiCli,
}

impl Echo {
    fn content(self, model: &Value, turn: usize) -> Value {
        if self == Echo::AsReceived {
            return model.clone();
        }
        let parts: Vec<Value> = model["parts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p.get("thought") != Some(&json!(true)))
            .enumerate()
            .map(|(i, p)| {
                let mut p = p.clone();
                if let Some(call) = p.get_mut("functionCall") {
                    let name = call["name"].as_str().unwrap().to_owned();
                    call["id"] = json!(format!("{name}_{turn}00{i}_0"));
                }
                p
            })
            .collect();
        json!({"role": "model", "parts": parts})
    }
}

/// The client's answer to each call of a model content (with the call's id when it has one).
fn answers(model: &Value, output: &str) -> Value {
    let parts: Vec<Value> = model["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.get("functionCall"))
        .map(|c| {
            let mut r =
                json!({"functionResponse": {"name": c["name"], "response": {"output": output}}});
            if let Some(id) = c.get("id") {
                r["functionResponse"]["id"] = id.clone();
            }
            r
        })
        .collect();
    assert!(!parts.is_empty(), "no call in {model}");
    json!({"role": "user", "parts": parts})
}

fn read(stream: bool, bytes: &[u8]) -> Assembled {
    if !stream {
        return assemble_json(WireApi::Gemini, bytes).unwrap();
    }
    let mut p = SseParser::new();
    let mut a = Assembler::new(WireApi::Gemini);
    for ev in p.feed(bytes) {
        a.push(&ev);
    }
    a.finish().unwrap()
}

/// One client turn: the model content the client will echo.
async fn turn(rig: &Rig, contents: &[Value], stream: bool) -> (Assembled, Value) {
    let resp = rig.post(&path(stream), &HEADERS, body(contents)).await;
    let status = resp.status();
    let bytes = resp.bytes().await.unwrap();
    assert!(
        status.is_success(),
        "{status}: {}",
        String::from_utf8_lossy(&bytes)
    );
    let a = read(stream, &bytes);
    let wire = serde_json::from_slice(&a.elements[0].wire).unwrap();
    (a, wire)
}

fn accepted(rig: &Rig) -> Vec<Value> {
    rig.mock
        .requests()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let text = String::from_utf8_lossy(&r.body).into_owned();
            assert!(
                r.refused.is_none(),
                "request {i} refused: {:?}\n{text}",
                r.refused
            );
            serde_json::from_slice(&r.body).unwrap()
        })
        .collect()
}

fn roles(body: &Value) -> Vec<String> {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["role"].as_str().unwrap_or("user").to_owned())
        .collect()
}

#[tokio::test]
async fn with_nothing_to_change_the_bytes_pass_and_the_session_is_recorded() {
    let mut rig = Rig::with(Config::default(), |s| {
        s.management.tools = ToolsSetting::None;
    })
    .await;
    for stream in [false, true] {
        rig.mock.clear();
        let script = rig.mock.script();
        script.push(Reply::tool_call(
            "run_shell_command",
            json!({"command": "ls"}),
        ));
        script.push(Reply::text("There is a README."));
        let mut contents = vec![user("What is in this directory?")];
        let (_, model) = turn(&rig, &contents, stream).await;
        // The mock signs its calls: the client sends the signature back on the same part.
        assert!(
            model["parts"][0].get("thoughtSignature").is_some(),
            "{model}"
        );
        contents.push(model.clone());
        contents.push(answers(&model, "README.md\nsrc"));
        let sent = body(&contents);
        let (answer, _) = turn(&rig, &contents, stream).await;
        assert!(matches!(&answer.elements[0].message.content[..],
            [ContentBlock::Text { text }] if text == "There is a README."));
        let got = rig.mock.requests();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].body.as_ref(), &sent[..], "stream={stream}");
        assert!(got.iter().all(|r| r.refused.is_none()));
        assert_eq!(got[1].header("x-goog-api-key"), Some("AIza-test-key"));
        assert_eq!(
            got[1].route(),
            format!(
                "/v1beta/models/{MODEL}:{}",
                if stream {
                    "streamGenerateContent"
                } else {
                    "generateContent"
                }
            )
        );
    }
    let stored = rig.stored().await;
    let sessions = stored.sessions();
    assert_eq!(sessions.len(), 1, "one session, resent whole each turn");
    let session = stored.load(&sessions[0]);
    assert_eq!(session.meta.model.as_deref(), Some(MODEL));
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut signatures = 0;
    for e in &session.entries {
        if let EntryKind::Message(m) = &e.kind {
            for b in &m.content {
                match b {
                    ContentBlock::ToolCall { id, .. } => calls.push(id.clone()),
                    ContentBlock::ToolResult { call_id, .. } => results.push(call_id.clone()),
                    ContentBlock::Thinking {
                        signature: Some(_), ..
                    } if m.role == Role::Assistant => signatures += 1,
                    _ => {}
                }
            }
        }
    }
    assert!(!calls.is_empty());
    assert!(signatures > 0, "the call's signature is in the log");
    for r in &results {
        assert!(calls.contains(r), "result {r} names no call: {calls:?}");
    }
}

#[tokio::test]
async fn the_json_array_stream_is_relayed_as_it_came_and_recorded() {
    let mut rig = Rig::with(Config::default(), |_| {}).await;
    rig.mock.script().push(Reply::text("one two three four"));
    let resp = rig
        .post(
            &format!("/v1beta/models/{MODEL}:streamGenerateContent"),
            &HEADERS,
            body(&[user("count")]),
        )
        .await;
    assert!(resp.status().is_success());
    let bytes = resp.bytes().await.unwrap();
    let mut splitter = JsonArraySplitter::new();
    let chunks = splitter.feed(&bytes);
    assert!(chunks.len() >= 2, "{}", String::from_utf8_lossy(&bytes));
    let mut a = Assembler::new(WireApi::Gemini);
    for c in &chunks {
        a.push(&SseEvent {
            event: None,
            data: String::from_utf8(c.clone()).unwrap(),
        });
    }
    let text = ctxd_core::text::message_text(&a.finish().unwrap().elements[0].message);
    assert_eq!(text, "one two three four");
    accepted(&rig);
    let stored = rig.stored().await;
    let session = stored.load(&stored.sessions()[0]);
    let last = session
        .entries
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EntryKind::Message(m) if m.role == Role::Assistant => Some(m),
            _ => None,
        })
        .expect("the response is recorded");
    assert_eq!(ctxd_core::text::message_text(last), "one two three four");
}

#[tokio::test]
async fn a_query_key_goes_upstream_as_the_header_and_is_never_stored() {
    let mut rig = Rig::with(Config::default(), |_| {}).await;
    rig.mock.script().push(Reply::text("hi"));
    let secret = "AIzaSECRET-QUERY-KEY-123";
    let resp = rig
        .post(
            &format!("/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key={secret}"),
            &[("x-ctxd-session", "q")],
            body(&[user("hello")]),
        )
        .await;
    assert!(resp.status().is_success());
    let _ = resp.bytes().await.unwrap();
    let got = rig.mock.requests();
    assert_eq!(got[0].header("x-goog-api-key"), Some(secret));
    assert_eq!(got[0].query("key"), None);
    assert!(!got[0].path.contains(secret), "{}", got[0].path);
    assert!(got[0].path.ends_with("?alt=sse"), "{}", got[0].path);
    // Relayed routes lose it too.
    let (status, _) = crate::support::get(&rig, &format!("/v1beta/models?key={secret}"), &[]).await;
    assert_eq!(status, 200);
    let listed = rig.mock.requests();
    let last = listed.last().unwrap();
    assert_eq!(last.header("x-goog-api-key"), Some(secret));
    assert!(!last.path.contains(secret));
    let store = rig.store_path.clone();
    rig.stop().await;
    for suffix in ["", "-wal"] {
        let file = format!("{}{suffix}", store.display());
        if let Ok(bytes) = std::fs::read(&file) {
            assert!(
                memchr::memmem::find(&bytes, secret.as_bytes()).is_none(),
                "the key is in {file}"
            );
        }
    }
}

#[tokio::test]
async fn count_tokens_and_the_model_list_are_relayed_and_errors_are_googles() {
    let rig = Rig::with(Config::default(), |_| {}).await;
    let resp = rig
        .post(
            &format!("/v1beta/models/{MODEL}:countTokens"),
            &HEADERS,
            serde_json::to_vec(&json!({"contents": [user("count these")]})).unwrap(),
        )
        .await;
    assert_eq!(resp.status(), 200);
    let v: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert!(v["totalTokens"].as_u64().unwrap() > 0, "{v}");
    let (status, list) = crate::support::get(&rig, "/v1beta/models", &HEADERS).await;
    assert_eq!(status, 200);
    assert!(list.contains("models/"), "{list}");
    // The Python SDK's default version.
    let (status, _) = crate::support::get(&rig, &format!("/v1/models/{MODEL}"), &HEADERS).await;
    assert_eq!(status, 200);
    let resp = rig
        .post(&path(false), &HEADERS, b"{not json".to_vec())
        .await;
    assert_eq!(resp.status(), 400);
    let e: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(e["error"]["code"], 400);
    assert_eq!(e["error"]["status"], "INVALID_ARGUMENT");
    assert!(e["error"]["message"].as_str().unwrap().contains("JSON"));
}

#[tokio::test]
async fn two_identical_calls_are_two_exchanges() {
    let rig = Rig::with(Config::default(), |s| {
        s.management.tools = ToolsSetting::None
    })
    .await;
    let script = rig.mock.script();
    let mut contents = vec![user("List the files.")];
    for round in 0..2 {
        script.push(Reply::tool_call(
            "run_shell_command",
            json!({"command": "ls"}),
        ));
        script.push(Reply::text("done"));
        let (_, call) = turn(&rig, &contents, round == 1).await;
        contents.push(call.clone());
        contents.push(answers(&call, "README.md"));
        let (_, done) = turn(&rig, &contents, false).await;
        contents.push(done);
        contents.push(user("Now list them once more."));
    }
    let bodies = accepted(&rig);
    assert_eq!(bodies.len(), 4);
    let last = &bodies[3]["contents"];
    let calls = last
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c.to_string().contains("functionCall"))
        .count();
    assert_eq!(calls, 2, "both calls go upstream: {last}");
}

#[tokio::test]
async fn ctxd_tools_run_in_hidden_rounds_and_a_reset_lands_mid_loop() {
    for echo in [Echo::AsReceived, Echo::GeminiCli] {
        for stream in [false, true] {
            hidden_rounds(stream, echo).await;
        }
    }
}

async fn hidden_rounds(stream: bool, echo: Echo) {
    let config = Config {
        reasoning: Reasoning::Always,
        ..Config::default()
    };
    let rig = Rig::with(config, |s| s.management.tools = ToolsSetting::All).await;
    let script = rig.mock.script();
    // Turn 1: a note in a hidden round, then the client's own call.
    script.push(Reply::parts(vec![
        Part::Text("Noting the plan.".into()),
        Part::ToolCall {
            name: "notes_write".into(),
            args: json!({"path": "plan.md", "text": "PLAN: fix it; GEMINI-NOTE-9"}),
        },
    ]));
    script.push(Reply::tool_call(
        "run_shell_command",
        json!({"command": "cargo test"}),
    ));
    let mut contents = vec![user("Find why the tests fail and fix them.")];
    let (a1, m1) = turn(&rig, &contents, stream).await;
    let names: Vec<&str> = a1.elements[0]
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(names, ["run_shell_command"], "stream={stream}: {m1}");
    assert!(ctxd_core::text::message_text(&a1.elements[0].message).contains("Noting the plan."));
    let m1 = echo.content(&m1, 1);
    contents.push(m1.clone());
    contents.push(answers(&m1, "test failed: OLD-WINDOW-OUTPUT"));

    // Turn 2, inside the client's loop: the model asks for a reset, reads its note, answers.
    script.push(Reply::tool_call("new_context", json!({})));
    script.push(Reply::tool_call("notes_read", json!({"path": "plan.md"})));
    script.push(Reply::text("Back on track."));
    let (a2, _) = turn(&rig, &contents, stream).await;
    let answer: Vec<&str> = a2.elements[0]
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            ContentBlock::ToolCall { name, .. } => panic!("the client saw a call of {name}"),
            _ => None,
        })
        .collect();
    assert_eq!(answer, ["Back on track."], "stream={stream} {echo:?}");

    let bodies = accepted(&rig);
    assert_eq!(
        bodies.len(),
        5,
        "stream={stream} {echo:?}: one request per round"
    );
    for (i, b) in bodies.iter().enumerate() {
        let r = roles(b);
        assert_eq!(r.first().map(String::as_str), Some("user"), "{i}: {r:?}");
        assert_eq!(r.last().map(String::as_str), Some("user"), "{i}: {r:?}");
        assert!(r.windows(2).all(|w| w[0] != w[1]), "{i}: roles {r:?}");
        // The client's system prompt, and ctxd's tools beside the client's.
        assert!(b["systemInstruction"]
            .to_string()
            .contains("You are a coding agent."));
        let declared: Vec<&str> = b["tools"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["functionDeclarations"].as_array().unwrap().iter())
            .map(|d| d["name"].as_str().unwrap())
            .collect();
        assert_eq!(declared[0], "run_shell_command");
        assert!(declared.contains(&"notes_write"), "{declared:?}");
    }
    let text: Vec<String> = bodies.iter().map(Value::to_string).collect();
    // The hidden round's continuation carries the model's call, signed as it came.
    let hidden_call = bodies[1]["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap().iter())
        .find(|p| p.pointer("/functionCall/name") == Some(&json!("notes_write")))
        .expect("the hidden call goes upstream");
    assert!(
        hidden_call.get("thoughtSignature").is_some(),
        "{hidden_call}"
    );
    assert!(text[1].contains("GEMINI-NOTE-9"));
    // The client's next request found the hidden exchange behind what it was shown.
    assert!(text[2].contains("GEMINI-NOTE-9"), "{echo:?}: {}", text[2]);
    // After the reset: nothing of the old window; the note read back.
    for (i, t) in text.iter().enumerate().skip(3) {
        assert!(
            !t.contains("OLD-WINDOW-OUTPUT"),
            "{echo:?} request {i}: {t}"
        );
    }
    assert!(text[4].contains("GEMINI-NOTE-9"), "notes_read answered");
    // Every request ends with the client's last message, or ctxd's answers after it.
    assert!(text[2].contains("OLD-WINDOW-OUTPUT"));
}
