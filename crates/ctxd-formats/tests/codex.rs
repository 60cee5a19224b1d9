//! Codex rollouts: the real shared files, a hand-written legacy rollout, and mutated copies.
//!
//! Expected figures were cross-checked with python3 over the JSONL (see each test).

use std::path::{Path, PathBuf};

use ctxd_core::model::{Agent, ContentBlock, EntryKind, Message, Role, Session, Usage};
use ctxd_formats::{import_path, Format};

use ctxd_test_support::shared;

const ROLLOUT: &str =
    "sessions/codex/rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl";

fn rollout() -> PathBuf {
    shared().join(ROLLOUT)
}

fn messages(s: &Session) -> Vec<&Message> {
    s.entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Message(m) => Some(m),
            _ => None,
        })
        .collect()
}

fn blocks(s: &Session, pred: fn(&ContentBlock) -> bool) -> usize {
    messages(s)
        .iter()
        .flat_map(|m| m.content.iter())
        .filter(|b| pred(b))
        .count()
}

fn usages(s: &Session) -> Vec<Usage> {
    s.entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Usage { usage } => Some(*usage),
            _ => None,
        })
        .collect()
}

fn count(s: &Session, pred: fn(&EntryKind) -> bool) -> usize {
    s.entries.iter().filter(|e| pred(&e.kind)).count()
}

/// python3: response_item types message 2 (user), function_call 39, function_call_output 39,
/// reasoning 38, ghost_snapshot 1; 79 token_count events, 78 with info, 39 distinct
/// total_token_usage; summed last_token_usage of those: input 1099261 (cached 1027328),
/// output 22305, equal to the final total_token_usage.
#[test]
fn real_rollout_imports_with_its_facts() {
    let import = import_path(&rollout()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(import.format, Format::Codex);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    let meta = &s.meta;
    assert_eq!(meta.agent, Some(Agent::Codex));
    assert_eq!(
        meta.id.as_deref(),
        Some("019a93b9-f380-7600-98ff-940e6b99603c")
    );
    assert_eq!(meta.format, "codex/0.58.0");
    assert_eq!(
        meta.cwd.as_deref(),
        Some("/home/user/projects/temp/chatbot-ui")
    );
    assert_eq!(meta.started_at.as_deref(), Some("2025-11-17T21:30:28.608Z"));
    assert_eq!(meta.model.as_deref(), Some("gpt-5.1-codex"));
    assert_eq!(meta.context_window, Some(258_400));
    assert_eq!(s.leaf, None);

    assert_eq!(messages(s).len(), 2 + 39 + 39 + 38);
    assert_eq!(
        blocks(s, |b| matches!(b, ContentBlock::ToolCall { .. })),
        39
    );
    assert_eq!(
        blocks(s, |b| matches!(b, ContentBlock::ToolResult { .. })),
        39
    );
    assert_eq!(
        blocks(s, |b| matches!(b, ContentBlock::Thinking { .. })),
        38
    );
    // The shell tool's name and its JSON-string arguments, parsed.
    assert!(messages(s).iter().flat_map(|m| &m.content).any(|b| matches!(b,
        ContentBlock::ToolCall { name, arguments, .. } if name == "shell" && arguments["command"][0] == "bash")));

    // The user typed one message; the other is Codex's environment context.
    let users: Vec<&Message> = messages(s)
        .into_iter()
        .filter(|m| m.role == Role::User)
        .collect();
    assert_eq!(users.len(), 2);
    assert_eq!(users[0].injected.as_deref(), Some("environment-context"));
    assert_eq!(users[1].injected, None);
    // Every assistant message carries the turn's model.
    assert!(messages(s)
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .all(|m| m.model.as_deref() == Some("gpt-5.1-codex")));

    // Usage: one entry per response, never the repeats.
    let u = usages(s);
    assert_eq!(u.len(), 39);
    let mut total = Usage::default();
    u.iter().for_each(|x| total.add(x));
    assert_eq!(total.input, 1_099_261 - 1_027_328);
    assert_eq!(total.cache_read, 1_027_328);
    assert_eq!(total.output, 22_305);
    assert_eq!(total.cache_write, 0);

    assert_eq!(count(s, |k| matches!(k, EntryKind::ModelChange { .. })), 1);
    assert_eq!(
        count(
            s,
            |k| matches!(k, EntryKind::Event { name, .. } if name == "ghost_snapshot")
        ),
        1
    );
    // The duplicated event_msg lines (user_message, agent_reasoning) add nothing.
    assert_eq!(s.entries.len(), 118 + 39 + 1 + 1);
    // Linear: each entry's parent is the one before.
    for pair in s.entries.windows(2) {
        assert_eq!(pair[1].parent.as_ref(), Some(&pair[0].id));
    }
}

/// python3 over small.jsonl: 7 session_meta, 9 turn_context (models luna, luna, 5.5,
/// codex-auto-review, 5.4, 5.2, 5.2-codex, 5.1, sol), 22 response_item (1 ghost_snapshot),
/// 6 compacted all with replacement_history (1, 8, 21, 51, 65, 13 items), 60 event_msg that
/// do not repeat items or count tokens, 5 world_state + 1 inter_agent_communication_metadata,
/// 3 token_count of which one has no info and one is all zeros.
#[test]
fn schema_coverage_fixture_imports_cleanly() {
    let import =
        import_path(&shared().join("sessions/codex/small.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    assert_eq!(s.meta.format, "codex/0.146.0");
    assert_eq!(s.meta.model.as_deref(), Some("gpt-5.6-luna"));
    assert_eq!(s.meta.context_window, Some(258_400));
    assert_eq!(s.meta.title.as_deref(), Some("[trimmed for fixture]"));

    assert_eq!(messages(s).len(), 21);
    assert_eq!(count(s, |k| matches!(k, EntryKind::SystemPrompt { .. })), 1);
    assert_eq!(count(s, |k| matches!(k, EntryKind::ModelChange { .. })), 8);
    let compactions: Vec<usize> = s
        .entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Compaction(c) => c.replacement.as_ref().map(Vec::len),
            _ => None,
        })
        .collect();
    assert_eq!(compactions, vec![1, 8, 21, 51, 65, 13]);
    assert_eq!(usages(s).len(), 1);
    assert_eq!(usages(s)[0].cache_read, 3584);
    assert_eq!(usages(s)[0].input, 16341 - 3584);
    // 60 event_msg + 6 newer line kinds + 6 repeated session_meta + 1 ghost_snapshot.
    assert_eq!(count(s, |k| matches!(k, EntryKind::Event { .. })), 73);
    // The inter-agent message and the developer message are the agent's injections.
    let injected: Vec<&str> = messages(s)
        .iter()
        .filter_map(|m| m.injected.as_deref())
        .collect();
    assert!(injected.contains(&"agent-message"), "{injected:?}");
    assert!(injected.contains(&"developer-instructions"), "{injected:?}");
}

/// A hand-written legacy rollout: bare meta, state markers, bare items, no timestamps.
#[test]
fn legacy_rollout() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/codex/legacy.jsonl");
    let import = import_path(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(import.format, Format::Codex);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    assert_eq!(s.meta.format, "codex/legacy");
    assert_eq!(
        s.meta.id.as_deref(),
        Some("5973b6c0-94b8-487b-a530-2aeb6098ae0e")
    );
    assert_eq!(
        s.meta.started_at.as_deref(),
        Some("2025-08-20T13:20:47.060Z")
    );
    assert!(matches!(&s.entries[0].kind,
        EntryKind::SystemPrompt { text } if text.starts_with("Always run the tests")));
    let ms = messages(s);
    let roles: Vec<Role> = ms.iter().map(|m| m.role).collect();
    use Role::*;
    assert_eq!(
        roles,
        vec![User, User, Assistant, Assistant, Tool, Assistant, Tool, Assistant]
    );
    assert_eq!(ms[0].injected.as_deref(), Some("environment-context"));
    assert_eq!(ms[1].injected, None);
    assert_eq!(blocks(s, |b| matches!(b, ContentBlock::ToolCall { .. })), 2);
    assert_eq!(
        blocks(s, |b| matches!(b, ContentBlock::ToolResult { .. })),
        2
    );
    // Ids name the file's lines (state markers are skipped, not numbered away).
    assert_eq!(s.entries[1].id.as_str(), "L3");
    assert_eq!(s.entries.last().map(|e| e.id.as_str()), Some("L12"));
}

fn temp_copy(name: &str, text: &str) -> PathBuf {
    // In cargo's scratch space for tests, not /tmp: nothing here removes it.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ctxd-codex-test");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    path
}

#[test]
fn corrupt_and_truncated_lines_are_skipped_with_a_warning() {
    let text = std::fs::read_to_string(rollout()).unwrap_or_else(|e| panic!("{e}"));
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let n = lines.len();
    // Line 11 is the first function_call; corrupt it. Cut the last line in half.
    lines[10] = lines[10].replacen('{', "{\"oops", 1);
    let last = &lines[n - 1];
    let half = last.len() / 2;
    let cut = (0..=half)
        .rev()
        .find(|i| last.is_char_boundary(*i))
        .unwrap_or(0);
    lines[n - 1] = last[..cut].to_owned();
    let path = temp_copy("corrupt.jsonl", &lines.join("\n"));
    let import = import_path(&path).unwrap_or_else(|e| panic!("{e}"));
    let lines_warned: Vec<Option<usize>> = import.warnings.iter().map(|w| w.line).collect();
    assert_eq!(lines_warned, vec![Some(11), Some(n)]);
    assert!(import.warnings[0]
        .to_string()
        .starts_with("line 11: skipped"));
    assert_eq!(
        blocks(&import.session, |b| matches!(
            b,
            ContentBlock::ToolCall { .. }
        )),
        38
    );

    // A payload-less envelope line is an error for that line only.
    let path = temp_copy(
        "nopayload.jsonl",
        "{\"timestamp\":\"t\",\"type\":\"session_meta\",\"payload\":{\"id\":\"a\"}}\n{\"type\":\"response_item\"}\n",
    );
    let import = import_path(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(import.warnings.len(), 1);
    assert_eq!(import.warnings[0].line, Some(2));
}

/// `cargo test --release -p ctxd-formats --test codex -- --ignored --nocapture`
#[test]
#[ignore]
fn import_speed() {
    for rel in [ROLLOUT, "sessions/codex/small.jsonl"] {
        let path = shared().join(rel);
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64;
        let runs = 200;
        let start = std::time::Instant::now();
        for _ in 0..runs {
            let import = import_path(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!import.session.entries.is_empty());
        }
        let secs = start.elapsed().as_secs_f64();
        println!("{rel}: {:.0} MB/s", bytes * runs as f64 / secs / 1e6);
    }
}
