#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `ctxd serve` SIGKILLed under load, restarted on the same store, ten times: every turn whose
//! response a client fully received (the JSON body, or the stream through its terminal event)
//! is in the store the moment the process is gone, with the provider's usage and response id,
//! and the store passes `integrity_check`. Twelve sessions (three APIs × JSON and SSE, two
//! each) run back to back while two CPU-bound processes compete for the machine's cores.
//!
//! `CTXD_CRASH_CYCLES` sets the number of kill/restart cycles (10 by default).

use std::collections::HashMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctxd_core::model::{EntryKind, Role};
use ctxd_formats::wire::stream::{assemble_json, Api as WireApi, Assembler, SseParser};
use ctxd_mock::{Config, MockServer};
use ctxd_store::{Durability, SqliteStore, Store};
use serde_json::{json, Value};

/// Child processes killed when dropped (a failing test must not leave them running).
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Two busy loops: the CPU-bound neighbours of a build.
fn burners() -> Kids {
    Kids(
        (0..2)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap()
            })
            .collect(),
    )
}

fn serve(store: &std::path::Path, upstream: &str) -> (Kids, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxd"))
        .args(["--store", store.to_str().unwrap(), "serve"])
        .args(["--listen", "127.0.0.1:0"])
        .args([
            "--upstream-anthropic",
            upstream,
            "--upstream-openai",
            upstream,
            "--upstream-gemini",
            upstream,
        ])
        .env("CTXD_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("ctxd serve: listening on"), "{line}");
    let addr = line.trim().rsplit("http://").next().unwrap().to_owned();
    (Kids(vec![child]), addr)
}

#[derive(Clone, Copy, Debug)]
enum Api {
    Anthropic,
    Chat,
    Responses,
}

/// One client's conversation, carried across restarts (only acknowledged turns extend it).
struct Conversation {
    api: Api,
    stream: bool,
    key: String,
    messages: Vec<Value>,
    turns: usize,
}

impl Conversation {
    fn user(&self, text: String) -> Value {
        match self.api {
            Api::Responses => json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": text}]}),
            _ => json!({"role": "user", "content": text}),
        }
    }

    fn body(&self) -> Value {
        match self.api {
            Api::Anthropic => json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
                "stream": self.stream, "messages": self.messages}),
            Api::Chat => {
                let mut b = json!({"model": "gpt-4o", "stream": self.stream,
                    "messages": self.messages});
                if self.stream {
                    b["stream_options"] = json!({"include_usage": true});
                }
                b
            }
            Api::Responses => json!({"model": "gpt-4o", "stream": self.stream,
                "input": self.messages}),
        }
    }

    fn path(&self) -> &'static str {
        match self.api {
            Api::Anthropic => "/v1/messages",
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
        }
    }

    fn wire(&self) -> WireApi {
        match self.api {
            Api::Anthropic => WireApi::Anthropic,
            Api::Chat => WireApi::OpenAiChat,
            Api::Responses => WireApi::OpenAiResponses,
        }
    }

    /// One turn: `Some(response id)` when the whole response arrived.
    async fn turn(&mut self, client: &reqwest::Client, addr: &str) -> Option<String> {
        // A turn that failed is resent as it was (its user message is still last).
        if self.messages.last().is_none_or(|m| m["role"] != "user") {
            let text = format!("{} turn {}", self.key, self.turns);
            self.messages.push(self.user(text));
        }
        let mut req = client
            .post(format!("http://{addr}{}", self.path()))
            .header("content-type", "application/json")
            .header("x-ctxd-session", &self.key)
            .body(serde_json::to_vec(&self.body()).unwrap());
        req = match self.api {
            Api::Anthropic => req.header("x-api-key", "sk-crash"),
            _ => req.header("authorization", "Bearer sk-crash"),
        };
        let resp = req.send().await.ok()?;
        if resp.status() != 200 {
            return None;
        }
        let bytes = resp.bytes().await.ok()?;
        let assembled = if self.stream {
            let mut parser = SseParser::new();
            let mut asm = Assembler::new(self.wire());
            for ev in parser.feed(&bytes) {
                asm.push(&ev);
            }
            if !asm.is_complete() {
                return None;
            }
            asm.finish().ok()?
        } else {
            assemble_json(self.wire(), &bytes).ok()?
        };
        let id = assembled.elements.first()?.message.response_id.clone()?;
        self.messages.extend(
            assembled
                .elements
                .iter()
                .map(|e| serde_json::from_slice::<Value>(&e.wire).unwrap()),
        );
        self.turns += 1;
        Some(id)
    }
}

/// The response ids of every stored assistant message with usage, per session key; and the
/// count of stored assistant messages without usage.
fn stored(store: &std::path::Path) -> (HashMap<String, Vec<String>>, usize) {
    let store = SqliteStore::open(store, Durability::Normal).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let mut ids: HashMap<String, Vec<String>> = HashMap::new();
    let mut without_usage = 0;
    for tenant in store.tenants().unwrap() {
        for record in store.list_sessions(&tenant).unwrap() {
            for e in store.load(record.id).unwrap().entries {
                if let EntryKind::Message(m) = e.kind {
                    if m.role != Role::Assistant {
                        continue;
                    }
                    if m.usage.is_none() {
                        without_usage += 1;
                    }
                    if let Some(id) = m.response_id {
                        ids.entry(record.key.clone()).or_default().push(id);
                    }
                }
            }
        }
    }
    (ids, without_usage)
}

/// A small deterministic generator for the kill times (seeded per run, printed).
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn acknowledged_turns_survive_sigkill_under_load() {
    let cycles: usize = std::env::var("CTXD_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut seed = std::env::var("CTXD_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("CTXD_CRASH_SEED={seed}");
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("crash.db");
    let _burners = burners();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut conversations: Vec<Conversation> = Vec::new();
    for api in [Api::Anthropic, Api::Chat, Api::Responses] {
        for stream in [false, true] {
            for n in 0..2 {
                conversations.push(Conversation {
                    api,
                    stream,
                    key: format!("{api:?}-{stream}-{n}"),
                    messages: Vec::new(),
                    turns: 0,
                });
            }
        }
    }
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    for cycle in 0..cycles {
        let (mut gateway, addr) = serve(&store, &mock.base_url());
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = std::mem::take(&mut conversations)
            .into_iter()
            .map(|mut c| {
                let (client, addr, stop, acked) =
                    (client.clone(), addr.clone(), stop.clone(), acked.clone());
                rt.spawn(async move {
                    while !stop.load(Ordering::Acquire) {
                        match c.turn(&client, &addr).await {
                            Some(id) => acked.lock().unwrap().push((c.key.clone(), id)),
                            None => break, // the gateway is gone (or refused): next cycle
                        }
                    }
                    c
                })
            })
            .collect();
        // Killed at a random moment 150-650 ms into the load.
        let after = Duration::from_millis(150 + next(&mut seed) % 500);
        std::thread::sleep(after);
        for c in &mut gateway.0 {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
        }
        stop.store(true, Ordering::Release);
        conversations = tasks.into_iter().map(|t| rt.block_on(t).unwrap()).collect();
        // Right after the crash, before any client resends anything.
        let (ids, without_usage) = stored(&store);
        let acked = acked.lock().unwrap();
        let missing: Vec<_> = acked
            .iter()
            .filter(|(key, id)| !ids.get(key).is_some_and(|v| v.contains(id)))
            .collect();
        assert!(
            missing.is_empty(),
            "cycle {cycle}: {} of {} acknowledged turns missing: {missing:?}",
            missing.len(),
            acked.len()
        );
        assert_eq!(
            without_usage, 0,
            "cycle {cycle}: stored responses without usage"
        );
        eprintln!(
            "cycle {cycle}: killed after {after:?}, {} acknowledged turns, all stored",
            acked.len()
        );
    }
    let total = acked.lock().unwrap().len();
    assert!(
        total >= cycles * 6,
        "too few turns to mean anything: {total}"
    );
}
