#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd-bench gateway` with tiny settings: the report's shape, and every request answered.

mod common;

use serde_json::Value;

fn bench(extra: &[&str]) -> Vec<Value> {
    let out = common::bench()
        .args([
            "gateway",
            "--rate",
            "20",
            "--duration",
            "1",
            "--sizes",
            "2k",
            "--sessions",
            "3",
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn direct_only_measures_the_mock() {
    let rows = bench(&["--direct-only"]);
    assert_eq!(rows.len(), 2, "one row per mode");
    assert_eq!(rows[0]["mode"], "json");
    assert_eq!(rows[1]["mode"], "sse");
    for row in &rows {
        assert_eq!(row["size_bytes"], 2048);
        assert_eq!(row["direct"]["requests"], 20);
        assert_eq!(row["direct"]["errors"], 0);
        let p50 = row["direct"]["p50_ms"].as_f64().unwrap();
        let p99 = row["direct"]["p99_ms"].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= row["direct"]["max_ms"].as_f64().unwrap());
        assert!(row["gateway"].is_null());
        assert!(row["added_p99_ms"].is_null());
    }
}

#[test]
fn text_table_has_a_row_per_mode_and_rate() {
    let out = common::succeed(
        common::bench()
            .args([
                "gateway",
                "--direct-only",
                "--rate",
                "20,200",
                "--duration",
                "0.5",
                "--sizes",
                "100k",
            ])
            .args(["--modes", "sse", "--sessions", "2"]),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("ctxd-bench gateway: 20, 200 req/s"),
        "{text}"
    );
    assert!(lines[1].contains("direct p50/p99/max ms"));
    // A row per rate; the targets are judged at 200 req/s only.
    for (line, rate) in [(lines[2], " 20 "), (lines[3], " 200 ")] {
        assert!(
            line.contains("100 KiB") && line.contains("sse") && line.contains(rate),
            "{text}"
        );
    }
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[4].contains("not measured"), "{text}");
}

#[test]
fn bad_settings_exit_2() {
    let out = common::bench()
        .args(["gateway", "--rate", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = common::bench()
        .args(["gateway", "--sizes", "huge"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Through a `ctxd serve` child with its own store.
#[test]
fn through_the_gateway() {
    let rows = bench(&[]);
    assert_eq!(rows.len(), 2);
    for row in &rows {
        assert_eq!(row["direct"]["errors"], 0);
        assert_eq!(row["gateway"]["requests"], 20);
        assert_eq!(row["gateway"]["errors"], 0, "{row}");
        assert!(row["added_p50_ms"].as_f64().is_some());
        assert!(row["gateway_peak_rss_mb"].as_f64().unwrap() > 1.0);
        // The gateway's own overhead histogram saw this row's requests (not the warm-up; the
        // last ones may be recorded just after the scrape).
        let seen = row["overhead"]["count"].as_f64().unwrap();
        assert!((1.0..=20.0).contains(&seen), "{row}");
    }
}

/// `--peer`: another proxy measured in the same slices. The mock itself stands in for one here
/// (a proxy of zero hops), at the port `--mock-port` fixes.
#[test]
fn a_peer_is_measured_beside_the_mock() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let peer = format!("itself=http://127.0.0.1:{port}");
    let rows = bench(&[
        "--direct-only",
        "--mock-port",
        &port.to_string(),
        "--peer",
        &peer,
    ]);
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let peers = row["peers"].as_array().unwrap();
        assert_eq!(peers.len(), 1, "{row}");
        assert_eq!(peers[0]["name"], "itself");
        assert_eq!(peers[0]["latency"]["requests"], 20);
        assert_eq!(peers[0]["latency"]["errors"], 0, "{row}");
        assert!(peers[0]["added_p50_ms"].as_f64().is_some(), "{row}");
    }
    for bad in ["nginx", "=http://127.0.0.1:1", "nginx=127.0.0.1:1"] {
        let out = common::bench()
            .args(["gateway", "--peer", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--peer {bad}");
    }
}
