use serde_json::json;

use super::*;
use crate::model::{Message, Role};
use crate::tokens::CharEstimate;

/// A session: a prompt, an assistant call of `tool` with `args`, and its result `output`
/// (as `role`, with `tool_name` when the format names it).
fn session(
    tool: &str,
    args: serde_json::Value,
    role: Role,
    tool_name: Option<&str>,
    output: &str,
) -> Session {
    let mut s = Session::default();
    s.push_linear(EntryKind::Message(Message::text(
        Role::User,
        "run the tests",
    )));
    s.push_linear(EntryKind::Message(Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolCall {
            id: "call_1".into(),
            name: tool.into(),
            arguments: args,
        }],
    )));
    s.push_linear(EntryKind::Message(Message::new(
        role,
        vec![ContentBlock::ToolResult {
            call_id: "call_1".into(),
            tool_name: tool_name.map(str::to_owned),
            content: vec![ContentBlock::text(output)],
            is_error: false,
        }],
    )));
    s
}

fn all(s: &Session) -> Vec<usize> {
    (0..s.entries.len()).collect()
}

fn found(s: &Session, agent: &str) -> Vec<Candidate> {
    let b = all(s);
    candidates(
        s,
        &b,
        &b[2..],
        Some(agent),
        &Config::default(),
        &CharEstimate,
    )
}

/// A long build log: `n` lines, an error at line 500 and a warning at 900, a summary last.
fn build_log(n: usize) -> String {
    let mut out = String::new();
    for i in 1..=n {
        let line = match i {
            500 => "error[E0308]: mismatched types at src/engine.rs:41:9".to_owned(),
            900 => "warning: unused variable `x` in src/lib.rs:7".to_owned(),
            _ if i == n => "test result: FAILED. 41 passed; 1 failed".to_owned(),
            _ => format!("   Compiling crate-{i} v0.1.{i} (/work/crates/crate-{i})"),
        };
        out.push_str(&line);
        if i < n {
            out.push('\n');
        }
    }
    out
}

#[test]
fn each_agents_shell_shape_is_found() {
    let log = build_log(2_000);
    // Claude Code: `Bash`, the result in a user message, its name only on the call.
    let cc = session(
        "Bash",
        json!({"command": "cargo test 2>&1", "description": "Run tests"}),
        Role::User,
        None,
        &log,
    );
    let c = found(&cc, "claude-code");
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].label, "Bash `cargo test`");
    assert_eq!(c[0].entry, 2);
    assert!(c[0].tokens >= 2_000);
    // Codex: `exec_command` with `cmd`, a tool message.
    let cx = session(
        "exec_command",
        json!({"cmd": "cargo build"}),
        Role::Tool,
        None,
        &log,
    );
    assert_eq!(found(&cx, "codex").len(), 1);
    // Pi: `bash`, the name on the result too.
    let pi = session(
        "bash",
        json!({"command": "make"}),
        Role::Tool,
        Some("bash"),
        &log,
    );
    assert_eq!(found(&pi, "pi").len(), 1);
    // The table is per agent: Claude Code's `Bash` is not Pi's shell.
    assert!(found(&cc, "pi").is_empty());
    // An agent without a row: the common names.
    assert_eq!(found(&pi, "sdk").len(), 1);
    // Configurable.
    let mut cfg = Config::default();
    cfg.shell_tools
        .agents
        .insert("pi".into(), vec!["run".into()]);
    let b = all(&pi);
    assert!(candidates(&pi, &b, &b[2..], Some("pi"), &cfg, &CharEstimate).is_empty());
}

#[test]
fn small_outputs_other_tools_images_and_ctxds_own_are_left_alone() {
    // Below the threshold.
    let small = session(
        "Bash",
        json!({"command": "ls"}),
        Role::User,
        None,
        &build_log(100),
    );
    assert!(found(&small, "claude-code").is_empty());
    // Just above it is digested; the threshold is configurable.
    let log = build_log(2_000);
    let s = session("Bash", json!({"command": "ls"}), Role::User, None, &log);
    let b = all(&s);
    let cfg = Config {
        min_tokens: 100_000,
        ..Config::default()
    };
    assert!(candidates(&s, &b, &b[2..], Some("claude-code"), &cfg, &CharEstimate).is_empty());
    // Only the request's new elements: an output the model already saw stays as it was.
    assert!(candidates(
        &s,
        &b,
        &[],
        Some("claude-code"),
        &Config::default(),
        &CharEstimate
    )
    .is_empty());
    // Not a shell tool.
    let read = session("Read", json!({"file_path": "a.rs"}), Role::User, None, &log);
    assert!(found(&read, "claude-code").is_empty());
    // An image in the result.
    let mut img = s.clone();
    if let EntryKind::Message(m) = &mut img.entries[2].kind {
        if let ContentBlock::ToolResult { content, .. } = &mut m.content[0] {
            content.push(ContentBlock::Image(crate::model::Image::default()));
        }
    }
    assert!(found(&img, "claude-code").is_empty());
    // A file shown through the shell is a read: left to distillation, not digested.
    for (tool, agent, args) in [
        (
            "bash",
            "other",
            json!({"command": "cd /testbed && cat astropy/modeling/separable.py"}),
        ),
        (
            "shell",
            "codex",
            json!({"command": ["bash", "-lc", "sed -n 1,400p src/main.rs"]}),
        ),
        (
            "Bash",
            "claude-code",
            json!({"command": "head -n 3000 src/lib.rs"}),
        ),
    ] {
        let read = session(tool, args.clone(), Role::Tool, Some(tool), &log);
        assert!(found(&read, agent).is_empty(), "{args}");
    }
    // A pipeline that filters a file is not a plain read: digested.
    let piped = session(
        "bash",
        json!({"command": "cd /testbed && cat build.log | grep -v DEBUG"}),
        Role::Tool,
        Some("bash"),
        &log,
    );
    assert_eq!(found(&piped, "other").len(), 1);
    // ctxd's own text (a recall's output, say).
    let own = session(
        "Bash",
        json!({"command": "x"}),
        Role::User,
        None,
        &format!("{MARKER} recalled\n{log}"),
    );
    assert!(found(&own, "claude-code").is_empty());
}

#[test]
fn the_local_digest_keeps_head_tail_and_errors_within_the_cap() {
    let log = build_log(2_000);
    let s = session(
        "Bash",
        json!({"command": "cargo test"}),
        Role::User,
        None,
        &log,
    );
    let c = &found(&s, "claude-code")[0];
    let cfg = Config::default();
    let d = render_local(c, &Pointer::Recall("i_abc".into()), &cfg, &CharEstimate);
    assert!(d.starts_with(DIGEST_PREFIX), "{d}");
    assert!(CharEstimate.count(&d) <= cfg.max_tokens, "{}", d.len());
    assert!(d.contains("crate-1 v0.1.1"), "head kept");
    assert!(d.contains("test result: FAILED"), "tail kept");
    assert!(d.contains("error[E0308]: mismatched types"), "error kept");
    assert!(d.contains("warning: unused variable"), "warning kept");
    assert!(!d.contains("crate-700 "), "the middle is omitted");
    // The pointer: the whole output, and the omitted lines by offset.
    assert!(d.contains(r#"recall({"entryId":"i_abc"})"#), "{d}");
    assert!(
        d.contains(r#"recall({"entryId":"i_abc","offset":16,"limit":484})"#),
        "{d}"
    );
    assert!(d.len() < log.len() / 10);
}

#[test]
fn without_recall_the_digest_names_no_tool() {
    let log = build_log(2_000);
    let s = session(
        "Bash",
        json!({"command": "cargo test"}),
        Role::User,
        None,
        &log,
    );
    let c = &found(&s, "claude-code")[0];
    for d in [
        render_local(c, &Pointer::NoRecall, &Config::default(), &CharEstimate),
        render_fallback(c, &Pointer::NoRecall, 3_000),
        render_summary(c, "ok", "m", &Pointer::NoRecall, &Config::default()),
    ] {
        assert!(!d.contains("recall"), "{d}");
        assert!(d.contains("run the command again"), "{d}");
    }
}

#[test]
fn very_long_lines_are_clipped_and_the_cap_holds() {
    let line = "x".repeat(20_000);
    let log = format!("{line}\n{line}\nerror: boom\n{line}");
    let s = session(
        "Bash",
        json!({"command": "cat big"}),
        Role::User,
        None,
        &log,
    );
    let c = &found(&s, "claude-code")[0];
    let cfg = Config::default();
    let d = render_local(c, &Pointer::Recall("e2".into()), &cfg, &CharEstimate);
    assert!(CharEstimate.count(&d) <= cfg.max_tokens, "{}", d.len());
    assert!(d.contains("error: boom"));
}

#[test]
fn the_failure_path_is_a_truncated_tail_never_the_whole_output() {
    let log = build_log(2_000);
    let s = session(
        "Bash",
        json!({"command": "cargo test"}),
        Role::User,
        None,
        &log,
    );
    let c = &found(&s, "claude-code")[0];
    let d = render_fallback(c, &Pointer::Recall("e2".into()), 3_000);
    assert!(d.starts_with(DIGEST_PREFIX));
    assert!(d.ends_with("test result: FAILED. 41 passed; 1 failed"));
    assert!(!d.contains("crate-1 v0.1.1 "), "not the head");
    assert!(d.len() < 3_000 + 600, "{}", d.len());
    assert!(
        d.contains(r#""offset":1,"#),
        "the omitted lines' recall: {d}"
    );
}

#[test]
fn a_summary_is_capped_and_the_prompt_is_bounded() {
    let log = build_log(20_000);
    let s = session(
        "Bash",
        json!({"command": "cargo test"}),
        Role::User,
        None,
        &log,
    );
    let c = &found(&s, "claude-code")[0];
    let cfg = Config::default();
    let (system, user) = summary_prompt(c, &cfg);
    assert!(system.contains("1024 tokens"));
    assert!(user.starts_with("Command: Bash `cargo test`"));
    assert!(user.len() < SUMMARY_INPUT_CHARS + 200);
    assert!(user.contains("test result: FAILED"));
    let d = render_summary(
        c,
        &"y".repeat(10_000),
        "gpt-x",
        &Pointer::Recall("e2".into()),
        &cfg,
    );
    assert!(d.contains("a summary by gpt-x"));
    assert!(d.len() < 4 * 1024 + 400);
}

#[test]
fn omitted_search_hits_name_their_files() {
    let mut log = String::new();
    for f in 0..40 {
        for n in 1..=30 {
            log.push_str(&format!(
                "src/mod_{f}.rs:{n}:    let value_{n} = compute_{f}({n});\n"
            ));
        }
    }
    let s = session(
        "Bash",
        json!({"command": "rg value"}),
        Role::User,
        None,
        &log,
    );
    let c = &found(&s, "claude-code")[0];
    let d = render_local(
        c,
        &Pointer::Recall("e2".into()),
        &Config::default(),
        &CharEstimate,
    );
    assert!(
        d.contains("hits in src/mod_0.rs (15), src/mod_1.rs (30)"),
        "{d}"
    );
}

#[test]
fn signal_lines() {
    for l in [
        "error: could not compile `ctxd`",
        "  --> warning: unused",
        "thread 'main' panicked at src/x.rs:1",
        "FAILED tests/test_a.py::test_b",
        "Traceback (most recent call last):",
        "bash: foo: command not found",
        "E       AssertionError: 1 != 2",
    ] {
        assert!(signal_line(l), "{l}");
    }
    for l in [
        "",
        "   Compiling x",
        "test result: ok. 3 passed; 0 failed",
        "0 errors, 0 warnings",
    ] {
        assert!(!signal_line(l), "{l}");
    }
}

#[test]
fn the_edit_keeps_the_call_ids_and_the_projection_shows_the_digest() {
    let log = build_log(2_000);
    let mut s = session(
        "Bash",
        json!({"command": "cargo test"}),
        Role::User,
        None,
        &log,
    );
    let c = found(&s, "claude-code").remove(0);
    let text = render_local(
        &c,
        &Pointer::Recall("e2".into()),
        &Config::default(),
        &CharEstimate,
    );
    let edits = drafts(&s, &[(c, text.clone())]);
    assert_eq!(edits.len(), 1);
    assert!(is_digest_edit(&edits[0]));
    for e in edits {
        s.push_linear(e);
    }
    let branch = all(&s);
    let p = crate::view::project_checked(&s, &branch).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.items.len(), 3);
    let shown = crate::text::message_text(&p.items[2].to_message());
    assert_eq!(shown, text);
    // The raw entry is untouched.
    assert!(
        crate::text::message_text(s.entries[2].kind.as_message().unwrap_or_else(|| panic!()))
            .contains("crate-700 ")
    );
    // The accounting charges the difference to the digests.
    let m = crate::savings::measure(&s, &branch, &mut crate::savings::EntryTokens::default(), 0);
    assert!(m.saved.digests > 1_000, "{:?}", m.saved);
    assert_eq!(m.saved.distillation, 0);
    assert_eq!(m.saved_total(), m.saved.total());
}
