#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;
use crate::model::Message;
use crate::view::project_checked;

fn call(id: &str, name: &str, arguments: Value) -> ContentBlock {
    ContentBlock::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
    }
}

fn result(id: &str, text: &str, is_error: bool) -> ContentBlock {
    ContentBlock::ToolResult {
        call_id: id.into(),
        tool_name: None,
        content: vec![ContentBlock::text(text)],
        is_error,
    }
}

fn big(n: usize) -> String {
    let mut s = String::from("\"\"\"The model: a small CNN.\"\"\"\nimport torch\n");
    while s.len() < n {
        s.push_str("x = conv(x)  # layer\n");
    }
    s
}

/// A session: user, assistant with `calls`, results (one user message), and the branch.
fn session(calls: Vec<ContentBlock>, results: Vec<ContentBlock>) -> (Session, Vec<usize>) {
    let mut s = Session::default();
    s.push_linear(EntryKind::Message(Message::text(Role::User, "go")));
    let mut content = vec![
        ContentBlock::Thinking {
            thinking: "plan".into(),
            signature: Some("sig".into()),
            redacted: false,
        },
        ContentBlock::text("Writing."),
    ];
    content.extend(calls);
    s.push_linear(EntryKind::Message(Message::new(Role::Assistant, content)));
    s.push_linear(EntryKind::Message(Message::new(Role::User, results)));
    let branch = (0..s.entries.len()).collect();
    (s, branch)
}

fn apply(s: &mut Session, drafts: &[Draft]) -> Vec<usize> {
    for d in drafts {
        s.push_linear(d.kind.clone());
    }
    (0..s.entries.len()).collect()
}

fn shown_args(s: &Session, branch: &[usize], id: &str) -> Value {
    let p = project_checked(s, branch).unwrap();
    p.items
        .iter()
        .flat_map(|it| it.to_message().content)
        .find_map(|b| match b {
            ContentBlock::ToolCall {
                id: i, arguments, ..
            } if i == id => Some(arguments),
            _ => None,
        })
        .unwrap()
}

#[test]
fn claude_code_write_is_stripped_with_its_fact() {
    let content = big(2_000);
    let (mut s, branch) = session(
        vec![call(
            "t1",
            "Write",
            json!({"file_path": "src/model.py", "content": content}),
        )],
        vec![result("t1", "File created successfully", false)],
    );
    let drafts = plan(&s, &branch, &[2], &Settings::default());
    assert_eq!(drafts.len(), 1);
    let fact = &drafts[0].calls[0].fact;
    assert_eq!(
        fact,
        &format!(
            "[Wrote src/model.py — The model: a small CNN., ~{} lines]",
            content.lines().count()
        )
    );
    let branch = apply(&mut s, &drafts);
    let args = shown_args(&s, &branch, "t1");
    assert_eq!(args["file_path"], "src/model.py");
    let shown = args["content"].as_str().unwrap();
    assert!(shown.starts_with(fact.as_str()), "{shown}");
    assert!(
        shown.contains("chars written are in src/model.py"),
        "{shown}"
    );
    // Thinking, text and the call's id and name are as written.
    let p = project_checked(&s, &branch).unwrap();
    let m = p.items[1].to_message();
    assert_eq!(m.content.len(), 3);
    assert!(
        matches!(&m.content[0], ContentBlock::Thinking { signature: Some(sig), .. } if sig == "sig")
    );
}

#[test]
fn each_agents_write_shapes() {
    let long = big(1_000);
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "Edit",
            json!({"file_path": "a.rs", "old_string": long, "new_string": format!("{long}\nfn added() {{}}\n")}),
            "[Edited a.rs — replaced",
        ),
        (
            "MultiEdit",
            json!({"file_path": "b.ts", "edits": [{"old_string": long, "new_string": "x"}, {"old_string": "y", "new_string": long}]}),
            "[Edited b.ts — 2 edits, replaced",
        ),
        (
            "NotebookEdit",
            json!({"notebook_path": "n.ipynb", "cell_id": "c3", "new_source": long}),
            "[Edited notebook n.ipynb — cell c3,",
        ),
        (
            "write",
            json!({"path": "p.ts", "content": long}),
            "[Wrote p.ts — The model: a small CNN.",
        ),
        (
            "edit",
            json!({"path": "p.ts", "oldText": long, "newText": "short"}),
            "[Edited p.ts — replaced",
        ),
        (
            "edit",
            json!({"path": "p.ts", "edits": [{"oldText": long, "newText": "z"}]}),
            "[Edited p.ts — 1 edit,",
        ),
        (
            "apply_patch",
            json!(format!("*** Begin Patch\n*** Add File: new.py\n+{}\n*** Update File: old.py\n@@\n-a\n+b\n+c\n*** Delete File: gone.py\n*** End Patch", long.replace('\n', "\n+"))),
            "[Patched — added new.py (+",
        ),
        (
            "apply_patch",
            json!({"input": format!("*** Begin Patch\n*** Update File: x.py\n@@\n-{}\n*** End Patch", long.replace('\n', "\n-"))}),
            "[Patched — updated x.py (+0 −",
        ),
        (
            "shell",
            json!({"command": ["bash", "-lc", format!("apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: y.ts\n@@\n+{}\n*** End Patch\nPATCH", long.replace('\n', "\n+"))]}),
            "[Patched — updated y.ts (+",
        ),
    ];
    for (name, args, start) in cases {
        let (mut s, branch) = session(
            vec![call("c", name, args.clone())],
            vec![result("c", "ok", false)],
        );
        let drafts = plan(&s, &branch, &[2], &Settings::default());
        assert_eq!(drafts.len(), 1, "{name}");
        let fact = &drafts[0].calls[0].fact;
        assert!(fact.starts_with(start), "{name}: {fact}");
        let branch = apply(&mut s, &drafts);
        let shown = shown_args(&s, &branch, "c");
        assert_ne!(shown, args, "{name}: stripped");
        assert!(
            shown.to_string().contains(fact.as_str()),
            "{name}: fact shown"
        );
        assert!(
            shown.to_string().len() < args.to_string().len(),
            "{name}: smaller"
        );
        // Same JSON type, same keys.
        assert_eq!(shown.is_string(), args.is_string(), "{name}");
        if let (Some(a), Some(b)) = (shown.as_object(), args.as_object()) {
            assert_eq!(
                a.keys().collect::<Vec<_>>(),
                b.keys().collect::<Vec<_>>(),
                "{name}"
            );
        }
    }
    // A patch fact counts each file.
    let fact = patch_fact("*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n+z\n*** Move to: b\n*** Delete File: c\n*** End Patch").unwrap();
    assert_eq!(fact, "[Patched — moved a to b (+2 −1), deleted c]");
}

#[test]
fn small_writes_errors_and_other_tools_pass_through() {
    let small = "print('hi')\n";
    let long = big(800);
    let (s, branch) = session(
        vec![
            call("a", "Write", json!({"file_path": "s.py", "content": small})),
            call("b", "Write", json!({"file_path": "e.py", "content": long})),
            call("c", "Write", json!({"file_path": "f.py", "content": long})),
            call("d", "Read", json!({"file_path": "r.py", "content": long})),
            call("e", "Write", json!({"path_typo": "x", "content": long})),
        ],
        vec![
            result("a", "ok", false),
            result("b", "permission denied", true),
            result(
                "c",
                "<tool_use_error>File has not been read yet</tool_use_error>",
                false,
            ),
            result("d", "ok", false),
            result("e", "ok", false),
        ],
    );
    assert!(plan(&s, &branch, &[2], &Settings::default()).is_empty());
    // The minimum is the setting's.
    let low = Settings {
        enabled: true,
        min_bytes: 5,
    };
    let drafts = plan(&s, &branch, &[2], &low);
    assert_eq!(drafts.len(), 1);
    assert_eq!(
        drafts[0]
            .calls
            .iter()
            .map(|c| c.call.as_str())
            .collect::<Vec<_>>(),
        vec!["a"]
    );
    // Disabled: nothing.
    let off = Settings {
        enabled: false,
        ..low
    };
    assert!(plan(&s, &branch, &[2], &off).is_empty());
}

#[test]
fn only_the_last_assistant_message_and_only_with_fresh_results() {
    let long = big(800);
    let w = |id: &str| call(id, "Write", json!({"file_path": "a.py", "content": long}));
    let mut s = Session::default();
    s.push_linear(EntryKind::Message(Message::text(Role::User, "go")));
    s.push_linear(EntryKind::Message(Message::new(
        Role::Assistant,
        vec![w("old")],
    )));
    s.push_linear(EntryKind::Message(Message::new(
        Role::User,
        vec![result("old", "ok", false)],
    )));
    s.push_linear(EntryKind::Message(Message::new(
        Role::Assistant,
        vec![w("new")],
    )));
    s.push_linear(EntryKind::Message(Message::new(
        Role::Tool,
        vec![result("new", "ok", false)],
    )));
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    // The request bringing `new`'s result strips `new` only.
    let drafts = plan(&s, &branch, &[4], &Settings::default());
    assert_eq!(drafts.len(), 1);
    assert_eq!(drafts[0].target, s.entries[3].id);
    // Results already sent (not fresh): nothing, even for the last message.
    assert!(plan(&s, &branch, &[], &Settings::default()).is_empty());
    assert!(plan(&s, &branch, &[2], &Settings::default()).is_empty());
    // Once stripped, the same request again (a retry) finds the message edited: nothing more.
    let mut s2 = s.clone();
    let b2 = apply(&mut s2, &drafts);
    assert!(plan(&s2, &b2, &[4], &Settings::default()).is_empty());
    // A later user turn: the last assistant message has no fresh results.
    s.push_linear(EntryKind::Message(Message::text(Role::User, "next")));
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    assert!(plan(&s, &branch, &[5], &Settings::default()).is_empty());
}

#[test]
fn a_response_split_over_entries_is_one_message() {
    // Claude Code: thinking, then each tool call its own entry; the results in one message.
    let long = big(800);
    let mut s = Session::default();
    s.push_linear(EntryKind::Message(Message::text(Role::User, "go")));
    s.push_linear(EntryKind::Message(Message::new(
        Role::Assistant,
        vec![ContentBlock::Thinking {
            thinking: "t".into(),
            signature: Some("s".into()),
            redacted: false,
        }],
    )));
    for id in ["x", "y"] {
        s.push_linear(EntryKind::Message(Message::new(
            Role::Assistant,
            vec![call(
                id,
                "Write",
                json!({"file_path": format!("{id}.py"), "content": long}),
            )],
        )));
    }
    s.push_linear(EntryKind::Message(Message::new(
        Role::User,
        vec![result("x", "ok", false), result("y", "ok", false)],
    )));
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    let drafts = plan(&s, &branch, &[4], &Settings::default());
    let targets: Vec<&str> = drafts.iter().map(|d| d.target.as_str()).collect();
    assert_eq!(targets, vec!["e2", "e3"]);
}

#[test]
fn fact_wording() {
    assert_eq!(
        first_line(
            "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n\"\"\"Train the CNN on MNIST.\"\"\"\n"
        ),
        Some("Train the CNN on MNIST.".into())
    );
    assert_eq!(
        first_line("import os\nuse std::io;\n\nfn main() {\n}\n"),
        Some("fn main() {".into())
    );
    assert_eq!(
        first_line("/**\n * Default themes for TUI tests.\n */\nexport const x = 1;\n"),
        Some("Default themes for TUI tests.".into())
    );
    assert_eq!(
        first_line("# Project title\n\nSome text"),
        Some("Project title".into())
    );
    let long = "x".repeat(200);
    assert_eq!(first_line(&long).unwrap().chars().count(), 60);
    assert_eq!(thousands(2_345), "2,345");
    assert_eq!(thousands(1_234_567), "1,234,567");
    assert_eq!(thousands(12), "12");
    assert!(nonzero_exit(
        "{\"output\":\"x\",\"metadata\":{\"exit_code\":1}}"
    ));
    assert!(!nonzero_exit("{\"metadata\":{\"exit_code\":0}}"));
}

#[test]
fn a_call_signed_on_its_own_part_keeps_its_arguments() {
    // Gemini: the thoughtSignature on the call's part, read as a bare signature before it.
    let (s, branch) = session(
        vec![
            ContentBlock::Thinking {
                thinking: String::new(),
                signature: Some("c2ln".into()),
                redacted: true,
            },
            call(
                "~write_file~abc",
                "write_file",
                json!({"file_path": "src/model.py", "content": big(2_000)}),
            ),
        ],
        vec![result("~write_file~abc", "Successfully wrote", false)],
    );
    assert!(plan(&s, &branch, &[2], &Settings::default()).is_empty());
}

#[test]
fn gemini_clis_unsigned_write_is_stripped() {
    let (s, branch) = session(
        vec![call(
            "~write_file~abc",
            "write_file",
            json!({"file_path": "src/model.py", "content": big(2_000)}),
        )],
        vec![result("~write_file~abc", "Successfully wrote", false)],
    );
    let drafts = plan(&s, &branch, &[2], &Settings::default());
    assert_eq!(drafts.len(), 1);
    assert!(drafts[0].calls[0].fact.starts_with("[Wrote src/model.py"));
}
