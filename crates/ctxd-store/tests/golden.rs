#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Stored formats are forever: `tests/golden/v1.db` was written by schema version 1 and entry
//! format 1, and every later build must read it back exactly (after migrating a copy).
//!
//! Never regenerate a committed golden file: add `v2.db` beside it when the schema changes. The
//! generator is kept for the record and for new versions:
//! `cargo test -p ctxd-store --test golden -- --ignored generate_v1_golden`.

use std::path::{Path, PathBuf};

use ctxd_core::model::{
    Agent, Compaction, ContentBlock, Entry, EntryId, EntryKind, Image, Message, Role, Session,
    SessionMeta, ToolDef, Usage,
};
use ctxd_store::{Durability, NewEntry, SqliteStore, Store, StoreError, SCHEMA_VERSION};
use rusqlite::{Connection, OpenFlags};
use serde_json::json;

fn golden_path(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/v{version}.db"))
}

/// One session of the golden store, as it must read back.
struct Expected {
    id: i64,
    tenant: &'static str,
    key: &'static str,
    meta: SessionMeta,
    /// Batches in append order: entries, raw bytes, the leaf given to `append`.
    batches: Vec<(Vec<NewEntry>, Option<&'static str>)>,
    /// A leaf moved with `set_leaf` after the batches.
    set_leaf: Option<&'static str>,
    leaf: Option<&'static str>,
}

fn e(id: &str, parent: Option<&str>, kind: EntryKind) -> Entry {
    Entry {
        id: EntryId::new(id),
        parent: parent.map(EntryId::new),
        timestamp: Some(format!("2025-06-01T12:00:{:02}.000Z", id.len())),
        sidechain: false,
        kind,
    }
}

fn raw(entry: Entry, bytes: &[u8]) -> NewEntry {
    NewEntry {
        entry,
        raw: Some(bytes.to_vec()),
    }
}

fn usage() -> Usage {
    Usage {
        input: 1200,
        output: 345,
        cache_read: 40_000,
        cache_write: 512,
    }
}

/// Every `EntryKind`, every `ContentBlock`, every optional field set somewhere and left out
/// somewhere, raw bytes that are not UTF-8, a sidechain, two tenants, a branch and a moved leaf.
fn expected() -> Vec<Expected> {
    let mut assistant = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking {
                thinking: "The user wants the zebra file.".into(),
                signature: Some("c2lnbmF0dXJl".into()),
                redacted: false,
            },
            ContentBlock::Thinking {
                thinking: String::new(),
                signature: Some("b3BhcXVl".into()),
                redacted: true,
            },
            ContentBlock::text("Reading it."),
            ContentBlock::ToolCall {
                id: "toolu_01".into(),
                name: "read".into(),
                arguments: json!({"path": "src/zebra.rs", "limit": 20, "nested": [1, 2.5, null, true]}),
            },
        ],
    );
    assistant.model = Some("claude-sonnet-4-20250514".into());
    assistant.response_id = Some("msg_01ABC".into());
    assistant.usage = Some(usage());
    assistant.stop_reason = Some("tool_use".into());

    let tool_result = Message::new(
        Role::User,
        vec![ContentBlock::ToolResult {
            call_id: "toolu_01".into(),
            tool_name: Some("read".into()),
            content: vec![
                ContentBlock::text("fn zebra() {}\n\tunicode: é ü 漢字 🦓"),
                ContentBlock::Image(Image {
                    media_type: Some("image/png".into()),
                    width: Some(2),
                    height: Some(1),
                    data: Some("iVBORw0KGgo=".into()),
                    url: None,
                }),
            ],
            is_error: false,
        }],
    );
    let failed = Message::new(
        Role::Tool,
        vec![ContentBlock::ToolResult {
            call_id: "call_9".into(),
            tool_name: None,
            content: vec![ContentBlock::text("permission denied")],
            is_error: true,
        }],
    );
    let injected = Message::text(Role::User, "<system-reminder>todo list</system-reminder>")
        .injected("system-reminder");
    let boot = Message::new(
        Role::User,
        vec![
            ContentBlock::text("You are in window w2. Notes index: MAP.md"),
            ContentBlock::Image(Image {
                media_type: None,
                width: None,
                height: None,
                data: None,
                url: Some("file:///tmp/screen.png".into()),
            }),
        ],
    );

    let pi = Expected {
        id: 1,
        tenant: "",
        key: "pi-0001",
        meta: SessionMeta {
            id: Some("0001-uuid".into()),
            agent: Some(Agent::Pi),
            format: "pi/v3".into(),
            cwd: Some("/home/u/proj".into()),
            started_at: Some("2025-06-01T12:00:00.000Z".into()),
            model: Some("claude-sonnet-4-20250514".into()),
            context_window: Some(200_000),
            parent_session: Some("0000-uuid".into()),
            title: Some("Golden session".into()),
        },
        batches: vec![
            (
                vec![
                    raw(
                        e(
                            "sys",
                            None,
                            EntryKind::SystemPrompt {
                                text: "You are a coding agent.".into(),
                            },
                        ),
                        b"{\"type\":\"system\"}",
                    ),
                    NewEntry::new(e(
                        "tools",
                        Some("sys"),
                        EntryKind::ToolDefs {
                            tools: vec![
                                ToolDef {
                                    name: "read".into(),
                                    description: "Read a file".into(),
                                    schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
                                },
                                ToolDef {
                                    name: "web_search".into(),
                                    description: String::new(),
                                    schema: json!({"type": "web_search_20250305"}),
                                },
                            ],
                        },
                    )),
                    raw(
                        e(
                            "u1",
                            Some("tools"),
                            EntryKind::Message(Message::text(Role::User, "show me the zebra")),
                        ),
                        &[0xff, 0xfe, 0x00, 0x7b, 0x80, 0x0a],
                    ),
                ],
                None,
            ),
            (
                vec![
                    NewEntry::new(e("a1", Some("u1"), EntryKind::Message(assistant))),
                    NewEntry::new(e("r1", Some("a1"), EntryKind::Message(tool_result))),
                    NewEntry::new(e("inj", Some("r1"), EntryKind::Message(injected))),
                    NewEntry::new(e(
                        "edit1",
                        Some("inj"),
                        EntryKind::ContextEdit {
                            target: EntryId::new("r1"),
                            replacement: Some(vec![ContentBlock::ToolResult {
                                call_id: "toolu_01".into(),
                                tool_name: Some("read".into()),
                                content: vec![ContentBlock::text("[trimmed]")],
                                is_error: false,
                            }]),
                        },
                    )),
                    NewEntry::new(e(
                        "edit2",
                        Some("edit1"),
                        EntryKind::ContextEdit {
                            target: EntryId::new("inj"),
                            replacement: None,
                        },
                    )),
                ],
                None,
            ),
            (
                vec![
                    NewEntry::new(e(
                        "mc",
                        Some("edit2"),
                        EntryKind::ModelChange {
                            provider: Some("anthropic".into()),
                            model: "claude-opus-4".into(),
                        },
                    )),
                    NewEntry::new(e(
                        "mc2",
                        Some("mc"),
                        EntryKind::ModelChange {
                            provider: None,
                            model: "gpt-5".into(),
                        },
                    )),
                    NewEntry::new(e("use", Some("mc2"), EntryKind::Usage { usage: usage() })),
                    NewEntry::new(e(
                        "ev1",
                        Some("use"),
                        EntryKind::Event {
                            name: "thinking_level_change".into(),
                            detail: Some(json!({"level": "high", "n": 3})),
                        },
                    )),
                    NewEntry::new(e(
                        "ev2",
                        Some("ev1"),
                        EntryKind::Event {
                            name: "label".into(),
                            detail: None,
                        },
                    )),
                    NewEntry::new(e(
                        "cmp",
                        Some("ev2"),
                        EntryKind::Compaction(Compaction {
                            summary: "Summary: the zebra was found.".into(),
                            first_kept: Some(EntryId::new("r1")),
                            tokens_before: Some(150_000),
                            replacement: None,
                        }),
                    )),
                    NewEntry::new(e(
                        "cmp2",
                        Some("cmp"),
                        EntryKind::Compaction(Compaction {
                            summary: "Codex compaction".into(),
                            first_kept: None,
                            tokens_before: None,
                            replacement: Some(vec![
                                Message::text(Role::Developer, "dev instructions"),
                                Message::text(Role::System, "system note"),
                            ]),
                        }),
                    )),
                    NewEntry::new(e(
                        "wm",
                        Some("cmp2"),
                        EntryKind::WindowMarker {
                            window_id: "w2".into(),
                            reason: "new_context".into(),
                        },
                    )),
                    raw(
                        e(
                            "wb",
                            Some("wm"),
                            EntryKind::WindowBoot {
                                window_id: "w2".into(),
                                message: boot,
                            },
                        ),
                        b"",
                    ),
                ],
                // The leaf named explicitly: not the batch's last entry.
                Some("cmp2"),
            ),
            (
                vec![
                    NewEntry::new(e(
                        "bs",
                        Some("u1"),
                        EntryKind::BranchSummary {
                            from: Some(EntryId::new("wb")),
                            summary: "We left the window branch.".into(),
                        },
                    )),
                    NewEntry::new(e(
                        "bs2",
                        Some("bs"),
                        EntryKind::BranchSummary {
                            from: None,
                            summary: String::new(),
                        },
                    )),
                    NewEntry::new(e("f1", Some("bs2"), EntryKind::Message(failed))),
                    NewEntry::new(Entry {
                        id: EntryId::new("side1"),
                        parent: None,
                        timestamp: None,
                        sidechain: true,
                        kind: EntryKind::Message(Message::text(
                            Role::Assistant,
                            "subagent says hi",
                        )),
                    }),
                ],
                Some("f1"),
            ),
        ],
        set_leaf: Some("wb"),
        leaf: Some("wb"),
    };

    let claude = Expected {
        id: 2,
        tenant: "tenant-7f3a",
        key: "claude/abc",
        meta: SessionMeta {
            agent: Some(Agent::ClaudeCode),
            format: "claude-code/1.0.98".into(),
            ..SessionMeta::default()
        },
        batches: vec![(
            vec![raw(
                e(
                    "c1",
                    None,
                    EntryKind::Message(Message::text(Role::User, "hello from another tenant")),
                ),
                "{\"uuid\":\"c1\",\"message\":\"hello\"}\n".as_bytes(),
            )],
            None,
        )],
        set_leaf: None,
        leaf: Some("c1"),
    };

    let empty = Expected {
        id: 3,
        tenant: "tenant-7f3a",
        key: "empty",
        meta: SessionMeta::default(),
        batches: vec![],
        set_leaf: None,
        leaf: None,
    };
    vec![pi, claude, empty]
}

fn all_entries(x: &Expected) -> Vec<&NewEntry> {
    x.batches.iter().flat_map(|(b, _)| b.iter()).collect()
}

/// Fixed times, so the golden file says the same thing whenever it is made.
const CREATED: &str = "2025-06-01T12:00:00.000Z";
const UPDATED: &str = "2025-06-01T13:00:00.000Z";

#[test]
#[ignore = "writes tests/golden/v1.db; never rerun for a committed version"]
fn generate_v1_golden() {
    assert_eq!(SCHEMA_VERSION, 1, "this generator writes schema version 1");
    let path = golden_path(1);
    assert!(
        !path.exists(),
        "{} exists: golden files are never regenerated",
        path.display()
    );
    {
        let store = SqliteStore::open(&path, Durability::Full).unwrap();
        for x in expected() {
            let s = store.open_session(x.tenant, x.key, &x.meta).unwrap();
            assert_eq!(s.id, x.id);
            for (batch, leaf) in &x.batches {
                store
                    .append(s.id, batch, leaf.map(EntryId::new).as_ref())
                    .unwrap();
            }
            if let Some(leaf) = x.set_leaf {
                store.set_leaf(s.id, &EntryId::new(leaf)).unwrap();
            }
        }
    }
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE sessions SET created_at = ?1, updated_at = ?2",
        [CREATED, UPDATED],
    )
    .unwrap();
    conn.execute_batch("VACUUM").unwrap();
    drop(conn);
    assert!(!Path::new(&format!("{}-wal", path.display())).exists());
}

/// A copy of a golden file in a temp dir, so the committed file is never touched (even a
/// read-only SQLite connection to a WAL file creates `-wal` and `-shm` files beside it).
fn golden_copy(version: u32) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join(format!("v{version}.db"));
    std::fs::copy(golden_path(version), &copy).unwrap();
    (dir, copy)
}

#[test]
fn golden_v1_is_schema_v1() {
    let (_dir, copy) = golden_copy(1);
    let conn = Connection::open_with_flags(&copy, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1, "v1.db must stay a schema-1 file");
}

#[test]
fn golden_v1_reads_back_equal_with_the_current_code() {
    let (_dir, copy) = golden_copy(1);
    let store = SqliteStore::open(&copy, Durability::Full).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let expected = expected();
    for x in &expected {
        let record = store
            .find_session(x.tenant, x.key)
            .unwrap()
            .unwrap_or_else(|| panic!("session {} missing", x.key));
        let entries = all_entries(x);
        assert_eq!(record.id, x.id);
        assert_eq!(record.tenant, x.tenant);
        assert_eq!(record.meta, x.meta, "{}", x.key);
        assert_eq!(record.leaf, x.leaf.map(EntryId::new), "{}", x.key);
        assert_eq!(record.entry_count, entries.len() as u64);
        assert_eq!(
            (record.created_at.as_str(), record.updated_at.as_str()),
            (CREATED, UPDATED)
        );
        assert_eq!(store.session(x.tenant, x.id).unwrap(), Some(record.clone()));

        let session = store.load(x.id).unwrap();
        assert_eq!(
            session,
            Session {
                meta: x.meta.clone(),
                entries: entries.iter().map(|n| n.entry.clone()).collect(),
                leaf: x.leaf.map(EntryId::new),
            },
            "{}",
            x.key
        );
        for n in &entries {
            assert_eq!(
                store.entry(x.id, &n.entry.id).unwrap().as_ref(),
                Some(&n.entry)
            );
            assert_eq!(
                store.raw(x.id, &n.entry.id).unwrap(),
                n.raw,
                "raw of {}",
                n.entry.id
            );
        }
    }
    // Tenants stay apart; listing works on the old file.
    let keys = |t: &str| -> Vec<String> {
        let mut k: Vec<String> = store
            .list_sessions(t)
            .unwrap()
            .into_iter()
            .map(|s| s.key)
            .collect();
        k.sort();
        k
    };
    assert_eq!(keys(""), ["pi-0001"]);
    assert_eq!(keys("tenant-7f3a"), ["claude/abc", "empty"]);
    assert!(store.session("", 2).unwrap().is_none());

    // Every kind of entry and content block is in the file (the fixture covers them all).
    let conn = Connection::open_with_flags(&copy, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let kinds: Vec<String> = conn
        .prepare("SELECT DISTINCT kind FROM entries ORDER BY kind")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        kinds,
        [
            "branch_summary",
            "compaction",
            "context_edit",
            "event",
            "message",
            "model_change",
            "system_prompt",
            "tool_defs",
            "usage",
            "window_boot",
            "window_marker"
        ]
    );

    // The full-text index written by v1 still answers, keyed through entry_text.
    let hits: Vec<String> = conn
        .prepare(
            "SELECT e.id FROM entry_fts f JOIN entry_text t ON t.rowid = f.rowid \
             JOIN entries e ON e.session_id = t.session_id AND e.seq = t.seq \
             WHERE entry_fts MATCH 'zebra' ORDER BY e.seq",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(hits, ["u1", "a1", "r1", "cmp"]);
    drop(conn);

    // The old file takes new appends from the current code.
    let next = EntryId::new("after-upgrade");
    store
        .append(
            1,
            &[NewEntry::new(e(
                "after-upgrade",
                Some("wb"),
                EntryKind::Event {
                    name: "x".into(),
                    detail: None,
                },
            ))],
            None,
        )
        .unwrap();
    assert_eq!(store.load(1).unwrap().leaf, Some(next));
}

/// Entry format 1 is a contract: the current code writes the same body JSON as the golden file
/// holds. If this fails because the serialization changed on purpose, bump `entries.format`
/// and keep a reader for format 1; do not edit the golden file.
#[test]
fn golden_v1_bodies_are_what_the_current_code_writes() {
    let (_dir, copy) = golden_copy(1);
    let conn = Connection::open_with_flags(&copy, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    for x in expected() {
        for n in all_entries(&x) {
            let (body, format, sidechain): (String, i64, bool) = conn
                .query_row(
                    "SELECT body, format, sidechain FROM entries WHERE session_id = ?1 AND id = ?2",
                    rusqlite::params![x.id, n.entry.id.0],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .unwrap();
            assert_eq!(format, 1);
            assert_eq!(sidechain, n.entry.sidechain);
            assert_eq!(
                body,
                serde_json::to_string(&n.entry.kind).unwrap(),
                "{}",
                n.entry.id
            );
        }
    }
}

#[test]
fn a_store_from_a_newer_ctxd_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE future_thing (x); INSERT INTO future_thing VALUES (42);")
            .unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let err = SqliteStore::open(&path, Durability::Full)
        .err()
        .expect("refused");
    assert!(
        matches!(err, StoreError::TooNew { found, supported } if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "store: schema version {} is newer than this ctxd supports ({SCHEMA_VERSION})",
            SCHEMA_VERSION + 1
        )
    );
    // Refused before any migration touched it.
    let conn = Connection::open(&path).unwrap();
    let (version, x, tables): (u32, i64, i64) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version), \
                    (SELECT x FROM future_thing), \
                    (SELECT COUNT(*) FROM sqlite_master WHERE name = 'entries')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((version, x, tables), (SCHEMA_VERSION + 1, 42, 0));
}

/// A refused store is not written to at all. Today `SqliteStore::setup` runs
/// `PRAGMA journal_mode=WAL` before `schema::migrate` checks the version, so a newer store left
/// in rollback-journal mode is switched to WAL before it is refused.
#[test]
fn a_refused_store_keeps_its_journal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("future.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE future_thing (x);")
            .unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    assert!(SqliteStore::open(&path, Durability::Full).is_err());
    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "journal mode of a refused store");
}

/// The golden file's schema is exactly what this build creates for its version: a schema change
/// without a new migration (and a new golden file) fails here.
#[test]
fn golden_v1_schema_is_what_this_build_creates() {
    fn schema(path: &Path) -> Vec<(String, String, Option<String>)> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }
    assert_eq!(SCHEMA_VERSION, 1);
    let (_dir, golden) = golden_copy(1);
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = fresh_dir.path().join("fresh.db");
    drop(SqliteStore::open(&fresh, Durability::Full).unwrap());
    assert_eq!(schema(&golden), schema(&fresh));
}
