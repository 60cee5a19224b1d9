#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd history ...` on the real binary, over a store filled by `ctxd import`.

mod common;

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn store() -> (common::TestDir, String) {
    let dir = common::fresh_dir("history-cli");
    let db = dir.join("s.db").to_str().unwrap().to_owned();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ctxd-formats/tests/fixtures/pi/tree-v3.jsonl");
    let out = common::on_store(&db, &["import", fixture.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, db)
}

#[test]
fn history_commands_list_read_and_search() {
    let (dir, db) = store();
    let windows = json(&common::on_store(
        &db,
        &["history", "windows", "pi:sess-v3", "--json"],
    ));
    assert_eq!(windows["total"], 1);
    let items = json(&common::on_store(
        &db,
        &["history", "items", "pi:sess-v3", "--json"],
    ));
    let items = items["items"].as_array().unwrap();
    let ids: Vec<&str> = items
        .iter()
        .map(|i| i["entry_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"a1") && ids.contains(&"b2"), "{ids:?}");
    assert!(
        !ids.contains(&"a4"),
        "a4 is on the branch the user left: {ids:?}"
    );
    // Paged: one item at a time, each page's next_offset continues, the last has none.
    let mut paged = Vec::new();
    let mut offset = 0u64;
    loop {
        let page = json(&common::on_store(
            &db,
            &[
                "history",
                "items",
                "pi:sess-v3",
                "--limit",
                "1",
                "--offset",
                &offset.to_string(),
                "--json",
            ],
        ));
        paged.push(page["items"][0]["entry_id"].as_str().unwrap().to_owned());
        match page["next_offset"].as_u64() {
            Some(next) => offset = next,
            None => break,
        }
    }
    assert_eq!(paged, ids, "the pages add up to the whole list");
    // By store id too, with a filter.
    let by_id = json(&common::on_store(
        &db,
        &["history", "items", "1", "--tool", "bash", "--json"],
    ));
    assert_eq!(by_id["items"][0]["entry_id"], "a2");

    let first = &items[0];
    let read = json(&common::on_store(
        &db,
        &[
            "history",
            "read",
            "pi:sess-v3",
            first["window_id"].as_str().unwrap(),
            first["item_id"].as_str().unwrap(),
            "--offset",
            "5",
            "--limit",
            "3",
            "--json",
        ],
    ));
    assert_eq!(read["text"], "the");
    assert_eq!(read["next_offset"], 8);
    let text = common::on_store(&db, &["history", "search", "pi:sess-v3", "Now count"]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("Now count lines") && text.ends_with("1 hits\n"),
        "{text}"
    );
    let ranked = json(&common::on_store(
        &db,
        &[
            "history",
            "search",
            "pi:sess-v3",
            "FILES",
            "--ranked",
            "--json",
        ],
    ));
    assert!(!ranked["hits"].as_array().unwrap().is_empty());
    let windows_text =
        String::from_utf8(common::on_store(&db, &["history", "windows", "pi:sess-v3"]).stdout)
            .unwrap();
    assert!(
        windows_text.starts_with("w_") && windows_text.contains("root"),
        "{windows_text}"
    );

    // Errors: one line, exit code 2.
    for args in [
        vec!["history", "items", "no-such-session"],
        vec!["history", "items", "pi:sess-v3", "--role", "robot"],
        vec!["history", "read", "pi:sess-v3", "w_x", "i_y"],
        vec!["history", "search", "pi:sess-v3", ""],
    ] {
        let out = common::on_store(&db, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("ctxd: "), "{err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
