#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Crash safety: SIGKILL a process that appends batches in a loop, many times, and check after
//! every kill that each acknowledged batch is in the store whole, no batch is partial, the file
//! passes `PRAGMA integrity_check` and the session loads.
//!
//! The victim is `examples/append_loop.rs`, built here through cargo (a no-op when fresh).
//! `CTXD_CRASH_ROUNDS` (default 50) and `CTXD_CRASH_SEED` (default: the clock, printed) vary it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ctxd_core::tree::active_branch;
use ctxd_store::{Durability, SqliteStore, Store};
use rusqlite::{Connection, OpenFlags};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Build the example (same profile as this test) and return its path, from cargo's own report.
fn append_loop_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "--quiet",
        "-p",
        "ctxd-store",
        "--example",
        "append_loop",
        "--message-format=json-render-diagnostics",
    ]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd.stderr(Stdio::inherit()).output().expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build --example append_loop failed"
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "append_loop")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported no append_loop executable")
}

/// One acknowledged batch: its number and entry ids, as the child printed them.
fn parse_ack(line: &str) -> Option<(i64, Vec<String>)> {
    let rest = line.strip_suffix('\n')?.strip_prefix("ACK ")?;
    let mut parts = rest.split(' ');
    let batch = parts.next()?.parse().ok()?;
    Some((batch, parts.map(str::to_owned).collect()))
}

/// `<tag>.<i>.<n>` -> (tag, i, n).
fn parse_id(id: &str) -> (String, u64, u64) {
    let mut it = id.rsplitn(3, '.');
    let n = it.next().unwrap().parse().unwrap();
    let i = it.next().unwrap().parse().unwrap();
    (it.next().unwrap().to_owned(), i, n)
}

/// Reopen the store after a kill and check everything. Returns (entries, batches) in the store.
fn verify(path: &Path, acked: &BTreeMap<i64, Vec<String>>) -> (usize, usize) {
    let store = SqliteStore::open(path, Durability::Full).expect("reopen after kill");
    assert_eq!(store.integrity_check().unwrap(), "ok");
    let Some(session) = store.find_session("", "crash").unwrap() else {
        assert!(acked.is_empty(), "acknowledged batches but no session");
        return (0, 0);
    };
    let loaded = store.load(session.id).expect("the session loads");

    let ro = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let rows: Vec<(i64, i64, String, Option<String>, bool)> = ro
        .prepare(
            "SELECT batch, seq, id, parent, raw IS NOT NULL FROM entries \
             WHERE session_id = ?1 ORDER BY seq",
        )
        .unwrap()
        .query_map([session.id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();

    // Sequence numbers run 1..=N; every entry is the child of the one before.
    let mut by_batch: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for (k, (batch, seq, id, parent, has_raw)) in rows.iter().enumerate() {
        assert_eq!(*seq, k as i64 + 1, "seq gap at {id}");
        let expected_parent = k.checked_sub(1).map(|p| rows[p].2.as_str());
        assert_eq!(parent.as_deref(), expected_parent, "broken chain at {id}");
        let (_, i, _) = parse_id(id);
        assert_eq!(*has_raw, i % 2 == 0, "raw bytes of {id}");
        by_batch.entry(*batch).or_default().push(id);
    }
    // No partial batch: each batch is one attempt's entries 0..n, all n of them.
    for (k, (batch, ids)) in by_batch.iter().enumerate() {
        assert_eq!(*batch, k as i64 + 1, "batch numbers have a gap");
        let (tag, _, n) = parse_id(ids[0]);
        assert_eq!(ids.len() as u64, n, "batch {batch} is partial: {ids:?}");
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(parse_id(id), (tag.clone(), i as u64, n), "batch {batch}");
        }
    }
    // Every acknowledged batch is there, exactly as acknowledged.
    for (batch, ids) in acked {
        let stored: Vec<String> = by_batch
            .get(batch)
            .unwrap_or_else(|| panic!("acknowledged batch {batch} is lost"))
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(&stored, ids, "acknowledged batch {batch} differs");
    }
    // The store's own reading agrees; the leaf moved with the last batch; the index too.
    let ids: Vec<&str> = loaded.entries.iter().map(|e| e.id.as_str()).collect();
    let db_ids: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(ids, db_ids);
    assert_eq!(
        loaded.leaf.as_ref().map(|l| l.as_str()),
        db_ids.last().copied()
    );
    assert_eq!(active_branch(&loaded).len(), rows.len());
    let (text_rows, hits): (i64, i64) = ro
        .query_row(
            "SELECT (SELECT COUNT(*) FROM entry_text WHERE session_id = ?1), \
                    (SELECT COUNT(*) FROM entry_fts WHERE entry_fts MATCH 'crashword')",
            [session.id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((text_rows, hits), (rows.len() as i64, rows.len() as i64));
    // The history index is written in the append's transaction: one row per entry, one
    // trigram row per item (every entry here says something), never behind.
    let (items, trigram_hits): (i64, i64) = ro
        .query_row(
            "SELECT (SELECT COUNT(*) FROM history_items WHERE session_id = ?1), \
                    (SELECT COUNT(*) FROM history_trigram WHERE history_trigram MATCH 'crashword')",
            [session.id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        (items, trigram_hits),
        (rows.len() as i64, rows.len() as i64)
    );
    (rows.len(), by_batch.len())
}

#[test]
fn sigkilled_appender_loses_no_acknowledged_batch_and_leaves_no_partial_one() {
    let binary = append_loop_binary();
    let rounds: u64 = std::env::var("CTXD_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("CTXD_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("crash test: seed {seed} (CTXD_CRASH_SEED), {rounds} rounds");
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let started = Instant::now();

    let mut acked: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    let mut rounds_with_acks = 0;
    for round in 0..rounds {
        let mut child = Command::new(&binary)
            .arg(&path)
            .arg(rng.next().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                lines.push(std::mem::take(&mut line));
            }
            lines
        });
        // Mostly mid-loop; one round in five early, while the store is opening or migrating.
        let delay = if rng.below(5) == 0 {
            rng.below(15)
        } else {
            20 + rng.below(300)
        };
        std::thread::sleep(Duration::from_millis(delay));
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("append_loop exited by itself ({status}): {err}");
        }
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let lines = reader.join().unwrap();

        let before = acked.len();
        for line in &lines {
            // A line cut short by the kill is not an acknowledgement.
            if let Some((batch, ids)) = parse_ack(line) {
                assert!(
                    acked.insert(batch, ids).is_none(),
                    "batch {batch} acked twice"
                );
            }
        }
        if acked.len() > before {
            rounds_with_acks += 1;
        }
        let (entries, batches) = verify(&path, &acked);
        // At most one batch per kill can be committed without its acknowledgement.
        assert!(batches >= acked.len() && batches - acked.len() <= round as usize + 1);
        eprintln!(
            "round {round}: killed after {delay} ms; {} acked this round; store has {batches} \
             batches ({} committed, never acked), {entries} entries",
            acked.len() - before,
            batches - acked.len()
        );
    }
    eprintln!(
        "crash test: {rounds} kills, {} acknowledged batches, {:.1} s",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        rounds_with_acks * 2 >= rounds,
        "too few rounds got as far as appending ({rounds_with_acks}/{rounds}): the test \
         would not show anything"
    );
}

/// The checker itself can fail: a batch cut in two, and an acknowledged batch that is missing.
#[test]
fn the_checker_catches_a_partial_batch_and_a_lost_one() {
    use ctxd_core::model::{Entry, EntryId, EntryKind, Message, Role, SessionMeta};
    use ctxd_store::NewEntry;

    let entry = |id: &str, parent: Option<&str>, raw: bool| NewEntry {
        entry: Entry {
            id: EntryId::new(id),
            parent: parent.map(EntryId::new),
            timestamp: None,
            sidechain: false,
            kind: EntryKind::Message(Message::text(Role::User, "crashword")),
        },
        raw: raw.then(|| b"r".to_vec()),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let store = SqliteStore::open(&path, Durability::Full).unwrap();
    let s = store
        .open_session("", "crash", &SessionMeta::default())
        .unwrap();
    store
        .append(s.id, &[entry("t1.0.1", None, true)], None)
        .unwrap();
    let whole: BTreeMap<i64, Vec<String>> = [(1, vec!["t1.0.1".to_owned()])].into();
    assert_eq!(verify(&path, &whole), (1, 1));

    // Lost: an acknowledged batch 2 the store does not have.
    let mut lost = whole.clone();
    lost.insert(2, vec!["t2.0.1".to_owned()]);
    let err = std::panic::catch_unwind(|| verify(&path, &lost)).unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("acknowledged batch 2 is lost"), "{msg}");

    // Partial: a batch of three written as two entries.
    store
        .append(
            s.id,
            &[
                entry("t3.0.3", Some("t1.0.1"), true),
                entry("t3.1.3", Some("t3.0.3"), false),
            ],
            None,
        )
        .unwrap();
    drop(store);
    let err = std::panic::catch_unwind(|| verify(&path, &whole)).unwrap_err();
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("batch 2 is partial"), "{msg}");
}

/// Two processes (here: two stores on one file) appending at once must wait for each other
/// (`busy_timeout`), not fail. Today `append` opens a deferred transaction that reads before it
/// writes, so SQLite answers `database is locked` at once instead of waiting.
#[test]
fn concurrent_writers_wait_for_each_other() {
    use ctxd_core::model::{Entry, EntryId, EntryKind, Message, Role, SessionMeta};
    use ctxd_store::NewEntry;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    SqliteStore::open(&path, Durability::Normal).unwrap();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let path = path.clone();
            std::thread::spawn(move || {
                let store = SqliteStore::open(&path, Durability::Normal).unwrap();
                let s = store
                    .open_session("", &format!("w{w}"), &SessionMeta::default())
                    .unwrap();
                for k in 0..200 {
                    let e = Entry {
                        id: EntryId::new(format!("e{k}")),
                        parent: None,
                        timestamp: None,
                        sidechain: false,
                        kind: EntryKind::Message(Message::text(Role::User, "x")),
                    };
                    store.append(s.id, &[NewEntry::new(e)], None)?;
                }
                Ok::<_, ctxd_store::StoreError>(())
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap().unwrap();
    }
}
