#![allow(clippy::unwrap_used)]

use super::record::{requests, totals, Record};
use super::*;
use crate::model::{Compaction, ContentBlock, EntryId, EntryKind, Message, Role, Session};
use crate::windows::{reset_drafts, ResetCause};

/// A message of `n` bytes of text (n/4 tokens).
fn msg(role: Role, n: usize) -> EntryKind {
    EntryKind::Message(Message::text(role, "x".repeat(n)))
}

fn measured(s: &Session, served: u64) -> Measure {
    let branch = crate::tree::active_branch(s);
    let mut memo = EntryTokens::default();
    let m = measure(s, &branch, &mut memo, served);
    assert_eq!(m.saved.total(), m.saved_total(), "{m:?}");
    // A warm memo measures the same.
    assert_eq!(measure(s, &branch, &mut memo, served), m);
    m
}

fn session(kinds: Vec<EntryKind>) -> Session {
    let mut s = Session::default();
    for k in kinds {
        s.push_linear(k);
    }
    s
}

#[test]
fn an_untouched_branch_sends_the_whole() {
    let s = session(vec![
        EntryKind::SystemPrompt {
            text: "s".repeat(40),
        },
        msg(Role::User, 400),
        msg(Role::Assistant, 800),
    ]);
    let m = measured(&s, 0);
    assert_eq!((m.sent, m.whole), (310, 310));
    assert_eq!(m.saved, ByMechanism::default());
    // ctxd's tools are a cost.
    let m = measured(&s, 50);
    assert_eq!((m.sent, m.whole, m.saved.served_tools), (360, 310, -50));
}

#[test]
fn a_window_saves_what_it_folded_net_of_its_boot() {
    let mut kinds = vec![msg(Role::User, 4000), msg(Role::Assistant, 4000)];
    kinds.extend(reset_drafts("w2", ResetCause::Requested, "b".repeat(400)));
    kinds.push(msg(Role::User, 40));
    let s = session(kinds);
    let m = measured(&s, 0);
    let boot = m.sent - 10;
    assert_eq!(m.whole, 2010);
    assert_eq!(m.saved.windows, 2000 - boot as i64);
    assert_eq!(m.saved.distillation, 0);
}

#[test]
fn edits_and_omissions_are_distillation_and_reminders_a_cost() {
    let mut s = session(vec![msg(Role::User, 4000), msg(Role::Assistant, 400)]);
    s.push_linear(EntryKind::Message(
        Message::text(Role::User, "r".repeat(80)).injected(crate::budget::GUIDANCE_KIND),
    ));
    s.push_linear(EntryKind::ContextEdit {
        target: EntryId::new("e0"),
        replacement: Some(vec![ContentBlock::text("y".repeat(40))]),
    });
    s.push_linear(msg(Role::User, 400));
    s.push_linear(EntryKind::ContextEdit {
        target: EntryId::new("e4"),
        replacement: None,
    });
    let m = measured(&s, 0);
    assert_eq!(m.saved.distillation, (1000 - 10) + 100);
    assert_eq!(m.saved.reminders, -20);
    assert_eq!(m.whole, 1000 + 100 + 100);
    assert_eq!(m.sent, 10 + 100 + 20);
}

#[test]
fn what_a_window_folds_is_the_windows_even_when_distilled_before() {
    let mut kinds = vec![
        msg(Role::User, 4000),
        EntryKind::ContextEdit {
            target: EntryId::new("e0"),
            replacement: Some(vec![ContentBlock::text("y".repeat(40))]),
        },
        msg(Role::Assistant, 400),
        EntryKind::ContextEdit {
            target: EntryId::new("e2"),
            replacement: None,
        },
    ];
    kinds.extend(reset_drafts("w2", ResetCause::Requested, "b".repeat(400)));
    let s = session(kinds);
    let m = measured(&s, 0);
    assert_eq!(m.saved.distillation, 0);
    assert_eq!(m.saved.windows, 1000 + 100 - 100);
}

#[test]
fn a_clients_compaction_is_no_saving_of_ctxds() {
    let s = session(vec![
        msg(Role::User, 4000),
        msg(Role::Assistant, 4000),
        EntryKind::Compaction(Compaction {
            summary: "s".repeat(400),
            first_kept: None,
            tokens_before: None,
            replacement: None,
        }),
        msg(Role::User, 40),
    ]);
    let m = measured(&s, 0);
    assert_eq!((m.sent, m.whole), (110, 110));
    assert_eq!(m.saved, ByMechanism::default());
}

#[test]
fn unpaired_calls_are_pairing() {
    let call = Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: serde_json::json!({"cmd": "x".repeat(100)}),
        }],
    );
    let s = session(vec![msg(Role::User, 40), EntryKind::Message(call)]);
    let m = measured(&s, 0);
    assert!(m.saved.pairing > 0);
    assert_eq!(m.sent, 10);
    // What went upstream unchanged saves nothing but ctxd's tools cost.
    let u = m.unchanged();
    assert_eq!(u.sent, u.whole);
    assert_eq!(u.saved, ByMechanism::default());
}

#[test]
fn records_round_trip_and_totals_read_them_back() {
    let m = Measure {
        sent: 100,
        whole: 1100,
        saved: ByMechanism {
            windows: 1200,
            served_tools: -100,
            ..ByMechanism::default()
        },
    };
    let r = Record::new(&m, Some("claude-sonnet-4-5"));
    let entry = r.to_entry();
    assert_eq!(Record::from_entry(&entry).as_ref(), Some(&r));
    let json = serde_json::to_string(&r).unwrap();
    assert_eq!(
        json,
        r#"{"v":1,"sent":100,"whole":1100,"saved":{"windows":1200,"served-tools":-100},"model":"claude-sonnet-4-5"}"#
    );
    // A later build's mechanism and a later version.
    let later: serde_json::Value = serde_json::from_str(
        r#"{"v":1,"sent":1,"whole":2,"saved":{"digests":1,"future-thing":5}}"#,
    )
    .unwrap();
    let kind = |detail| EntryKind::Event {
        name: record::EVENT.into(),
        detail: Some(detail),
    };
    assert_eq!(
        Record::from_entry(&kind(later)).map(|r| r.saved.digests),
        Some(1)
    );
    assert!(Record::from_entry(&kind(serde_json::json!({"v": 2}))).is_none());
    let mut s = session(vec![msg(Role::User, 4), entry.clone(), entry]);
    s.push_linear(msg(Role::User, 4));
    assert_eq!(requests(&s).len(), 2);
    let t = totals(&s);
    assert_eq!((t.requests, t.sent, t.whole, t.saved), (2, 200, 2200, 2000));
    assert_eq!(t.saved_by.windows, 2400);
    assert!((t.cost_saved_usd - 2000.0 * 3.0 / 1e6).abs() < 1e-12);
    assert_eq!(
        t.saved_by.header_value(),
        "windows=2400,distillation=0,reminders=0,served-tools=-200,pairing=0,digests=0,amnesia=0,write-facts=0,lazy-tools=0"
    );
}

#[test]
fn a_stripped_write_is_saved_by_write_facts_net_of_its_fact() {
    let content = "# The model.\n".to_owned() + &"x = conv(x)\n".repeat(200);
    let mut s = session(vec![
        msg(Role::User, 40),
        EntryKind::Message(Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: "w".into(),
                name: "Write".into(),
                arguments: serde_json::json!({"file_path": "m.py", "content": content}),
            }],
        )),
        EntryKind::Message(Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                call_id: "w".into(),
                tool_name: None,
                content: vec![ContentBlock::text("ok")],
                is_error: false,
            }],
        )),
    ]);
    let before = measured(&s, 0);
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    let drafts = crate::mechanisms::writes::plan(&s, &branch, &[2], &Default::default());
    assert_eq!(drafts.len(), 1);
    s.push_linear(drafts[0].kind.clone());
    let after = measured(&s, 0);
    assert_eq!(after.whole, before.whole);
    assert!(after.saved.write_facts > 500, "{after:?}");
    assert_eq!(after.saved.write_facts, after.saved_total());
    assert_eq!(after.saved.distillation, 0);
}

#[test]
fn tools_left_out_are_lazy_tools_and_the_sum_stays_exact() {
    let tool = |name: &str, n: usize| crate::model::ToolDef {
        name: name.into(),
        description: "d".repeat(n),
        schema: serde_json::Value::Null,
    };
    let tools = vec![tool("Bash", 396), tool("Workflow", 3992)];
    let left_out = crate::mechanisms::lazy::avoided_tokens(&tools, |n| n == "Bash");
    assert_eq!(left_out, 1000);
    let s = session(vec![EntryKind::ToolDefs { tools }, msg(Role::User, 400)]);
    let m = measured(&s, 40).with_lazy(left_out);
    assert_eq!(m.saved.lazy_tools, 1000);
    assert_eq!(m.whole, 100 + 1000 + 100);
    assert_eq!(m.sent, 100 + 40 + 100);
    assert_eq!(m.saved.total(), m.saved_total());
    // Unchanged conversations keep the saving of the tools (the body was still rewritten).
    let u = measured(&s, 40).unchanged().with_lazy(left_out);
    assert_eq!(u.saved.total(), u.saved_total());
    assert_eq!(u.saved.lazy_tools, 1000);
}
