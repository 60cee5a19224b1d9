#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Stored formats are forever: `tests/golden/v1.db` was written by schema version 1 and entry
//! format 1, and every later build must read it back exactly (after migrating a copy): the
//! sessions and entries, the notes with every version, and the history index rows.
//!
//! Never regenerate a committed golden file: add `v2.db` beside it when the schema changes. (v1.db
//! was regenerated once, before schema 1 shipped, to add the notes and the history rows that
//! `append` now writes.) The generator is kept for the record and for new versions:
//! `cargo test -p ctxd-store --test golden -- --ignored generate_v1_golden`.

use std::path::{Path, PathBuf};

use ctxd_core::history::{ItemFilter, RankedQuery};
use ctxd_core::model::{
    Agent, Compaction, ContentBlock, Entry, EntryId, EntryKind, Image, Message, Role, Session,
    SessionMeta, ToolDef, Usage,
};
use ctxd_core::notes::ListOrder;
use ctxd_store::{
    Backend, Durability, HistoryStore, NewEntry, NotesStore, SqliteStore, Store, StoreError,
    SCHEMA_VERSION,
};

mod common;
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

/// Write the fixture through the store's API: sessions, batches (with the history index that
/// `append` writes), leaves, then the notes.
fn fill(store: &dyn Backend) {
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
    for op in note_ops() {
        let done = match op {
            NoteOp::Write(t, home, path, body, at) => {
                store.note_write(t, home, path, body, at).unwrap().is_ok()
            }
            NoteOp::Append(t, home, path, text, at) => {
                store.note_append(t, home, path, text, at).unwrap().is_ok()
            }
            NoteOp::Stale(t, home, path, stale, at) => store
                .note_set_stale(t, home, path, stale, at)
                .unwrap()
                .is_some(),
            NoteOp::Rename(t, from, to, at) => store.note_rename(t, from, to, at).unwrap().is_ok(),
            NoteOp::Delete(t, home, path, at) => {
                store.note_delete(t, home, path, at).unwrap().is_some()
            }
        };
        assert!(done, "{op:?}");
    }
}

/// One change to the notes of the golden store: (tenant, home, path, ..., at_ms).
#[derive(Clone, Copy, Debug)]
enum NoteOp {
    Write(&'static str, &'static str, &'static str, &'static str, i64),
    Append(&'static str, &'static str, &'static str, &'static str, i64),
    Stale(&'static str, &'static str, &'static str, bool, i64),
    Rename(
        &'static str,
        (&'static str, &'static str),
        (&'static str, &'static str),
        i64,
    ),
    Delete(&'static str, &'static str, &'static str, i64),
}

const SESSION_HOME: &str = "session:pi-0001";

/// Every kind of version (write, append, overwrite, stale, fresh, rename across homes, delete
/// and a write after it), all five homes, two tenants, text that is not ASCII.
fn note_ops() -> Vec<NoteOp> {
    use NoteOp::*;
    vec![
        Write("", SESSION_HOME, "plan.md", "step 1", 1_000),
        Append("", SESSION_HOME, "plan.md", "step 2\n", 2_000),
        Write("", SESSION_HOME, "plan.md", "rewritten plan\n", 3_000),
        Write(
            "",
            "project:proj-1f2e",
            "MAP.md",
            "# Map\n- plan.md\n",
            4_000,
        ),
        Write("", "human", "prefs.md", "be brief; ü 漢字 🦓", 5_000),
        Stale("", "human", "prefs.md", true, 6_000),
        Stale("", "human", "prefs.md", false, 7_000),
        Write("", "agent:pi", "todo.md", "a\nb\nc\n", 8_000),
        Rename(
            "",
            ("agent:pi", "todo.md"),
            ("model:claude", "todo.md"),
            9_000,
        ),
        Write("", SESSION_HOME, "scratch.md", "temp", 10_000),
        Delete("", SESSION_HOME, "scratch.md", 11_000),
        Write("", SESSION_HOME, "scratch.md", "again", 12_000),
        Stale("", "model:claude", "todo.md", true, 13_000),
        Write(
            "tenant-7f3a",
            "human",
            "prefs.md",
            "the other tenant",
            14_000,
        ),
    ]
}

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
    fill(&SqliteStore::open(&path, Durability::Full).unwrap());
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

/// The fixture written by the current code into a fresh store: what the golden file must read
/// back as.
fn fresh() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("fresh.db"), Durability::Normal).unwrap();
    fill(&store);
    (dir, store)
}

/// Every (tenant, home, path) the note fixture touches.
fn note_paths() -> Vec<(&'static str, &'static str, &'static str)> {
    let mut out = Vec::new();
    for op in note_ops() {
        let touched = match op {
            NoteOp::Write(t, h, p, ..)
            | NoteOp::Append(t, h, p, ..)
            | NoteOp::Stale(t, h, p, ..)
            | NoteOp::Delete(t, h, p, ..) => vec![(t, h, p)],
            NoteOp::Rename(t, from, to, _) => vec![(t, from.0, from.1), (t, to.0, to.1)],
        };
        for x in touched {
            if !out.contains(&x) {
                out.push(x);
            }
        }
    }
    out
}

#[test]
fn golden_v1_notes_read_back_with_every_version() {
    let (_dir, copy) = golden_copy(1);
    let golden = SqliteStore::open(&copy, Durability::Full).unwrap();
    let (_fresh_dir, fresh) = fresh();
    // What v1 wrote, by hand.
    let plan = golden
        .note_read("", SESSION_HOME, "plan.md")
        .unwrap()
        .unwrap();
    assert_eq!(plan.body, "rewritten plan\n");
    assert_eq!(
        (
            plan.meta.version,
            plan.meta.created_at_ms,
            plan.meta.updated_at_ms
        ),
        (3, 1_000, 3_000)
    );
    let ops = |t: &str, h: &str, p: &str| -> Vec<(String, Option<String>, i64)> {
        golden
            .note_versions(t, h, p)
            .unwrap()
            .into_iter()
            .map(|v| (v.op, v.other, v.at_ms))
            .collect()
    };
    let op = |o: &str, at: i64| (o.to_owned(), None, at);
    assert_eq!(
        ops("", SESSION_HOME, "plan.md"),
        [op("write", 1_000), op("append", 2_000), op("write", 3_000)]
    );
    let body = |h: &str, p: &str, v: i64| golden.note_version_body("", h, p, v).unwrap();
    assert_eq!(body(SESSION_HOME, "plan.md", 1).as_deref(), Some("step 1"));
    assert_eq!(
        body(SESSION_HOME, "plan.md", 2).as_deref(),
        Some("step 1\nstep 2\n")
    );
    assert_eq!(
        ops("", SESSION_HOME, "scratch.md"),
        [
            op("write", 10_000),
            op("delete", 11_000),
            op("write", 12_000)
        ]
    );
    assert_eq!(body(SESSION_HOME, "scratch.md", 2), None);
    assert_eq!(
        body(SESSION_HOME, "scratch.md", 3).as_deref(),
        Some("again")
    );
    assert_eq!(
        ops("", "agent:pi", "todo.md"),
        [
            op("write", 8_000),
            (
                "rename_out".into(),
                Some("model:claude\ttodo.md".into()),
                9_000
            )
        ]
    );
    assert_eq!(golden.note_read("", "agent:pi", "todo.md").unwrap(), None);
    let moved = golden
        .note_read("", "model:claude", "todo.md")
        .unwrap()
        .unwrap();
    assert_eq!((moved.body.as_str(), moved.meta.stale), ("a\nb\nc\n", true));
    assert_eq!(
        ops("", "human", "prefs.md"),
        [op("write", 5_000), op("stale", 6_000), op("fresh", 7_000)]
    );
    let prefs = golden.note_read("", "human", "prefs.md").unwrap().unwrap();
    assert_eq!(
        (prefs.body.as_str(), prefs.meta.stale),
        ("be brief; ü 漢字 🦓", false)
    );
    let other = golden
        .note_read("tenant-7f3a", "human", "prefs.md")
        .unwrap();
    assert_eq!(other.map(|n| n.body).as_deref(), Some("the other tenant"));

    // And all of it reads back as the current code writes it: listings, notes, every version.
    for (t, h, p) in note_paths() {
        assert_eq!(
            golden
                .note_list(t, h, "", ListOrder::default(), 1_000)
                .unwrap(),
            fresh
                .note_list(t, h, "", ListOrder::default(), 1_000)
                .unwrap(),
            "{t}/{h}"
        );
        assert_eq!(
            golden.note_read(t, h, p).unwrap(),
            fresh.note_read(t, h, p).unwrap()
        );
        let versions = golden.note_versions(t, h, p).unwrap();
        assert!(!versions.is_empty(), "{h}/{p}");
        assert_eq!(versions, fresh.note_versions(t, h, p).unwrap(), "{h}/{p}");
        for v in versions {
            assert_eq!(
                golden.note_version_body(t, h, p, v.version).unwrap(),
                fresh.note_version_body(t, h, p, v.version).unwrap(),
                "{h}/{p} v{}",
                v.version
            );
        }
    }
}

/// The history index rows of one session, as stored: every column of `history_items`, the
/// tool call names, and the items the trigram index finds for a word.
fn history_dump(store: &SqliteStore, path: &Path, session: i64) -> Vec<String> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let rows = |label: &str, sql: &str| -> Vec<String> {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        stmt.query_map([session], |r| {
            (0..n)
                .map(|i| {
                    r.get::<_, rusqlite::types::Value>(i)
                        .map(|v| format!("{v:?}"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|v| format!("{label} {}", v.join(" ")))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let mut out = rows(
        "row",
        "SELECT seq, parent_seq, lane, window_seq, item_key, kind, role, tools, sidechain \
         FROM history_items WHERE session_id = ?1 ORDER BY seq",
    );
    out.extend(rows(
        "call",
        "SELECT call_id, name FROM history_calls WHERE session_id = ?1 ORDER BY call_id",
    ));
    out.extend(rows(
        "trigram",
        "SELECT h.seq FROM history_trigram f JOIN history_items h ON h.rowid = f.rowid \
         WHERE history_trigram MATCH 'zebra' AND h.session_id = ?1 ORDER BY h.seq",
    ));
    out.extend(history_api(store, session));
    out
}

#[test]
fn golden_v1_history_rows_read_back() {
    let (_dir, copy) = golden_copy(1);
    let golden = SqliteStore::open(&copy, Durability::Full).unwrap();
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh_path = fresh_dir.path().join("fresh.db");
    fill(&SqliteStore::open(&fresh_path, Durability::Normal).unwrap());
    let fresh = SqliteStore::open(&fresh_path, Durability::Normal).unwrap();
    for x in expected() {
        // v1 wrote the index with the entries: nothing to catch up.
        assert_eq!(golden.history_sync(x.id).unwrap(), 0, "{}", x.key);
        let dump = history_dump(&golden, &copy, x.id);
        assert_eq!(dump, history_dump(&fresh, &fresh_path, x.id), "{}", x.key);
        let items = dump.iter().filter(|l| l.starts_with("item ")).count();
        let windows = dump.iter().filter(|l| l.starts_with("window ")).count();
        let rows = dump.iter().filter(|l| l.starts_with("row ")).count();
        // By hand: one history row per entry.
        assert_eq!(rows, all_entries(&x).len(), "{}", x.key);
        let hits = |label: &str| {
            dump.iter()
                .filter(|l| l.starts_with(&format!("{label} ")))
                .count()
        };
        match x.key {
            // The root, w2 (marker + boot) and the sidechain's own root; 11 entries say
            // something; "zebra" is in u1, a1, r1 and the compaction summary.
            "pi-0001" => assert_eq!(
                (
                    windows,
                    items,
                    hits("literal"),
                    hits("ranked"),
                    hits("trigram")
                ),
                (3, 11, 4, 4, 4),
                "{dump:#?}"
            ),
            "claude/abc" => assert_eq!((windows, items), (1, 1), "{dump:#?}"),
            _ => assert!(dump.is_empty(), "{dump:#?}"),
        }
    }
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

/// The golden file, migrated by this build, has exactly the schema this build creates: a schema
/// change without a migration fails here (and so does a migration that creates something else
/// than a fresh store has).
#[test]
fn golden_v1_migrated_has_the_schema_this_build_creates() {
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
    let version = |path: &Path| -> u32 {
        Connection::open(path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    let (_dir, golden) = golden_copy(1);
    drop(SqliteStore::open(&golden, Durability::Full).unwrap());
    let fresh_dir = tempfile::tempdir().unwrap();
    let fresh = fresh_dir.path().join("fresh.db");
    drop(SqliteStore::open(&fresh, Durability::Full).unwrap());
    assert_eq!(version(&golden), SCHEMA_VERSION);
    assert_eq!(version(&fresh), SCHEMA_VERSION);
    assert_eq!(schema(&golden), schema(&fresh));
}

/// The history of one session read through the API: windows, items, both searches.
fn history_api(store: &dyn Backend, session: i64) -> Vec<String> {
    let mut api = Vec::new();
    for w in store.history_windows(session, None).unwrap() {
        api.push(format!(
            "window {} {} {} {}",
            w.window_seq, w.start.id, w.items, w.last_seq
        ));
    }
    let all = ItemFilter::default();
    let zebra = RankedQuery::parse("zebra").unwrap();
    for label in ["item", "literal", "ranked"] {
        let mut visit = |r: ctxd_store::HistoryRow| {
            api.push(format!(
                "{label} {} {} {} {} {:?}",
                r.seq, r.entry.id, r.kind, r.role, r.tools
            ));
            true
        };
        match label {
            "item" => store.history_items(session, &all, None, false, &mut visit),
            "literal" => {
                store.history_search_literal(session, "zebra", &all, None, false, &mut visit)
            }
            _ => store.history_search_ranked(session, &zebra, &all, None, &mut visit),
        }
        .unwrap();
    }
    api
}

/// The fixture written through the API reads back the same on every backend as on a fresh
/// SQLite store: sessions, entries, raw bytes, notes with every version, the history index
/// (ranked hits compared as a set: the backends score differently).
#[test]
fn the_fixture_reads_back_the_same_on_every_backend() {
    let (_dir, sqlite) = fresh();
    common::each_backend(|store| {
        fill(store);
        for x in expected() {
            let ours = store.find_session(x.tenant, x.key).unwrap().unwrap();
            let theirs = sqlite.find_session(x.tenant, x.key).unwrap().unwrap();
            assert_eq!(
                (ours.id, &ours.meta, &ours.leaf, ours.entry_count),
                (theirs.id, &theirs.meta, &theirs.leaf, theirs.entry_count)
            );
            assert_eq!(store.load(x.id).unwrap(), sqlite.load(x.id).unwrap());
            for n in all_entries(&x) {
                assert_eq!(store.raw(x.id, &n.entry.id).unwrap(), n.raw);
            }
            let sorted = |mut lines: Vec<String>| {
                lines.sort_by_key(|l| !l.starts_with("ranked"));
                let ranked = lines.iter().take_while(|l| l.starts_with("ranked")).count();
                lines[..ranked].sort();
                lines
            };
            assert_eq!(
                sorted(history_api(store, x.id)),
                sorted(history_api(&sqlite, x.id)),
                "{}",
                x.key
            );
        }
        for t in ["", "tenant-7f3a"] {
            let keys = |s: &dyn Backend| -> Vec<String> {
                s.list_sessions(t)
                    .unwrap()
                    .into_iter()
                    .map(|r| r.key)
                    .collect()
            };
            let (mut a, mut b) = (keys(store), keys(&sqlite));
            a.sort();
            b.sort();
            assert_eq!(a, b);
        }
        for (t, h, p) in note_paths() {
            assert_eq!(
                store
                    .note_list(t, h, "", ListOrder::default(), 1_000)
                    .unwrap(),
                sqlite
                    .note_list(t, h, "", ListOrder::default(), 1_000)
                    .unwrap()
            );
            assert_eq!(
                store.note_home(t, h).unwrap(),
                sqlite.note_home(t, h).unwrap()
            );
            let versions = store.note_versions(t, h, p).unwrap();
            assert_eq!(versions, sqlite.note_versions(t, h, p).unwrap(), "{h}/{p}");
            for v in versions {
                assert_eq!(
                    store.note_version_body(t, h, p, v.version).unwrap(),
                    sqlite.note_version_body(t, h, p, v.version).unwrap()
                );
            }
        }
        assert_eq!(store.integrity_check().unwrap(), "ok");
    });
}
