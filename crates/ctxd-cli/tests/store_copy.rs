#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd store copy` on the real binary: a copy answers every read as its source does
//! (sessions, reports, history search, notes with their versions): SQLite to SQLite, and
//! with `CTXD_TEST_POSTGRES` set, through PostgreSQL and back (`postgres_round_trip`).

mod common;

use std::path::PathBuf;

use serde_json::Value;

fn ok(store: &str, args: &[&str]) -> String {
    let out = common::on_store(store, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn fixture(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ctxd-formats/tests/fixtures")
        .join(path)
        .display()
        .to_string()
}

/// A store with three imported sessions, a note written twice, appended to and renamed.
fn filled(db: &str) {
    ok(
        db,
        &[
            "import",
            &fixture("pi/tree-v3.jsonl"),
            &fixture("claude_code/real-2.1.197-compact.jsonl"),
            &fixture("codex/legacy.jsonl"),
        ],
    );
    let note = |args: &[&str]| {
        let mut all = vec!["notes"];
        all.extend_from_slice(args);
        ok(db, &all)
    };
    note(&["write", "@project/todo.md", "one", "--project", "/p"]);
    note(&["write", "@project/todo.md", "two", "--project", "/p"]);
    note(&["append", "@project/todo.md", "three", "--project", "/p"]);
    note(&[
        "mv",
        "@project/todo.md",
        "@project/done.md",
        "--project",
        "/p",
    ]);
}

/// Everything a reader sees of `db`, for comparing a copy with its source.
/// `ranked`: with ranked search, whose scores are each backend's own (bm25 on SQLite,
/// `ts_rank` on PostgreSQL).
fn observed(db: &str, ranked: bool) -> Vec<String> {
    let listed = ok(db, &["sessions", "--json"]);
    let mut seen = Vec::new();
    let mut keys: Vec<String> = listed
        .lines()
        .map(|line| {
            let s: Value = serde_json::from_str(line).unwrap();
            s["key"].as_str().unwrap().to_owned()
        })
        .collect();
    keys.sort();
    assert_eq!(keys.len(), 3, "{listed}");
    for key in &keys {
        seen.push(ok(db, &["report", key, "--json"]));
        seen.push(ok(db, &["history", "items", key, "--json"]));
        if ranked {
            let search = ["history", "search", key, "the", "--ranked", "--json"];
            seen.push(ok(db, &search));
        }
        seen.push(ok(db, &["history", "search", key, "README", "--json"]));
    }
    for args in [
        ["notes", "read", "@project/done.md"],
        ["notes", "list", "@project/"],
    ] {
        let mut all = args.to_vec();
        all.extend(["--project", "/p", "--json"]);
        // The listing says when it was made: not part of what is compared.
        let mut listed: Value = serde_json::from_str(&ok(db, &all)).unwrap();
        listed.as_object_mut().unwrap().remove("now_ms");
        seen.push(listed.to_string());
    }
    seen
}

/// `a` and `b` read alike; the first difference is the failure.
fn same(a: &str, b: &str) {
    same_but_ranked(a, b, true);
}

fn same_but_ranked(a: &str, b: &str, ranked: bool) {
    let (seen_a, seen_b) = (observed(a, ranked), observed(b, ranked));
    assert_eq!(seen_a.len(), seen_b.len());
    for (x, y) in seen_a.iter().zip(&seen_b) {
        assert!(x == y, "source:\n{x}\ncopy:\n{y}");
    }
    assert!(
        seen_a
            .iter()
            .any(|s| s.contains("\"mode\":\"literal\",\"hits\":[{")),
        "a literal search found nothing: the comparison proves little"
    );
}

fn copy(from: &str, to: &str) -> Value {
    let out = common::succeed(
        common::ctxd().args(["store", "copy", "--from", from, "--to", to, "--json"]),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_copy_reads_as_its_source() {
    let dir = common::fresh_dir("store-copy");
    let (a, b) = (
        dir.join("a.db").display().to_string(),
        dir.join("b.db").display().to_string(),
    );
    filled(&a);
    let copied = copy(&a, &b);
    assert_eq!(copied["sessions"], 3, "{copied}");
    assert_eq!(copied["notes"], 1, "{copied}");
    assert!(copied["note_versions"].as_u64().unwrap() >= 5, "{copied}");
    same(&a, &b);
    // A store that holds sessions already is refused, untouched.
    let again = common::ctxd()
        .args(["store", "copy", "--from", &a, "--to", &b])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("copy into a new store"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    same(&a, &b);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SQLite → PostgreSQL → SQLite: each copy reads as the source. Needs `CTXD_TEST_POSTGRES`
/// (an admin URL; `psql` on PATH); skipped without it, except under `CI`.
#[test]
fn postgres_round_trip() {
    let Some(admin) = std::env::var("CTXD_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set CTXD_TEST_POSTGRES"
        );
        eprintln!("postgres_round_trip: CTXD_TEST_POSTGRES unset, skipped");
        return;
    };
    let name = format!("ctxd_copy_{}", std::process::id());
    let psql = |sql: &str| {
        common::succeed(std::process::Command::new("psql").args([
            admin.as_str(),
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-c",
            sql,
        ]));
    };
    psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    psql(&format!("CREATE DATABASE {name}"));
    let (base, _) = admin.rsplit_once('/').unwrap();
    let pg = format!("{base}/{name}");
    let dir = common::fresh_dir("store-copy-pg");
    let (a, c) = (
        dir.join("a.db").display().to_string(),
        dir.join("c.db").display().to_string(),
    );
    filled(&a);
    assert_eq!(copy(&a, &pg)["sessions"], 3);
    same_but_ranked(&a, &pg, false);
    assert_eq!(copy(&pg, &c)["sessions"], 3);
    same(&a, &c);
    psql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ctxd store check` and `ctxd store vacuum` on a SQLite store: the integrity, the sessions
/// and the sizes; a vacuum empties the WAL and never grows the file, and is refused while a
/// gateway serves the store.
#[test]
fn check_and_vacuum_report_the_store_and_vacuum_waits_for_no_gateway() {
    let dir = common::fresh_dir("store-vacuum");
    let db = dir.join("s.db");
    let db = db.to_str().unwrap();
    filled(db);
    let text = ok(db, &["store", "check"]);
    assert!(
        text.contains("3 sessions") && text.contains("integrity: ok"),
        "{text}"
    );
    let checked: Value = serde_json::from_str(&ok(db, &["store", "check", "--json"])).unwrap();
    assert_eq!(checked["sessions"], 3);
    assert_eq!(checked["integrity"], "ok");
    assert!(checked["wal_bytes"].is_u64(), "{checked}");

    let done: Value = serde_json::from_str(&ok(db, &["store", "vacuum", "--json"])).unwrap();
    assert_eq!(done["after"]["wal_bytes"], 0, "{done}");
    assert!(
        done["after"]["database_bytes"].as_u64() <= done["before"]["database_bytes"].as_u64(),
        "{done}"
    );
    assert_eq!(done["after"]["sessions"], 3);
    assert_eq!(done["after"]["integrity"], "ok");

    // A gateway holds the store: vacuum is refused, the store untouched.
    let mut gateway = common::ctxd()
        .args(["--store", db, "serve", "--listen", "127.0.0.1:0"])
        .env("CTXD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(gateway.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("listening on"), "{line}");
    let refused = common::on_store(db, &["store", "vacuum"]);
    let _ = gateway.kill();
    let _ = gateway.wait();
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("serves") && why.contains("stop it first"),
        "{why}"
    );
    let text = ok(db, &["store", "check"]);
    assert!(
        text.contains("3 sessions") && text.contains("integrity: ok"),
        "{text}"
    );
}
