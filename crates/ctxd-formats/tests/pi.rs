//! Pi importer: the real v1 session from pi-mono, mutated copies, and a hand-written v3 tree.
//!
//! Facts about `large-session.jsonl` were counted independently with python3 over the JSONL:
//! 1019 lines = 1 header + 914 `message` + 103 `thinking_level_change` + 1 `model_change`;
//! roles 453 assistant / 373 toolResult / 88 user; 391 toolCall blocks, 1 thinking block (with a
//! `thinkingSignature`); 19 tool results with isError; stop reasons 366 toolUse, 65 stop,
//! 21 aborted, 1 error; summed usage input 1049, output 83156, cacheRead 43229469,
//! cacheWrite 4296232.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test

mod common;
use common::{confuse, Rng};

use std::io::Cursor;
use std::path::PathBuf;

use ctxd_core::model::{ContentBlock, EntryId, EntryKind, Message, Role, Session, Usage};
use ctxd_formats::{import_path, import_reader, Format, Import};

use ctxd_test_support::shared;

fn large_session() -> PathBuf {
    shared().join("sessions/pi/large-session.jsonl")
}

fn import_str(s: &str) -> Import {
    import_reader(Cursor::new(s.as_bytes().to_vec())).expect("imports")
}

fn messages(s: &Session) -> impl Iterator<Item = &Message> {
    s.entries.iter().filter_map(|e| match &e.kind {
        EntryKind::Message(m) => Some(m),
        _ => None,
    })
}

fn event_count(s: &Session, name: &str) -> usize {
    s.entries
        .iter()
        .filter(|e| matches!(&e.kind, EntryKind::Event { name: n, .. } if n == name))
        .count()
}

#[test]
fn large_v1_session_imports_with_real_counts() {
    let import = import_path(&large_session()).expect("imports");
    assert_eq!(import.format, Format::Pi);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;

    assert_eq!(s.meta.format, "pi/v1");
    assert_eq!(
        s.meta.id.as_deref(),
        Some("d703a1a9-1b7b-4fb1-b512-c9738b1fe617")
    );
    assert_eq!(
        s.meta.cwd.as_deref(),
        Some("/Users/badlogic/workspaces/pi-mono")
    );
    assert_eq!(
        s.meta.started_at.as_deref(),
        Some("2025-11-20T23:33:50.805Z")
    );
    assert_eq!(s.meta.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(s.leaf, None);

    assert_eq!(s.entries.len(), 1018);
    assert_eq!(messages(s).count(), 914);
    let by_role = |r: Role| messages(s).filter(|m| m.role == r).count();
    assert_eq!(by_role(Role::Assistant), 453);
    assert_eq!(by_role(Role::Tool), 373);
    assert_eq!(by_role(Role::User), 88);
    assert_eq!(event_count(s, "thinking_level_change"), 103);
    let model_changes: Vec<_> = s
        .entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::ModelChange { provider, model } => {
                Some((provider.as_deref(), model.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        model_changes,
        vec![(Some("anthropic"), "claude-sonnet-4-5")]
    );

    let blocks = || messages(s).flat_map(|m| m.content.iter());
    assert_eq!(
        blocks()
            .filter(|b| matches!(b, ContentBlock::ToolCall { .. }))
            .count(),
        391
    );
    let thinking: Vec<_> = blocks()
        .filter_map(|b| match b {
            ContentBlock::Thinking {
                thinking,
                signature,
                ..
            } => Some((thinking.len(), signature)),
            _ => None,
        })
        .collect();
    assert_eq!(thinking.len(), 1);
    assert_eq!(thinking[0].0, 138);
    assert_eq!(thinking[0].1.as_ref().map(String::len), Some(416));
    let errors = blocks()
        .filter(|b| matches!(b, ContentBlock::ToolResult { is_error: true, .. }))
        .count();
    assert_eq!(errors, 19);
    let bash_results = blocks()
        .filter(|b| matches!(b, ContentBlock::ToolResult { tool_name: Some(n), .. } if n == "bash"))
        .count();
    assert_eq!(bash_results, 192);

    let mut usage = Usage::default();
    for m in messages(s) {
        if let Some(u) = &m.usage {
            usage.add(u);
        }
    }
    assert_eq!(
        usage,
        Usage {
            input: 1049,
            output: 83156,
            cache_read: 43_229_469,
            cache_write: 4_296_232
        }
    );
    let aborted = messages(s)
        .filter(|m| m.stop_reason.as_deref() == Some("aborted"))
        .count();
    assert_eq!(aborted, 21);

    // v1 is linear: `L<line>` ids, each entry's parent the previous one.
    assert_eq!(s.entries[0].id, EntryId::new("L2"));
    assert_eq!(s.entries[0].parent, None);
    assert_eq!(
        s.entries[0].timestamp.as_deref(),
        Some("2025-11-20T23:33:01.550Z")
    );
    for pair in s.entries.windows(2) {
        assert_eq!(pair[1].parent.as_ref(), Some(&pair[0].id));
    }
    assert_eq!(s.entries.last().map(|e| e.id.as_str()), Some("L1019"));
}

fn mutated_copy(name: &str, edit: impl FnOnce(&mut Vec<String>)) -> PathBuf {
    let text = std::fs::read_to_string(large_session()).expect("shared session");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    edit(&mut lines);
    // In cargo's scratch space for tests, not /tmp: nothing here removes it.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ctxd-pi-test");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n")).expect("write copy");
    path
}

#[test]
fn a_corrupt_line_is_skipped_with_a_warning_naming_it() {
    let path = mutated_copy("corrupt.jsonl", |lines| {
        // Line 500: a write cut in half. Line 700: two objects on one line.
        let cut = lines[499].len() / 2;
        let cut = (0..=cut)
            .rev()
            .find(|&i| lines[499].is_char_boundary(i))
            .unwrap_or(0);
        lines[499].truncate(cut);
        lines[699] = format!("{}{}", lines[699], lines[700]);
    });
    let import = import_path(&path).expect("imports despite the corrupt lines");
    let lines: Vec<_> = import.warnings.iter().map(|w| w.line).collect();
    assert_eq!(lines, vec![Some(500), Some(700)], "{:?}", import.warnings);
    assert!(import.warnings[0]
        .to_string()
        .starts_with("line 500: skipped"));
    assert_eq!(import.session.entries.len(), 1016);
    // The entries around a skipped line are still chained.
    let pos = import
        .session
        .entries
        .iter()
        .position(|e| e.id.as_str() == "L501");
    let pos = pos.expect("line 501 imported");
    assert_eq!(
        import.session.entries[pos].parent,
        Some(EntryId::new("L499"))
    );
}

#[test]
fn a_truncated_last_line_is_skipped_with_a_warning() {
    let path = mutated_copy("truncated.jsonl", |lines| {
        let last = lines.len() - 1;
        lines[last].truncate(40);
    });
    let import = import_path(&path).expect("imports");
    assert_eq!(import.warnings.len(), 1);
    assert_eq!(import.warnings[0].line, Some(1019));
    assert_eq!(import.session.entries.len(), 1017);
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pi")).join(name)
}

fn entry<'a>(s: &'a Session, id: &str) -> &'a ctxd_core::model::Entry {
    s.entries
        .iter()
        .find(|e| e.id.as_str() == id)
        .unwrap_or_else(|| panic!("no entry {id}"))
}

fn message<'a>(s: &'a Session, id: &str) -> &'a Message {
    match &entry(s, id).kind {
        EntryKind::Message(m) => m,
        other => panic!("{id} is not a message: {other:?}"),
    }
}

#[test]
fn v3_tree_keeps_pi_ids_parents_and_every_entry_kind() {
    let import = import_path(&fixture("tree-v3.jsonl")).expect("imports");
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    assert_eq!(s.meta.format, "pi/v3");
    assert_eq!(s.meta.id.as_deref(), Some("sess-v3"));
    assert_eq!(s.meta.parent_session.as_deref(), Some("/tmp/parent.jsonl"));
    assert_eq!(s.meta.model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(s.meta.title.as_deref(), Some("Demo session"));
    assert_eq!(s.entries.len(), 21);

    // The tree: a1 <- a2 <- a3 <- a4 (left branch), and a2 <- b1 <- b2 <- ... <- b17.
    let parent = |id: &str| entry(s, id).parent.as_ref().map(EntryId::as_str);
    assert_eq!(parent("a1"), None);
    assert_eq!(parent("a4"), Some("a3"));
    assert_eq!(parent("b1"), Some("a2"));
    assert_eq!(parent("b2"), Some("b1"));
    assert_eq!(parent("b17"), Some("b16"));
    let branch: Vec<&str> = ctxd_core::tree::active_branch(s)
        .into_iter()
        .map(|i| s.entries[i].id.as_str())
        .collect();
    assert_eq!(&branch[..4], &["a1", "a2", "b1", "b2"]);
    assert!(!branch.contains(&"a4"));

    let a2 = message(s, "a2");
    assert_eq!(a2.response_id.as_deref(), Some("msg_01"));
    assert_eq!(a2.stop_reason.as_deref(), Some("toolUse"));
    assert_eq!(
        a2.usage,
        Some(Usage {
            input: 10,
            output: 20,
            cache_read: 1000,
            cache_write: 50
        })
    );
    assert!(matches!(&a2.content[0],
        ContentBlock::Thinking { signature: Some(sig), .. } if sig == "sig-a2"));
    assert!(matches!(&a2.content[1],
        ContentBlock::ToolCall { id, name, arguments } if id == "call_1" && name == "bash"
            && arguments["command"] == "ls"));

    let a3 = message(s, "a3");
    assert_eq!(a3.role, Role::Tool);
    let ContentBlock::ToolResult {
        call_id,
        tool_name,
        content,
        is_error,
    } = &a3.content[0]
    else {
        panic!("a3 holds a tool result");
    };
    assert_eq!(
        (call_id.as_str(), tool_name.as_deref(), *is_error),
        ("call_1", Some("bash"), false)
    );
    assert!(matches!(&content[1], ContentBlock::Image(img)
        if img.media_type.as_deref() == Some("image/png") && img.width == Some(4)
            && img.height == Some(3)));

    assert!(
        matches!(&entry(s, "b1").kind, EntryKind::BranchSummary { from: Some(f), summary }
        if f.as_str() == "a4" && summary.starts_with("Listed"))
    );
    let b3 = message(s, "b3");
    assert_eq!(
        (b3.role, b3.injected.as_deref()),
        (Role::User, Some("reminder"))
    );
    assert!(
        matches!(&entry(s, "b4").kind, EntryKind::ContextEdit { target, replacement: Some(r) }
        if target.as_str() == "a3" && r == &vec![ContentBlock::text("[listing trimmed]")])
    );
    assert!(
        matches!(&entry(s, "b5").kind, EntryKind::ContextEdit { target, replacement: None }
        if target.as_str() == "a1")
    );
    assert!(matches!(&entry(s, "b6").kind, EntryKind::Compaction(c)
        if c.first_kept == Some(EntryId::new("b2")) && c.tokens_before == Some(12345)));
    assert_eq!(message(s, "b7").injected.as_deref(), Some("note"));
    assert_eq!(message(s, "b8").injected.as_deref(), Some("legacy-hook"));
    let b9 = message(s, "b9");
    assert_eq!(b9.injected.as_deref(), Some("bash-execution"));
    assert_eq!(
        b9.content,
        vec![ContentBlock::text(
            "Ran `wc -l a.txt`\n```\n3 a.txt\n```\n\nCommand exited with code 1"
        )]
    );
    assert!(
        matches!(&entry(s, "b10").kind, EntryKind::Event { name, .. } if name == "bash_execution")
    );
    assert!(
        matches!(&entry(s, "b11").kind, EntryKind::ModelChange { provider: Some(p), model }
        if p == "google" && model == "gemini-2.5-pro")
    );
    for (id, name) in [("b12", "session_info"), ("b13", "label"), ("b14", "custom")] {
        assert!(
            matches!(&entry(s, id).kind, EntryKind::Event { name: n, .. } if n == name),
            "{id}"
        );
    }
    assert!(
        matches!(&entry(s, "b14").kind, EntryKind::Event { detail: Some(d), .. }
        if d["customType"] == "my-ext" && d["data"]["count"] == 42)
    );
    assert!(
        matches!(&entry(s, "b15").kind, EntryKind::Event { name, detail: Some(d) }
        if name == "some_future_type" && d["payload"]["x"] == 1)
    );
    assert!(matches!(&entry(s, "b16").kind, EntryKind::Usage { usage }
        if *usage == Usage { input: 7, output: 3, cache_read: 0, cache_write: 0 }));
    // Pi's Google provider once counted cached tokens inside `input` (pi-mono #1487): undone.
    assert_eq!(
        message(s, "b17").usage,
        Some(Usage {
            input: 5386,
            output: 5,
            cache_read: 16289,
            cache_write: 0
        })
    );
}

#[test]
fn v1_compaction_names_its_first_kept_entry_by_index() {
    let text = [
        r#"{"type":"session","id":"v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a"}}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"user","content":"b"}}"#,
        r#"{"type":"compaction","timestamp":"2025-01-01T00:00:03.000Z","summary":"s","firstKeptEntryIndex":2,"tokensBefore":9}"#,
    ]
    .join("\n");
    let import = import_str(&text);
    let s = &import.session;
    assert_eq!(s.meta.format, "pi/v1");
    assert!(matches!(&s.entries[2].kind, EntryKind::Compaction(c)
        if c.first_kept == Some(EntryId::new("L3")) && c.summary == "s"));
}

#[test]
fn bad_lines_are_skipped_and_a_missing_header_is_noted() {
    let text = [
        r#"{"type":"message","id":"m1","parentId":null,"message":{"role":"user","content":"hi"}}"#,
        r#"[1,2,3]"#,
        r#"{"type":"message","id":"m2","parentId":"m1"}"#,
        r#"{"type":"message","id":"m3","parentId":"m1","message":{"content":"no role"}}"#,
        r#"{"id":"m4"}"#,
        r#"{"type":"message","id":"m5","parentId":"m1","message":{"role":"alien","x":1}}"#,
    ]
    .join("\n");
    let import = import_str(&text);
    let skipped: Vec<_> = import.warnings.iter().filter_map(|w| w.line).collect();
    assert_eq!(skipped, vec![2, 3, 4, 5]);
    assert!(import
        .warnings
        .iter()
        .any(|w| w.line.is_none() && w.message.contains("header")));
    let s = &import.session;
    assert_eq!(s.meta.format, "pi");
    assert_eq!(s.entries.len(), 2);
    assert!(matches!(&s.entries[1].kind, EntryKind::Event { name, .. } if name == "message:alien"));
}

/// Import throughput: `cargo test --release -p ctxd-formats --test pi -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput() {
    let bytes = std::fs::read(large_session()).expect("shared session");
    // The real file, and a 20x concatenation of its entries (about 20 MB).
    let text = String::from_utf8(bytes.clone()).expect("utf8");
    let mut big = String::with_capacity(text.len() * 20);
    big.push_str(text.lines().next().unwrap_or_default());
    big.push('\n');
    for _ in 0..20 {
        for line in text.lines().skip(1) {
            big.push_str(line);
            big.push('\n');
        }
    }
    measure("pi large-session.jsonl", &bytes, 50);
    measure("pi large-session.jsonl x20", big.as_bytes(), 5);
}

/// Import `data` `rounds` times; prints the best round's MB/s (the machine may be shared: the
/// best round is the least disturbed one) and the mean.
fn measure(name: &str, data: &[u8], rounds: usize) {
    let mut best = f64::MAX;
    let mut total = 0.0;
    for _ in 0..rounds {
        let start = std::time::Instant::now();
        let import = import_reader(Cursor::new(data)).expect("imports");
        assert!(!import.session.entries.is_empty());
        drop(import);
        let secs = start.elapsed().as_secs_f64();
        best = best.min(secs);
        total += secs;
    }
    let mb = data.len() as f64 / 1e6;
    println!(
        "{name}: {mb:.2} MB, best {:.0} MB/s, mean {:.0} MB/s over {rounds} rounds",
        mb / best,
        mb * rounds as f64 / total
    );
}

#[test]
fn typed_fast_path_and_value_path_agree() {
    // Re-serialised through `serde_json::Value`, keys come out sorted, so `type` is no longer
    // first and every line takes the general path instead of the typed one.
    let text = std::fs::read_to_string(large_session()).expect("shared session");
    let fixture_text = std::fs::read_to_string(fixture("tree-v3.jsonl")).expect("fixture");
    for text in [text, fixture_text] {
        let resorted: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .expect("json")
                    .to_string()
            })
            .collect();
        assert!(!resorted[1].starts_with(r#"{"type""#));
        let fast = import_str(&text);
        let general = import_str(&resorted.join("\n"));
        assert_eq!(fast.session, general.session);
        assert_eq!(fast.warnings, general.warnings);
    }
}

#[test]
fn type_confused_lines_never_panic() {
    let text = std::fs::read_to_string(large_session()).expect("shared session");
    let fixture_text = std::fs::read_to_string(fixture("tree-v3.jsonl")).expect("fixture");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .take(120)
        .chain(fixture_text.lines())
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..200 {
        let mut mutated = lines.clone();
        for _ in 0..8 {
            let i = rng.below(mutated.len());
            confuse(
                &mut mutated[i],
                &mut rng,
                6,
                &[serde_json::json!({"type": "image", "data": "%%%", "mimeType": 3})],
            );
        }
        let out: Vec<String> = mutated.iter().map(|v| v.to_string()).collect();
        // Any outcome but a panic is fine: an import with warnings, or a clean error.
        let _ = import_reader(Cursor::new(out.join("\n").into_bytes()));
    }
}
