//! Claude Code importer against the real 1.0.x transcripts in `shared/sessions/claude-code/`, a
//! real 2.1.197 transcript (compaction) and hand-written 2.x fixtures.
//!
//! Every expected figure below was computed independently with python3 over the JSONL (see the
//! comment on each test), not read back from the importer.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ctxd_core::model::{Agent, ContentBlock, Entry, EntryKind, Message, Role, Session, Usage};
use ctxd_core::tree::active_branch;
use ctxd_formats::{import_path, Format, Import};

use ctxd_test_support::shared;

fn real(name: &str) -> PathBuf {
    shared().join("sessions/claude-code").join(name)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/claude_code")
        .join(name)
}

const V1098: &str = "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl";
const V10108: &str = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl";

fn import(path: &Path) -> Import {
    match import_path(path) {
        Ok(i) => i,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

fn messages(session: &Session) -> impl Iterator<Item = (&Entry, &Message)> {
    session.entries.iter().filter_map(|e| match &e.kind {
        EntryKind::Message(m) => Some((e, m)),
        _ => None,
    })
}

fn main_branch_messages(session: &Session) -> Vec<&Message> {
    active_branch(session)
        .into_iter()
        .filter_map(|i| match &session.entries[i].kind {
            EntryKind::Message(m) => Some(m),
            _ => None,
        })
        .collect()
}

fn count_blocks(session: &Session, pred: fn(&ContentBlock) -> bool) -> usize {
    messages(session)
        .flat_map(|(_, m)| m.content.iter())
        .filter(|b| pred(b))
        .count()
}

fn usage_total(session: &Session) -> (Usage, usize) {
    let mut total = Usage::default();
    let mut n = 0;
    for (_, m) in messages(session) {
        if let Some(u) = &m.usage {
            total.add(u);
            n += 1;
        }
    }
    (total, n)
}

struct Expected {
    entries: usize,
    main_branch: usize,
    sidechain: usize,
    tool_use: usize,
    tool_result: usize,
    responses: usize,
    usage: Usage,
    leaf: &'static str,
    version: &'static str,
}

/// python3: for each file, L = json lines; leaf = last non-sidechain line with a uuid; walk
/// parentUuid from it; count user/assistant lines on the path; count isSidechain lines,
/// tool_use / tool_result blocks, distinct message.id; sum usage of the LAST line of each
/// message.id (input, output, cache_read, cache_creation).
fn check_real(name: &str, want: &Expected) {
    let import = import(&real(name));
    assert_eq!(import.format, Format::ClaudeCode);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    assert_eq!(s.entries.len(), want.entries);
    assert_eq!(main_branch_messages(s).len(), want.main_branch);
    assert_eq!(
        s.entries.iter().filter(|e| e.sidechain).count(),
        want.sidechain
    );
    assert_eq!(
        count_blocks(s, |b| matches!(b, ContentBlock::ToolCall { .. })),
        want.tool_use
    );
    assert_eq!(
        count_blocks(s, |b| matches!(b, ContentBlock::ToolResult { .. })),
        want.tool_result
    );
    let ids: HashSet<&str> = messages(s)
        .filter_map(|(_, m)| m.response_id.as_deref())
        .collect();
    assert_eq!(ids.len(), want.responses);
    let (total, with_usage) = usage_total(s);
    assert_eq!(total, want.usage);
    // One usage per response, never more.
    assert_eq!(with_usage, want.responses);
    assert_eq!(s.leaf.as_ref().map(|l| l.as_str()), Some(want.leaf));
    assert_eq!(s.meta.agent, Some(Agent::ClaudeCode));
    assert_eq!(s.meta.format, format!("claude-code/{}", want.version));
    assert_eq!(s.meta.id.as_deref(), name.strip_suffix(".jsonl"));
    assert_eq!(s.meta.model.as_deref(), Some("claude-sonnet-4-20250514"));
    // Every parent is an earlier entry.
    let mut seen = HashSet::new();
    for e in &s.entries {
        if let Some(p) = &e.parent {
            assert!(
                seen.contains(p.as_str()),
                "{} before its parent {}",
                e.id,
                p
            );
        }
        seen.insert(e.id.as_str());
    }
    // No sidechain entry is on the main branch.
    assert!(active_branch(s).iter().all(|&i| !s.entries[i].sidechain));
}

#[test]
fn claude_code_1_0_98() {
    // python3: 438 lines (437 with uuid + 1 summary), main path 32 messages, 405 sidechain,
    // 167 tool_use, 167 tool_result, 170 message ids, usage [818, 51933, 3647854, 137976].
    check_real(
        V1098,
        &Expected {
            entries: 438,
            main_branch: 32,
            sidechain: 405,
            tool_use: 167,
            tool_result: 167,
            responses: 170,
            usage: Usage {
                input: 818,
                output: 51933,
                cache_read: 3_647_854,
                cache_write: 137_976,
            },
            leaf: "5ac34508-f923-4ac5-8efa-749838e99760",
            version: "1.0.98",
        },
    );
    let s = import(&real(V1098)).session;
    // The leading summary line: an event and the title, not a compaction.
    assert_eq!(
        s.meta.title.as_deref(),
        Some("Empty Repo Setup: CLAUDE.md Foundation Created")
    );
    assert!(matches!(&s.entries[0].kind, EntryKind::Event { name, .. } if name == "summary"));
    assert_eq!(s.entries[0].id.as_str(), "L1");
    assert!(!s
        .entries
        .iter()
        .any(|e| matches!(e.kind, EntryKind::Compaction(_))));
    // Line 2 is the `/orchestrator` command wrapper, line 3 its isMeta expansion.
    let injected: Vec<_> = messages(&s)
        .filter_map(|(_, m)| m.injected.as_deref())
        .collect();
    assert_eq!(injected, ["command", "meta"]);
    // msg_0175yHhPUPFGbabUiDkdjvaD spans lines 4-6 with output 3, 172, 172: usage on line 6.
    let lines: Vec<_> = messages(&s)
        .filter(|(_, m)| m.response_id.as_deref() == Some("msg_0175yHhPUPFGbabUiDkdjvaD"))
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].1.usage.is_none() && lines[1].1.usage.is_none());
    assert_eq!(
        lines[2].1.usage,
        Some(Usage {
            input: 3,
            output: 172,
            cache_read: 14874,
            cache_write: 1331
        })
    );
    assert_eq!(lines[2].1.stop_reason.as_deref(), Some("tool_use"));
}

#[test]
fn claude_code_1_0_108() {
    // python3: 53 lines, main path 31 messages, 22 sidechain, 21 tool_use, 21 tool_result,
    // 20 message ids, usage [129, 3629, 324259, 47747].
    check_real(
        V10108,
        &Expected {
            entries: 53,
            main_branch: 31,
            sidechain: 22,
            tool_use: 21,
            tool_result: 21,
            responses: 20,
            usage: Usage {
                input: 129,
                output: 3629,
                cache_read: 324_259,
                cache_write: 47_747,
            },
            leaf: "e9bd5ce8-d37d-49a1-868c-8281d0d0a32b",
            version: "1.0.108",
        },
    );
    let s = import(&real(V10108)).session;
    assert_eq!(s.meta.title, None);
    assert_eq!(s.meta.cwd.as_deref(), Some("/path/to/Demo"));
    assert_eq!(
        s.meta.started_at.as_deref(),
        Some("2025-09-07T09:52:03.071Z")
    );
    // Two inline subagent chains, each rooted at a sidechain user prompt.
    let roots: Vec<_> = s
        .entries
        .iter()
        .filter(|e| e.sidechain && e.parent.is_none())
        .collect();
    assert_eq!(roots.len(), 2);
}

fn temp_copy(name: &str, mutate: impl FnOnce(&mut Vec<String>)) -> PathBuf {
    let text = std::fs::read_to_string(real(name)).unwrap_or_default();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    mutate(&mut lines);
    // In cargo's scratch space for tests, not /tmp: nothing here removes it.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ctxd-cc-test");
    std::fs::create_dir_all(&dir).unwrap_or_default();
    let path = dir.join(format!("{}-{name}", lines.len()));
    std::fs::write(&path, lines.join("\n")).unwrap_or_default();
    path
}

#[test]
fn a_corrupt_line_is_skipped_and_named() {
    // Line 20 of the 1.0.108 file is a sidechain assistant line (msg_01BWHsYxQBBnzQd8o6ipRbWB).
    let path = temp_copy(V10108, |lines| {
        let cut = lines[19].len() / 2;
        lines[19].truncate(cut);
    });
    let import = import(&path);
    assert_eq!(import.warnings.len(), 2, "{:?}", import.warnings);
    assert_eq!(import.warnings[0].line, Some(20));
    // Its child (line 21) now names a missing parent: imported as a root, counted once.
    assert_eq!(import.warnings[1].line, None);
    assert!(import.warnings[1].message.contains("1 entries"));
    assert_eq!(import.session.entries.len(), 52);
    // The main branch is untouched.
    assert_eq!(main_branch_messages(&import.session).len(), 31);
}

#[test]
fn a_truncated_last_line_is_skipped_and_named() {
    let path = temp_copy(V1098, |lines| {
        if let Some(last) = lines.last_mut() {
            let mut cut = last.len() - 40;
            while !last.is_char_boundary(cut) {
                cut -= 1;
            }
            last.truncate(cut);
        }
    });
    let import = import(&path);
    assert_eq!(import.warnings.len(), 1, "{:?}", import.warnings);
    assert_eq!(import.warnings[0].line, Some(438));
    assert_eq!(import.session.entries.len(), 437);
    assert_eq!(main_branch_messages(&import.session).len(), 31);
}

#[test]
fn garbage_lines_never_panic() {
    let path = temp_copy(V10108, |lines| {
        lines.insert(3, "[1,2,3]".into());
        lines.insert(5, r#"{"type":"user","uuid":"x"}"#.into());
        lines.insert(
            7,
            r#"{"type":"assistant","message":{"role":"assistant"}}"#.into(),
        );
        lines.insert(9, r#"{"type":7}"#.into());
        lines.insert(11, lines[10].clone()); // line 12 repeats line 11's uuid
    });
    let import = import(&path);
    let lines: Vec<_> = import.warnings.iter().filter_map(|w| w.line).collect();
    assert_eq!(lines, [4, 6, 8, 10, 12]);
    assert_eq!(import.session.entries.len(), 53);
}

/// Real Claude Code 2.1.197, run against the local mock (see the fixtures README): a session,
/// `/compact` with --resume, then one more prompt.
#[test]
fn claude_code_2_1_real_compaction() {
    let import = import(&fixture("real-2.1.197-compact.jsonl"));
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    // python3: 29 lines, 10 without uuid (6 queue-operation, 3 last-prompt, 1 mode).
    assert_eq!(s.entries.len(), 19);
    assert_eq!(s.meta.format, "claude-code/2.1.197");
    assert_eq!(s.meta.model.as_deref(), Some("claude-sonnet-4-5"));
    let compactions: Vec<_> = s
        .entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Compaction(c) => Some((e, c)),
            _ => None,
        })
        .collect();
    assert_eq!(compactions.len(), 1);
    let (entry, c) = compactions[0];
    assert_eq!(entry.id.as_str(), "9bc9ad06-c63c-4144-b953-8403a4bf9aa3");
    // Parented on logicalParentUuid, keeping the last message through preservedSegment.
    let kept = "9a235127-e3f2-4008-b155-4364ffd86e9c";
    assert_eq!(entry.parent.as_ref().map(|p| p.as_str()), Some(kept));
    assert_eq!(c.first_kept.as_ref().map(|p| p.as_str()), Some(kept));
    assert_eq!(c.tokens_before, Some(29442));
    assert!(c.summary.starts_with("This session is being continued"));
    // The summary line is not also a user message.
    assert!(!messages(s).any(|(_, m)| joined(m).starts_with("This session is being continued")));
    // The whole history stays on the active branch, through the compaction (python3: walking
    // parentUuid, or logicalParentUuid when it is null, from the last uuid line: 19).
    let branch = active_branch(s);
    assert_eq!(branch.len(), 19);
    assert_eq!(
        s.leaf.as_ref().map(|l| l.as_str()),
        Some("d27cf108-ccf9-48c2-896f-2f97d54fb791")
    );
    let injected: Vec<_> = messages(s)
        .filter_map(|(_, m)| m.injected.as_deref())
        .collect();
    // caveat (isMeta), /compact, its stdout, "Continue from where you left off." (isMeta), and
    // the synthetic "No response requested.".
    assert_eq!(
        injected,
        ["meta", "command", "command", "meta", "synthetic"]
    );
    // 4 real responses, one usage each; the synthetic one has none.
    let (total, n) = usage_total(s);
    assert_eq!(n, 4);
    assert_eq!(total.input, 29346 + 29437 + 29744 + 29840);
    let events: Vec<_> = s
        .entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Event { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        events,
        [
            "attachment",
            "attachment",
            "compact_summary",
            "attachment",
            "attachment"
        ]
    );
}

fn joined(m: &Message) -> String {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Hand-written 2.x: progress lines inside the chain, a response split over two lines, a
/// system-reminder message, a plain compact_boundary, microcompact and turn_duration events,
/// lines without uuid.
#[test]
fn claude_code_2_x_progress_chain_and_compaction() {
    let import = import(&fixture("progress-compact-2x.jsonl"));
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    // 19 lines, 3 without uuid.
    assert_eq!(s.entries.len(), 16);
    assert_eq!(
        s.meta.id.as_deref(),
        Some("aaaaaaaa-0000-4000-8000-000000000001")
    );
    assert_eq!(
        s.meta.started_at.as_deref(),
        Some("2025-12-01T10:00:00.000Z")
    );
    assert_eq!(s.meta.parent_session, None);
    // Every entry is on the branch: progress, attachments and system events included.
    assert_eq!(active_branch(s).len(), 16);
    let c = s.entries.iter().find_map(|e| match &e.kind {
        EntryKind::Compaction(c) => Some((e, c)),
        _ => None,
    });
    let Some((entry, c)) = c else {
        panic!("no compaction")
    };
    assert_eq!(entry.parent.as_ref().map(|p| p.as_str()), Some("s1"));
    assert_eq!(c.tokens_before, Some(14433));
    assert_eq!(c.first_kept, None);
    assert!(c.summary.contains("off-by-one"));
    // msg_A: two lines, usage on the second with the final output count.
    let a: Vec<_> = messages(s)
        .filter(|(_, m)| m.response_id.as_deref() == Some("msg_A"))
        .map(|(e, m)| (e.id.as_str(), m.usage))
        .collect();
    assert_eq!(
        a,
        [
            ("a1", None),
            (
                "a2",
                Some(Usage {
                    input: 10,
                    output: 57,
                    cache_read: 5000,
                    cache_write: 2000
                })
            )
        ]
    );
    let injected: Vec<_> = messages(s)
        .filter_map(|(_, m)| m.injected.as_deref())
        .collect();
    assert_eq!(injected, ["system-reminder", "command"]);
    let user_typed: Vec<_> = messages(s)
        .filter(|(_, m)| m.role == Role::User && m.injected.is_none())
        .filter(|(_, m)| {
            !m.content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        })
        .map(|(_, m)| joined(m))
        .collect();
    assert_eq!(user_typed, ["fix the failing test", "now fix it"]);
    let events: Vec<_> = s
        .entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Event { name, detail } => Some((name.as_str(), detail.is_some())),
            _ => None,
        })
        .collect();
    assert_eq!(
        events,
        [
            ("progress", true),
            ("progress", true),
            ("attachment", true),
            ("turn_duration", true),
            ("compact_summary", false),
            ("microcompact_boundary", true)
        ]
    );
}

/// A 2.x subagent file: every line a sidechain, imported as its own session.
#[test]
fn claude_code_2_x_subagent_file() {
    let import = import(&fixture(
        "aaaaaaaa-0000-4000-8000-000000000001/subagents/agent-a1b2c3d.jsonl",
    ));
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    assert_eq!(s.entries.len(), 4);
    assert!(s.entries.iter().all(|e| !e.sidechain));
    assert_eq!(s.meta.id.as_deref(), Some("a1b2c3d"));
    assert_eq!(
        s.meta.parent_session.as_deref(),
        Some("aaaaaaaa-0000-4000-8000-000000000001")
    );
    assert_eq!(s.meta.model.as_deref(), Some("claude-haiku-4-5-20251001"));
    assert_eq!(main_branch_messages(s).len(), 4);
    assert_eq!(s.leaf.as_ref().map(|l| l.as_str()), Some("s-a2"));
}

/// Import speed over the real files: `cargo test --release -p ctxd-formats -- --ignored`.
#[test]
#[ignore]
fn claude_code_import_speed() {
    for name in [V1098, V10108] {
        let bytes = std::fs::read(real(name)).unwrap_or_default();
        let rounds = 200;
        let start = std::time::Instant::now();
        let mut entries = 0;
        for _ in 0..rounds {
            let import = ctxd_formats::import_reader(std::io::Cursor::new(&bytes[..]));
            entries += import.map(|i| i.session.entries.len()).unwrap_or(0);
        }
        let secs = start.elapsed().as_secs_f64();
        let mb = (bytes.len() * rounds) as f64 / 1e6;
        println!("{name}: {:.0} MB/s ({entries} entries)", mb / secs);
        assert!(entries > 0);
    }
}

/// Claude Code 2.1 writes a response's parallel calls one line each, chained, and each result
/// under its own call's line (`shared/sessions/claude-code/entire-…-2.1.5-compact.jsonl`):
/// the results are chained after the response's last line, so the active branch holds every
/// call and every result, in the order the model saw them.
#[test]
fn parallel_results_are_chained_after_their_response() {
    let line = |v: serde_json::Value| v.to_string() + "\n";
    let assistant = |uuid: &str, parent: &str, block: serde_json::Value| {
        line(
            serde_json::json!({"type": "assistant", "uuid": uuid, "parentUuid": parent,
            "sessionId": "s", "version": "2.1.5",
            "message": {"id": "msg_1", "role": "assistant", "model": "claude-opus-4-5",
                "content": [block]}}),
        )
    };
    let result = |uuid: &str, parent: &str, call: &str| {
        line(
            serde_json::json!({"type": "user", "uuid": uuid, "parentUuid": parent,
            "sessionId": "s", "version": "2.1.5",
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call, "content": format!("out {call}")}]}}),
        )
    };
    let text = [
        line(
            serde_json::json!({"type": "user", "uuid": "u1", "parentUuid": null,
            "sessionId": "s", "version": "2.1.5",
            "message": {"role": "user", "content": "read three files"}}),
        ),
        assistant(
            "a1",
            "u1",
            serde_json::json!({"type": "text", "text": "Reading."}),
        ),
        assistant(
            "a2",
            "a1",
            serde_json::json!({"type": "tool_use", "id": "c1", "name": "Read", "input": {}}),
        ),
        assistant(
            "a3",
            "a2",
            serde_json::json!({"type": "tool_use", "id": "c2", "name": "Read", "input": {}}),
        ),
        assistant(
            "a4",
            "a3",
            serde_json::json!({"type": "tool_use", "id": "c3", "name": "Read", "input": {}}),
        ),
        result("r1", "a2", "c1"),
        result("r2", "a3", "c2"),
        result("r3", "a4", "c3"),
        line(
            serde_json::json!({"type": "assistant", "uuid": "a5", "parentUuid": "r3",
            "sessionId": "s", "version": "2.1.5",
            "message": {"id": "msg_2", "role": "assistant", "model": "claude-opus-4-5",
                "content": [{"type": "text", "text": "done"}]}}),
        ),
    ]
    .concat();
    let import = ctxd_formats::import_reader(std::io::Cursor::new(text.into_bytes())).unwrap();
    let branch = main_branch_messages(&import.session);
    let results: Vec<&str> = branch
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["c1", "c2", "c3"]);
    assert_eq!(branch.len(), 9, "{branch:?}");
    let parent_of = |id: &str| {
        import
            .session
            .entries
            .iter()
            .find(|e| e.id.as_str() == id)
            .and_then(|e| e.parent.clone())
            .map(|p| p.0)
    };
    assert_eq!(parent_of("r1").as_deref(), Some("a4"));
    assert_eq!(parent_of("r2").as_deref(), Some("r1"));
    assert_eq!(parent_of("r3").as_deref(), Some("r2"));
}
