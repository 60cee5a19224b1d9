#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Properties of the projection over generated logs: messages, tool call/result batches
//! (complete or cut short), context edits, compactions, window markers with and without boots.

use std::collections::HashMap;

use ctxd_core::model::{
    Compaction, ContentBlock, Entry, EntryId, EntryKind, Message, Role, Session,
};
use ctxd_core::tree::active_branch;
use ctxd_core::view::{project_checked, ItemKind, ProjectionError};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    System,
    User,
    Assistant,
    /// `calls` tool calls; results for the first `answered`, as one user message or one tool
    /// message each.
    Batch {
        calls: usize,
        answered: usize,
        grouped: bool,
    },
    Edit {
        target: usize,
        omit: bool,
        keep_ids: bool,
    },
    Compaction {
        first_kept: Option<usize>,
    },
    Window {
        boot: bool,
    },
    StrayBoot,
    Event,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::System),
        4 => Just(Op::User),
        3 => Just(Op::Assistant),
        5 => (1usize..4, 0usize..4, any::<bool>())
            .prop_map(|(calls, answered, grouped)| Op::Batch { calls, answered: answered.min(calls), grouped }),
        3 => (any::<usize>(), any::<bool>(), any::<bool>())
            .prop_map(|(target, omit, keep_ids)| Op::Edit { target, omit, keep_ids }),
        1 => proptest::option::of(any::<usize>()).prop_map(|first_kept| Op::Compaction { first_kept }),
        2 => prop_oneof![5 => Just(true), 1 => Just(false)].prop_map(|boot| Op::Window { boot }),
        1 => Just(Op::StrayBoot),
        1 => Just(Op::Event),
    ]
}

struct Builder {
    s: Session,
    calls: usize,
    windows: usize,
}

impl Builder {
    fn push(&mut self, kind: EntryKind) {
        let parent = self.s.entries.last().map(|e| e.id.clone());
        let id = EntryId::new(format!("e{}", self.s.entries.len()));
        self.s.entries.push(Entry {
            id,
            parent,
            timestamp: None,
            sidechain: false,
            kind,
        });
    }

    fn apply(&mut self, op: &Op) {
        let n = self.s.entries.len();
        match op {
            Op::System => self.push(EntryKind::SystemPrompt {
                text: format!("system {n}"),
            }),
            Op::User => self.push(EntryKind::Message(Message::text(
                Role::User,
                format!("user {n}"),
            ))),
            Op::Assistant => self.push(EntryKind::Message(Message::text(
                Role::Assistant,
                format!("answer {n}"),
            ))),
            Op::Batch {
                calls,
                answered,
                grouped,
            } => {
                let ids: Vec<String> = (0..*calls)
                    .map(|_| {
                        self.calls += 1;
                        format!("call{}", self.calls)
                    })
                    .collect();
                let mut content = vec![ContentBlock::text("working")];
                content.extend(ids.iter().map(|id| ContentBlock::ToolCall {
                    id: id.clone(),
                    name: "bash".into(),
                    arguments: serde_json::json!({"cmd": id}),
                }));
                self.push(EntryKind::Message(Message::new(Role::Assistant, content)));
                let result = |id: &String| ContentBlock::ToolResult {
                    call_id: id.clone(),
                    tool_name: Some("bash".into()),
                    content: vec![ContentBlock::text(format!("output of {id}"))],
                    is_error: false,
                };
                if *grouped {
                    if *answered > 0 {
                        let mut blocks: Vec<ContentBlock> =
                            ids[..*answered].iter().map(result).collect();
                        blocks.push(ContentBlock::text("and a note"));
                        self.push(EntryKind::Message(Message::new(Role::User, blocks)));
                    }
                } else {
                    for id in &ids[..*answered] {
                        self.push(EntryKind::Message(Message::new(
                            Role::Tool,
                            vec![result(id)],
                        )));
                    }
                }
            }
            Op::Edit {
                target,
                omit,
                keep_ids,
            } => {
                if n == 0 {
                    return;
                }
                let target_entry = &self.s.entries[target % n];
                let replacement = if *omit {
                    None
                } else if *keep_ids {
                    // Same calls/results, other content (what a distiller writes).
                    match &target_entry.kind {
                        EntryKind::Message(m) => Some(
                            m.content
                                .iter()
                                .map(|b| match b {
                                    ContentBlock::ToolResult { call_id, .. } => {
                                        ContentBlock::ToolResult {
                                            call_id: call_id.clone(),
                                            tool_name: None,
                                            content: vec![ContentBlock::text("[distilled]")],
                                            is_error: false,
                                        }
                                    }
                                    ContentBlock::Text { .. } => ContentBlock::text("[edited]"),
                                    other => other.clone(),
                                })
                                .collect(),
                        ),
                        _ => Some(vec![ContentBlock::text("[edited]")]),
                    }
                } else {
                    Some(vec![ContentBlock::text("[replaced]")])
                };
                let target = target_entry.id.clone();
                self.push(EntryKind::ContextEdit {
                    target,
                    replacement,
                });
            }
            Op::Compaction { first_kept } => {
                let first_kept = first_kept
                    .filter(|_| n > 0)
                    .map(|k| self.s.entries[k % n].id.clone());
                self.push(EntryKind::Compaction(Compaction {
                    summary: format!("summary {n}"),
                    first_kept,
                    tokens_before: None,
                    replacement: None,
                }));
            }
            Op::Window { boot } => {
                self.windows += 1;
                let window_id = format!("w{}", self.windows);
                self.push(EntryKind::WindowMarker {
                    window_id: window_id.clone(),
                    reason: "requested".into(),
                });
                if *boot {
                    self.push(EntryKind::WindowBoot {
                        window_id,
                        message: Message::text(Role::User, "boot").injected("ctxd/boot"),
                    });
                }
            }
            Op::StrayBoot => self.push(EntryKind::WindowBoot {
                window_id: "root".into(),
                message: Message::text(Role::User, "root boot").injected("ctxd/boot"),
            }),
            Op::Event => self.push(EntryKind::Event {
                name: "label".into(),
                detail: None,
            }),
        }
    }
}

fn build(ops: &[Op]) -> Session {
    let mut b = Builder {
        s: Session::default(),
        calls: 0,
        windows: 0,
    };
    for op in ops {
        b.apply(op);
    }
    b.s
}

/// Independent oracle: the latest marker on the branch and whether its boot follows it.
fn latest_marker_has_boot(s: &Session, branch: &[usize]) -> bool {
    let Some(i) = branch
        .iter()
        .rposition(|&p| matches!(s.entries[p].kind, EntryKind::WindowMarker { .. }))
    else {
        return true;
    };
    let EntryKind::WindowMarker { window_id, .. } = &s.entries[branch[i]].kind else {
        unreachable!()
    };
    branch[i + 1..].iter().any(|&p| matches!(&s.entries[p].kind, EntryKind::WindowBoot { window_id: w, .. } if w == window_id))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn projection_invariants(ops in proptest::collection::vec(op(), 0..60)) {
        let s = build(&ops);
        let branch = active_branch(&s);
        let result = project_checked(&s, &branch);
        // Determinism: same log, same output.
        prop_assert_eq!(format!("{result:?}"), format!("{:?}", project_checked(&s, &branch)));

        let p = match result {
            Err(ProjectionError::MissingBoot { .. }) => {
                prop_assert!(!latest_marker_has_boot(&s, &branch));
                return Ok(());
            }
            Ok(p) => p,
        };
        prop_assert!(latest_marker_has_boot(&s, &branch));

        // Every call has a later result and every result an earlier call.
        let mut calls: HashMap<&str, usize> = HashMap::new();
        let mut results: HashMap<&str, usize> = HashMap::new();
        for (i, item) in p.items.iter().enumerate() {
            if let ItemKind::Message { message, content, edited } = &item.kind {
                if message.role == Role::Assistant {
                    // Assistant content shown as written.
                    prop_assert!(std::ptr::eq(*content, message.content.as_slice()));
                    prop_assert!(!edited);
                    let EntryKind::Message(original) = &s.entries[item.entry].kind else {
                        panic!("assistant item from a non-message entry");
                    };
                    prop_assert_eq!(&original.content, &message.content);
                }
                for b in content.iter() {
                    match b {
                        ContentBlock::ToolCall { id, .. } => { calls.insert(id, i); }
                        ContentBlock::ToolResult { call_id, .. } => { results.insert(call_id, i); }
                        _ => {}
                    }
                }
            }
        }
        for (id, at) in &calls {
            prop_assert!(results.get(id).is_some_and(|r| r > at), "call {} without its result", id);
        }
        for (id, at) in &results {
            prop_assert!(calls.get(id).is_some_and(|c| c < at), "result {} without its call", id);
        }

        // A window never shows an entry from before its boot (the system prompt may be older).
        if let Some(w) = &p.window {
            let boot = w.boot.expect("a checked projection has the boot");
            for item in &p.items {
                prop_assert!(item.entry >= boot, "entry {} shown from before boot {}", item.entry, boot);
            }
        }
        // Only entries of the branch are shown.
        for item in &p.items {
            prop_assert!(branch.contains(&item.entry));
        }
    }
}

#[test]
fn a_marker_without_boot_is_an_error_not_the_raw_history() {
    let s = build(&[
        Op::User,
        Op::Assistant,
        Op::Window { boot: false },
        Op::User,
    ]);
    let err = project_checked(&s, &active_branch(&s)).unwrap_err();
    assert_eq!(
        err,
        ProjectionError::MissingBoot {
            window_id: "w1".into(),
            marker: "e2".into()
        }
    );
    assert!(err.to_string().contains("refusing to send the raw history"));
}

#[test]
fn boot_folds_everything_before_it_but_the_system_prompt_and_tools() {
    let s = build(&[
        Op::System,
        Op::User,
        Op::Batch {
            calls: 2,
            answered: 2,
            grouped: false,
        },
        Op::Window { boot: true },
        Op::User,
    ]);
    let p = project_checked(&s, &active_branch(&s)).unwrap();
    assert_eq!(p.system.map(|(pos, _)| pos), Some(0));
    let shown: Vec<&str> = p
        .items
        .iter()
        .map(|it| s.entries[it.entry].id.as_str())
        .collect();
    assert_eq!(shown, vec!["e6", "e7"]);
}

#[test]
fn omitting_a_result_omits_its_call_and_the_batch() {
    // e0 user, e1 assistant with call1+call2, e2 result call1, e3 result call2, e4 edit omits e2.
    let mut s = build(&[
        Op::User,
        Op::Batch {
            calls: 2,
            answered: 2,
            grouped: false,
        },
    ]);
    let mut b = Builder {
        s: std::mem::take(&mut s),
        calls: 2,
        windows: 0,
    };
    b.push(EntryKind::ContextEdit {
        target: EntryId::new("e2"),
        replacement: None,
    });
    let s = b.s;
    let p = project_checked(&s, &active_branch(&s)).unwrap();
    let shown: Vec<&str> = p
        .items
        .iter()
        .map(|it| s.entries[it.entry].id.as_str())
        .collect();
    assert_eq!(shown, vec!["e0"]);
    assert_eq!(p.unpaired, vec![1, 3]);
}

#[test]
fn edits_never_rewrite_assistant_content_or_drop_a_result() {
    let mut b = Builder {
        s: Session::default(),
        calls: 0,
        windows: 0,
    };
    b.apply(&Op::Batch {
        calls: 1,
        answered: 1,
        grouped: false,
    });
    b.push(EntryKind::ContextEdit {
        target: EntryId::new("e0"),
        replacement: Some(vec![ContentBlock::text("x")]),
    });
    b.push(EntryKind::ContextEdit {
        target: EntryId::new("e1"),
        replacement: Some(vec![ContentBlock::text("x")]),
    });
    let s = b.s;
    let p = project_checked(&s, &active_branch(&s)).unwrap();
    assert_eq!(p.items.len(), 2);
    assert!(p
        .items
        .iter()
        .all(|it| matches!(it.kind, ItemKind::Message { edited: false, .. })));
}
