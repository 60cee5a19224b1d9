//! Gemini CLI chat recordings: the four real shared files (three JSON, one JSONL), and mutated
//! copies.
//!
//! Expected figures were counted with python3 over the files: for the JSONL, the message
//! records deduplicated by id (the last copy kept, at the first one's position); usage summed
//! over the gemini messages whose `tokens` are not all zero, as input - cached + tool, output +
//! thoughts, cached.

mod common;
use common::{confuse, Rng};

use std::collections::HashSet;
use std::io::Cursor;
use std::path::PathBuf;

use ctxd_core::model::{Agent, ContentBlock, EntryKind, Message, Role, Session, Usage};
use ctxd_formats::{detect, import_path, import_reader, Format};

use ctxd_test_support::shared;

fn path(name: &str) -> PathBuf {
    shared().join("sessions/gemini-cli").join(name)
}

fn messages(s: &Session) -> Vec<&Message> {
    s.entries
        .iter()
        .filter_map(|e| e.kind.as_message())
        .collect()
}

/// What each shared file is expected to import as.
struct Expect {
    file: &'static str,
    format: &'static str,
    id: &'static str,
    started_at: &'static str,
    user: usize,
    assistant: usize,
    tool_messages: usize,
    calls: usize,
    errors: usize,
    usages: usize,
    usage: Usage,
    events: usize,
    model: &'static str,
}

const FILES: [Expect; 4] = [
    // 1 user (Part[]), 39 gemini, 38 calls each with a result, all successes.
    Expect {
        file: "aim-control_pro.json",
        format: "gemini-cli/json",
        id: "b36c9e17-99f8-4acf-b1b3-cef1081a98f6",
        started_at: "2026-03-26T04:33:40.572Z",
        user: 1,
        assistant: 39,
        tool_messages: 38,
        calls: 38,
        errors: 0,
        usages: 39,
        usage: Usage {
            input: 190_042,
            output: 28_299,
            cache_read: 716_017,
            cache_write: 0,
        },
        events: 0,
        model: "gemini-3.1-pro-preview",
    },
    // 6 user, 67 gemini (61 with calls), 67 calls, 4 status:error with response.error.
    Expect {
        file: "aim-session-2026-03-18T02-03-6745da32.json",
        format: "gemini-cli/json",
        id: "6745da32-772a-411b-bdd7-c780c0da1cfb",
        started_at: "2026-03-18T02:04:13.193Z",
        user: 6,
        assistant: 67,
        tool_messages: 61,
        calls: 67,
        errors: 4,
        usages: 67,
        usage: Usage {
            input: 272_181,
            output: 16_956,
            cache_read: 1_377_723,
            cache_write: 0,
        },
        events: 0,
        model: "gemini-3-flash-preview",
    },
    // 5 user (string content), 14 gemini (one with zeroed tokens), 11 calls, 1 error.
    Expect {
        file: "yoavf-gemini-cli-pomodoro-timer.json",
        format: "gemini-cli/json",
        id: "0b23371a-ce2e-4b1c-81a0-44af5d94d9ce",
        started_at: "2025-10-21T20:04:20.819Z",
        user: 5,
        assistant: 14,
        tool_messages: 9,
        calls: 11,
        errors: 1,
        usages: 13,
        usage: Usage {
            input: 34_028,
            output: 6_223,
            cache_read: 86_702,
            cache_write: 0,
        },
        events: 0,
        model: "gemini-2.5-pro",
    },
    // 16 message records, 11 ids (5 gemini ids re-appended with their tool calls added):
    // 2 info, 3 user, 6 gemini; 12 calls.
    Expect {
        file: "vct-gemini-session.jsonl",
        format: "gemini-cli/jsonl",
        id: "0ab84937-9fe7-4284-986a-33c832af0b6a",
        started_at: "2026-04-23T12:52:52.759Z",
        user: 3,
        assistant: 6,
        tool_messages: 5,
        calls: 12,
        errors: 0,
        usages: 6,
        usage: Usage {
            input: 153_635,
            output: 4_293,
            cache_read: 48_951,
            cache_write: 0,
        },
        events: 2,
        model: "gemini-3-flash-preview",
    },
];

#[test]
fn every_shared_file_imports_with_its_counts() {
    for e in &FILES {
        let import = import_path(&path(e.file)).unwrap_or_else(|err| panic!("{}: {err}", e.file));
        assert_eq!(import.format, Format::GeminiCli, "{}", e.file);
        assert!(
            import.warnings.is_empty(),
            "{}: {:?}",
            e.file,
            import.warnings
        );
        let s = &import.session;
        assert_eq!(s.meta.agent, Some(Agent::GeminiCli));
        assert_eq!(s.meta.format, e.format, "{}", e.file);
        assert_eq!(s.meta.model.as_deref(), Some(e.model), "{}", e.file);
        assert_eq!(s.meta.id.as_deref(), Some(e.id), "{}", e.file);
        assert_eq!(
            s.meta.started_at.as_deref(),
            Some(e.started_at),
            "{}",
            e.file
        );

        let ms = messages(s);
        let role = |r: Role| ms.iter().filter(|m| m.role == r).count();
        assert_eq!(role(Role::User), e.user, "{}", e.file);
        assert_eq!(role(Role::Assistant), e.assistant, "{}", e.file);
        assert_eq!(role(Role::Tool), e.tool_messages, "{}", e.file);
        assert_eq!(ms.len(), e.user + e.assistant + e.tool_messages);

        let mut calls = HashSet::new();
        let mut results = 0;
        let mut errors = 0;
        for m in &ms {
            for b in &m.content {
                match b {
                    ContentBlock::ToolCall { id, .. } => {
                        assert!(calls.insert(id.clone()), "{}: call {id} twice", e.file);
                    }
                    ContentBlock::ToolResult {
                        call_id,
                        tool_name,
                        content,
                        is_error,
                    } => {
                        // Results come after their call, and name it.
                        assert!(calls.contains(call_id), "{}: result {call_id}", e.file);
                        assert!(tool_name.is_some());
                        assert!(!content.is_empty());
                        results += 1;
                        errors += usize::from(*is_error);
                    }
                    _ => {}
                }
            }
        }
        assert_eq!(calls.len(), e.calls, "{}", e.file);
        assert_eq!(results, e.calls, "{}: every call has its result", e.file);
        assert_eq!(errors, e.errors, "{}", e.file);

        let mut total = Usage::default();
        let mut usages = 0;
        for m in &ms {
            if let Some(u) = &m.usage {
                assert_eq!(m.role, Role::Assistant);
                total.add(u);
                usages += 1;
            }
        }
        assert_eq!(usages, e.usages, "{}", e.file);
        assert_eq!(total, e.usage, "{}", e.file);

        let events = s
            .entries
            .iter()
            .filter(|en| matches!(en.kind, EntryKind::Event { .. }))
            .count();
        assert_eq!(events, e.events, "{}", e.file);
        // Every assistant message names its model; entries are linear.
        assert!(ms
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .all(|m| m.model.is_some()));
        for w in s.entries.windows(2) {
            assert_eq!(w[1].parent.as_ref(), Some(&w[0].id), "{}", e.file);
        }
        assert_eq!(s.leaf, None);
    }
}

#[test]
fn detection_reads_the_content_not_the_name() {
    for e in &FILES {
        let bytes = std::fs::read(path(e.file)).unwrap();
        // The JSONL from its first line; the pretty-printed JSON only whole.
        let import = import_reader(Cursor::new(bytes.clone())).unwrap();
        assert_eq!(import.format, Format::GeminiCli, "{}", e.file);
        if e.format == "gemini-cli/jsonl" {
            let first = bytes.split(|&b| b == b'\n').next().unwrap();
            assert_eq!(detect(first).ok(), Some(Format::GeminiCli));
        }
        // The JSON written on one line is still the JSON layout.
        if e.format == "gemini-cli/json" {
            let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            let one_line = doc.to_string().into_bytes();
            let import = import_reader(Cursor::new(one_line)).unwrap();
            assert_eq!(import.session.meta.format, "gemini-cli/json");
            assert_eq!(
                messages(&import.session).len(),
                e.user + e.assistant + e.tool_messages
            );
        }
    }
}

/// The JSONL's second gemini record (line 8) re-appends line 6's id with its five tool calls:
/// the message stays at line 6, holds the calls, and its results follow it.
#[test]
fn the_jsonl_keeps_first_positions_and_last_contents() {
    let s = import_path(&path("vct-gemini-session.jsonl"))
        .unwrap()
        .session;
    let ids: Vec<&str> = s.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "L2", "L4", "L6", "L6.1", "L9", "L9.1", "L12", "L12.1", "L15", "L15.1", "L18", "L20",
            "L22", "L24", "L24.1", "L27"
        ]
    );
    let EntryKind::Message(m) = &s.entries[2].kind else {
        panic!()
    };
    let calls = m
        .content
        .iter()
        .filter(|b| matches!(b, ContentBlock::ToolCall { .. }))
        .count();
    assert_eq!(calls, 5);
    assert!(matches!(m.content[0], ContentBlock::Thinking { .. }));
    // The /init prompt is the CLI's expansion; "System: Please continue." is the CLI's too.
    let users: Vec<&Message> = messages(&s)
        .into_iter()
        .filter(|m| m.role == Role::User)
        .collect();
    assert_eq!(users[0].injected.as_deref(), Some("command"));
    assert_eq!(users[1].injected.as_deref(), Some("expanded"));
    assert_eq!(users[2].injected, None);
    // The model changes mid-session; the session's is the first.
    let models: Vec<&str> = messages(&s)
        .iter()
        .filter_map(|m| m.model.as_deref())
        .collect();
    assert_eq!(models.last(), Some(&"gemini-3.1-pro-preview"));
}

/// `$set` patches, a rewind and bad lines, appended to a copy of the real JSONL.
#[test]
fn the_jsonl_takes_patches_rewinds_and_bad_lines() {
    let mut text = std::fs::read_to_string(path("vct-gemini-session.jsonl")).unwrap();
    text.push_str("{\"$set\":{\"summary\":\"Init the GEMINI.md\"}}\n");
    text.push_str("not json\n");
    // Rewind to the last user message (line 22): what followed it is left behind.
    text.push_str("{\"$rewindTo\":\"231038fa-bbfb-4b43-9a30-b8b7fcf54895\"}\n");
    text.push_str("{\"id\":\"new\",\"timestamp\":\"t\",\"type\":\"user\",\"content\":\"again\"}\n");
    let import = import_reader(Cursor::new(text.into_bytes())).unwrap();
    assert_eq!(import.warnings.len(), 1, "{:?}", import.warnings);
    assert_eq!(import.warnings[0].line, Some(30));
    let s = &import.session;
    assert_eq!(s.meta.title.as_deref(), Some("Init the GEMINI.md"));
    let last = s.entries.last().unwrap();
    assert_eq!(last.id.as_str(), "L32");
    // It hangs from the message before the rewound one (line 20, the gemini answer).
    assert_eq!(last.parent.as_ref().map(|p| p.as_str()), Some("L20"));
}

#[test]
fn type_confused_recordings_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let text = std::fs::read_to_string(path("yoavf-gemini-cli-pomodoro-timer.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    for _ in 0..150 {
        let mut mutated = doc.clone();
        for _ in 0..6 {
            confuse(&mut mutated, &mut rng, 6, &[]);
        }
        let _ = import_reader(Cursor::new(mutated.to_string().into_bytes()));
    }
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(path("vct-gemini-session.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for _ in 0..150 {
        let mut mutated = lines.clone();
        for _ in 0..4 {
            let i = rng.below(mutated.len());
            confuse(&mut mutated[i], &mut rng, 5, &[]);
        }
        let text: Vec<String> = mutated.iter().map(ToString::to_string).collect();
        let _ = import_reader(Cursor::new(text.join("\n").into_bytes()));
    }
}
