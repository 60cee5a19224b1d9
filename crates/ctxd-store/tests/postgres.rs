#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

//! What only the PostgreSQL backend has to show: calls from inside a tokio runtime, several
//! stores (gateways) on one database, migrations racing, reconnecting, and opening by URL.
//! Each test runs on a database of its own (`CTXD_TEST_POSTGRES`, see `common/mod.rs`).

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TempDb;
use ctxd_core::model::{Role, SessionMeta};
use ctxd_store::{
    open, Backend, Durability, GroupWrite, Location, NewEntry, PgStore, Store, StoreError,
    PG_SCHEMA_VERSION,
};

fn entry(id: &str, parent: Option<&str>) -> NewEntry {
    NewEntry::new(ctxd_test_support::entry(
        id,
        parent,
        ctxd_test_support::text(Role::User, &format!("says {id}")),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_from_a_tokio_worker_run_on_the_connection_threads() {
    let Some(db) = TempDb::create() else { return };
    let store = db.open();
    // On a runtime worker thread: the sync driver itself would panic here.
    let s = store
        .open_session("t", "k", &SessionMeta::default())
        .unwrap();
    store.append(s.id, &[entry("a", None)], None).unwrap();
    let moved = store.clone();
    let n = tokio::spawn(async move { moved.load(s.id).unwrap().entries.len() })
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[test]
fn two_stores_appending_to_one_session_lose_and_duplicate_nothing() {
    let Some(db) = TempDb::create() else { return };
    let stores: Vec<Arc<PgStore>> = (0..2).map(|_| Arc::new(db.open())).collect();
    let s = stores[0]
        .open_session("t", "shared", &SessionMeta::default())
        .unwrap();
    const WRITERS: usize = 6;
    const BATCHES: usize = 25;
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = stores[w % 2].clone();
            std::thread::spawn(move || {
                let mut prev: Option<String> = None;
                for b in 0..BATCHES {
                    let (x, y) = (format!("w{w}-{b}-x"), format!("w{w}-{b}-y"));
                    let batch = [entry(&x, prev.as_deref()), entry(&y, Some(&x))];
                    if b % 2 == 0 {
                        store.append(s.id, &batch, None).unwrap();
                    } else {
                        let results = store
                            .write_group(&[GroupWrite::Append {
                                session: s.id,
                                entries: &batch,
                                expect_leaf: None,
                            }])
                            .unwrap();
                        assert!(results.iter().all(Result::is_ok));
                    }
                    prev = Some(y);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let session = stores[1].load(s.id).unwrap();
    assert_eq!(session.entries.len(), WRITERS * BATCHES * 2);
    let mut seen = HashSet::new();
    let mut next_of_writer: BTreeMap<String, usize> = BTreeMap::new();
    for (i, e) in session.entries.iter().enumerate() {
        assert!(seen.insert(e.id.0.clone()), "duplicate {}", e.id);
        if let Some(p) = &e.parent {
            assert!(seen.contains(&p.0), "{} comes before its parent {p}", e.id);
        }
        // A batch's two entries are adjacent, and each writer's batches are in its order.
        let mut parts = e.id.0.split('-');
        let (w, b, half) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        if half == "x" {
            assert_eq!(session.entries[i + 1].id.0, format!("{w}-{b}-y"));
            let next = next_of_writer.entry(w.to_owned()).or_default();
            assert_eq!(b.parse::<usize>().unwrap(), *next);
            *next += 1;
        }
    }
    assert_eq!(stores[0].integrity_check().unwrap(), "ok");
    // The second store indexes what the first wrote, once.
    let indexed = stores[1].index_pending(s.id, u64::MAX).unwrap();
    let synced = ctxd_store::HistoryStore::history_sync(&*stores[0], s.id).unwrap();
    assert!(indexed.1);
    assert!(synced as usize + indexed.0 as usize <= WRITERS * BATCHES * 2);
}

/// Two gateways on one session: one appends turns, the other lands edits only under the leaf
/// it last read. The database orders them: every edit batch that went in sits right after
/// the entry it was written under (the leaf did not move between the read and the commit),
/// and the refused ones left nothing.
#[test]
fn conditional_appends_racing_plain_ones_land_only_under_the_leaf_they_read() {
    let Some(db) = TempDb::create() else { return };
    let stores: Vec<Arc<PgStore>> = (0..2).map(|_| Arc::new(db.open())).collect();
    let s = stores[0]
        .open_session("t", "race", &SessionMeta::default())
        .unwrap();
    stores[0]
        .append(s.id, &[entry("root", None)], None)
        .unwrap();
    const TURNS: usize = 150;
    let turns = {
        let store = stores[0].clone();
        std::thread::spawn(move || {
            for t in 0..TURNS {
                let leaf = store.load(s.id).unwrap().leaf.unwrap();
                let id = format!("turn-{t}");
                store
                    .append(s.id, &[entry(&id, Some(&leaf.0))], None)
                    .unwrap();
            }
        })
    };
    let store = stores[1].clone();
    let (mut landed, mut refused) = (0, 0);
    for n in 0.. {
        if turns.is_finished() && n > 20 {
            break;
        }
        let leaf = store.load(s.id).unwrap().leaf.unwrap();
        let (x, y) = (format!("edit-{n}-x"), format!("edit-{n}-y"));
        let batch = [entry(&x, Some(&leaf.0)), entry(&y, Some(&x))];
        let results = store
            .write_group(&[GroupWrite::Append {
                session: s.id,
                entries: &batch,
                expect_leaf: Some(&leaf),
            }])
            .unwrap();
        match &results[0] {
            Ok(()) => landed += 1,
            Err(StoreError::LeafMoved { expected, .. }) if *expected == leaf.0 => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    turns.join().unwrap();
    let session = stores[0].load(s.id).unwrap();
    let mut seen = HashSet::new();
    for (i, e) in session.entries.iter().enumerate() {
        assert!(seen.insert(e.id.0.clone()), "duplicate {}", e.id);
        if e.id.0.ends_with("-x") {
            assert_eq!(
                e.parent.as_ref(),
                Some(&session.entries[i - 1].id),
                "edit batch {} landed away from the leaf it read",
                e.id
            );
            assert_eq!(session.entries[i + 1].id.0, e.id.0.replace("-x", "-y"));
        }
    }
    let edits = session
        .entries
        .iter()
        .filter(|e| e.id.0.starts_with("edit-"))
        .count();
    assert_eq!(edits, landed * 2, "a refused batch left entries");
    assert_eq!(session.entries.len(), 1 + TURNS + landed * 2);
    assert!(landed > 0, "no conditional append ever landed");
    eprintln!("conditional appends: {landed} landed, {refused} refused");
}

#[test]
fn stores_starting_together_migrate_once() {
    let Some(db) = TempDb::create() else { return };
    let url = db.url.clone();
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PgStore::open(&url).map(|_| ()))
        })
        .collect();
    for t in opened {
        t.join().unwrap().unwrap();
    }
    let store = db.open();
    let s = store
        .open_session("", "k", &SessionMeta::default())
        .unwrap();
    assert_eq!(store.append(s.id, &[entry("a", None)], None).unwrap(), 1);
}

#[test]
fn a_newer_schema_is_refused() {
    let Some(db) = TempDb::create() else { return };
    drop(db.open());
    db.sql("INSERT INTO schema_migrations (version) VALUES (999)");
    let err = PgStore::open(&db.url).err().unwrap();
    assert!(
        matches!(err, StoreError::TooNew { found: 999, supported } if supported == PG_SCHEMA_VERSION),
        "{err}"
    );
}

#[test]
fn the_store_reconnects_after_its_connections_are_terminated() {
    let Some(db) = TempDb::create() else { return };
    let store = PgStore::open(&format!("{}?pool=2", db.url)).unwrap();
    assert_eq!(store.pool_size(), 2);
    let s = store
        .open_session("", "k", &SessionMeta::default())
        .unwrap();
    store.append(s.id, &[entry("a", None)], None).unwrap();
    db.sql(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{}' AND pid <> pg_backend_pid()",
        db.name
    ));
    // Each thread's first call after the termination fails (as unavailable); later calls
    // reconnect.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut failures = 0;
    let mut ok_in_a_row = 0;
    while ok_in_a_row < 4 {
        match store.load(s.id) {
            Ok(session) => {
                assert_eq!(session.entries.len(), 1);
                ok_in_a_row += 1;
            }
            Err(e) => {
                assert!(matches!(e, StoreError::Unavailable(_)), "{e}");
                failures += 1;
                ok_in_a_row = 0;
                assert!(Instant::now() < deadline, "no reconnect: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    assert!(failures <= 4, "{failures} failures");
    store.append(s.id, &[entry("b", Some("a"))], None).unwrap();
}

#[test]
fn an_unreachable_server_is_unavailable_and_the_password_never_shows() {
    // Port 1 on loopback: nothing listens there.
    let url = "postgres://ctxd:sekrit@127.0.0.1:1/ctxd?connect_timeout=2";
    let err = PgStore::open(url).err().unwrap();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    let text = err.to_string();
    assert!(!text.contains("sekrit"), "{text}");
    assert!(text.contains("ctxd:***@127.0.0.1:1"), "{text}");
}

#[test]
fn open_by_location_gives_a_postgres_backend() {
    let Some(db) = TempDb::create() else { return };
    let store: Box<dyn Backend> = open(&Location::parse(&db.url), Durability::Full).unwrap();
    assert_eq!(store.kind(), ctxd_store::StoreKind::Postgres);
    assert!(!store.quick_commit());
    assert_eq!(store.location(), db.url);
    assert!(store.shared());
    let s = store
        .open_session("", "k", &SessionMeta::default())
        .unwrap();
    store.append(s.id, &[entry("a", None)], None).unwrap();
    let reader = store.reader().unwrap();
    assert_eq!(reader.load(s.id).unwrap().entries.len(), 1);
    assert_eq!(store.integrity_check().unwrap(), "ok");
    assert_eq!(store.setting_or_insert("k", b"one").unwrap(), b"one");
    assert_eq!(reader.setting_or_insert("k", b"two").unwrap(), b"one");
}

#[test]
fn gateways_racing_for_one_budget_admit_at_most_one_request_past_it() {
    use ctxd_core::spend::Spend;
    let Some(db) = TempDb::create() else { return };
    let stores: Vec<Arc<PgStore>> = (0..2).map(|_| Arc::new(db.open())).collect();
    let bound = Spend {
        tokens: 1_000,
        micro_usd: u64::MAX,
    };
    let each = Spend {
        tokens: 100,
        micro_usd: 0,
    };
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = stores[t % 2].clone();
            std::thread::spawn(move || {
                (0..10)
                    .filter(|_| store.spend_reserve("all", "total", each, bound).unwrap().0)
                    .count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // 100 tokens each against 1,000: the tenth reaches the bound exactly, none after it.
    assert_eq!(admitted, 10, "80 racing reservations, 10 admitted");
    let c = stores[0].spend("all", "total").unwrap();
    assert_eq!(c.reserved.tokens, 1_000);
}
