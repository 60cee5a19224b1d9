#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The derived indexes are written by `append`, in the batch's transaction; a session stored
//! without them (by an older build, or by the gateway's group writes, which defer them) is
//! caught up by `history_sync` or `index_pending`, to the same rows.

use ctxd_core::history::{ItemFilter, RankedQuery};
use ctxd_core::model::{ContentBlock, Entry, EntryKind, Message, Role, SessionMeta};
use ctxd_store::{Backend, Durability, HistoryStore, NewEntry, SessionId, SqliteStore, Store};

mod common;
use common::each_backend;

fn entry(id: &str, parent: Option<&str>, sidechain: bool, kind: EntryKind) -> NewEntry {
    NewEntry::new(Entry {
        sidechain,
        ..ctxd_test_support::entry(id, parent, kind)
    })
}

fn text(id: &str, parent: Option<&str>, role: Role, says: &str) -> NewEntry {
    entry(
        id,
        parent,
        false,
        EntryKind::Message(Message::text(role, says)),
    )
}

/// A session with tool calls, a result that does not name its tool, a window reset, a fork and a
/// sidechain, in batches whose first entries continue earlier batches.
fn batches() -> Vec<Vec<NewEntry>> {
    let call = EntryKind::Message(Message::new(
        Role::Assistant,
        vec![
            ContentBlock::text("let me grep"),
            ContentBlock::ToolCall {
                id: "c1".into(),
                name: "grep".into(),
                arguments: serde_json::json!({"pattern": "zebra"}),
            },
        ],
    ));
    let result = EntryKind::Message(Message::new(
        Role::Tool,
        vec![ContentBlock::ToolResult {
            call_id: "c1".into(),
            tool_name: None,
            content: vec![ContentBlock::text("src/zebra.rs:1: zebra stripes")],
            is_error: false,
        }],
    ));
    let boot = EntryKind::WindowBoot {
        window_id: "w2".into(),
        message: Message::text(Role::User, "boot: you were working on zebras"),
    };
    vec![
        vec![
            entry(
                "sys",
                None,
                false,
                EntryKind::SystemPrompt {
                    text: "be brief".into(),
                },
            ),
            text("u1", Some("sys"), Role::User, "find the zebra"),
        ],
        vec![
            entry("a1", Some("u1"), false, call),
            entry("r1", Some("a1"), false, result),
        ],
        vec![
            entry(
                "m",
                Some("r1"),
                false,
                EntryKind::WindowMarker {
                    window_id: "w2".into(),
                    reason: "new_context".into(),
                },
            ),
            entry("b", Some("m"), false, boot),
            text("u2", Some("b"), Role::User, "now the giraffe"),
        ],
        vec![
            // A fork from u1 and a subagent's sidechain.
            text("u1b", Some("u1"), Role::User, "or rather the okapi"),
            entry(
                "s1",
                Some("u2"),
                true,
                EntryKind::Message(Message::text(Role::Assistant, "subagent: giraffe found")),
            ),
            text("u3", Some("u2"), Role::User, "thanks for the giraffe"),
        ],
    ]
}

type Dump = (Vec<Vec<String>>, Vec<(String, String)>, Vec<i64>, Vec<i64>);

/// The session's history rows, tool call names, and the seqs the trigram and ranked indexes find.
fn dump(path: &std::path::Path, session: SessionId) -> Dump {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT seq, parent_seq, lane, window_seq, item_key, kind, role, tools, sidechain \
             FROM history_items WHERE session_id = ?1 ORDER BY seq",
        )
        .unwrap();
    let items = stmt
        .query_map([session], |r| {
            (0..9)
                .map(|i| {
                    r.get::<_, rusqlite::types::Value>(i)
                        .map(|v| format!("{v:?}"))
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut stmt = conn
        .prepare("SELECT call_id, name FROM history_calls WHERE session_id = ?1 ORDER BY call_id")
        .unwrap();
    let calls = stmt
        .query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT h.seq FROM history_trigram f JOIN history_items h ON h.rowid = f.rowid \
             WHERE history_trigram MATCH 'giraffe' AND h.session_id = ?1 ORDER BY h.seq",
        )
        .unwrap();
    let hits = stmt
        .query_map([session], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT t.seq FROM entry_fts f JOIN entry_text t ON t.rowid = f.rowid \
             WHERE entry_fts MATCH 'giraffe' AND t.session_id = ?1 ORDER BY t.seq",
        )
        .unwrap();
    let ranked: Vec<i64> = stmt
        .query_map([session], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (items, calls, hits, ranked)
}

#[test]
fn append_indexes_its_batch_and_a_sync_catches_up_an_older_store_to_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (fresh_path, old_path) = (dir.path().join("fresh.db"), dir.path().join("old.db"));
    let fresh = SqliteStore::open(&fresh_path, Durability::Normal).unwrap();
    let old = SqliteStore::open(&old_path, Durability::Normal).unwrap();
    let a = fresh
        .open_session("", "k", &SessionMeta::default())
        .unwrap();
    let b = old.open_session("", "k", &SessionMeta::default()).unwrap();
    let batches = batches();

    // Indexed as appended: nothing left for a sync.
    for batch in &batches {
        fresh.append(a.id, batch, None).unwrap();
    }
    assert_eq!(fresh.history_sync(a.id).unwrap(), 0);
    let indexed = dump(&fresh_path, a.id);
    assert_eq!(indexed.0.len(), 10, "one row per entry");
    assert_eq!(indexed.1, [("c1".to_owned(), "grep".to_owned())]);
    assert_eq!(indexed.2, [7, 9, 10]);
    assert_eq!(indexed.3, [7, 9, 10], "ranked search's rows, once each");

    // An older build stored the first two batches without the index.
    for batch in &batches[..2] {
        old.append(b.id, batch, None).unwrap();
    }
    {
        let conn = rusqlite::Connection::open(&old_path).unwrap();
        conn.execute_batch(
            "DELETE FROM history_items; DELETE FROM history_calls; \
             INSERT INTO history_trigram (history_trigram) VALUES ('delete-all');",
        )
        .unwrap();
    }
    // Appends do not index behind a gap; the first history read catches up, once.
    old.append(b.id, &batches[2], None).unwrap();
    assert_eq!(dump(&old_path, b.id).0.len(), 0);
    assert_eq!(old.history_sync(b.id).unwrap(), 7);
    assert_eq!(old.history_sync(b.id).unwrap(), 0);
    // From then on appends index again.
    old.append(b.id, &batches[3], None).unwrap();
    assert_eq!(old.history_sync(b.id).unwrap(), 0);
    assert_eq!(dump(&old_path, b.id), indexed);
}

#[test]
fn a_refused_batch_leaves_no_index_rows() {
    each_backend(|store| {
        let s = store
            .open_session("", "k", &SessionMeta::default())
            .unwrap();
        store
            .append(s.id, &[text("a", None, Role::User, "giraffe one")], None)
            .unwrap();
        let dup = [
            text("b", Some("a"), Role::User, "giraffe two"),
            text("a", Some("b"), Role::User, "giraffe again"),
        ];
        assert!(store.append(s.id, &dup, None).is_err());
        store
            .append(
                s.id,
                &[text("c", Some("a"), Role::User, "giraffe three")],
                None,
            )
            .unwrap();
        // "b" was rolled back with its batch: the index holds a and c only, and needs no sync.
        assert_eq!(store.history_sync(s.id).unwrap(), 0);
        let mut seqs = Vec::new();
        store
            .history_items(s.id, &Default::default(), None, false, &mut |row| {
                seqs.push((row.seq, row.entry.id.0.clone()));
                true
            })
            .unwrap();
        assert_eq!(seqs, [(1, "a".to_owned()), (2, "c".to_owned())]);
    });
}

#[test]
fn group_writes_defer_the_indexes_and_index_pending_catches_up_in_steps_to_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (inline_path, group_path) = (dir.path().join("inline.db"), dir.path().join("group.db"));
    let inline = SqliteStore::open(&inline_path, Durability::Normal).unwrap();
    let grouped = SqliteStore::open(&group_path, Durability::Normal).unwrap();
    let a = inline
        .open_session("", "k", &SessionMeta::default())
        .unwrap();
    let b = grouped
        .open_session("", "k", &SessionMeta::default())
        .unwrap();
    for batch in &batches() {
        inline.append(a.id, batch, None).unwrap();
        let results = grouped
            .write_group(&[ctxd_store::GroupWrite::Append {
                session: b.id,
                entries: batch,
                expect_leaf: None,
            }])
            .unwrap();
        assert!(results.iter().all(Result::is_ok));
    }
    let expected = dump(&inline_path, a.id);
    let nothing = dump(&group_path, b.id);
    assert!(nothing.0.is_empty() && nothing.2.is_empty() && nothing.3.is_empty());
    // Three entries a step: 10 entries take four steps, the last one reports current.
    let mut steps = Vec::new();
    loop {
        let (count, current) = grouped.index_pending(b.id, 3).unwrap();
        steps.push(count);
        if current {
            break;
        }
    }
    assert_eq!(steps, [3, 3, 3, 1]);
    assert_eq!(grouped.index_pending(b.id, 3).unwrap(), (0, true));
    assert_eq!(grouped.history_sync(b.id).unwrap(), 0);
    assert_eq!(dump(&group_path, b.id), expected);
}

/// What the history API says of a session: its items, windows, branch, and both searches.
fn api_dump(store: &dyn Backend, session: SessionId) -> Vec<String> {
    let mut out = Vec::new();
    store
        .history_items(session, &ItemFilter::default(), None, false, &mut |r| {
            out.push(format!(
                "item {} {} {} {} {} {} {:?} {}",
                r.seq, r.lane, r.window_seq, r.item_key, r.kind, r.role, r.tools, r.sidechain
            ));
            true
        })
        .unwrap();
    for w in store.history_windows(session, None).unwrap() {
        out.push(format!(
            "window {} {} {} {} {}",
            w.window_seq, w.start.id, w.items, w.first_seq, w.last_seq
        ));
    }
    out.push(format!(
        "branch {:?} starts {:?}",
        store.history_branch(session).unwrap().lanes(),
        store.history_window_starts(session).unwrap()
    ));
    let mut hits = Vec::new();
    store
        .history_search_literal(
            session,
            "giraffe",
            &ItemFilter::default(),
            None,
            true,
            &mut |r| {
                hits.push(r.seq);
                true
            },
        )
        .unwrap();
    out.push(format!("literal {hits:?}"));
    let mut ranked = Vec::new();
    let q = RankedQuery::parse("GIRAFFE").unwrap();
    store
        .history_search_ranked(session, &q, &ItemFilter::default(), None, &mut |r| {
            ranked.push(r.seq);
            true
        })
        .unwrap();
    ranked.sort_unstable();
    out.push(format!("ranked {ranked:?}"));
    out
}

#[test]
fn group_writes_then_index_pending_give_what_inline_appends_give_on_every_backend() {
    common::each_backend_pair(|inline, grouped| {
        let a = inline
            .open_session("", "k", &SessionMeta::default())
            .unwrap();
        let b = grouped
            .open_session("", "k", &SessionMeta::default())
            .unwrap();
        for batch in &batches() {
            inline.append(a.id, batch, None).unwrap();
            let results = grouped
                .write_group(&[ctxd_store::GroupWrite::Append {
                    session: b.id,
                    entries: batch,
                    expect_leaf: None,
                }])
                .unwrap();
            assert!(results.iter().all(Result::is_ok));
        }
        assert_eq!(grouped.index_pending(b.id, 3).unwrap(), (3, false));
        while !grouped.index_pending(b.id, 3).unwrap().1 {}
        assert_eq!(grouped.history_sync(b.id).unwrap(), 0);
        let expected = api_dump(inline, a.id);
        assert!(
            expected.iter().any(|l| l == "literal [10, 9, 7]"),
            "{expected:#?}"
        );
        assert!(
            expected.iter().any(|l| l == "ranked [7, 9, 10]"),
            "{expected:#?}"
        );
        // Item keys hash the session id: the two sessions' ids are the same on fresh stores.
        assert_eq!(a.id, b.id);
        assert_eq!(api_dump(grouped, b.id), expected);
    });
}

#[test]
fn searches_are_literal_or_by_word_on_every_backend() {
    each_backend(|store| {
        let s = store
            .open_session("", "k", &SessionMeta::default())
            .unwrap();
        let says = [
            "100% sure: my_var is set",
            "100 percent: myXvar is set",
            "Zebra crossing on the road in the town",
            "zebra, ZEBRA, zebra: a giraffe",
            "back\\slash",
        ];
        let batch: Vec<NewEntry> = says
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let id = format!("e{i}");
                let parent = (i > 0).then(|| format!("e{}", i - 1));
                text(&id, parent.as_deref(), Role::User, t)
            })
            .collect();
        store.append(s.id, &batch, None).unwrap();
        let literal = |q: &str| {
            let mut seqs = Vec::new();
            store
                .history_search_literal(s.id, q, &ItemFilter::default(), None, false, &mut |r| {
                    seqs.push(r.seq);
                    true
                })
                .unwrap();
            seqs
        };
        assert_eq!(literal("0% s"), [1], "% is a character, not a wildcard");
        assert_eq!(literal("my_var"), [1], "_ is a character, not a wildcard");
        assert_eq!(literal("Zebra"), [3], "case-sensitive");
        assert_eq!(literal("k\\s"), [5]);
        assert_eq!(literal("is"), [1, 2], "shorter than a trigram");
        let ranked = |q: &str| {
            let mut seqs = Vec::new();
            let q = RankedQuery::parse(q).unwrap();
            store
                .history_search_ranked(s.id, &q, &ItemFilter::default(), None, &mut |r| {
                    assert!(r.score.is_some());
                    seqs.push(r.seq);
                    true
                })
                .unwrap();
            seqs
        };
        let mut zebras = ranked("zebra");
        zebras.sort_unstable();
        assert_eq!(zebras, [3, 4], "any case");
        assert_eq!(ranked("zebra giraffe"), [4], "every word");
        assert_eq!(ranked("my-var"), [1]);
        assert!(ranked("okapi").is_empty());
        // The one that says zebra most, in fewer words, ranks first on both.
        assert_eq!(ranked("zebra")[0], 4);
    });
}

#[test]
fn long_listings_come_whole_and_in_order_or_stop_when_the_visitor_stops() {
    each_backend(|store| {
        let s = store
            .open_session("", "k", &SessionMeta::default())
            .unwrap();
        let batch: Vec<NewEntry> = (0..300)
            .map(|i| {
                let (id, parent) = (format!("e{i}"), format!("e{}", i.max(1) - 1));
                text(
                    &id,
                    (i > 0).then_some(parent.as_str()),
                    Role::User,
                    "giraffe",
                )
            })
            .collect();
        store.append(s.id, &batch, None).unwrap();
        let all = ItemFilter::default();
        let mut seqs = Vec::new();
        store
            .history_items(s.id, &all, None, true, &mut |r| {
                seqs.push(r.seq);
                true
            })
            .unwrap();
        assert_eq!(seqs, (1..=300).rev().collect::<Vec<i64>>());
        // A literal search's matches across its pages (PostgreSQL reads 128 at a time), each
        // once, in order either way.
        for recent_first in [false, true] {
            let mut found = Vec::new();
            store
                .history_search_literal(s.id, "giraffe", &all, None, recent_first, &mut |r| {
                    found.push(r.seq);
                    true
                })
                .unwrap();
            let mut want: Vec<i64> = (1..=300).collect();
            if recent_first {
                want.reverse();
            }
            assert_eq!(found, want, "recent first: {recent_first}");
        }
        let mut taken = 0;
        store
            .history_search_literal(s.id, "giraffe", &all, None, false, &mut |_| {
                taken += 1;
                taken < 5
            })
            .unwrap();
        assert_eq!(taken, 5);
        // The store is usable at once after a visitor stopped a stream.
        assert_eq!(store.load(s.id).unwrap().entries.len(), 300);
    });
}
