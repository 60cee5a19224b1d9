#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Properties of meta-amnesia's pruning: whatever the conversation (rounds of parallel calls,
//! thinking, text, read and other tools, errors, small and large results; Anthropic-,
//! Chat- and Responses-shaped) and whatever the classifier answers, the request after the
//! pruning is well-formed: every call has its result and every result its call, it does not
//! end with an assistant message, no assistant message is left empty or thinking-only where
//! it was not, and what it shows is the unpruned request's items up to some point (a prefix:
//! nothing mid-array is ever removed).

use ctxd_core::distill::Answer;
use ctxd_core::mechanisms::amnesia::{decide, prepare, Config};
use ctxd_core::model::{ContentBlock, EntryKind, Message, Role, Session};
use ctxd_core::tokens::CharEstimate;
use ctxd_core::view::{project_checked, ItemKind};
use proptest::prelude::*;
use serde_json::json;

#[derive(Clone, Debug)]
struct CallSpec {
    read: bool,
    large: bool,
    error: bool,
}

#[derive(Clone, Debug)]
struct RoundSpec {
    calls: Vec<CallSpec>,
    thinking: bool,
    text: bool,
    /// Anthropic: one results message; Chat: one tool message per result; Responses: each
    /// call its own item too.
    shape: u8,
}

fn call_spec() -> impl Strategy<Value = CallSpec> {
    (any::<bool>(), any::<bool>(), prop::bool::weighted(0.1))
        .prop_map(|(read, large, error)| CallSpec { read, large, error })
}

fn round_spec() -> impl Strategy<Value = RoundSpec> {
    (
        prop::collection::vec(call_spec(), 1..4),
        any::<bool>(),
        prop::bool::weighted(0.2),
        0u8..3,
    )
        .prop_map(|(calls, thinking, text, shape)| RoundSpec {
            calls,
            thinking,
            text,
            shape,
        })
}

fn push(s: &mut Session, role: Role, content: Vec<ContentBlock>) -> usize {
    s.push_linear(EntryKind::Message(Message::new(role, content)));
    s.entries.len() - 1
}

/// Append a round; the positions of its results.
fn round(s: &mut Session, r: &RoundSpec, n: usize) -> Vec<usize> {
    let mut head = Vec::new();
    if r.thinking {
        head.push(ContentBlock::Thinking {
            thinking: format!("think {n}"),
            signature: Some(format!("sig{n}")),
            redacted: false,
        });
    }
    if r.text {
        head.push(ContentBlock::text(format!("looking {n}")));
    }
    let calls: Vec<ContentBlock> = r
        .calls
        .iter()
        .enumerate()
        .map(|(k, c)| ContentBlock::ToolCall {
            id: format!("c{n}_{k}"),
            name: if c.read { "Read" } else { "Edit" }.into(),
            arguments: json!({"file_path": format!("f{n}_{k}.rs")}),
        })
        .collect();
    if r.shape == 2 {
        if !head.is_empty() {
            push(s, Role::Assistant, head);
        }
        for c in calls {
            push(s, Role::Assistant, vec![c]);
        }
    } else {
        head.extend(calls);
        push(s, Role::Assistant, head);
    }
    let results: Vec<ContentBlock> = r
        .calls
        .iter()
        .enumerate()
        .map(|(k, c)| ContentBlock::ToolResult {
            call_id: format!("c{n}_{k}"),
            tool_name: None,
            content: vec![ContentBlock::text(if c.large {
                "zebra quokka platypus wombat\n".repeat(60)
            } else {
                "ok".to_owned()
            })],
            is_error: c.error,
        })
        .collect();
    if r.shape == 0 {
        vec![push(s, Role::User, results)]
    } else {
        results
            .into_iter()
            .map(|b| push(s, Role::Tool, vec![b]))
            .collect()
    }
}

fn well_formed(s: &Session) -> Vec<(usize, Role, Vec<ContentBlock>)> {
    let b: Vec<usize> = (0..s.entries.len()).collect();
    let p = project_checked(s, &b).unwrap();
    assert!(p.unpaired.is_empty(), "unpaired items {:?}", p.unpaired);
    p.items
        .iter()
        .map(|it| match &it.kind {
            ItemKind::Message {
                message, content, ..
            } => (it.entry, message.role, content.to_vec()),
            ItemKind::Summary { .. } => unreachable!(),
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn pruned_requests_are_well_formed(
        rounds in prop::collection::vec(round_spec(), 1..6),
        ps in prop::collection::vec(0.0f32..1.0, 1..24),
    ) {
        let mut s = Session::default();
        push(&mut s, Role::User, vec![ContentBlock::text("fix the parser")]);
        let mut answers = ps.iter().cycle();
        for (n, r) in rounds.iter().enumerate() {
            let new = round(&mut s, r, n);
            let before = well_formed(&s);
            let branch: Vec<usize> = (0..s.entries.len()).collect();
            let Some(prepared) =
                prepare(&s, &branch, &new, Some("claude-code"), &Config::default(), &CharEstimate)
            else {
                continue;
            };
            let q = prepared.plan.as_ref().map_or(0, |p| p.questions.len());
            let a: Vec<_> = (0..q).map(|_| Ok(Answer::Yes(*answers.next().unwrap()))).collect();
            let (record, drafts) = decide(prepared, &a, "prop");
            for d in drafts {
                s.push_linear(d);
            }
            let after = well_formed(&s);
            // A prefix of what it was: nothing mid-array removed.
            prop_assert!(after.len() <= before.len());
            prop_assert_eq!(&after[..], &before[..after.len()]);
            prop_assert_eq!(record.pruned.is_empty(), after.len() == before.len());
            // Never ends with an assistant message; the first prompt always stays.
            prop_assert!(!after.is_empty());
            prop_assert!(after.last().unwrap().1 != Role::Assistant);
            // Every pruned round was all reads, all large, none an error, no text.
            if !record.pruned.is_empty() {
                prop_assert!(r.calls.iter().all(|c| c.read && c.large && !c.error) && !r.text);
            }
        }
    }
}
