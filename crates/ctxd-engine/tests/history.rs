#![allow(clippy::unwrap_used, clippy::expect_used)]

//! History and recall through the engine and its tool registry, on a real (in-memory) store.

use ctxd_core::model::{
    Agent, ContentBlock, Entry, EntryId, EntryKind, Message, Role, SessionMeta,
};
use ctxd_engine::history::{ItemsQuery, ReadQuery, Scope, SearchMode, SearchQuery, WindowsQuery};
use ctxd_engine::{Caller, Engine};
use ctxd_store::{NewEntry, SqliteStore, Store};
use serde_json::{json, Value};

fn entry(id: &str, parent: Option<&str>, kind: EntryKind) -> NewEntry {
    NewEntry::new(Entry {
        timestamp: Some(format!("2025-01-01T00:00:{:02}Z", id.len())),
        ..ctxd_test_support::entry(id, parent, kind)
    })
}

fn text(role: Role, t: &str) -> EntryKind {
    EntryKind::Message(Message::text(role, t))
}

fn call(id: &str, name: &str, cmd: &str) -> EntryKind {
    EntryKind::Message(Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({ "cmd": cmd }),
        }],
    ))
}

fn result(id: &str, out: &str) -> EntryKind {
    EntryKind::Message(Message::new(
        Role::Tool,
        vec![ContentBlock::ToolResult {
            call_id: id.into(),
            tool_name: None,
            content: vec![ContentBlock::text(out)],
            is_error: false,
        }],
    ))
}

/// root: u1 → a1 (bash call) → t1 (result) → m (marker) → b (boot) → u2 → a2,
/// and an abandoned branch u1 → x ("abandoned idea"). Leaf a2.
fn setup() -> (Engine<SqliteStore>, Caller) {
    let engine = Engine::new(SqliteStore::open_in_memory().unwrap());
    let meta = SessionMeta {
        agent: Some(Agent::Pi),
        ..Default::default()
    };
    let s = engine
        .store()
        .open_session("tenant-a", "s1", &meta)
        .unwrap();
    let batch = vec![
        entry(
            "u1",
            None,
            text(Role::User, "Fix the TypeError in parser.rs"),
        ),
        entry("x", Some("u1"), text(Role::Assistant, "abandoned idea")),
        entry("a1", Some("u1"), call("c1", "bash", "cargo test")),
        entry(
            "t1",
            Some("a1"),
            result(
                "c1",
                &format!("error: TypeError at line 3\n{}", "log ".repeat(300)),
            ),
        ),
        entry(
            "m",
            Some("t1"),
            EntryKind::WindowMarker {
                window_id: "w2".into(),
                reason: "new_context".into(),
            },
        ),
        entry(
            "b",
            Some("m"),
            EntryKind::WindowBoot {
                window_id: "w2".into(),
                message: Message::text(Role::User, "Boot: notes index and checkpoint"),
            },
        ),
        entry("u2", Some("b"), text(Role::User, "now write the docs")),
        entry(
            "a2",
            Some("u2"),
            text(Role::Assistant, "Docs written; the typeerror is gone"),
        ),
    ];
    engine
        .store()
        .append(s.id, &batch, Some(&EntryId::new("a2")))
        .unwrap();
    let caller = Caller {
        tenant: "tenant-a".into(),
        session: Some(s.id),
        ..Default::default()
    };
    (engine, caller)
}

fn tool(engine: &Engine<SqliteStore>, caller: &Caller, name: &str, args: Value) -> (Value, bool) {
    let out = engine.call_tool(caller, name, &args).unwrap();
    let v = serde_json::from_str(&out.text).unwrap_or(Value::String(out.text.clone()));
    (v, out.is_error)
}

#[test]
fn windows_split_at_markers_on_the_active_branch() {
    let (engine, caller) = setup();
    let page = engine
        .history_list_windows(&caller, &WindowsQuery::default())
        .unwrap();
    assert_eq!(page.total, 2);
    let w = &page.windows;
    assert_eq!(
        (w[0].opened_by, w[0].items),
        ("root", 3),
        "u1, a1, t1 (x is off the branch)"
    );
    assert_eq!(
        (w[1].opened_by, w[1].reason.as_deref(), w[1].items),
        ("window_marker", Some("new_context"), 3)
    );
    assert!(w[0].window_id.starts_with("w_") && w[0].window_id != w[1].window_id);
    let recent = engine
        .history_list_windows(
            &caller,
            &WindowsQuery {
                recent_first: true,
                limit: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(recent.windows.len(), 1);
    assert_eq!(recent.windows[0].window_id, w[1].window_id);
    let all = engine
        .history_list_windows(
            &caller,
            &WindowsQuery {
                scope: Scope {
                    all_branches: true,
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(all.windows[0].items, 4, "with the abandoned branch");
}

#[test]
fn items_filter_and_preview() {
    let (engine, caller) = setup();
    let all = engine
        .history_list_items(&caller, &ItemsQuery::default())
        .unwrap();
    let ids: Vec<&str> = all.items.iter().map(|i| i.entry_id.as_str()).collect();
    assert_eq!(ids, vec!["u1", "a1", "t1", "b", "u2", "a2"]);
    assert_eq!(all.items[3].kind, "boot");
    assert!(!all.more);

    let q = |f: fn(&mut ItemsQuery)| {
        let mut q = ItemsQuery::default();
        f(&mut q);
        engine.history_list_items(&caller, &q).unwrap()
    };
    let bash = q(|q| q.tool_name = Some("bash".into()));
    assert_eq!(
        bash.items
            .iter()
            .map(|i| i.entry_id.as_str())
            .collect::<Vec<_>>(),
        vec!["a1", "t1"],
        "the result is named from its call"
    );
    let users = q(|q| q.role = Some("user".into()));
    assert_eq!(users.items.len(), 3);
    let newest = q(|q| {
        q.recent_first = true;
        q.limit = Some(2);
    });
    assert_eq!(
        newest
            .items
            .iter()
            .map(|i| i.entry_id.as_str())
            .collect::<Vec<_>>(),
        vec!["a2", "u2"]
    );
    assert!(newest.more);
    let short = q(|q| q.max_chars_per_item = Some(10));
    let t1 = short.items.iter().find(|i| i.entry_id == "t1").unwrap();
    assert_eq!((t1.text.as_str(), t1.truncated), ("error: Typ", true));
    assert!(t1.chars > 1000);

    let w2 = all.items[3].window_id.clone();
    let mut in_w2 = ItemsQuery {
        window_id: Some(w2),
        ..Default::default()
    };
    let page = engine.history_list_items(&caller, &in_w2).unwrap();
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.entry_id.as_str())
            .collect::<Vec<_>>(),
        vec!["b", "u2", "a2"]
    );
    in_w2.window_id = Some("w_0000000000000000".into());
    let err = engine
        .history_list_items(&caller, &in_w2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no window w_0000000000000000"), "{err}");

    let sub = q(|q| {
        q.scope = Scope {
            agent_name: Some("pi".into()),
            all_branches: true,
        };
    });
    assert_eq!(sub.items.len(), 7);
    let err = engine
        .history_list_items(
            &caller,
            &ItemsQuery {
                scope: Scope {
                    agent_name: Some("codex".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"main\" or \"subagent\""), "{err}");
}

#[test]
fn ids_are_stable_when_entries_are_appended_and_the_branch_moves() {
    let (engine, caller) = setup();
    let before = engine
        .history_list_items(&caller, &ItemsQuery::default())
        .unwrap();
    let sid = caller.session.unwrap();
    engine
        .store()
        .append(
            sid,
            &[entry("u3", Some("a2"), text(Role::User, "more"))],
            None,
        )
        .unwrap();
    let after = engine
        .history_list_items(&caller, &ItemsQuery::default())
        .unwrap();
    assert_eq!(after.items.len(), before.items.len() + 1);
    for (a, b) in before.items.iter().zip(&after.items) {
        assert_eq!((&a.item_id, &a.window_id), (&b.item_id, &b.window_id));
    }
    // Move the leaf to the abandoned branch: history follows it.
    engine.store().set_leaf(sid, &EntryId::new("x")).unwrap();
    let page = engine
        .history_list_items(&caller, &ItemsQuery::default())
        .unwrap();
    assert_eq!(
        page.items
            .iter()
            .map(|i| i.entry_id.as_str())
            .collect::<Vec<_>>(),
        vec!["u1", "x"]
    );
    assert_eq!(page.items[0].item_id, before.items[0].item_id);
}

#[test]
fn read_item_pages_by_characters() {
    let (engine, caller) = setup();
    let items = engine
        .history_list_items(&caller, &ItemsQuery::default())
        .unwrap();
    let t1 = items.items.iter().find(|i| i.entry_id == "t1").unwrap();
    let mut q = ReadQuery {
        window_id: Some(t1.window_id.clone()),
        item_id: t1.item_id.clone(),
        offset_chars: None,
        limit_chars: Some(500),
    };
    let mut got = String::new();
    let mut pages = 0;
    loop {
        let page = engine.history_read_item(&caller, &q).unwrap();
        got.push_str(&page.text);
        pages += 1;
        match page.next_offset {
            Some(n) => q.offset_chars = Some(n),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(got.chars().count(), t1.chars);
    assert!(got.starts_with("error: TypeError"));

    let other_window = items
        .items
        .iter()
        .find(|i| i.entry_id == "u2")
        .unwrap()
        .window_id
        .clone();
    let err = engine
        .history_read_item(
            &caller,
            &ReadQuery {
                window_id: Some(other_window),
                ..q.clone()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not in window"), "{err}");
    let err = engine
        .history_read_item(
            &caller,
            &ReadQuery {
                offset_chars: Some(1_000_000),
                ..q.clone()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("past the end"), "{err}");
    let err = engine
        .history_read_item(
            &caller,
            &ReadQuery {
                item_id: "i_0123".into(),
                ..q
            },
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("not an id ctxd gave"), "{err}");
}

/// Item ids are unique in a session: the id alone reads the item (the window is optional,
/// and checked when given), through the registry as the model calls it.
#[test]
fn read_item_by_its_id_alone() {
    let (engine, caller) = setup();
    let items = engine
        .history_list_items(&caller, &ItemsQuery::default())
        .unwrap();
    let u2 = items.items.iter().find(|i| i.entry_id == "u2").unwrap();
    let (read, err) = tool(
        &engine,
        &caller,
        "history_read_item",
        json!({"item_id": u2.item_id}),
    );
    assert!(!err, "{read}");
    assert_eq!(read["entry_id"], "u2");
    assert_eq!(read["window_id"], json!(u2.window_id), "the window found");
    let (read, err) = tool(
        &engine,
        &caller,
        "history_read_item",
        json!({"item_id": u2.item_id, "window_id": u2.window_id}),
    );
    assert!(!err, "{read}");
    assert_eq!(read["entry_id"], "u2");
    let t1 = items.items.iter().find(|i| i.entry_id == "t1").unwrap();
    assert_ne!(t1.window_id, u2.window_id);
    let (read, err) = tool(
        &engine,
        &caller,
        "history_read_item",
        json!({"item_id": u2.item_id, "window_id": t1.window_id}),
    );
    assert!(err, "a window given is checked: {read}");
    assert!(
        read.as_str().unwrap().contains("is not in window"),
        "{read}"
    );
    let spec = ctxd_engine::tools::specs()
        .into_iter()
        .find(|s| s.name == "history_read_item")
        .unwrap();
    assert_eq!(spec.parameters["required"], json!(["item_id"]));
}

#[test]
fn search_literal_is_case_sensitive_and_ranked_is_not() {
    let (engine, caller) = setup();
    let search = |query: &str, mode: SearchMode, f: fn(&mut ItemsQuery)| {
        let mut filters = ItemsQuery::default();
        f(&mut filters);
        engine
            .history_search_contents(
                &caller,
                &SearchQuery {
                    query: query.into(),
                    mode,
                    filters,
                },
            )
            .unwrap()
    };
    let hits = search("TypeError", SearchMode::Literal, |_| {});
    assert_eq!(
        hits.hits
            .iter()
            .map(|h| h.entry_id.as_str())
            .collect::<Vec<_>>(),
        vec!["u1", "t1"]
    );
    assert!(hits.hits[1].excerpt.contains("error: TypeError at line 3"));
    let lower = search("typeerror", SearchMode::Literal, |_| {});
    assert_eq!(
        lower
            .hits
            .iter()
            .map(|h| h.entry_id.as_str())
            .collect::<Vec<_>>(),
        vec!["a2"]
    );
    // A substring inside a word (trigram index), and a query shorter than a trigram (scan).
    let inner = search("ypeErr", SearchMode::Literal, |q| q.recent_first = true);
    assert_eq!(
        inner
            .hits
            .iter()
            .map(|h| h.entry_id.as_str())
            .collect::<Vec<_>>(),
        vec!["t1", "u1"]
    );
    let two = search("rs", SearchMode::Literal, |_| {});
    assert_eq!(two.hits[0].entry_id, "u1");
    // Off the active branch only with all_branches.
    assert!(search("abandoned", SearchMode::Literal, |_| {})
        .hits
        .is_empty());
    assert_eq!(
        search("abandoned", SearchMode::Literal, |q| q.scope.all_branches =
            true)
        .hits
        .len(),
        1
    );
    // Filters apply to search.
    let tool_only = search("TypeError", SearchMode::Literal, |q| {
        q.role = Some("tool".into())
    });
    assert_eq!(tool_only.hits.len(), 1);

    let ranked = search("TYPEERROR", SearchMode::Ranked, |_| {});
    assert_eq!(ranked.hits.len(), 3);
    assert!(ranked.hits.iter().all(|h| h.score.is_some()));
    assert!(ranked.hits.windows(2).all(|w| w[0].score >= w[1].score));
    let both = search("docs typeerror", SearchMode::Ranked, |_| {});
    assert_eq!(
        both.hits
            .iter()
            .map(|h| h.entry_id.as_str())
            .collect::<Vec<_>>(),
        vec!["a2"]
    );
    assert!(both.hits[0].excerpt.contains("Docs written"));
}

#[test]
fn a_tenant_cannot_read_another_tenants_items_even_with_their_ids() {
    let (engine, caller_a) = setup();
    let items = engine
        .history_list_items(&caller_a, &ItemsQuery::default())
        .unwrap();
    let target = &items.items[0];
    // Tenant B has a session with an entry of the same id.
    let s_b = engine
        .store()
        .open_session("tenant-b", "s1", &SessionMeta::default())
        .unwrap();
    engine
        .store()
        .append(
            s_b.id,
            &[entry("u1", None, text(Role::User, "tenant b's own"))],
            None,
        )
        .unwrap();
    let caller_b = Caller {
        tenant: "tenant-b".into(),
        session: Some(s_b.id),
        ..Default::default()
    };
    let read = ReadQuery {
        window_id: Some(target.window_id.clone()),
        item_id: target.item_id.clone(),
        offset_chars: None,
        limit_chars: None,
    };
    let err = engine
        .history_read_item(&caller_b, &read)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no window"), "{err}");
    // Same entry id, other session: another item id.
    let b_items = engine
        .history_list_items(&caller_b, &ItemsQuery::default())
        .unwrap();
    assert_ne!(b_items.items[0].item_id, target.item_id);
    let err = engine
        .history_read_item(
            &caller_b,
            &ReadQuery {
                window_id: Some(b_items.items[0].window_id.clone()),
                ..read.clone()
            },
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("no item"), "{err}");
    // Naming tenant A's session as tenant B gets nothing either.
    let spoof = Caller {
        session: caller_a.session,
        ..caller_b.clone()
    };
    let err = engine
        .history_read_item(&spoof, &read)
        .unwrap_err()
        .to_string();
    assert!(err.contains("no session"), "{err}");
    let (out, is_error) = tool(&engine, &spoof, "recall", json!({"entryId": "u1"}));
    assert!(is_error && out.as_str().unwrap().contains("no session"));
    let (out, _) = tool(&engine, &caller_b, "recall", json!({"entryId": "u1"}));
    assert_eq!(out.as_str().unwrap(), "tenant b's own");
}

#[test]
fn tools_run_through_the_registry_with_clear_errors() {
    let (engine, caller) = setup();
    let names: Vec<&str> = ctxd_engine::tools::specs().iter().map(|s| s.name).collect();
    for n in [
        "history_list_windows",
        "history_list_items",
        "history_read_item",
        "history_search_contents",
        "recall",
    ] {
        assert!(names.contains(&n), "{n} missing");
    }
    let (windows, err) = tool(&engine, &caller, "history_list_windows", json!({}));
    assert!(!err);
    assert_eq!(windows["windows"].as_array().unwrap().len(), 2);
    let (items, _) = tool(
        &engine,
        &caller,
        "history_list_items",
        json!({"tool_name": "bash", "max_chars_per_item": 5}),
    );
    let first = &items["items"][0];
    let (read, err) = tool(
        &engine,
        &caller,
        "history_read_item",
        json!({"window_id": first["window_id"], "item_id": first["item_id"], "limit_chars": 4}),
    );
    assert!(!err);
    assert_eq!(read["text"], "bash");
    assert_eq!(read["next_offset"], 4);
    let (hits, _) = tool(
        &engine,
        &caller,
        "history_search_contents",
        json!({"query": "docs", "mode": "ranked"}),
    );
    let found: Vec<&str> = hits["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["entry_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        found,
        vec!["u2", "a2"],
        "the shorter text ranks first (bm25)"
    );

    for (name, args, needle) in [
        (
            "history_list_items",
            json!({"limit": 0}),
            "limit must be at least 1",
        ),
        (
            "history_list_items",
            json!({"limit": 100000}),
            "over the maximum",
        ),
        (
            "history_list_items",
            json!({"limit": "ten"}),
            "history_list_items: limit: invalid type: string \"ten\", expected a whole number from 0",
        ),
        (
            "history_list_items",
            json!({"role": "robot"}),
            "role \"robot\" is not one of",
        ),
        (
            "history_list_items",
            json!({"windw_id": "w_"}),
            "history_list_items: unknown field `windw_id`, expected one of `agent_name`, `window_id`, `role`, `tool_name`, `recent_first`, `limit`, `all_branches`, `max_chars_per_item`",
        ),
        (
            "history_read_item",
            json!({"window_id": "w_0000000000000000"}),
            "history_read_item: missing field `item_id`",
        ),
        (
            "history_search_contents",
            json!({}),
            "history_search_contents: missing field `query`",
        ),
        (
            "history_search_contents",
            json!({"query": ""}),
            "query is empty",
        ),
        (
            "history_search_contents",
            json!({"query": "x", "mode": "fuzzy"}),
            "history_search_contents: mode: unknown variant `fuzzy`, expected `literal` or `ranked`",
        ),
        (
            "history_search_contents",
            json!({"query": "!!", "mode": "ranked"}),
            "no word to rank by",
        ),
        ("history_list_windows", json!([1]), "must be a JSON object"),
        ("recall", json!({}), "recall: missing field `entryId`"),
        ("recall", json!({"entryId": ""}), "entryId is empty"),
        (
            "recall",
            json!({"entryId": "t1", "offset": "x"}),
            "recall: offset: invalid type: string \"x\", expected a whole number",
        ),
        (
            "recall",
            json!({"entryId": "t1", "pattern": "a".repeat(501)}),
            "limit is 500",
        ),
        (
            "recall",
            json!({"entryId": "t1", "pattern": "(x"}),
            "not a valid regex",
        ),
        (
            "recall",
            json!({"entryId": "t1", "offset": -1}),
            "offset must be a line number",
        ),
        (
            "recall",
            json!({"entryId": "nope"}),
            "No entry \"nope\" in this session",
        ),
        (
            "recall",
            json!({"entryId": "t1", "extra": 1}),
            "recall: unknown field `extra`, expected one of `entryId`, `pattern`, `offset`, `limit`",
        ),
    ] {
        let out = engine.call_tool(&caller, name, &args).unwrap();
        assert!(out.is_error, "{name} {args}: {}", out.text);
        assert!(out.text.contains(needle), "{name} {args}: {}", out.text);
    }
    let no_session = Caller {
        session: None,
        ..caller
    };
    assert!(engine
        .call_tool(&no_session, "history_list_items", &json!({}))
        .is_err());
}

#[test]
fn recall_reads_the_raw_entry_and_omitted_exchanges() {
    let (engine, caller) = setup();
    let sid = caller.session.unwrap();
    // Replace t1 in context and omit the exchange of u1 (a1 and t1).
    engine
        .store()
        .append(
            sid,
            &[
                entry(
                    "e1",
                    Some("a2"),
                    EntryKind::ContextEdit {
                        target: EntryId::new("t1"),
                        replacement: Some(vec![ContentBlock::text("stub")]),
                    },
                ),
                entry(
                    "e2",
                    Some("e1"),
                    EntryKind::ContextEdit {
                        target: EntryId::new("a1"),
                        replacement: None,
                    },
                ),
                entry(
                    "e3",
                    Some("e2"),
                    EntryKind::ContextEdit {
                        target: EntryId::new("t1"),
                        replacement: None,
                    },
                ),
            ],
            None,
        )
        .unwrap();
    let (out, err) = tool(&engine, &caller, "recall", json!({"entryId": "t1"}));
    assert!(!err);
    let out = out.as_str().unwrap();
    assert!(
        out.starts_with("error: TypeError at line 3\nlog log"),
        "the raw output, not the stub: {out}"
    );
    let (out, _) = tool(
        &engine,
        &caller,
        "recall",
        json!({"entryId": "t1", "pattern": "^error"}),
    );
    assert_eq!(out.as_str().unwrap(), "1: error: TypeError at line 3");
    let (out, _) = tool(&engine, &caller, "recall", json!({"entryId": "u1"}));
    let out = out.as_str().unwrap();
    assert!(out.starts_with("## user\nFix the TypeError in parser.rs\n\n## assistant\n[tool call] bash {\"cmd\":\"cargo test\"}\n\n## tool result (bash)\nerror: TypeError"), "{out}");
    // A prompt whose exchange was not omitted is just its text.
    let (out, _) = tool(&engine, &caller, "recall", json!({"entryId": "u2"}));
    assert_eq!(out.as_str().unwrap(), "now write the docs");
}

/// Random trees, appended in random batches, with random leaves: the items history lists are
/// exactly the items of `tree::active_branch`, and each item's window is the nearest marker (or
/// root) above it.
#[test]
fn lanes_match_the_tree_walk_on_random_trees() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rand = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for round in 0..40 {
        let engine = Engine::new(SqliteStore::open_in_memory().unwrap());
        let s = engine
            .store()
            .open_session("", "r", &SessionMeta::default())
            .unwrap();
        let caller = Caller {
            session: Some(s.id),
            ..Default::default()
        };
        let mut session = ctxd_core::model::Session::default();
        let size = 5 + rand(60);
        let mut pending = Vec::new();
        for i in 0..size {
            let parent = match rand(10) {
                0 => None,
                1..=3 if i > 0 => Some(format!("n{}", rand(i))),
                _ if i > 0 => Some(format!("n{}", i - 1)),
                _ => None,
            };
            let kind = if rand(8) == 0 {
                EntryKind::WindowMarker {
                    window_id: format!("w{i}"),
                    reason: "r".into(),
                }
            } else {
                text(Role::User, &format!("item {i}"))
            };
            let e = Entry {
                id: EntryId::new(format!("n{i}")),
                parent: parent.map(EntryId::new),
                timestamp: None,
                sidechain: false,
                kind,
            };
            session.entries.push(e.clone());
            pending.push(NewEntry::new(e));
            if rand(4) == 0 || i + 1 == size {
                engine.store().append(s.id, &pending, None).unwrap();
                pending.clear();
                // Read (and so index) between batches sometimes.
                if rand(2) == 0 {
                    engine
                        .history_list_items(&caller, &ItemsQuery::default())
                        .unwrap();
                }
            }
        }
        for _ in 0..3 {
            let leaf = format!("n{}", rand(size));
            engine.store().set_leaf(s.id, &EntryId::new(&leaf)).unwrap();
            session.leaf = Some(EntryId::new(&leaf));
            let branch = ctxd_core::tree::active_branch(&session);
            let expected: Vec<String> = branch
                .iter()
                .map(|&p| &session.entries[p])
                .filter(|e| matches!(e.kind, EntryKind::Message(_)))
                .map(|e| e.id.0.clone())
                .collect();
            let q = ItemsQuery {
                limit: Some(500),
                ..Default::default()
            };
            let page = engine.history_list_items(&caller, &q).unwrap();
            let got: Vec<String> = page.items.iter().map(|i| i.entry_id.clone()).collect();
            assert_eq!(got, expected, "round {round}, leaf {leaf}");
            // Windows: the nearest marker above, else the branch root.
            let mut opener = None;
            let mut want_window = std::collections::HashMap::new();
            for &p in &branch {
                let e = &session.entries[p];
                if opener.is_none()
                    || e.parent.is_none()
                    || matches!(e.kind, EntryKind::WindowMarker { .. })
                {
                    opener = Some(e.id.0.clone());
                }
                want_window.insert(e.id.0.clone(), opener.clone().unwrap());
            }
            for item in &page.items {
                let opener = &want_window[&item.entry_id];
                let id =
                    ctxd_core::history::window_id(ctxd_core::history::window_key(s.id, opener));
                assert_eq!(
                    item.window_id, id,
                    "round {round}: window of {}",
                    item.entry_id
                );
            }
        }
    }
}
