#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd recall ...` on the real binary, over a store filled by `ctxd import`.

mod common;

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn recall_shows_an_entry_whole_by_lines_or_by_pattern_and_fails_in_one_line() {
    let dir = common::fresh_dir("recall-cli");
    let db = dir.join("s.db").to_str().unwrap().to_owned();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ctxd-formats/tests/fixtures/pi/tree-v3.jsonl");
    stdout(&common::on_store(
        &db,
        &["import", fixture.to_str().unwrap()],
    ));

    // a3: a bash result, "a.txt\nb.png" and an image; it was trimmed by a context edit (b4),
    // and recall returns it as written.
    let whole = stdout(&common::on_store(&db, &["recall", "pi:sess-v3", "a3"]));
    assert!(whole.starts_with("a.txt\nb.png\n[image"), "{whole}");
    assert!(!whole.contains("[listing trimmed]"), "{whole}");

    let lines = stdout(&common::on_store(
        &db,
        &[
            "recall",
            "pi:sess-v3",
            "a3",
            "--offset",
            "2",
            "--limit",
            "1",
        ],
    ));
    assert!(
        lines.starts_with("b.png\n\n[limit reached: showed lines 2-2 of 3."),
        "{lines}"
    );
    // The hint is the command a person types, not the model's tool call.
    assert!(
        lines
            .trim_end()
            .ends_with("More: ctxd recall pi:sess-v3 a3 --offset 3]"),
        "{lines}"
    );
    assert!(!lines.contains("recall({"), "{lines}");

    let doc: Value = serde_json::from_str(&stdout(&common::on_store(
        &db,
        &["recall", "1", "a3", "--pattern", r"\.png$", "--json"],
    )))
    .unwrap();
    assert_eq!(doc["session"], 1);
    assert_eq!(doc["entry_id"], "a3");
    assert_eq!(doc["text"], "2: b.png");

    // Errors: one line on stderr, exit code 2.
    let long = "a".repeat(501);
    for (args, says) in [
        (vec!["recall", "pi:sess-v3", "nope"], "No entry \"nope\""),
        (
            vec!["recall", "pi:sess-v3", "nope"],
            "`ctxd history items pi:sess-v3`",
        ),
        (vec!["recall", "no-such-session", "a3"], "no session"),
        (
            vec!["recall", "pi:sess-v3", "a3", "--pattern", "(unclosed"],
            "not a valid regex",
        ),
        (
            vec!["recall", "pi:sess-v3", "a3", "--pattern", &long],
            "the limit is 500",
        ),
        (
            vec!["recall", "pi:sess-v3", "a3", "--offset", "0"],
            "offset must be",
        ),
        (
            vec!["recall", "pi:sess-v3", "a3", "--limit", "-2"],
            "limit must be",
        ),
        (
            vec![
                "recall",
                "pi:sess-v3",
                "a3",
                "--pattern",
                "b",
                "--offset",
                "2",
            ],
            "not both",
        ),
    ] {
        let out = common::on_store(&db, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("ctxd: ") && err.contains(says),
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
