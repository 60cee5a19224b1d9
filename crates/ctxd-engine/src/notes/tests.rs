use serde_json::json;

use ctxd_core::notes::{HomeScope, MAX_NOTE_BYTES};
use ctxd_store::{NotesStore, SqliteStore};

use crate::{Caller, Engine};

fn engine() -> Engine<SqliteStore> {
    Engine::new(SqliteStore::open_in_memory().unwrap())
}

fn caller() -> Caller {
    Caller {
        tenant: "t1".into(),
        session: None,
        session_key: Some("pi:s1".into()),
        agent: Some("pi".into()),
        model: Some("claude-sonnet-4".into()),
        project: Some("/repo".into()),
        policy: None,
    }
}

fn call(
    e: &Engine<SqliteStore>,
    c: &Caller,
    name: &str,
    args: serde_json::Value,
) -> (String, bool) {
    let out = e.call_tool(c, name, &args).unwrap();
    (out.text, out.is_error)
}

fn ok(e: &Engine<SqliteStore>, name: &str, args: serde_json::Value) -> String {
    let (text, is_error) = call(e, &caller(), name, args);
    assert!(!is_error, "{name}: {text}");
    text
}

fn err(e: &Engine<SqliteStore>, name: &str, args: serde_json::Value) -> String {
    let (text, is_error) = call(e, &caller(), name, args);
    assert!(is_error, "{name} should fail: {text}");
    text
}

#[test]
fn specs_name_every_tool_with_the_seed_arguments() {
    let specs = super::specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "notes_write",
            "notes_append",
            "notes_read",
            "notes_list",
            "notes_search",
            "notes_delete",
            "notes_rename",
            "notes_mark_stale"
        ]
    );
    let props = |n: &str| -> Vec<String> {
        let s = specs.iter().find(|s| s.name == n).unwrap();
        let mut v: Vec<String> = s.parameters["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    };
    assert_eq!(props("notes_read"), ["path", "start_line", "stop_line"]);
    assert_eq!(
        props("notes_list"),
        ["file_order", "file_order_by", "max_results", "prefix"]
    );
    assert_eq!(props("notes_search"), ["max_results", "prefix", "query"]);
    assert_eq!(props("notes_write"), ["path", "text"]);
    assert!(crate::tools::specs()
        .iter()
        .any(|s| s.name == "notes_write"));
}

#[test]
fn write_read_append_through_the_registry() {
    let e = engine();
    assert_eq!(
        ok(
            &e,
            "notes_write",
            json!({"path": "plan.md", "text": "one\ntwo\nthree\n"})
        ),
        "Wrote plan.md (3 lines, 14 bytes; new note)."
    );
    assert_eq!(
        ok(
            &e,
            "notes_read",
            json!({"path": "plan.md", "start_line": -2})
        ),
        "plan.md (lines 2-3 of 3):\ntwo\nthree\n"
    );
    assert_eq!(
        ok(
            &e,
            "notes_append",
            json!({"path": "plan.md", "text": "four"})
        ),
        "Appended 4 bytes to plan.md (now 4 lines, 18 bytes)."
    );
    assert!(ok(&e, "notes_write", json!({"path": "plan.md", "text": "new"})).contains("replaced"));
    let past = err(
        &e,
        "notes_read",
        json!({"path": "plan.md", "start_line": 5}),
    );
    assert_eq!(
        past,
        "note plan.md: start_line 5 is past the end: the note has 1 line"
    );
    assert_eq!(
        err(&e, "notes_read", json!({"path": "nope.md"})),
        "no note nope.md"
    );
    assert_eq!(
        err(&e, "notes_write", json!({"path": "a.md"})),
        "notes_write: missing field `text`"
    );
    assert_eq!(
        err(&e, "notes_read", json!({"path": 3})),
        "notes_read: path: invalid type: integer `3`, expected a string"
    );
}

#[test]
fn arguments_are_checked_by_their_type() {
    let e = engine();
    ok(
        &e,
        "notes_write",
        json!({"path": "a.md", "text": "one\ntwo\n"}),
    );
    assert_eq!(
        err(
            &e,
            "notes_write",
            json!({"path": "a.md", "text": "x", "mode": "w"})
        ),
        "notes_write: unknown field `mode`, expected `path` or `text`"
    );
    // A whole number written as a float reads as the number; a fraction is refused.
    assert_eq!(
        ok(&e, "notes_read", json!({"path": "a.md", "start_line": 2.0})),
        "a.md (lines 2-2 of 2):\ntwo\n"
    );
    assert_eq!(
        err(&e, "notes_read", json!({"path": "a.md", "stop_line": 1.5})),
        "notes_read: stop_line: invalid value: floating point `1.5`, expected a whole number"
    );
    assert_eq!(
        err(&e, "notes_list", json!({"max_results": "ten"})),
        "notes_list: max_results: invalid type: string \"ten\", expected a whole number"
    );
    // The orders are the core's, aliases included; null is no argument.
    assert!(ok(
        &e,
        "notes_list",
        json!({"file_order": "desc", "prefix": null})
    )
    .contains("a.md"));
    assert!(err(&e, "notes_list", json!({"file_order": "up"})).contains("file_order \"up\""));
    assert_eq!(
        err(&e, "notes_delete", json!(["a.md"])),
        "notes_delete: arguments must be a JSON object"
    );
}

#[test]
fn homes_resolve_and_listings_show_resolved_names() {
    let e = engine();
    ok(
        &e,
        "notes_write",
        json!({"path": "@self/MAP.md", "text": "map"}),
    );
    ok(
        &e,
        "notes_write",
        json!({"path": "@model/tips.md", "text": "tip"}),
    );
    ok(
        &e,
        "notes_write",
        json!({"path": "@project/todo.md", "text": "x"}),
    );
    ok(
        &e,
        "notes_write",
        json!({"path": "@human/prefs.md", "text": "y"}),
    );
    ok(&e, "notes_write", json!({"path": "mine.md", "text": "z"}));
    ok(
        &e,
        "notes_write",
        json!({"path": "@agents/codex/theirs.md", "text": "w"}),
    );
    let all = ok(&e, "notes_list", json!({}));
    assert!(
        all.starts_with("5 notes in your homes (by name, ascending):"),
        "{all}"
    );
    for address in [
        "@agents/pi/MAP.md",
        "@models/claude-sonnet-4/tips.md",
        "@project/todo.md",
        "@human/prefs.md",
        "- mine.md",
    ] {
        assert!(all.contains(address), "{address} in {all}");
    }
    assert!(
        !all.contains("codex"),
        "another agent's home is not one of yours"
    );
    let codex = ok(&e, "notes_list", json!({"prefix": "@agents/codex/"}));
    assert!(codex.contains("@agents/codex/theirs.md"), "{codex}");
    // The same note by its resolved name.
    assert_eq!(
        ok(&e, "notes_read", json!({"path": "@agents/pi/MAP.md"})),
        "@agents/pi/MAP.md (lines 1-1 of 1):\nmap"
    );
    // Another agent cannot reach pi's @self.
    let other = Caller {
        agent: Some("codex".into()),
        ..caller()
    };
    let (text, _) = call(&e, &other, "notes_read", json!({"path": "@self/MAP.md"}));
    assert_eq!(text, "no note @agents/codex/MAP.md");
}

#[test]
fn list_order_limit_and_prefix() {
    let e = engine();
    for name in ["b.md", "a.md", "plans/c.md", "plans/d.md"] {
        ok(&e, "notes_write", json!({"path": name, "text": name}));
    }
    let list = ok(
        &e,
        "notes_list",
        json!({"prefix": "plans/", "file_order_by": "name", "file_order": "descending"}),
    );
    assert!(
        list.starts_with(
            "2 notes in this session under plans/ (by name, descending):\n- plans/d.md"
        ),
        "{list}"
    );
    let one = ok(&e, "notes_list", json!({"prefix": "", "max_results": 1}));
    assert!(
        one.contains("- a.md") && one.contains("More notes match"),
        "{one}"
    );
    assert!(err(&e, "notes_list", json!({"file_order_by": "size"}))
        .contains("name, created_at or updated_at"));
    assert!(err(&e, "notes_list", json!({"max_results": 0})).contains("from 1 to 1000"));
    assert!(err(&e, "notes_list", json!({"prefix": "@nowhere/"})).contains("unknown home @nowhere"));
}

#[test]
fn search_across_homes_with_line_numbers() {
    let e = engine();
    ok(
        &e,
        "notes_write",
        json!({"path": "a.md", "text": "x\nTODO one\ny\nTODO two"}),
    );
    ok(
        &e,
        "notes_write",
        json!({"path": "@project/b.md", "text": "TODO three"}),
    );
    let found = ok(&e, "notes_search", json!({"query": "TODO"}));
    assert_eq!(
        found,
        "3 matching lines in 2 notes for \"TODO\" in your homes:\na.md:2: TODO one\na.md:4: TODO two\n@project/b.md:1: TODO three"
    );
    let capped = ok(
        &e,
        "notes_search",
        json!({"query": "TODO", "max_results": 2}),
    );
    assert!(capped.contains("More lines match"), "{capped}");
    let one_home = ok(
        &e,
        "notes_search",
        json!({"query": "TODO", "prefix": "@project/"}),
    );
    assert!(one_home.starts_with("1 matching line"), "{one_home}");
    assert!(ok(&e, "notes_search", json!({"query": "todo"})).starts_with("No line contains"));
    assert!(err(&e, "notes_search", json!({"query": ""})).contains("empty"));
}

#[test]
fn delete_rename_and_stale() {
    let e = engine();
    ok(&e, "notes_write", json!({"path": "draft.md", "text": "v1"}));
    assert_eq!(
        ok(
            &e,
            "notes_rename",
            json!({"path": "draft.md", "new_path": "@project/plan.md"})
        ),
        "Renamed draft.md to @project/plan.md (1 line, 2 bytes)."
    );
    ok(&e, "notes_write", json!({"path": "other.md", "text": "v"}));
    assert_eq!(
        err(
            &e,
            "notes_rename",
            json!({"path": "other.md", "new_path": "@project/plan.md"})
        ),
        "note @project/plan.md already exists: delete it first or pick another name"
    );
    assert!(ok(&e, "notes_mark_stale", json!({"path": "@project/plan.md"})).contains("stale"));
    assert!(ok(&e, "notes_read", json!({"path": "@project/plan.md"})).contains(", stale)"));
    assert!(ok(&e, "notes_delete", json!({"path": "@project/plan.md"}))
        .starts_with("Deleted @project/plan.md"));
    assert_eq!(
        err(&e, "notes_delete", json!({"path": "@project/plan.md"})),
        "no note @project/plan.md"
    );
    // The deleted text is still in the store's versions.
    let body = e
        .store()
        .note_version_body("t1", "project:/repo", "plan.md", 1)
        .unwrap();
    assert_eq!(body.as_deref(), Some("v1"));
}

#[test]
fn bad_addresses_and_oversize_write_nothing() {
    let e = engine();
    for path in ["../x", "@nope/x", "a@b", "/abs", "a//b", "@self", "x\u{7}"] {
        let text = err(&e, "notes_write", json!({"path": path, "text": "t"}));
        assert!(text.starts_with("invalid note address"), "{path}: {text}");
    }
    let big = "x".repeat(MAX_NOTE_BYTES + 1);
    let text = err(&e, "notes_write", json!({"path": "big.md", "text": big}));
    assert!(
        text.contains("1,000,001") && text.contains("big.md"),
        "{text}"
    );
    ok(
        &e,
        "notes_write",
        json!({"path": "full.md", "text": "x".repeat(MAX_NOTE_BYTES)}),
    );
    let text = err(&e, "notes_append", json!({"path": "full.md", "text": "y"}));
    assert!(text.starts_with("note full.md would be"), "{text}");
    assert_eq!(
        ok(&e, "notes_list", json!({})).lines().count(),
        2,
        "only full.md"
    );
    // No caller names: a clear error, not a guess.
    let nobody = Caller {
        tenant: "t1".into(),
        ..Caller::default()
    };
    let (text, is_error) = call(
        &e,
        &nobody,
        "notes_write",
        json!({"path": "@self/a", "text": "t"}),
    );
    assert!(is_error && text.contains("@self is unavailable"), "{text}");
}

#[test]
fn tenants_are_isolated_through_the_engine() {
    let e = engine();
    ok(
        &e,
        "notes_write",
        json!({"path": "@human/secret.md", "text": "mine"}),
    );
    let other = Caller {
        tenant: "t2".into(),
        ..caller()
    };
    let (text, _) = call(
        &e,
        &other,
        "notes_read",
        json!({"path": "@human/secret.md"}),
    );
    assert_eq!(text, "no note @human/secret.md");
    let (list, _) = call(&e, &other, "notes_list", json!({}));
    assert_eq!(list, "No notes in your homes.");
}

#[test]
fn snapshot_has_every_home_most_recent_first() {
    let e = engine();
    let s = e.store();
    s.note_write("t1", "session:pi:s1", "old.md", "o", 1)
        .unwrap()
        .unwrap();
    s.note_write("t1", "session:pi:s1", "new.md", "n\nm\n", 5)
        .unwrap()
        .unwrap();
    s.note_write("t1", "agent:pi", "MAP.md", "map body", 3)
        .unwrap()
        .unwrap();
    s.note_write("t1", "model:claude-sonnet-4", "m.md", "", 3)
        .unwrap()
        .unwrap();
    s.note_write("t1", "agent:codex", "not-mine.md", "", 3)
        .unwrap()
        .unwrap();
    s.note_set_stale("t1", "session:pi:s1", "old.md", true, 9)
        .unwrap()
        .unwrap();
    let snap = e.notes_snapshot(&caller(), 1000).unwrap();
    assert_eq!(snap.opened_at_ms, 1000);
    assert!(snap.unavailable.is_empty());
    let session = &snap.homes[&HomeScope::Session];
    assert_eq!(
        session.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
        ["new.md", "old.md"]
    );
    assert_eq!(
        (session[0].lines, session[0].bytes, session[0].updated_at_ms),
        (2, 4, 5)
    );
    assert!(session[1].stale);
    let agent = &snap.homes[&HomeScope::Agent];
    assert_eq!(agent.len(), 1);
    assert_eq!(
        (agent[0].address.as_str(), agent[0].body.as_str()),
        ("@agents/pi/MAP.md", "map body")
    );
    assert_eq!(
        snap.homes[&HomeScope::Model][0].address,
        "@models/claude-sonnet-4/m.md"
    );
    assert!(snap.homes[&HomeScope::Project].is_empty());
    assert!(snap.homes[&HomeScope::Human].is_empty());
    // Unknown names: those homes are absent, not unavailable.
    let bare = Caller {
        tenant: "t1".into(),
        ..Caller::default()
    };
    let snap = e.notes_snapshot(&bare, 0).unwrap();
    assert_eq!(
        snap.homes.keys().copied().collect::<Vec<_>>(),
        [HomeScope::Human]
    );
}

#[test]
fn session_key_is_found_from_the_session_id() {
    use ctxd_core::model::SessionMeta;
    use ctxd_store::Store;
    let e = engine();
    let rec = e
        .store()
        .open_session("t1", "pi:abc", &SessionMeta::default())
        .unwrap();
    let c = Caller {
        tenant: "t1".into(),
        session: Some(rec.id),
        ..Caller::default()
    };
    let (text, is_error) = call(&e, &c, "notes_write", json!({"path": "a.md", "text": "x"}));
    assert!(!is_error, "{text}");
    assert!(e
        .store()
        .note_read("t1", "session:pi:abc", "a.md")
        .unwrap()
        .is_some());
}
