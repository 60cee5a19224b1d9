//! Raw API request bodies and captures of requests (`shared/clients/captured/*.jsonl`).

use std::path::{Path, PathBuf};

use ctxd_core::model::{Agent, ContentBlock, Entry, EntryKind, Message, Role, Session, WireApi};
use ctxd_formats::wire::{anthropic, gemini, openai_chat, openai_responses, Request};
use ctxd_formats::{import_path, Format};
use serde_json::Value;

use ctxd_test_support::shared;

fn captured() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(shared().join("clients/captured"))
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/api")
        .join(name)
}

/// The entries from the root to the session's leaf (the last entry when `leaf` is `None`).
fn branch(s: &Session) -> Vec<&Entry> {
    let mut out = Vec::new();
    let mut cur = match &s.leaf {
        Some(id) => s.entries.iter().find(|e| &e.id == id),
        None => s.entries.last(),
    };
    while let Some(e) = cur {
        out.push(e);
        cur = e
            .parent
            .as_ref()
            .and_then(|p| s.entries.iter().find(|x| &x.id == p));
    }
    out.reverse();
    out
}

fn branch_messages(s: &Session) -> Vec<&Message> {
    branch(s)
        .into_iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Message(m) => Some(m),
            _ => None,
        })
        .collect()
}

fn api_of_path(path: &str) -> WireApi {
    if path.contains("/messages") {
        WireApi::AnthropicMessages
    } else if path.contains("/chat/completions") {
        WireApi::OpenaiChat
    } else if path.contains(":generateContent") || path.contains(":streamGenerateContent") {
        WireApi::GeminiGenerateContent
    } else {
        WireApi::OpenaiResponses
    }
}

fn parse(api: WireApi, body: &Value) -> Request {
    match api {
        WireApi::AnthropicMessages => anthropic::request(body),
        WireApi::OpenaiChat => openai_chat::request(body),
        WireApi::OpenaiResponses => openai_responses::request(body),
        WireApi::GeminiGenerateContent => gemini::request(body, None),
    }
}

/// The last line of a capture that is a POST with a body: its API and its parsed request.
fn last_request(path: &Path) -> (WireApi, Request, Value) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
    let line = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["method"] == "POST" && v["body"].is_object())
        .unwrap_or_else(|| panic!("no request in {}", path.display()));
    let api = api_of_path(line["path"].as_str().unwrap_or_default());
    (api, parse(api, &line["body"]), line)
}

#[test]
fn every_capture_imports_and_its_leaf_is_the_last_request() {
    let files = captured();
    assert_eq!(files.len(), 6);
    for path in files {
        let name = path.display().to_string();
        let import = import_path(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(import.format, Format::CapturedRequests, "{name}");
        assert!(import.warnings.is_empty(), "{name}: {:?}", import.warnings);
        let s = &import.session;
        assert_eq!(s.meta.agent, Some(Agent::Api));
        assert_eq!(s.meta.format, "captured requests");
        assert!(s
            .meta
            .started_at
            .as_deref()
            .is_some_and(|t| t.starts_with("2026-11-30T")));

        let (_, last, line) = last_request(&path);
        assert_eq!(s.meta.model, last.model, "{name}");
        // The branch is the last request's messages, then the mock's answer to it (when the
        // capture recorded one): the conversation as it ended.
        let mut got: Vec<Role> = branch_messages(s).iter().map(|m| m.role).collect();
        if s.leaf
            .as_ref()
            .is_some_and(|l| l.as_str().ends_with(".reply"))
        {
            assert_eq!(got.pop(), Some(Role::Assistant), "{name}");
        }
        let want: Vec<Role> = last.messages.iter().map(|m| m.role).collect();
        assert_eq!(got, want, "{name}");
        let b = branch(s);
        assert_eq!(
            b.iter()
                .any(|e| matches!(e.kind, EntryKind::SystemPrompt { .. })),
            last.system.is_some(),
            "{name}"
        );
        assert_eq!(
            b.iter()
                .any(|e| matches!(e.kind, EntryKind::ToolDefs { .. })),
            !last.tools.is_empty()
        );
        // Ids are `r<line>.<index>`: the leaf is the last request's last item unless an earlier
        // request already had it.
        assert!(b.iter().all(|e| e.id.as_str().starts_with('r')), "{name}");

        // Headers (API keys) never reach the session.
        let json = serde_json::to_string(s).unwrap_or_default();
        for (key, value) in line["headers"].as_object().into_iter().flatten() {
            if ["authorization", "x-api-key"].contains(&key.to_ascii_lowercase().as_str()) {
                let secret = value.as_str().unwrap_or_default();
                assert!(!json.contains(secret), "{name}: header {key} leaked");
            }
        }
        assert!(!json.contains("x-stainless"), "{name}");
    }
}

/// python3: requests_claude.jsonl has a `HEAD /` line, then two POSTs; the second repeats the
/// first's system prompt, tools and 2 messages and adds an assistant tool_use and a tool_result.
/// The first user message has a `cache_control` in the first request and none in the second:
/// the two still merge. The mock answered
/// `["tool", "Bash", ...]` then `["text", "done"]`.
#[test]
fn requests_merge_into_one_tree() {
    let import = import_path(&shared().join("clients/captured/requests_claude.jsonl"))
        .unwrap_or_else(|e| panic!("{e}"));
    let s = &import.session;
    let ids: Vec<&str> = s.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        vec!["r2.0", "r2.1", "r2.2", "r2.3", "r3.4", "r3.5", "r3.reply"]
    );
    assert_eq!(s.leaf.as_ref().map(|l| l.as_str()), Some("r3.reply"));
    assert_eq!(s.meta.model.as_deref(), Some("claude-opus-4-8"));
    // The first reply (a tool call) was confirmed by the second request: not kept twice. The
    // final answer ends the active branch.
    let reply = &s.entries[6];
    assert_eq!(reply.parent.as_ref().map(|p| p.as_str()), Some("r3.5"));
    assert!(matches!(&reply.kind, EntryKind::Message(m)
        if m.role == Role::Assistant && m.content == vec![ContentBlock::text("done")]));
    // Claude Code's in-messages system note keeps its role.
    assert_eq!(branch_messages(s)[1].role, Role::System);
}

/// Pi talked Chat Completions, then Responses, with the same prompt: two root chains.
#[test]
fn different_conversations_become_separate_roots() {
    let import =
        import_path(&shared().join("clients/captured/requests_pi_compat_and_responses.jsonl"))
            .unwrap_or_else(|e| panic!("{e}"));
    let s = &import.session;
    let roots: Vec<&str> = s
        .entries
        .iter()
        .filter(|e| e.parent.is_none())
        .map(|e| e.id.as_str())
        .collect();
    assert_eq!(roots, vec!["r1.0", "r3.0"]);
    // chat: system, tools, user, assistant, tool (5) + its answer; responses: tools, system
    // message, user, call, output (5) + its answer.
    assert_eq!(s.entries.len(), 12);
    assert_eq!(s.meta.model.as_deref(), Some("gpt-5-mini"));
    let tool_calls = branch_messages(s)
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, ContentBlock::ToolCall { name, .. } if name == "bash"))
        .count();
    assert_eq!(tool_calls, 1);
}

#[test]
fn a_single_body_per_api() {
    let cases = [
        (
            "anthropic.json",
            WireApi::AnthropicMessages,
            "claude-sonnet-4-5",
            3,
            true,
        ),
        (
            "openai_chat.json",
            WireApi::OpenaiChat,
            "gpt-4o-mini",
            5,
            true,
        ),
        (
            "openai_responses.json",
            WireApi::OpenaiResponses,
            "gpt-5-mini",
            5,
            true,
        ),
    ];
    for (file, api, model, messages, system) in cases {
        let import = import_path(&fixture(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(import.format, Format::ApiRequest(api), "{file}");
        let s = &import.session;
        assert_eq!(s.meta.agent, Some(Agent::Api));
        assert_eq!(s.meta.format, Format::ApiRequest(api).name());
        assert_eq!(s.meta.model.as_deref(), Some(model));
        assert_eq!(branch_messages(s).len(), messages, "{file}");
        assert_eq!(
            matches!(&s.entries[0].kind, EntryKind::SystemPrompt { text } if text == "You are a careful coding agent."),
            system,
            "{file}"
        );
        assert!(
            matches!(&s.entries[1].kind, EntryKind::ToolDefs { tools } if tools[0].name == "bash")
        );
        let calls = branch_messages(s)
            .iter()
            .flat_map(|m| &m.content)
            .filter(|b| matches!(b, ContentBlock::ToolCall { arguments, .. } if arguments["command"] == "ls"))
            .count();
        assert_eq!(calls, 1, "{file}");
        let results = branch_messages(s)
            .iter()
            .flat_map(|m| &m.content)
            .filter(
                |b| matches!(b, ContentBlock::ToolResult { call_id, .. } if call_id.ends_with('1')),
            )
            .count();
        assert_eq!(results, 1, "{file}");
    }
}

fn temp_file(name: &str, text: &str) -> PathBuf {
    // In cargo's scratch space for tests, not /tmp: nothing here removes it.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ctxd-api-test");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    path
}

/// The body of Codex's second captured request, saved alone, imports as one Responses request.
#[test]
fn a_body_taken_out_of_a_capture() {
    let (api, request, line) =
        last_request(&shared().join("clients/captured/requests_codex_final.jsonl"));
    assert_eq!(api, WireApi::OpenaiResponses);
    let path = temp_file("codex_body.json", &line["body"].to_string());
    let import = import_path(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(import.format, Format::ApiRequest(WireApi::OpenaiResponses));
    let s = &import.session;
    let roles: Vec<Role> = branch_messages(s).iter().map(|m| m.role).collect();
    use Role::*;
    // python3: developer, developer, user (environment context), user, function_call,
    // function_call_output.
    assert_eq!(
        roles,
        vec![Developer, Developer, User, User, Assistant, Tool]
    );
    assert_eq!(roles.len(), request.messages.len());
    assert_eq!(s.meta.model, request.model);
    assert!(matches!(&s.entries[0].kind, EntryKind::ToolDefs { tools } if !tools.is_empty()));
}

/// Bare bodies, one a line, import like a capture: three growing requests, one chain.
#[test]
fn bare_bodies_one_a_line() {
    let import = import_path(&fixture("bodies.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(import.format, Format::CapturedRequests);
    let s = &import.session;
    // system, tools, then 5 messages: every request extends the one before.
    assert_eq!(s.entries.len(), 2 + 5);
    assert_eq!(s.entries.iter().filter(|e| e.parent.is_none()).count(), 1);
    assert_eq!(s.leaf.as_ref().map(|l| l.as_str()), Some("r3.6"));
    assert_eq!(branch_messages(s).len(), 5);
}

#[test]
fn a_corrupt_line_in_a_capture_is_skipped_with_a_warning() {
    let text = std::fs::read_to_string(shared().join("clients/captured/requests_pi_openai.jsonl"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut lines: Vec<&str> = text.lines().collect();
    let second = lines[1];
    let half = (0..=second.len() / 2)
        .rev()
        .find(|i| second.is_char_boundary(*i))
        .unwrap_or(0);
    let cut = &second[..half];
    lines.insert(1, "{\"ts\": 1, \"method\": \"POST\", \"body\": {");
    lines[2] = cut; // the second request, truncated
    let path = temp_file("corrupt.jsonl", &lines.join("\n"));
    let import = import_path(&path).unwrap_or_else(|e| panic!("{e}"));
    let warned: Vec<Option<usize>> = import.warnings.iter().map(|w| w.line).collect();
    assert_eq!(warned, vec![Some(2), Some(3)]);
    assert!(import.warnings[0]
        .to_string()
        .starts_with("line 2: skipped"));
    // Only the first request is left: system, tools, user, and the mock's tool call.
    let s = &import.session;
    assert_eq!(s.entries.len(), 4);
    assert!(matches!(&s.entries[3].kind, EntryKind::Message(m)
        if matches!(&m.content[0], ContentBlock::ToolCall { name, .. } if name == "bash")));
}

/// `cargo test --release -p ctxd-formats --test api_request -- --ignored --nocapture`
#[test]
#[ignore]
fn import_speed() {
    let files = captured();
    let bytes: u64 = files
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    let runs = 100;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        for path in &files {
            let import = import_path(path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!import.session.entries.is_empty());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "captured requests: {:.0} MB/s",
        bytes as f64 * runs as f64 / secs / 1e6
    );
}
