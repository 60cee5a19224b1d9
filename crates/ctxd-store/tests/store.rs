#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxd_core::model::{EntryId, EntryKind, Role, SessionMeta};
use ctxd_store::{Durability, GroupWrite, Head, NewEntry, SqliteStore, Store, StoreError};

mod common;
use common::each_backend;

fn entry(id: &str, parent: Option<&str>, text: &str) -> NewEntry {
    NewEntry::new(ctxd_test_support::entry(
        id,
        parent,
        ctxd_test_support::text(Role::User, text),
    ))
}

#[test]
fn batches_are_atomic_and_read_back_in_order() {
    each_backend(|store| {
        let s = store
            .open_session("t", "k", &SessionMeta::default())
            .unwrap();
        let b1 = store
            .append(
                s.id,
                &[entry("a", None, "one"), entry("b", Some("a"), "two")],
                None,
            )
            .unwrap();
        assert_eq!(b1, 1);
        // A duplicate id anywhere in a batch rolls the whole batch back.
        let err = store
            .append(
                s.id,
                &[entry("c", Some("b"), "three"), entry("a", Some("c"), "dup")],
                None,
            )
            .unwrap_err();
        assert!(
            matches!(err, StoreError::DuplicateEntry { ref id } if id == "a"),
            "{err}"
        );
        // So does an id the batch itself repeats.
        let err = store
            .append(
                s.id,
                &[
                    entry("d", Some("b"), "four"),
                    entry("d", Some("d"), "again"),
                ],
                None,
            )
            .unwrap_err();
        assert!(
            matches!(err, StoreError::DuplicateEntry { ref id } if id == "d"),
            "{err}"
        );
        let session = store.load(s.id).unwrap();
        let ids: Vec<&str> = session.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(session.leaf, Some(EntryId::new("b")));
        // A leaf that names no entry is refused, and nothing of the batch stays.
        let err = store
            .append(
                s.id,
                &[entry("c", Some("b"), "x")],
                Some(&EntryId::new("zz")),
            )
            .unwrap_err();
        assert!(matches!(err, StoreError::NoEntry(_)));
        assert_eq!(store.load(s.id).unwrap().entries.len(), 2);
        store.set_leaf(s.id, &EntryId::new("a")).unwrap();
        assert_eq!(store.load(s.id).unwrap().leaf, Some(EntryId::new("a")));
        assert!(store.set_leaf(s.id, &EntryId::new("nope")).is_err());
        assert_eq!(
            store
                .entry(s.id, &EntryId::new("b"))
                .unwrap()
                .unwrap()
                .parent,
            Some(EntryId::new("a"))
        );
    });
}

/// A conditional append (a distillation pass's edits) lands only while the session's leaf is
/// the one it names; otherwise nothing of it is written, and the other writes of its group
/// still are.
#[test]
fn a_conditional_append_lands_only_while_the_leaf_is_where_it_was() {
    each_backend(|store| {
        let s = store
            .open_session("t", "k", &SessionMeta::default())
            .unwrap();
        store
            .append(
                s.id,
                &[entry("a", None, "one"), entry("b", Some("a"), "two")],
                None,
            )
            .unwrap();
        let b = EntryId::new("b");
        let edits = [entry("e1", Some("b"), "edit")];
        let results = store
            .write_group(&[GroupWrite::Append {
                session: s.id,
                entries: &edits,
                expect_leaf: Some(&b),
            }])
            .unwrap();
        assert!(results[0].is_ok(), "{results:?}");
        assert_eq!(store.load(s.id).unwrap().leaf, Some(EntryId::new("e1")));
        // Another writer moved the leaf (to e1): an append expecting b is refused whole, in a
        // group beside a write that goes in.
        let late = [
            entry("e2", Some("b"), "late"),
            entry("e3", Some("e2"), "late"),
        ];
        let next = [entry("c", Some("e1"), "three")];
        let results = store
            .write_group(&[
                GroupWrite::Append {
                    session: s.id,
                    entries: &late,
                    expect_leaf: Some(&b),
                },
                GroupWrite::Append {
                    session: s.id,
                    entries: &next,
                    expect_leaf: None,
                },
            ])
            .unwrap();
        assert!(
            matches!(&results[0], Err(StoreError::LeafMoved { expected, found })
                if expected == "b" && found.as_deref() == Some("e1")),
            "{results:?}"
        );
        assert!(results[1].is_ok(), "{results:?}");
        let session = store.load(s.id).unwrap();
        let ids: Vec<&str> = session.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "e1", "c"]);
        assert_eq!(session.leaf, Some(EntryId::new("c")));
    });
}

/// A cached copy's check (`follow`): the head always, and the entries from the copy's last
/// on only when the store holds more than the copy.
#[test]
fn follow_gives_the_head_and_what_a_copy_lacks() {
    each_backend(|store| {
        let s = store
            .open_session("t", "k", &SessionMeta::default())
            .unwrap();
        let (head, tail) = store.follow(s.id, 0).unwrap();
        assert_eq!(head, Head::default());
        assert!(tail.is_empty());
        store
            .append(
                s.id,
                &[
                    entry("a", None, "one"),
                    entry("b", Some("a"), "two"),
                    entry("c", Some("b"), "three"),
                ],
                None,
            )
            .unwrap();
        store.set_leaf(s.id, &EntryId::new("b")).unwrap();
        let ids = |known| {
            let (head, tail) = store.follow(s.id, known).unwrap();
            assert_eq!(head.entries, 3);
            assert_eq!(head.last, Some(EntryId::new("c")));
            assert_eq!(head.leaf, Some(EntryId::new("b")));
            tail.into_iter().map(|e| e.id.0).collect::<Vec<_>>()
        };
        assert_eq!(ids(0), ["a", "b", "c"]);
        assert_eq!(ids(1), ["a", "b", "c"]);
        assert_eq!(ids(2), ["b", "c"]);
        assert!(ids(3).is_empty());
        assert!(ids(7).is_empty());
        assert!(matches!(
            store.follow(s.id + 1000, 0),
            Err(StoreError::NoSession(_))
        ));
    });
}

#[test]
fn tenants_never_see_each_other() {
    each_backend(|store| {
        let a = store
            .open_session("alice", "same-key", &SessionMeta::default())
            .unwrap();
        let b = store
            .open_session("bob", "same-key", &SessionMeta::default())
            .unwrap();
        assert_ne!(a.id, b.id);
        assert_eq!(store.list_sessions("alice").unwrap().len(), 1);
        assert!(store.session("bob", a.id).unwrap().is_none());
        assert!(store.find_session("carol", "same-key").unwrap().is_none());
        // Opening again returns the same session.
        assert_eq!(
            store
                .open_session("alice", "same-key", &SessionMeta::default())
                .unwrap()
                .id,
            a.id
        );
    });
}

#[test]
fn reopens_a_file_store_and_checks_integrity() {
    let dir = std::env::temp_dir().join(format!("ctxd-store-reopen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("nested/store.db");
    {
        let store = SqliteStore::open(&path, Durability::Full).unwrap();
        let s = store
            .open_session("", "k", &SessionMeta::default())
            .unwrap();
        store
            .append(s.id, &[entry("a", None, "hello")], None)
            .unwrap();
    }
    let store = SqliteStore::open(&path, Durability::Normal).unwrap();
    let s = store.find_session("", "k").unwrap().unwrap();
    assert_eq!(s.entry_count, 1);
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_newer_schema_is_refused() {
    let dir = std::env::temp_dir().join(format!("ctxd-store-newer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s.db");
    {
        let conn = rusqlite_conn(&path);
        conn.pragma_update(None, "user_version", 999).unwrap();
    }
    let err = SqliteStore::open(&path, Durability::Full).err().unwrap();
    assert!(
        matches!(err, StoreError::TooNew { found: 999, .. }),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn rusqlite_conn(path: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

/// The same request planned by two gateways (a retry racing its original) appends the same
/// entries, with ids derived from their content and parent: the second append is answered and
/// nothing is stored twice. A different entry under a held id is still refused.
#[test]
fn the_same_entries_appended_twice_are_stored_once() {
    each_backend(|store| {
        let s = store
            .open_session("t", "k", &SessionMeta::default())
            .unwrap();
        let first = [entry("a", None, "one"), entry("b", Some("a"), "two")];
        store.append(s.id, &first, None).unwrap();
        let again = [
            entry("a", None, "one"),
            entry("b", Some("a"), "two"),
            entry("c", Some("b"), "three"),
        ];
        store.append(s.id, &again, None).unwrap();
        store.append(s.id, &again, None).unwrap();
        let session = store.load(s.id).unwrap();
        let ids: Vec<&str> = session.entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(session.leaf, Some(EntryId::new("c")));
        // The same content under the same parent with other metadata (another provider
        // response) is the winner's entry too.
        let mut answer = entry("b", Some("a"), "two");
        if let EntryKind::Message(m) = &mut answer.entry.kind {
            m.response_id = Some("msg_other".into());
        }
        store.append(s.id, &[answer], None).unwrap();
        let err = store
            .append(s.id, &[entry("b", Some("a"), "not two")], None)
            .unwrap_err();
        assert!(
            matches!(err, StoreError::DuplicateEntry { ref id } if id == "b"),
            "{err}"
        );
        assert_eq!(store.load(s.id).unwrap().entries.len(), 3);
    });
}

#[test]
fn a_spending_counter_admits_until_its_bound_then_settles_what_was_billed() {
    use ctxd_core::spend::Spend;
    each_backend(|store| {
        let tokens = |tokens| Spend {
            tokens,
            micro_usd: 0,
        };
        let bound = Spend {
            tokens: 100,
            micro_usd: u64::MAX,
        };
        assert_eq!(
            store.spend("tenant:t", "day:2026-12-05").unwrap(),
            Default::default()
        );
        // Admitted while used + reserved is below the bound, even when this one goes past it.
        let (ok, c) = store
            .spend_reserve("tenant:t", "day:2026-12-05", tokens(60), bound)
            .unwrap();
        assert!(ok);
        assert_eq!(c.reserved.tokens, 60);
        let (ok, c) = store
            .spend_reserve("tenant:t", "day:2026-12-05", tokens(60), bound)
            .unwrap();
        assert!(ok, "60 < 100: admitted");
        assert_eq!(c.reserved.tokens, 120);
        let (ok, c) = store
            .spend_reserve("tenant:t", "day:2026-12-05", tokens(1), bound)
            .unwrap();
        assert!(!ok, "120 reserved: refused");
        assert_eq!(c.reserved.tokens, 120, "a refusal reserves nothing");
        // The responses' usage replaces the reservations.
        store
            .spend_settle("tenant:t", "day:2026-12-05", tokens(30), tokens(60))
            .unwrap();
        store
            .spend_settle("tenant:t", "day:2026-12-05", tokens(40), tokens(60))
            .unwrap();
        let c = store.spend("tenant:t", "day:2026-12-05").unwrap();
        assert_eq!((c.used.tokens, c.reserved.tokens), (70, 0));
        assert!(
            store
                .spend_reserve("tenant:t", "day:2026-12-05", tokens(1), bound)
                .unwrap()
                .0
        );
        // Another period or scope is another counter; a release never goes below zero.
        store
            .spend_settle("tenant:t", "day:2026-12-06", tokens(5), tokens(99))
            .unwrap();
        let c = store.spend("tenant:t", "day:2026-12-06").unwrap();
        assert_eq!((c.used.tokens, c.reserved.tokens), (5, 0));
        assert_eq!(
            store.spend("tenant:u", "day:2026-12-05").unwrap(),
            Default::default()
        );
    });
}
