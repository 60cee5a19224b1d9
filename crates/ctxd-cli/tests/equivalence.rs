#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `ctxd eval` must report exactly what `ctxd serve` sends upstream. One recorded
//! session per agent family in `../shared/sessions` is replayed through the real binary as
//! its client would have sent it (`ctxd_gateway::replay::client_turns`), in front of the
//! strict mock scripted with the recorded replies (their call ids and thinking too, so the
//! gateway finds them in the next request); every upstream body is checked on its own, then
//! compared request by request with what `ctxd eval --requests` reports for the same session.
//!
//! Asserted on the gateway's side: every request answered 200; exactly one upstream body per
//! client request (the recorded replies never call ctxd's tools, so no hidden round), none
//! refused by the strict mock; each body read by the gateway's parser and measured
//! (`ctxd_gateway::replay::measure_body`), holding the client's system prompt and ending with
//! the client's last message (or, by design, that message's shell-output digest); the stored
//! log forking exactly where the client's next request does not echo a reply (an empty one,
//! calls whose results are off the recorded branch), so every other reply was found. Then,
//! against `ctxd eval --requests`: the tokens of the system prompt, the tools and each
//! conversation element, exactly; bytes and hashes as a note.
//!
//! `CTXD_EQUIV_REQUESTS` bounds the requests per session (default 40; 0: all of them).
//! On a difference the bodies are kept in `$CARGO_TARGET_TMPDIR/equivalence/<family>/`
//! (`CTXD_EQUIV_KEEP=1`: every body), beside `gateway-requests.jsonl`, the gateway's side in
//! the format of `ctxd eval --requests`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use ctxd_core::model::{Agent, ContentBlock, Message, Session};
use ctxd_core::tokens::blocks_tokens;
use ctxd_engine::turn::hash;
use ctxd_gateway::api::Api;
use ctxd_gateway::replay::{client_turns, measure_body, BodyTokens, ClientTurn};
use ctxd_gateway::request::ParsedRequest;
use ctxd_mock::{Config, MockServer, Part, Reply};

/// Requests replayed per session unless `CTXD_EQUIV_REQUESTS` says otherwise.
const DEFAULT_REQUESTS: usize = 40;

/// An agent family: where its sessions are, the agent, the name ctxd gives it
/// (`x-ctxd-agent`), and the API its client speaks.
struct Family {
    dir: &'static str,
    agent: Agent,
    name: &'static str,
    api: Api,
    /// The model when the session names none.
    model: &'static str,
}

const CLAUDE_CODE: Family = Family {
    dir: "claude-code",
    agent: Agent::ClaudeCode,
    name: "claude-code",
    api: Api::Anthropic,
    model: "claude-sonnet-4-5",
};
const PI: Family = Family {
    dir: "pi",
    agent: Agent::Pi,
    name: "pi",
    api: Api::Anthropic,
    model: "claude-sonnet-4-5",
};
const CODEX: Family = Family {
    dir: "codex",
    agent: Agent::Codex,
    name: "codex",
    api: Api::Responses,
    model: "gpt-5",
};
const SWE_AGENT: Family = Family {
    dir: "swe-agent",
    agent: Agent::SweAgent,
    name: "swe-agent",
    api: Api::Chat,
    model: "gpt-4o",
};
const MINI_SWE_AGENT: Family = Family {
    dir: "mini-swe-agent",
    agent: Agent::MiniSweAgent,
    name: "mini-swe-agent",
    api: Api::Chat,
    model: "gpt-4o",
};

const GEMINI_CLI: Family = Family {
    dir: "gemini-cli",
    agent: Agent::GeminiCli,
    name: "gemini-cli",
    api: Api::Gemini,
    model: "gemini-2.5-pro",
};

/// Every Claude Code session of `../shared/sessions`, not only the first: the issue's
/// figure (eval's cost within 0.02 of the gateway's) is for Claude Code.
#[test]
fn claude_code() {
    let sessions = sessions_of(&CLAUDE_CODE);
    if sessions.is_empty() {
        eprintln!("claude-code: no session in ../shared/sessions, skipped");
    }
    for (path, session) in sessions {
        replay_session(&CLAUDE_CODE, path, session);
    }
}

#[test]
fn pi() {
    replay(&PI);
}

#[test]
fn codex() {
    replay(&CODEX);
}

#[test]
fn swe_agent() {
    replay(&SWE_AGENT);
}

#[test]
fn mini_swe_agent() {
    replay(&MINI_SWE_AGENT);
}

#[test]
fn gemini_cli() {
    replay(&GEMINI_CLI);
}

fn requests_limit() -> usize {
    match std::env::var("CTXD_EQUIV_REQUESTS") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("CTXD_EQUIV_REQUESTS={v:?} is not a number")),
        Err(_) => DEFAULT_REQUESTS,
    }
}

/// The family's sessions: the files of its directory (by name) that import as that agent's.
fn sessions_of(family: &Family) -> Vec<(PathBuf, Session)> {
    let dir = common::shared().join("sessions").join(family.dir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let session = ctxd_formats::import_path(&path).ok()?.session;
            (session.meta.agent == Some(family.agent)).then_some((path, session))
        })
        .collect()
}

/// The family's session: the first of [`sessions_of`].
fn session_of(family: &Family) -> Option<(PathBuf, Session)> {
    sessions_of(family).into_iter().next()
}

/// The recorded reply as the mock's scripted parts: the same ids, thinking and text, so the
/// gateway records what the client echoes next.
fn parts(reply: &[Message]) -> Vec<Part> {
    let mut out = Vec::new();
    for m in reply {
        for b in &m.content {
            out.push(match b {
                ContentBlock::Text { text } => Part::Text(text.clone()),
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => Part::ToolCallWithId {
                    id: id.clone(),
                    name: name.clone(),
                    args: arguments.clone(),
                },
                ContentBlock::Thinking {
                    thinking,
                    signature,
                    redacted,
                } => Part::Thinking {
                    text: thinking.clone(),
                    signature: signature.clone(),
                    redacted: *redacted,
                },
                other => panic!("the mock cannot answer with {other:?} (a recorded reply)"),
            });
        }
    }
    out
}

/// A message as the model reads it. Gemini's results name their call by an id ctxd derives
/// from the call as sent, which write facts may have shortened: the model reads no id.
fn model_read(api: Api, m: &Message) -> hash::Hash {
    if api != Api::Gemini {
        return hash::message(m);
    }
    let mut m = m.clone();
    for b in &mut m.content {
        if let ContentBlock::ToolResult { call_id, .. } = b {
            call_id.clear();
        }
    }
    hash::message(&m)
}

/// Where a request of `api` goes (Gemini names the model in the path).
fn route(api: Api, model: &str) -> String {
    ctxd_gateway::replay::path(api, model)
}

fn api_name(api: Api) -> &'static str {
    match api {
        Api::Anthropic => "anthropic",
        Api::Chat => "chat",
        Api::Responses => "responses",
        Api::Gemini => "gemini",
    }
}

/// Where a family's bodies are kept when something differs (emptied at the start).
fn kept_dir(family: &Family) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("equivalence")
        .join(family.dir);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn keep(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn replay(family: &Family) {
    let Some((path, session)) = session_of(family) else {
        eprintln!("{}: no session in ../shared/sessions, skipped", family.dir);
        return;
    };
    replay_session(family, path, session);
}

fn replay_session(family: &Family, path: PathBuf, session: Session) {
    let api = family.api;
    let model = ctxd_tokens::last_model(&session)
        .unwrap_or(family.model)
        .to_owned();
    let mut turns = client_turns(api, &session, &model);
    let all = turns.len();
    let limit = requests_limit();
    if limit > 0 {
        turns.truncate(limit);
    }
    assert!(!turns.is_empty(), "{}: no request", path.display());
    eprintln!(
        "{}: {} ({model}, {api:?}): {} of {all} requests",
        family.dir,
        path.display(),
        turns.len()
    );
    let counter = ctxd_tokens::for_session(&session);
    let kept = kept_dir(family);

    // The strict mock, with room for any session: its window is an estimate from bytes, and
    // what a model's window allows is not what this test is about.
    // No usage in its replies: the gateway then counts its window with its tokenizer, as
    // the eval does (a recorded session's usage is of the requests its client sent
    // unmanaged, not of ctxd's).
    let mock = MockServer::start_blocking(Config {
        windows: vec![(String::new(), u64::MAX / 4)],
        usage: false,
        ..Config::default()
    })
    .unwrap();
    let dir = common::fresh_dir(&format!("equiv-{}", family.dir));
    let mut gw = common::serve(
        &dir.join("gw.db"),
        &mock.base_url(),
        &["--distill-wait-ms", "60000"],
    );
    // The key the eval's replay uses: a boot or a notes home may quote it.
    let session_key = ctxd_gateway::replay::session_key(&session);
    let mut headers: Vec<(&str, &str)> = vec![
        ("x-ctxd-session", &session_key),
        ("x-ctxd-agent", family.name),
    ];
    match api {
        Api::Anthropic => {
            headers.push(("x-api-key", "sk-ant-equivalence"));
            headers.push(("anthropic-version", "2023-06-01"));
        }
        Api::Chat | Api::Responses => headers.push(("authorization", "Bearer sk-equivalence")),
        Api::Gemini => headers.push(("x-goog-api-key", "equivalence-key")),
    }

    // One client turn at a time, its reply scripted just before it: an upstream call the
    // gateway made beyond one per turn would get the mock's own turn logic, and is caught
    // at once.
    let upstream = |mock: &MockServer| -> Vec<ctxd_mock::Recorded> {
        mock.requests()
            .into_iter()
            .filter(|r| r.route() == route(api, &model))
            .collect()
    };
    let started = Instant::now();
    for (k, turn) in turns.iter().enumerate() {
        let n = k + 1; // requests are counted from 1, as `ctxd eval --requests` does
        mock.script().push(Reply::parts(parts(&turn.reply)));
        let body = std::str::from_utf8(&turn.body).unwrap();
        let response = common::post(&gw.addr, &route(api, &model), &headers, body);
        let (status, body) = common::status_and_body(&response);
        if status != 200 {
            let client = keep(&kept, &format!("client-{n}.json"), &turn.body);
            panic!(
                "{}: request {n} answered {status}: {body}\n(client body: {})",
                family.dir,
                client.display()
            );
        }
        let seen = upstream(&mock);
        if let Some(refused) = seen.iter().find(|r| r.refused.is_some()) {
            let sent = keep(
                &kept,
                &format!("upstream-{n}.json"),
                &refused.decoded_body().unwrap(),
            );
            panic!(
                "{}: request {n}: the mock refused an upstream body ({}): {}",
                family.dir,
                refused.refused.as_deref().unwrap_or_default(),
                sent.display()
            );
        }
        assert_eq!(
            seen.len(),
            n,
            "{}: request {n}: {} upstream bodies after {n} client requests (one each expected)",
            family.dir,
            seen.len(),
        );
        assert!(mock.script().is_empty(), "{}: request {n}", family.dir);
    }
    let bodies: Vec<Vec<u8>> = upstream(&mock)
        .iter()
        .map(|r| r.decoded_body().unwrap())
        .collect();
    common::stop(&mut gw);
    mock.stop();
    let sent_at = started.elapsed();
    let forks = forks(&dir.join("gw.db"), &session_key);

    // Each upstream body on its own.
    let mut measured: Vec<BodyTokens> = Vec::with_capacity(bodies.len());
    let mut broken: Vec<String> = Vec::new();
    let mut digested: Vec<String> = Vec::new();
    let (mut client_total, mut upstream_total) = (0u64, 0u64);
    for (k, (turn, body)) in turns.iter().zip(&bodies).enumerate() {
        let n = k + 1;
        let problems = invariants(api, turn, body, &counter);
        if !problems.is_empty() {
            let client = keep(&kept, &format!("client-{n}.json"), &turn.body);
            let sent = keep(&kept, &format!("upstream-{n}.json"), body);
            broken.push(format!(
                "request {n}: {} ({} / {})",
                problems.join("; "),
                client.display(),
                sent.display()
            ));
        }
        let tokens = measure_body(api, body, &counter)
            .unwrap_or_else(|e| panic!("{}: request {n}: {e}", family.dir));
        let client = measure_body(api, &turn.body, &counter).unwrap();
        if tokens.messages.last() != client.messages.last() {
            digested.push(format!(
                "{n} ({:?} → {:?} tokens)",
                client.messages.last(),
                tokens.messages.last()
            ));
        }
        client_total += client.total();
        upstream_total += tokens.total();
        measured.push(tokens);
    }
    // The gateway's side in the format of `ctxd eval --requests`, for a diff by hand.
    let mut lines = String::new();
    for (k, (body, tokens)) in bodies.iter().zip(&measured).enumerate() {
        lines.push_str(&request_line(k, body, tokens).to_string());
        lines.push('\n');
    }
    keep(&kept, "gateway-requests.jsonl", lines.as_bytes());
    if std::env::var_os("CTXD_EQUIV_KEEP").is_some() {
        for (k, (turn, body)) in turns.iter().zip(&bodies).enumerate() {
            keep(&kept, &format!("client-{}.json", k + 1), &turn.body);
            keep(&kept, &format!("upstream-{}.json", k + 1), body);
        }
    }
    eprintln!(
        "{}: {} requests through the gateway in {:.1} s: {client_total} tokens sent by the \
         client, {upstream_total} upstream",
        family.dir,
        bodies.len(),
        sent_at.as_secs_f64()
    );
    // Each reply the client's next request echoes as the mock sent it continues the stored
    // log; one it does not (an empty reply, calls whose results are off the branch) forks it,
    // unless the client started a new conversation (its own compaction). The requests whose
    // reply is not echoed, numbered from 1:
    let unechoed: Vec<usize> = turns
        .windows(2)
        .enumerate()
        .filter(|(_, w)| {
            continues(api, &w[0].body, &w[1].body) && !echoes(api, &w[1].body, &w[0].reply)
        })
        .map(|(k, _)| k + 1)
        .collect();
    if !digested.is_empty() {
        eprintln!(
            "{}: the client's last message went upstream digested at requests {}",
            family.dir,
            digested.join(", ")
        );
    }
    if !forks.is_empty() || !unechoed.is_empty() {
        eprintln!(
            "{}: replies the next request does not echo: requests {unechoed:?}; the stored log \
             forks under {} entries: {}",
            family.dir,
            forks.len(),
            forks.join(", ")
        );
    }
    assert_eq!(
        forks.len(),
        unechoed.len(),
        "{}: the gateway did not find every reply it recorded in the next request",
        family.dir
    );
    assert!(
        broken.is_empty(),
        "{}: upstream bodies breaking the invariants:\n{}",
        family.dir,
        broken.join("\n")
    );

    compare_with_eval(family, &path, &model, &bodies, &measured, &turns, &kept);
}

/// The entries of the stored session `key` under which two messages were appended: where a
/// request did not continue the log as it stood (the gateway did not find the reply it
/// recorded in the client's next request).
fn forks(store: &Path, key: &str) -> Vec<String> {
    let location = ctxd_store::Location::Sqlite(store.to_path_buf());
    let store = ctxd_store::open(&location, ctxd_store::Durability::Normal).unwrap();
    let record = store
        .tenants()
        .unwrap()
        .into_iter()
        .find_map(|t| store.find_session(&t, key).unwrap())
        .expect("the gateway stored the session");
    let session = store.load(record.id).unwrap();
    if let Some(dump) = std::env::var_os("CTXD_EQUIV_DUMP_LOG") {
        let text: String = session
            .entries
            .iter()
            .map(|e| {
                let kind = format!("{:?}", e.kind);
                format!(
                    "{} <- {} {}\n",
                    e.id,
                    e.parent.as_ref().map_or("-", |p| p.as_str()),
                    kind.chars().take(80).collect::<String>()
                )
            })
            .collect();
        std::fs::write(dump, text).unwrap();
    }
    let mut children: std::collections::HashMap<&str, usize> = Default::default();
    for e in &session.entries {
        if let (Some(parent), Some(_)) = (&e.parent, e.kind.as_message()) {
            *children.entry(parent.as_str()).or_default() += 1;
        }
    }
    let describe = |id: &str| -> String {
        session
            .entries
            .iter()
            .filter(|e| e.parent.as_ref().is_some_and(|p| p.as_str() == id))
            .filter_map(|e| e.kind.as_message())
            .map(|m| {
                let blocks: Vec<String> = m
                    .content
                    .iter()
                    .map(|b| format!("{b:?}").chars().take(60).collect())
                    .collect();
                format!("{:?} {blocks:?}", m.role)
            })
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let mut out: Vec<String> = children
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(id, n)| format!("{id} ({n}: {})", describe(id)))
        .collect();
    out.sort();
    out
}

/// Whether `next`'s conversation starts with all of `before`'s elements, byte for byte.
fn continues(api: Api, before: &[u8], next: &[u8]) -> bool {
    let a = ParsedRequest::parse_after(api, before, None).unwrap();
    let b = ParsedRequest::parse_after(api, next, None).unwrap();
    b.elements.len() >= a.elements.len()
        && (0..a.elements.len()).all(|i| a.element_bytes(before, i) == b.element_bytes(next, i))
}

/// Whether `body`'s conversation holds `reply`'s messages in a row.
fn echoes(api: Api, body: &[u8], reply: &[Message]) -> bool {
    if reply.is_empty() {
        return false;
    }
    let req = ParsedRequest::parse_after(api, body, None).unwrap();
    let sent: Vec<_> = (0..req.elements.len())
        .map(|i| hash::message(&req.message(body, i)))
        .collect();
    let want: Vec<_> = reply.iter().map(hash::message).collect();
    sent.windows(want.len()).any(|w| w == want.as_slice())
}

/// One request as `ctxd eval --requests` writes it.
fn request_line(k: usize, body: &[u8], tokens: &BodyTokens) -> serde_json::Value {
    serde_json::json!({
        "request": k + 1,
        "bytes": body.len(),
        "blake3": blake3::hash(body).to_hex().as_str(),
        "tokens": {"system": tokens.system, "tools": tokens.tools, "messages": tokens.messages},
    })
}

/// Whether `sent` is `client` with some of its tool results digested (shell-output digests
/// edit the request's new results, at its tail, by design): the same role and blocks, each
/// block the client's or a result of the same call and error flag whose text is a digest.
fn digest_of(sent: &Message, client: &Message) -> bool {
    sent.role == client.role
        && sent.content.len() == client.content.len()
        && ctxd_core::mechanisms::digest::is_digest(&sent.content)
        && sent.content.iter().zip(&client.content).all(|(a, b)| {
            a == b
                || matches!((a, b), (
                    ContentBlock::ToolResult { call_id: x, is_error: e, .. },
                    ContentBlock::ToolResult { call_id: y, is_error: f, .. },
                ) if x == y && e == f && ctxd_core::mechanisms::digest::is_digest(std::slice::from_ref(a)))
        })
}

/// What must hold of every upstream body: the gateway's parser reads it, the client's system
/// prompt is in it, it ends with the client's last message (or its shell output's digest), and
/// it can be measured.
fn invariants(
    api: Api,
    turn: &ClientTurn,
    body: &[u8],
    counter: &dyn ctxd_core::tokens::TokenCounter,
) -> Vec<String> {
    let mut problems = Vec::new();
    let client = ParsedRequest::parse_after(api, &turn.body, None).unwrap();
    let sent = match ParsedRequest::parse_after(api, body, None) {
        Ok(sent) => sent,
        Err(e) => return vec![format!("the gateway's parser refuses it: {e}")],
    };
    if let Err(e) = measure_body(api, body, counter) {
        problems.push(format!("not measured: {e}"));
    }
    match api {
        Api::Anthropic | Api::Responses | Api::Gemini => {
            if let Some(system) = client.system(&turn.body) {
                if !sent.system(body).is_some_and(|s| s.contains(&system)) {
                    problems.push("the client's system prompt is missing".to_owned());
                }
            }
        }
        Api::Chat => {
            let first = client.message(&turn.body, 0);
            if first.role == ctxd_core::model::Role::System
                && (sent.elements.is_empty()
                    || hash::message(&sent.message(body, 0)) != hash::message(&first))
            {
                problems.push("the client's system message does not open it".to_owned());
            }
        }
    }
    let last = client.message(&turn.body, client.elements.len() - 1);
    match sent.elements.len().checked_sub(1) {
        None => problems.push("no conversation".to_owned()),
        Some(i) => {
            let tail = sent.message(body, i);
            if model_read(api, &tail) != model_read(api, &last) && !digest_of(&tail, &last) {
                problems.push(format!(
                    "it ends with another message than the client's last ({:?}, {} tokens; the \
                     client's: {:?}, {} tokens)",
                    tail.role,
                    blocks_tokens(counter, &tail.content),
                    last.role,
                    blocks_tokens(counter, &last.content)
                ));
            }
        }
    }
    problems
}

/// `ctxd eval FILE --requests OUT --api API --model MODEL`, compared request by request: each
/// element's tokens exactly; bytes and hashes as a note unless the tokens differ too.
fn compare_with_eval(
    family: &Family,
    path: &Path,
    model: &str,
    bodies: &[Vec<u8>],
    measured: &[BodyTokens],
    turns: &[ClientTurn],
    kept: &Path,
) {
    let out = kept.join("eval-requests.jsonl");
    common::succeed(common::ctxd().args([
        "eval".as_ref(),
        path.as_os_str(),
        "--requests".as_ref(),
        out.as_os_str(),
        "--requests-with-bodies".as_ref(),
        "--api".as_ref(),
        api_name(family.api).as_ref(),
        "--model".as_ref(),
        model.as_ref(),
    ]));
    let text = std::fs::read_to_string(&out).unwrap();
    match compare(&text, bodies, measured, turns, kept) {
        Ok(notes) if notes.is_empty() => eprintln!(
            "{}: eval and gateway agree on all {} requests, byte for byte",
            family.dir,
            bodies.len()
        ),
        Ok(notes) => eprintln!(
            "{}: eval and gateway agree on the tokens of all {} requests; the bytes differ at \
             requests {notes:?} (boot texts carry times)",
            family.dir,
            bodies.len(),
        ),
        Err(difference) => panic!("{}: {difference}", family.dir),
    }
}

/// The gateway's `bodies` (`measured`) against the lines of `ctxd eval --requests` (`text`),
/// request by request: the requests (from 1) whose bytes alone differ, or the first whose
/// tokens differ, said with the bodies kept in `kept`.
fn compare(
    text: &str,
    bodies: &[Vec<u8>],
    measured: &[BodyTokens],
    turns: &[ClientTurn],
    kept: &Path,
) -> Result<Vec<usize>, String> {
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| format!("eval's line {l:?}: {e}")))
        .collect::<Result<_, _>>()?;
    if lines.len() < bodies.len() {
        return Err(format!(
            "eval wrote {} requests, the gateway sent {}",
            lines.len(),
            bodies.len()
        ));
    }
    let mut notes = Vec::new();
    for (k, ((body, tokens), line)) in bodies.iter().zip(measured).zip(&lines).enumerate() {
        let n = k + 1;
        if line["request"] != n {
            return Err(format!("eval's line {n} is request {}", line["request"]));
        }
        let eval = BodyTokens {
            system: line["tokens"]["system"].as_u64().unwrap_or(0),
            tools: line["tokens"]["tools"].as_u64().unwrap_or(0),
            messages: line["tokens"]["messages"]
                .as_array()
                .map(|m| m.iter().map(|t| t.as_u64().unwrap_or(0)).collect())
                .unwrap_or_default(),
        };
        let same_bytes = line["bytes"].as_u64() == Some(body.len() as u64)
            && line["blake3"].as_str() == Some(blake3::hash(body).to_hex().as_str());
        if eval == *tokens {
            if !same_bytes {
                notes.push(n);
            }
            continue;
        }
        let what = if eval.system != tokens.system {
            format!("system: eval {} vs gateway {}", eval.system, tokens.system)
        } else if eval.tools != tokens.tools {
            format!("tools: eval {} vs gateway {}", eval.tools, tokens.tools)
        } else {
            let i = (0..eval.messages.len().max(tokens.messages.len()))
                .find(|&i| eval.messages.get(i) != tokens.messages.get(i))
                .unwrap_or(0);
            format!(
                "message {i} (from 0): eval {:?} vs gateway {:?} ({} vs {} messages)",
                eval.messages.get(i),
                tokens.messages.get(i),
                eval.messages.len(),
                tokens.messages.len()
            )
        };
        let gateway = keep(kept, &format!("upstream-{n}.json"), body);
        let client = keep(kept, &format!("client-{n}.json"), &turns[k].body);
        let eval_body = match line.get("body").filter(|b| !b.is_null()) {
            Some(b) => keep(kept, &format!("eval-{n}.json"), b.to_string().as_bytes())
                .display()
                .to_string(),
            None => format!("line {n} of eval's output (no body in it)"),
        };
        return Err(format!(
            "request {n} differs first, {what}{}\n  gateway's upstream body: {}\n  eval's: \
             {eval_body}\n  the client's: {}",
            if same_bytes {
                ""
            } else {
                " (bytes differ too)"
            },
            gateway.display(),
            client.display()
        ));
    }
    Ok(notes)
}

/// The comparison reads the lines it is given in `ctxd eval --requests`'s format: the
/// gateway's own agree with it, a token off is the first difference.
#[test]
fn the_comparison_reads_eval_lines() {
    let kept = kept_dir(&Family {
        dir: "self-test",
        ..CLAUDE_CODE
    });
    let turns = vec![
        ClientTurn {
            body: br#"{"messages":[]}"#.to_vec(),
            reply: Vec::new(),
        };
        2
    ];
    let bodies = vec![b"one".to_vec(), b"two".to_vec()];
    let measured = vec![
        BodyTokens {
            system: 3,
            tools: 10,
            messages: vec![5, 7],
        },
        BodyTokens {
            system: 3,
            tools: 10,
            messages: vec![5, 7, 2],
        },
    ];
    let lines = |m: &[BodyTokens]| -> String {
        bodies
            .iter()
            .zip(m)
            .enumerate()
            .map(|(k, (b, t))| request_line(k, b, t).to_string() + "\n")
            .collect()
    };
    assert_eq!(
        compare(&lines(&measured), &bodies, &measured, &turns, &kept),
        Ok(Vec::new())
    );
    let mut off = measured.clone();
    off[1].messages[2] = 3;
    let said = compare(&lines(&off), &bodies, &measured, &turns, &kept).unwrap_err();
    assert!(
        said.starts_with(
            "request 2 differs first, message 2 (from 0): eval Some(3) vs gateway Some(2)"
        ),
        "{said}"
    );
    let other_bytes = lines(&measured).replace("\"bytes\":3", "\"bytes\":4");
    assert_eq!(
        compare(&other_bytes, &bodies, &measured, &turns, &kept),
        Ok(vec![1, 2])
    );
    let _ = std::fs::remove_dir_all(&kept);
}
