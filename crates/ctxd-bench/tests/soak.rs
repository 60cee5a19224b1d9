#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd-bench soak` with tiny settings: every turn answered, a sample per interval, and a
//! summary that checks RSS and WAL against their bounds.

mod common;

use serde_json::Value;

#[test]
fn a_small_soak_reports_samples_and_its_bounds() {
    let out = common::succeed(common::bench().args([
        "soak",
        "--sessions",
        "30",
        "--turns",
        "2",
        "--result-bytes",
        "2k",
        "--sample",
        "0.5",
        "--rest",
        "1",
        "--json",
    ]));
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, samples) = lines.split_last().unwrap();
    assert_eq!(summary["kind"], "summary");
    // Each turn is a tool call and a final answer.
    assert_eq!(summary["requests"], 30 * 2 * 2, "{summary}");
    assert_eq!(summary["errors"], 0, "{summary}");
    assert!(summary["peak_rss_mb"].as_f64().unwrap() > 1.0);
    assert_eq!(summary["rss_within"], true, "{summary}");
    assert_eq!(summary["wal_within"], true, "{summary}");
    assert!(samples.iter().all(|s| s["kind"] == "sample"));
    let last = samples.last().unwrap();
    assert_eq!(last["phase"], "rest", "{last}");
    assert_eq!(last["requests"], 120);
    assert_eq!(last["store_queue"], 0.0, "the store drained: {last}");
    assert!(last["db_mb"].as_f64().unwrap() > 0.0);
}

#[test]
fn bad_settings_exit_2() {
    for args in [
        &["--sessions", "0"][..],
        &["--sample", "0"],
        &["--result-bytes", "x"],
    ] {
        let out = common::bench().arg("soak").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}
