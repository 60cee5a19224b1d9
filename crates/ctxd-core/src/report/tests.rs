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
