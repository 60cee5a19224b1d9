#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Properties of [`EntryKind::ArgsEdit`] in the projection: an args edit is applied exactly
//! when it changes nothing but the named arguments of named tool calls (each keeping its JSON
//! type); any other change (a thinking block or its signature, a text, a call's id or name, an
//! argument it does not name, a type, the blocks' number or order) leaves the message as
//! written. Either way the items, their tool ids and the pairing are those of the unedited log.

use ctxd_core::model::{ContentBlock, EditedArg, EntryKind, Message, Role, Session};
use ctxd_core::view::{project_checked, ItemKind};
use proptest::prelude::*;
use serde_json::{json, Value};

/// An assistant message: thinking (signed), a text, and `calls` tool calls with three
/// arguments each.
fn assistant(calls: usize, seed: u32) -> Vec<ContentBlock> {
    let mut content = vec![
        ContentBlock::Thinking {
            thinking: format!("think {seed}"),
            signature: Some(format!("sig{seed}")),
            redacted: false,
        },
        ContentBlock::text(format!("text {seed}")),
    ];
    for c in 0..calls {
        content.push(ContentBlock::ToolCall {
            id: format!("c{c}"),
            name: "Write".into(),
            arguments: json!({"file_path": format!("f{c}.py"), "content": "x".repeat(50 + c), "n": c}),
        });
    }
    content
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Change the named argument of a named call to another string: allowed.
    NamedString {
        call: usize,
    },
    /// Change a call's whole (string) arguments... of an object: refused (not a string).
    WholeOfObject {
        call: usize,
    },
    NamedTypeChange {
        call: usize,
    },
    UnnamedArg {
        call: usize,
    },
    UnnamedCall {
        call: usize,
    },
    Thinking,
    Signature,
    Text,
    CallId {
        call: usize,
    },
    CallName {
        call: usize,
    },
    DropBlock {
        at: usize,
    },
    AddBlock,
    Swap,
}

impl Mutation {
    fn allowed(&self) -> bool {
        matches!(self, Mutation::NamedString { .. })
    }
}

fn mutation(calls: usize) -> impl Strategy<Value = Mutation> {
    let c = 0..calls;
    prop_oneof![
        4 => c.clone().prop_map(|call| Mutation::NamedString { call }),
        1 => c.clone().prop_map(|call| Mutation::WholeOfObject { call }),
        1 => c.clone().prop_map(|call| Mutation::NamedTypeChange { call }),
        1 => c.clone().prop_map(|call| Mutation::UnnamedArg { call }),
        1 => c.clone().prop_map(|call| Mutation::UnnamedCall { call }),
        1 => Just(Mutation::Thinking),
        1 => Just(Mutation::Signature),
        1 => Just(Mutation::Text),
        1 => c.clone().prop_map(|call| Mutation::CallId { call }),
        1 => c.prop_map(|call| Mutation::CallName { call }),
        1 => (0..calls + 2).prop_map(|at| Mutation::DropBlock { at }),
        1 => Just(Mutation::AddBlock),
        1 => Just(Mutation::Swap),
    ]
}

fn call_args(content: &mut [ContentBlock], call: usize) -> &mut Value {
    match &mut content[2 + call] {
        ContentBlock::ToolCall { arguments, .. } => arguments,
        _ => unreachable!(),
    }
}

/// The replacement and the args the edit names, for `mutations` applied in order.
fn edit(original: &[ContentBlock], mutations: &[Mutation]) -> (Vec<ContentBlock>, Vec<EditedArg>) {
    let mut content = original.to_vec();
    let mut args = Vec::new();
    let named = |call: usize| EditedArg {
        call: format!("c{call}"),
        key: Some("content".into()),
    };
    for m in mutations {
        match m {
            Mutation::NamedString { call } => {
                call_args(&mut content, *call)["content"] = json!("[Wrote f.py — stripped]");
                args.push(named(*call));
            }
            Mutation::WholeOfObject { call } => {
                call_args(&mut content, *call)["content"] = json!("[stripped]");
                args.push(EditedArg {
                    call: format!("c{call}"),
                    key: None,
                });
            }
            Mutation::NamedTypeChange { call } => {
                call_args(&mut content, *call)["content"] = json!(["not", "a", "string"]);
                args.push(named(*call));
                // Last: a later mutation setting a string again would make it fit.
                return (content, args);
            }
            Mutation::UnnamedArg { call } => {
                call_args(&mut content, *call)["file_path"] = json!("elsewhere.py");
                args.push(named(*call));
            }
            Mutation::UnnamedCall { call } => {
                // An argument no mutation names.
                call_args(&mut content, *call)["n"] = json!(999);
            }
            Mutation::Thinking => {
                if let ContentBlock::Thinking { thinking, .. } = &mut content[0] {
                    thinking.push_str(" changed");
                }
            }
            Mutation::Signature => {
                if let ContentBlock::Thinking { signature, .. } = &mut content[0] {
                    *signature = Some("forged".into());
                }
            }
            Mutation::Text => content[1] = ContentBlock::text("other"),
            Mutation::CallId { call } => {
                if let ContentBlock::ToolCall { id, .. } = &mut content[2 + call] {
                    id.push('x');
                }
                args.push(named(*call));
            }
            Mutation::CallName { call } => {
                if let ContentBlock::ToolCall { name, .. } = &mut content[2 + call] {
                    *name = "Bash".into();
                }
                args.push(named(*call));
            }
            Mutation::DropBlock { at } => {
                content.remove(*at);
                return (content, args);
            }
            Mutation::AddBlock => {
                content.push(ContentBlock::text("more"));
                return (content, args);
            }
            Mutation::Swap => {
                content.swap(0, 1);
                return (content, args);
            }
        }
    }
    (content, args)
}

fn tool_ids(s: &Session) -> Vec<(usize, Vec<String>)> {
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    let p = project_checked(s, &branch).unwrap();
    p.items
        .iter()
        .map(|it| {
            let ids = it
                .to_message()
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::ToolCall { id, name, .. } => Some(format!("call {id} {name}")),
                    ContentBlock::ToolResult { call_id, .. } => Some(format!("result {call_id}")),
                    _ => None,
                })
                .collect();
            (it.entry, ids)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn an_args_edit_changes_only_named_arguments(
        seed in any::<u32>(),
        mutations in (1usize..4).prop_flat_map(|calls| proptest::collection::vec(mutation(calls), 1..4).prop_map(move |m| (calls, m))),
        answered_first in any::<bool>(),
    ) {
        let (calls, mutations) = mutations;
        let original = assistant(calls, seed);
        let mut s = Session::default();
        s.push_linear(EntryKind::Message(Message::text(Role::User, "go")));
        s.push_linear(EntryKind::Message(Message::new(Role::Assistant, original.clone())));
        let results: Vec<ContentBlock> = (0..calls)
            .map(|c| ContentBlock::ToolResult {
                call_id: format!("c{c}"),
                tool_name: None,
                content: vec![ContentBlock::text("ok")],
                is_error: false,
            })
            .collect();
        let (replacement, args) = edit(&original, &mutations);
        let edit_entry = EntryKind::ArgsEdit {
            target: s.entries[1].id.clone(),
            replacement: replacement.clone(),
            args,
        };
        // The edit may come before or after the results; the outcome is the same.
        if answered_first {
            s.push_linear(EntryKind::Message(Message::new(Role::User, results.clone())));
            s.push_linear(edit_entry);
        } else {
            s.push_linear(edit_entry);
            s.push_linear(EntryKind::Message(Message::new(Role::User, results.clone())));
        }
        let mut plain = Session::default();
        plain.push_linear(EntryKind::Message(Message::text(Role::User, "go")));
        plain.push_linear(EntryKind::Message(Message::new(Role::Assistant, original.clone())));
        plain.push_linear(EntryKind::Message(Message::new(Role::User, results)));

        let branch: Vec<usize> = (0..s.entries.len()).collect();
        let p = project_checked(&s, &branch).unwrap();
        let shown = match &p.items[1].kind {
            ItemKind::Message { content, edited, .. } => (content.to_vec(), *edited),
            ItemKind::Summary { .. } => unreachable!(),
        };
        let allowed = mutations.iter().all(Mutation::allowed);
        if allowed {
            prop_assert_eq!(&shown.0, &replacement);
            prop_assert!(shown.1);
        } else {
            prop_assert_eq!(&shown.0, &original, "refused: {:?}", mutations);
            prop_assert!(!shown.1);
        }
        // Thinking blocks and signatures are always as written.
        prop_assert_eq!(&shown.0[0], &original[0]);
        // Items and their tool ids (so the pairing) are the unedited log's.
        let ids = |s: &Session| tool_ids(s).into_iter().map(|(_, ids)| ids).collect::<Vec<_>>();
        prop_assert_eq!(ids(&s), ids(&plain));
    }
}

#[test]
fn an_args_edit_of_a_user_message_or_a_missing_target_is_ignored() {
    let mut s = Session::default();
    s.push_linear(EntryKind::Message(Message::text(Role::User, "go")));
    s.push_linear(EntryKind::ArgsEdit {
        target: s.entries[0].id.clone(),
        replacement: vec![ContentBlock::text("go")],
        args: vec![],
    });
    s.push_linear(EntryKind::ArgsEdit {
        target: ctxd_core::model::EntryId::new("nobody"),
        replacement: vec![],
        args: vec![],
    });
    let branch: Vec<usize> = (0..s.entries.len()).collect();
    let p = project_checked(&s, &branch).unwrap();
    assert_eq!(p.items.len(), 1);
    assert!(matches!(
        &p.items[0].kind,
        ItemKind::Message { edited: false, .. }
    ));
    // An old store's entry kinds still read; the new one round-trips.
    let json = serde_json::to_string(&s.entries[1].kind).unwrap();
    assert!(json.contains("\"type\":\"args_edit\""), "{json}");
    let back: EntryKind = serde_json::from_str(&json).unwrap();
    assert_eq!(back, s.entries[1].kind);
    let old: EntryKind =
        serde_json::from_str(r#"{"type":"context_edit","target":"a","replacement":null}"#).unwrap();
    assert!(matches!(old, EntryKind::ContextEdit { .. }));
}
