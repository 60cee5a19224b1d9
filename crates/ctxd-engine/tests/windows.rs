#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Windows and budget through the engine and a real (in-memory SQLite) store, on the path the
//! gateway takes: the session loaded into a [`SessionView`], the turn ended on it
//! ([`end_turn`]), its entries written to the store, the projection read as upstream parts.

use ctxd_core::budget::{GUIDANCE_KIND, WARNING_KIND};
use ctxd_core::model::{
    ContentBlock, Entry, EntryId, EntryKind, Message, Role, SessionMeta, Usage,
};
use ctxd_core::offered::ModelTools;
use ctxd_core::tokens::CharEstimate;
use ctxd_core::tree::active_branch;
use ctxd_core::view::ProjectionError;
use ctxd_engine::turn::{end_turn, upstream_parts, Part, SessionLog, SessionView};
use ctxd_engine::windows::{RepairOutcome, TurnEnd, TurnEndOutcome, WindowPolicy};
use ctxd_engine::{Caller, Engine};
use ctxd_store::{NewEntry, SqliteStore, Store};
use serde_json::{json, Value};
use std::sync::Arc;

struct Fixture {
    engine: Arc<Engine<SqliteStore>>,
    caller: Caller,
    n: usize,
}

impl Fixture {
    fn new() -> Self {
        let store = SqliteStore::open_in_memory().unwrap();
        let rec = store
            .open_session("t1", "sess-1", &SessionMeta::default())
            .unwrap();
        Fixture {
            engine: Arc::new(Engine::new(store)),
            caller: Caller {
                tenant: "t1".into(),
                session: Some(rec.id),
                session_key: Some("sess-1".into()),
                agent: Some("pi".into()),
                model: Some("claude-sonnet-4".into()),
                project: None,
                policy: None,
            },
            n: 0,
        }
    }

    fn append(&mut self, kind: EntryKind) {
        let id = self.caller.session.unwrap();
        let session = self.engine.store().load(id).unwrap();
        let parent = active_branch(&session)
            .last()
            .map(|&p| session.entries[p].id.clone());
        self.n += 1;
        let entry = Entry {
            id: EntryId::new(format!("u{}", self.n)),
            parent,
            timestamp: None,
            sidechain: false,
            kind,
        };
        self.engine
            .store()
            .append(id, &[NewEntry::new(entry)], None)
            .unwrap();
    }

    fn user(&mut self, text: &str) {
        self.append(EntryKind::Message(Message::text(Role::User, text)));
    }

    fn assistant(&mut self, prompt_tokens: u64, calls: &[(&str, &str)]) {
        let mut content = vec![ContentBlock::text("ok")];
        content.extend(calls.iter().map(|(id, name)| ContentBlock::ToolCall {
            id: (*id).into(),
            name: (*name).into(),
            arguments: json!({}),
        }));
        let mut m = Message::new(Role::Assistant, content);
        m.usage = Some(Usage {
            input: prompt_tokens,
            ..Usage::default()
        });
        self.append(EntryKind::Message(m));
    }

    fn result(&mut self, id: &str) {
        self.append(EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: id.into(),
                tool_name: None,
                content: vec![ContentBlock::text("done")],
                is_error: false,
            }],
        )));
    }

    fn turn_end(&self, end: TurnEnd) -> TurnEndOutcome {
        // The model's policy: a 200,000-token window, default thresholds.
        let policy = WindowPolicy::for_model(self.caller.model.as_deref());
        assert_eq!(policy.context_window, Some(200_000));
        self.turn_end_with(end, policy, 1_700_000_000_000)
    }

    /// The session as the gateway holds it.
    fn view(&self) -> SessionView {
        let id = self.caller.session.unwrap();
        let store = self.engine.store();
        SessionView {
            record: store.session(&self.caller.tenant, id).unwrap().unwrap(),
            log: SessionLog::new(store.load(id).unwrap()),
            savings: Default::default(),
        }
    }

    /// A turn boundary as the gateway ends one: on the session view, its entries then written.
    fn turn_end_with(&self, end: TurnEnd, policy: WindowPolicy, now_ms: i64) -> TurnEndOutcome {
        let mut view = self.view();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (outcome, entries) = runtime.block_on(end_turn(
            &self.engine,
            &self.caller,
            &mut view,
            &policy,
            end,
            &CharEstimate,
            now_ms,
        ));
        let batch: Vec<NewEntry> = entries.into_iter().map(NewEntry::new).collect();
        if !batch.is_empty() {
            self.engine
                .store()
                .append(view.record.id, &batch, None)
                .unwrap();
        }
        outcome
    }

    /// What the model is shown: the projection as upstream parts, for a request without
    /// elements of its own (every part is rendered).
    fn project(&self) -> Result<Vec<Message>, ProjectionError> {
        let view = self.view();
        let parts = upstream_parts(&view.log, &[])?.unwrap_or_default();
        Ok(parts
            .into_iter()
            .map(|p| match p {
                Part::Rendered(m) => m,
                Part::Client(i) => panic!("no client element {i}"),
            })
            .collect())
    }

    /// The history id of the window the model is in.
    fn window_id(&self) -> String {
        let view = self.view();
        let branch = view.log.branch();
        ctxd_core::windows::current_history_window_id(&view.log.session, &branch, view.record.id)
            .unwrap_or_default()
    }

    fn tool(&self, name: &str) -> Value {
        let out = self
            .engine
            .call_tool(&self.caller, name, &json!({}))
            .unwrap();
        assert!(!out.is_error, "{}", out.text);
        serde_json::from_str(&out.text).unwrap()
    }

    fn shown(&self) -> Vec<Message> {
        self.project().unwrap()
    }
}

#[test]
fn new_context_takes_effect_after_the_batch() {
    let mut f = Fixture::new();
    f.user("please refactor the parser");
    f.assistant(1_000, &[("c1", "new_context"), ("c2", "bash")]);
    assert_eq!(f.tool("new_context")["status"], "requested");
    f.result("c1");
    // c2 has no result yet: the batch is not over, nothing is committed.
    let out = f.turn_end(TurnEnd::Completed);
    assert_eq!(out.reset, None);
    f.result("c2");
    let out = f.turn_end(TurnEnd::Completed);
    let (window_id, reason) = out.reset.clone().unwrap();
    assert_eq!(reason, "requested");
    assert_eq!(out.appended.len(), 2);
    // The projection is the boot alone, and names the new window.
    let p = f.shown();
    assert_eq!(f.window_id(), window_id);
    assert_eq!(p.len(), 1);
    let ContentBlock::Text { text } = &p[0].content[0] else {
        panic!()
    };
    assert!(text.contains(&format!("Current context window id: {window_id}")));
    assert!(text.contains("Agent: pi (model: claude-sonnet-4)"));
    assert!(
        text.contains("please refactor the parser"),
        "the checkpoint carries the request"
    );
    // The request is consumed: the next boundary does nothing.
    assert_eq!(f.turn_end(TurnEnd::Completed).reset, None);
    // Window ids are stable: reading again gives the same.
    assert_eq!(f.window_id(), window_id);
}

#[test]
fn duplicate_requests_in_one_window_are_reported_and_abort_voids_them() {
    let mut f = Fixture::new();
    f.user("go");
    f.assistant(1_000, &[("c1", "wipe_memory"), ("c2", "new_context")]);
    assert_eq!(f.tool("wipe_memory")["status"], "already_pending");
    f.result("c1");
    f.result("c2");
    let out = f.turn_end(TurnEnd::Aborted);
    assert_eq!(out.reset, None);
    assert_eq!(out.appended.len(), 1, "only the abort record");
    assert_eq!(
        f.turn_end(TurnEnd::Completed).reset,
        None,
        "the aborted request is void"
    );
}

#[test]
fn budget_reminders_once_per_window_discarded_on_abort() {
    let mut f = Fixture::new();
    f.user("go");
    // 200,000 window, 160,000 used: 40,000 left <= 40,960 (reminder line).
    f.assistant(160_000, &[]);
    assert_eq!(f.turn_end(TurnEnd::Aborted).reminder, None);
    let out = f.turn_end(TurnEnd::Completed);
    assert_eq!(out.reminder, Some(GUIDANCE_KIND));
    assert_eq!(out.remaining, Some(40_000));
    assert_eq!(
        f.turn_end(TurnEnd::Completed).reminder,
        None,
        "once per window"
    );
    // get_context_remaining counts down to the warning line (28,672); the committed reminder
    // (about 110 estimated tokens) now counts as well.
    let shown = f.tool("get_context_remaining")["remaining_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        shown < 40_000 - 28_672 && shown > 40_000 - 28_672 - 300,
        "{shown}"
    );
    f.user("more");
    f.assistant(175_000, &[]);
    let out = f.turn_end(TurnEnd::Completed);
    assert_eq!(out.reminder, Some(WARNING_KIND));
    assert_eq!(out.reset, None);
    assert_eq!(f.turn_end(TurnEnd::Completed).reminder, None);
}

#[test]
fn threshold_reset_at_the_reserve_and_reminders_start_over() {
    let mut f = Fixture::new();
    f.user("go");
    f.assistant(190_000, &[]);
    let out = f.turn_end(TurnEnd::Completed);
    assert_eq!(out.reminder, Some(WARNING_KIND));
    assert_eq!(out.reset.as_ref().map(|r| r.1), Some("threshold"));
    // The warning precedes the marker: folded away, not carried into the new window.
    assert_eq!(f.shown().len(), 1);
    // In the new window the old usage does not count: far from any line.
    let out = f.turn_end(TurnEnd::Completed);
    assert_eq!((out.reminder, out.reset), (None, None));
    assert!(out.remaining.unwrap() > 190_000);
}

#[test]
fn overflow_recovery_once_per_failure_chain() {
    let mut f = Fixture::new();
    f.user("go");
    assert_eq!(
        f.turn_end(TurnEnd::Overflow).reset.map(|r| r.1),
        Some("overflow")
    );
    assert_eq!(f.turn_end(TurnEnd::Overflow).reset, None, "no loop");
    assert_eq!(f.turn_end(TurnEnd::Error).reset, None);
    f.assistant(1_000, &[]);
    assert_eq!(
        f.turn_end(TurnEnd::Overflow).reset.map(|r| r.1),
        Some("overflow")
    );
}

#[test]
fn a_marker_without_boot_blocks_the_request_and_is_repaired_narrowly() {
    let mut f = Fixture::new();
    f.user("go");
    f.append(EntryKind::WindowMarker {
        window_id: "w-x".into(),
        reason: "requested".into(),
    });
    f.append(EntryKind::Event {
        name: "label".into(),
        detail: None,
    });
    let err = f.project().unwrap_err();
    assert!(err.to_string().contains("w-x"));
    let RepairOutcome::Repaired { window_id, .. } = f
        .engine
        .repair_window(&f.caller, ModelTools::ALL, 0)
        .unwrap()
    else {
        panic!("expected a repair");
    };
    assert_eq!(window_id, "w-x");
    // The model is shown the history id of the window (the marker is entry u2).
    assert!(f.project().is_ok());
    assert_eq!(
        f.window_id(),
        ctxd_core::windows::history_window_id(f.caller.session.unwrap(), &EntryId::new("u2"))
    );
    assert_eq!(
        f.engine
            .repair_window(&f.caller, ModelTools::ALL, 0)
            .unwrap(),
        RepairOutcome::NotNeeded
    );

    // Later work after a bare marker: refused, nothing appended.
    f.append(EntryKind::WindowMarker {
        window_id: "w-y".into(),
        reason: "requested".into(),
    });
    f.user("work after the marker");
    let before = f
        .engine
        .store()
        .load(f.caller.session.unwrap())
        .unwrap()
        .entries
        .len();
    assert!(matches!(
        f.engine
            .repair_window(&f.caller, ModelTools::ALL, 0)
            .unwrap(),
        RepairOutcome::Refused { .. }
    ));
    let after = f
        .engine
        .store()
        .load(f.caller.session.unwrap())
        .unwrap()
        .entries
        .len();
    assert_eq!(before, after);
    // A new window is the way out.
    f.assistant(1_000, &[("c9", "new_context")]);
    f.result("c9");
    assert!(f.turn_end(TurnEnd::Completed).reset.is_some());
    assert!(f.project().is_ok());
}

#[test]
fn tools_are_registered_and_check_their_caller() {
    let names: Vec<&str> = ctxd_engine::tools::specs().iter().map(|s| s.name).collect();
    for name in ["new_context", "wipe_memory", "get_context_remaining"] {
        assert!(names.contains(&name));
    }
    let f = Fixture::new();
    let other = Caller {
        tenant: "t2".into(),
        ..f.caller.clone()
    };
    let out = f
        .engine
        .call_tool(&other, "get_context_remaining", &json!({}))
        .unwrap();
    assert!(out.is_error, "another tenant's session is not found");
    let none = Caller {
        session: None,
        ..f.caller.clone()
    };
    assert!(f
        .engine
        .call_tool(&none, "new_context", &json!({}))
        .is_err());
}

/// The reset happens whatever arguments the call carried (the core counts calls by name), so
/// the tool answers it without an error: stray arguments are ignored, not refused.
#[test]
fn reset_tools_ignore_stray_arguments_and_answer_the_reset_they_make() {
    let mut f = Fixture::new();
    f.user("go");
    f.assistant(1_000, &[("c1", "new_context")]);
    for name in ["new_context", "wipe_memory"] {
        for args in [
            json!({"reason": "checkpoint written"}),
            json!({}),
            json!(""),
            Value::Null,
        ] {
            let out = f.engine.call_tool(&f.caller, name, &args).unwrap();
            assert!(!out.is_error, "{name} {args}: {}", out.text);
            let answer: Value = serde_json::from_str(&out.text).unwrap();
            assert_eq!(answer["accepted"], true, "{name} {args}");
        }
    }
    let out = f
        .engine
        .call_tool(
            &f.caller,
            "get_context_remaining",
            &json!({"verbose": true}),
        )
        .unwrap();
    assert!(!out.is_error, "{}", out.text);
    f.result("c1");
    let (_, reason) = f.turn_end(TurnEnd::Completed).reset.unwrap();
    assert_eq!(
        reason, "requested",
        "the answered request is the reset made"
    );
}

/// Every tool a text the model reads names is one the registry serves, and one the model was
/// offered: with every tool offered, and with none (the gateway today).
#[test]
fn texts_name_only_offered_registry_tools() {
    use ctxd_core::budget::Reminder;
    use ctxd_core::offered::tool_like_words;
    let registry: Vec<&str> = ctxd_engine::tools::specs().iter().map(|s| s.name).collect();
    for name in ModelTools::ALL.names() {
        assert!(registry.contains(&name), "{name} is not in the registry");
    }
    let offers = [
        ModelTools::ALL,
        ModelTools::NONE,
        ModelTools {
            notes: true,
            ..ModelTools::NONE
        },
    ];
    for tools in offers {
        let offered = tools.names();
        let mut texts = Vec::new();
        for resets in [true, false] {
            texts.push(Reminder::Guidance { left: 5_000 }.text(tools, resets));
            texts.push(Reminder::Warning.text(tools, resets));
        }
        // A boot, through a window the engine opens.
        let mut f = Fixture::new();
        f.user("please refactor the parser");
        f.assistant(190_000, &[]);
        let mut policy = WindowPolicy::for_model(f.caller.model.as_deref());
        policy.tools = tools;
        let out = f.turn_end_with(TurnEnd::Completed, policy, 1);
        assert!(out.reset.is_some());
        let session = f.engine.store().load(f.caller.session.unwrap()).unwrap();
        for e in &session.entries {
            if let EntryKind::WindowBoot { message, .. } | EntryKind::Message(message) = &e.kind {
                if message.injected.is_some() {
                    texts.push(ctxd_core::text::message_text(message));
                }
            }
        }
        for text in &texts {
            for word in tool_like_words(text) {
                assert!(
                    offered.contains(&word) && registry.contains(&word),
                    "{word:?} named with {tools:?} in:\n{text}"
                );
            }
        }
    }
}

/// The ids a boot shows are the ids the history tools accept.
#[test]
fn boot_ids_are_history_ids() {
    let mut f = Fixture::new();
    f.user("please refactor the parser");
    f.assistant(190_000, &[]);
    let out = f.turn_end(TurnEnd::Completed);
    let (window_id, _) = out.reset.unwrap();
    let session = f.engine.store().load(f.caller.session.unwrap()).unwrap();
    let boot = session
        .entries
        .iter()
        .find_map(|e| match &e.kind {
            EntryKind::WindowBoot { message, .. } => Some(ctxd_core::text::message_text(message)),
            _ => None,
        })
        .unwrap();
    assert!(
        boot.contains(&format!("Current context window id: {window_id}")),
        "{boot}"
    );
    let windows = f
        .engine
        .call_tool(&f.caller, "history_list_windows", &json!({}))
        .unwrap();
    assert!(!windows.is_error, "{}", windows.text);
    assert!(windows.text.contains(&window_id), "{}", windows.text);
    // The checkpoint's request item id reads back through history_read_item.
    let item = boot
        .split("item ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .unwrap()
        .to_owned();
    let first_window = boot
        .split("- window ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap()
        .to_owned();
    let read = f
        .engine
        .call_tool(
            &f.caller,
            "history_read_item",
            &json!({"window_id": first_window, "item_id": item}),
        )
        .unwrap();
    assert!(!read.is_error, "{}", read.text);
    assert!(
        read.text.contains("please refactor the parser"),
        "{}",
        read.text
    );
}
