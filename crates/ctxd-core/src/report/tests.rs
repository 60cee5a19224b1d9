use super::*;
use crate::model::{Compaction, ContentBlock, Entry, EntryId, Message, Role, SessionMeta};
use crate::tokens::CharEstimate;

fn session(kinds: Vec<EntryKind>) -> Session {
    let mut s = Session {
        meta: SessionMeta {
            agent: Some(Agent::Pi),
            model: Some("claude-sonnet-4-5".into()),
            format: "test".into(),
            ..SessionMeta::default()
        },
        ..Session::default()
    };
    for (i, kind) in kinds.into_iter().enumerate() {
        s.entries.push(Entry {
            id: EntryId(format!("e{i}")),
            parent: i.checked_sub(1).map(|p| EntryId(format!("e{p}"))),
            timestamp: None,
            sidechain: false,
            kind,
        });
    }
    s
}

fn user(text: &str) -> EntryKind {
    EntryKind::Message(Message::text(Role::User, text))
}

fn assistant(blocks: Vec<ContentBlock>, usage: Option<Usage>) -> EntryKind {
    let mut m = Message::new(Role::Assistant, blocks);
    m.usage = usage;
    EntryKind::Message(m)
}

fn tool_result(call: &str, text: &str) -> EntryKind {
    EntryKind::Message(Message::new(
        Role::Tool,
        vec![ContentBlock::ToolResult {
            call_id: call.into(),
            tool_name: None,
            content: vec![ContentBlock::text(text)],
            is_error: false,
        }],
    ))
}

fn usage(prompt: u64) -> Option<Usage> {
    Some(Usage {
        input: prompt,
        output: 10,
        ..Usage::default()
    })
}

fn row(r: &Report, id: &str) -> u64 {
    r.composition
        .rows
        .iter()
        .flat_map(|row| std::iter::once(row).chain(row.children.iter()))
        .find(|row| row.id == id)
        .map_or(0, |row| row.tokens)
}

#[test]
fn rows_add_up_and_tool_results_are_named_by_their_call() {
    let s = session(vec![
        EntryKind::SystemPrompt {
            text: "x".repeat(40),
        },
        user("please list"),
        assistant(
            vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: serde_json::json!({"command": "ls"}),
            }],
            usage(100),
        ),
        tool_result("c1", &"y".repeat(400)),
        assistant(vec![ContentBlock::text("done")], usage(250)),
    ]);
    let r = build(&s, &CharEstimate, &Options::default());
    let sum: u64 = r.composition.rows.iter().map(|r| r.tokens).sum();
    assert_eq!(sum, r.composition.total);
    assert_eq!(row(&r, "system"), 10);
    assert_eq!(row(&r, "tool_results/bash"), 100);
    assert_eq!(r.session.turn_count, 2);
    assert_eq!(r.turns[1].provider, Some(250));
    // Headline: the last usage (250) plus what came after its prompt (the answer, 1 token).
    assert_eq!(r.headline.tokens, Some(251));
    assert_eq!(r.headline.source, "provider");
    let d = r.drift.as_ref().map(|d| d.drift);
    assert_eq!(d, Some(251 - r.composition.total as i64));
    assert_eq!(r.largest[0].descriptor, "tool result: bash");
    assert_eq!(r.billed.responses, 2);
    assert_eq!(r.billed.input, 350);
}

#[test]
fn at_turn_reports_the_prompt_of_that_turn() {
    let s = session(vec![
        user("aaaa"),
        assistant(vec![ContentBlock::text("bbbb")], usage(40)),
        user("cccccccc"),
        assistant(vec![ContentBlock::text("dd")], usage(90)),
    ]);
    let opts = Options {
        at_turn: Some(2),
        ..Options::default()
    };
    let r = build(&s, &CharEstimate, &opts);
    assert_eq!(r.session.at_turn, Some(2));
    assert_eq!(r.composition.total, 1 + 1 + 2);
    assert_eq!(r.headline.tokens, Some(90));
    assert_eq!(r.turns.len(), 2);
    // Out of range: the report of now.
    let r = build(
        &s,
        &CharEstimate,
        &Options {
            at_turn: Some(9),
            ..Options::default()
        },
    );
    assert_eq!(r.session.at_turn, None);
}

#[test]
fn compaction_history_and_pending_total() {
    let s = session(vec![
        user(&"a".repeat(400)),
        assistant(vec![ContentBlock::text("b")], usage(500)),
        EntryKind::Compaction(Compaction {
            summary: "s".repeat(40),
            first_kept: None,
            tokens_before: Some(510),
            replacement: None,
        }),
    ]);
    let r = build(&s, &CharEstimate, &Options::default());
    assert_eq!(r.compactions.count, 1);
    let c = &r.compactions.history[0];
    assert_eq!(
        (c.estimate_before, c.estimate_after, c.summary_tokens),
        (101, 10, 10)
    );
    assert_eq!(c.tokens_before_reported, Some(510));
    assert_eq!(r.headline.tokens, None);
    assert_eq!(r.headline.source, "pending");
    assert_eq!(r.composition.total, 10);
    assert_eq!(row(&r, "summaries/compaction"), 10);
}

#[test]
fn injected_context_is_grouped_by_type_and_descriptors_are_safe() {
    let mut reminder = Message::text(Role::User, "\u{1b}[31mred\u{202e} evil\n\nnext line");
    reminder.injected = Some("system-reminder".into());
    let s = session(vec![EntryKind::Message(reminder), user("hi")]);
    let r = build(&s, &CharEstimate, &Options::default());
    assert!(row(&r, "injected/system-reminder") > 0);
    assert_eq!(r.largest[0].descriptor, "injected: system-reminder");
    assert_eq!(
        sanitize("\u{1b}[31mred\u{202e} evil\n\nnext", 40),
        "[31mred evil next"
    );
    assert_eq!(sanitize(&"x".repeat(50), 40).chars().count(), 40);
}

#[test]
fn calibration_separates_scale_from_overhead() {
    // provider = 2 × estimate + 1000 exactly.
    let mut kinds = Vec::new();
    let mut est = 0u64;
    for i in 0..5 {
        kinds.push(user(&"u".repeat(400)));
        est += 100;
        kinds.push(assistant(
            vec![ContentBlock::text("")],
            usage(2 * est + 1000),
        ));
        let _ = i;
    }
    let s = session(kinds);
    let r = build(&s, &CharEstimate, &Options::default());
    let c = r
        .calibration
        .as_ref()
        .map(|c| (c.scale, c.overhead, c.samples));
    assert_eq!(c, Some((2.0, 1000.0, 5)));
}

#[test]
fn billed_totals_fall_back_to_session_totals() {
    let s = session(vec![
        user("x"),
        EntryKind::Event {
            name: "billed_totals".into(),
            detail: Some(serde_json::json!({"input": 7, "output": 3, "api_calls": 2})),
        },
    ]);
    let r = build(&s, &CharEstimate, &Options::default());
    assert_eq!(
        (r.billed.source, r.billed.input, r.billed.responses),
        ("totals", 7, 2)
    );
}

fn call(id: &str) -> EntryKind {
    assistant(
        vec![ContentBlock::ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: serde_json::json!({"command": "make"}),
        }],
        None,
    )
}

#[test]
fn unpaired_calls_and_results_are_left_out_as_the_projection_does() {
    let answered = vec![
        user("build it"),
        call("c1"),
        tool_result("c1", &"o".repeat(80)),
        assistant(vec![ContentBlock::text("built")], usage(60)),
    ];
    // A call still waiting for its result, and a result whose call is not on the branch.
    let mut kinds = answered.clone();
    kinds.push(call("c2"));
    kinds.push(tool_result("c9", &"x".repeat(400)));
    let s = session(kinds);
    let r = build(&s, &CharEstimate, &Options::default());
    let clean = build(&session(answered), &CharEstimate, &Options::default());
    // What is counted is what the gateway sends: the same as without the two messages.
    assert_eq!(r.composition.total, clean.composition.total);
    let rows = |r: &Report| -> Vec<(String, u64)> {
        r.composition
            .rows
            .iter()
            .map(|row| (row.id.clone(), row.tokens))
            .collect()
    };
    assert_eq!(rows(&r), rows(&clean));
    let u = &r.composition.unpaired;
    assert_eq!(
        (u.count, u.entry_ids.clone()),
        (2, vec!["e4".into(), "e5".into()])
    );
    assert!(
        u.tokens > 100,
        "the orphan result's 400 chars: {}",
        u.tokens
    );
    assert!(r.largest.iter().all(|l| l.entry_id != "e5"));
    assert_eq!(clean.composition.unpaired.count, 0);
    let text = text::render(&r);
    assert!(
        text.contains("Left out, not counted: 2 messages") && text.contains("e4, e5"),
        "{text}"
    );
    assert!(!text::render(&clean).contains("Left out"));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["composition"]["unpaired"]["count"], 2);
    assert_eq!(
        json["composition"]["unpaired"]["entry_ids"],
        serde_json::json!(["e4", "e5"])
    );
}

fn marker(window: &str) -> EntryKind {
    EntryKind::WindowMarker {
        window_id: window.into(),
        reason: "new_context".into(),
    }
}

#[test]
fn a_marker_without_its_boot_is_shown_with_what_the_repair_would_do() {
    let start = vec![
        user(&"old ".repeat(100)),
        assistant(vec![ContentBlock::text("ok")], usage(120)),
    ];
    // Root window: no marker.
    let r = build(&session(start.clone()), &CharEstimate, &Options::default());
    assert!(r.context_window.is_none());
    assert!(serde_json::to_value(&r).unwrap()["context_window"].is_null());

    // Only metadata after the marker: the narrow repair can append the boot.
    let mut kinds = start.clone();
    kinds.push(marker("w1"));
    kinds.push(EntryKind::Event {
        name: "label".into(),
        detail: None,
    });
    let r = build(&session(kinds.clone()), &CharEstimate, &Options::default());
    let w = r.context_window.as_ref().unwrap();
    assert_eq!(
        (
            w.window_id.as_str(),
            w.marker_entry_id.as_str(),
            w.boot_missing
        ),
        ("w1", "e2", true)
    );
    assert_eq!(w.boot_entry_id, None);
    assert!(w
        .note
        .as_deref()
        .unwrap()
        .contains("narrow repair can append the boot"));
    let text = text::render(&r);
    assert!(
        text.contains("BROKEN  context window w1: its marker e2 has no boot after it"),
        "{text}"
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["context_window"]["boot_missing"], true);
    assert!(json["context_window"]["boot_entry_id"].is_null());
    // The walk's raw view is what the composition shows: the old history is still counted.
    assert!(r.composition.total >= 100);

    // Work after the marker: the repair refuses and says why.
    kinds.push(user("go on"));
    let r = build(&session(kinds.clone()), &CharEstimate, &Options::default());
    let note = r.context_window.as_ref().and_then(|w| w.note.clone());
    assert!(
        note.as_deref().unwrap().contains("start a new window"),
        "{note:?}"
    );

    // With its boot the window is healthy, and the history before it folds away.
    let mut kinds = start;
    kinds.push(marker("w1"));
    kinds.push(EntryKind::WindowBoot {
        window_id: "w1".into(),
        message: Message::text(Role::User, "boot"),
    });
    let r = build(&session(kinds), &CharEstimate, &Options::default());
    let w = r.context_window.as_ref().unwrap();
    assert_eq!(
        (w.boot_entry_id.as_deref(), w.boot_missing),
        (Some("e3"), false)
    );
    assert_eq!(w.note, None);
    assert_eq!(r.composition.total, 1);
    assert!(text::render(&r).contains("Reset   in context window w1 (marker e2, boot e3)"));
}
