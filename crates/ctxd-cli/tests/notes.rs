#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd notes ...` through the real binary.

mod common;

use std::io::Write;
use std::process::{Output, Stdio};

use serde_json::Value;

struct Store(common::TestDir);

impl Store {
    fn new(name: &str) -> Self {
        Store(common::fresh_dir(&format!("notes-cli-{name}")))
    }

    fn db(&self) -> String {
        self.0.join("s.db").display().to_string()
    }

    fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut cmd = common::ctxd();
        cmd.arg("--store").arg(self.db()).arg("notes").args(args);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            // The child may refuse before reading it all.
            let _ = pipe.write_all(bytes);
        }
        child.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args, None);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        serde_json::from_str(self.ok(&all).trim()).unwrap()
    }

    /// Exit 2 and one line on stderr.
    fn fails(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.run(args, stdin);
        assert_eq!(out.status.code(), Some(2), "{args:?} should fail");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(out.stdout.is_empty());
        err
    }
}

const WHO: [&str; 4] = ["--agent", "pi", "--project", "/repo"];

fn with<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut v = args.to_vec();
    v.extend(WHO);
    v
}

#[test]
fn write_append_read_list_search_rm_mv() {
    let s = Store::new("flow");
    let w = s.json(&with(&["write", "@self/plan.md", "one\ntwo\n"]));
    assert_eq!(w["note"]["address"], "@agents/pi/plan.md");
    assert_eq!(w["note"]["lines"], 2);
    assert_eq!(w["replaced"], false);

    // Append from stdin.
    let out = s.run(&with(&["append", "@self/plan.md"]), Some(b"three\n"));
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "Appended 6 bytes to @agents/pi/plan.md (now 3 lines, 14 bytes).\n"
    );
    // Read: the text itself, byte for byte; ranges with negative lines.
    assert_eq!(
        s.ok(&with(&["read", "@agents/pi/plan.md"])),
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        s.ok(&with(&[
            "read",
            "@self/plan.md",
            "--start",
            "-2",
            "--stop",
            "2"
        ])),
        "two\n"
    );
    let r = s.json(&with(&["read", "@self/plan.md", "--start", "2"]));
    assert_eq!(
        (r["start_line"].as_u64(), r["total_lines"].as_u64()),
        (Some(2), Some(3))
    );

    s.ok(&with(&["write", "@project/todo.md", "TODO: ship"]));
    s.ok(&with(&["write", "@human/prefs.md", "terse"]));
    let list = s.json(&with(&[
        "list",
        "--order-by",
        "name",
        "--order",
        "descending",
    ]));
    let addresses: Vec<&str> = list["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        addresses,
        ["@project/todo.md", "@human/prefs.md", "@agents/pi/plan.md"]
    );
    let text = s.ok(&with(&["list", "@project/"]));
    assert!(
        text.starts_with("1 note in @project (by name, ascending):\n- @project/todo.md"),
        "{text}"
    );

    let found = s.ok(&with(&["search", "TODO"]));
    assert!(found.contains("@project/todo.md:1: TODO: ship"), "{found}");

    let mv = s.json(&with(&["mv", "@project/todo.md", "@human/todo.md"]));
    assert_eq!(mv["note"]["address"], "@human/todo.md");
    s.ok(&with(&["stale", "@human/todo.md"]));
    assert_eq!(
        s.json(&with(&["read", "@human/todo.md"]))["note"]["stale"],
        true
    );
    let rm = s.json(&with(&["rm", "@human/todo.md"]));
    assert_eq!(rm["address"], "@human/todo.md");
    assert!(s
        .fails(&with(&["read", "@human/todo.md"]), None)
        .contains("no note @human/todo.md"));
}

#[test]
fn session_home_needs_a_known_session() {
    let s = Store::new("session");
    let err = s.fails(&["write", "a.md", "x", "--session", "nope"], None);
    assert!(err.contains("no session \"nope\""), "{err}");
    // The refusal names the flag to give (and the other homes).
    let err = s.fails(&["write", "a.md", "x"], None);
    assert!(err.contains("--session SESSION"), "{err}");
    assert!(err.contains("ctxd sessions --stored"), "{err}");
    assert!(err.contains("@project/"), "{err}");
    let err = s.fails(&["write", "@project/todo.md", "x"], None);
    assert!(err.contains("--project KEY"), "{err}");
    let err = s.fails(&["read", "@self/MAP.md"], None);
    assert!(err.contains("--agent NAME"), "{err}");
    let err = s.fails(&["list", "@model/"], None);
    assert!(err.contains("--model NAME"), "{err}");

    // A session in the store: bare paths are its notes.
    {
        use ctxd_store::Store;
        let store =
            ctxd_store::SqliteStore::open(std::path::Path::new(&s.db()), Default::default())
                .unwrap();
        store
            .open_session("", "pi:abc", &Default::default())
            .unwrap();
    }
    s.ok(&["write", "a.md", "session note", "--session", "pi:abc"]);
    assert_eq!(
        s.ok(&["read", "a.md", "--session", "pi:abc"]),
        "session note"
    );
    let list = s.json(&["list", "--session", "pi:abc"]);
    assert_eq!(list["notes"][0]["home"], "session:pi:abc");
    assert_eq!(list["notes"][0]["address"], "a.md");
}

/// `--session` names a session as every other command does: by the id `sessions --stored`
/// lists as well as by key, in whichever tenant holds it (a gateway session's notes are its
/// client's tenant's, found without --key-env). It refused the id ("no session \"8\"") and
/// looked only in the local tenant.
#[test]
fn session_is_named_by_id_or_key_in_any_tenant() {
    let s = Store::new("session-id");
    let (local, gateway) = {
        use ctxd_store::Store;
        let store =
            ctxd_store::SqliteStore::open(std::path::Path::new(&s.db()), Default::default())
                .unwrap();
        let local = store
            .open_session("", "pi:local", &Default::default())
            .unwrap()
            .id;
        let gateway = store
            .open_session("t0123456789abcdef", "cc:gateway", &Default::default())
            .unwrap()
            .id;
        (local, gateway)
    };
    let listed = common::succeed(common::ctxd().args(["--store", &s.db(), "sessions", "--json"]));
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(listed.contains("cc:gateway"), "{listed}");
    for (id, key) in [(local, "pi:local"), (gateway, "cc:gateway")] {
        let id = id.to_string();
        s.ok(&["write", "todo.md", &format!("for {key}"), "--session", &id]);
        assert_eq!(
            s.ok(&["read", "todo.md", "--session", key]),
            format!("for {key}")
        );
        assert_eq!(
            s.ok(&["read", "todo.md", "--session", &id]),
            format!("for {key}")
        );
        let list = s.json(&["list", "--session", &id]);
        assert_eq!(list["notes"][0]["home"], format!("session:{key}"), "{list}");
    }
    // Acting as a key's tenant, another tenant's session is not that key's.
    let out = common::ctxd()
        .args(["--store", &s.db(), "notes", "read", "todo.md"])
        .args(["--session", "cc:gateway", "--key-env", "K"])
        .env("K", "sk-someone")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no session \"cc:gateway\""), "{err}");
}

#[test]
fn bad_input_is_one_line_exit_2_and_nothing_written() {
    let s = Store::new("bad");
    for address in [
        "../escape.md",
        "@nowhere/x",
        "a@b.md",
        "/etc/passwd",
        "a//b",
        "@agents/x",
    ] {
        let err = s.fails(&with(&["write", address, "text"]), None);
        assert!(
            err.starts_with("ctxd: invalid note address"),
            "{address}: {err}"
        );
    }
    // Over the limit, from stdin.
    let big = vec![b'x'; 1_000_001];
    let err = s.fails(&with(&["write", "@human/big.md"]), Some(&big));
    assert!(
        err.contains("1,000,001") && err.contains("1,000,000"),
        "{err}"
    );
    // Exactly at the limit is fine; one more byte appended is refused.
    let full = vec![b'x'; 1_000_000];
    let out = s.run(&with(&["write", "@human/full.md"]), Some(&full));
    assert!(out.status.success());
    let err = s.fails(&with(&["append", "@human/full.md", "y"]), None);
    assert!(err.contains("would be"), "{err}");
    // Invalid UTF-8 on stdin.
    let err = s.fails(&with(&["write", "@human/bin.md"]), Some(b"ok\xff\xfe"));
    assert!(err.contains("not valid UTF-8 (at byte 2)"), "{err}");
    // Bad options.
    let err = s.fails(&with(&["list", "--order-by", "size"]), None);
    assert!(err.contains("name, created_at or updated_at"), "{err}");
    let err = s.fails(&with(&["read", "@human/full.md", "--start", "0"]), None);
    assert!(err.contains("lines start at 1"), "{err}");
    let err = s.fails(&["write", "@self/a.md", "x"], None);
    assert!(
        err.contains("@self/a.md: this address needs --agent NAME"),
        "{err}"
    );

    // Only the one good note exists, unchanged.
    let list = s.json(&with(&["list"]));
    let notes = list["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{list}");
    assert_eq!(notes[0]["address"], "@human/full.md");
    assert_eq!(notes[0]["bytes"], 1_000_000);
    assert_eq!(notes[0]["version"], 1);
}
