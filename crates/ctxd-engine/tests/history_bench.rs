#![allow(clippy::unwrap_used, clippy::expect_used)]

//! Benchmark: history search over 1,000,000 items (target: under 20 ms).
//!
//! `cargo test --release -p ctxd-engine --test history_bench -- --ignored --nocapture`
//! (`CTXD_BENCH_ITEMS` changes the size; `CTXD_BENCH_STORE=postgres://…` runs it on
//! PostgreSQL). Fills a temp store (batch appends of 10,000 entries,
//! synchronous NORMAL; `append` writes the history index too), then times the median of
//! repeated searches through the engine (tenant check, index catch-up check, active branch,
//! search, excerpts).

use std::time::{Duration, Instant};

use ctxd_core::model::{Entry, EntryId, EntryKind, Message, Role, SessionMeta};
use ctxd_engine::history::{ItemsQuery, SearchMode, SearchQuery};
use ctxd_engine::{Caller, Engine};
use ctxd_store::{Durability, NewEntry};

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn text(i: usize) -> String {
    let tool = ["bash", "read", "edit", "grep"][i % 4];
    let status = if i.is_multiple_of(97) { "failed" } else { "ok" };
    format!(
        "step {i} ran {tool} on src/file{}.rs with status {status}",
        i % 10_000
    )
}

#[test]
#[ignore = "benchmark: run with --release -- --ignored --nocapture"]
fn history_search_over_a_million_items() {
    let n: usize = std::env::var("CTXD_BENCH_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("ctxd-history-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // `CTXD_BENCH_STORE` (a `postgres://` URL of an empty database) runs it on PostgreSQL.
    let location = std::env::var("CTXD_BENCH_STORE").map_or_else(
        |_| ctxd_store::Location::Sqlite(dir.join("bench.db")),
        |url| ctxd_store::Location::parse(&url),
    );
    let store = ctxd_store::open(&location, Durability::Normal).unwrap();
    let s = store
        .open_session("", "bench", &SessionMeta::default())
        .unwrap();

    let t = Instant::now();
    let mut batch = Vec::with_capacity(10_000);
    for i in 0..n {
        let role = if i.is_multiple_of(2) {
            Role::User
        } else {
            Role::Assistant
        };
        batch.push(NewEntry::new(Entry {
            id: EntryId::new(format!("e{i}")),
            parent: i.checked_sub(1).map(|p| EntryId::new(format!("e{p}"))),
            timestamp: None,
            sidechain: false,
            kind: EntryKind::Message(Message::text(role, text(i))),
        }));
        if batch.len() == 10_000 || i + 1 == n {
            store.append(s.id, &batch, None).unwrap();
            batch.clear();
        }
    }
    let fill = t.elapsed();
    // `append` indexed the history as it went: the first history read has nothing to catch up.
    let t = Instant::now();
    let indexed = ctxd_store::HistoryStore::history_sync(&*store, s.id).unwrap();
    let sync = t.elapsed();
    assert_eq!(indexed, 0);
    let db_mb = std::fs::metadata(dir.join("bench.db")).map_or(0, |m| m.len()) as f64 / 1e6;
    println!(
        "fill: {n} entries, history index included, in {:.1} s ({:.0}/s, synchronous NORMAL); \
         first history sync: {:.2} ms; db {db_mb:.0} MB ({location})",
        fill.as_secs_f64(),
        n as f64 / fill.as_secs_f64(),
        sync.as_secs_f64() * 1e3
    );

    let engine = Engine::from_boxed(store);
    let caller = Caller {
        session: Some(s.id),
        ..Default::default()
    };
    let rare = format!("step {} ran", n / 2 + 1);
    let cases: Vec<(&str, String, SearchMode, Option<usize>)> = vec![
        ("literal, 1 hit", rare.clone(), SearchMode::Literal, None),
        (
            "literal, 100 hits",
            "src/file1234.rs".into(),
            SearchMode::Literal,
            None,
        ),
        (
            "literal, ~all items (first 50)",
            "with status ok".into(),
            SearchMode::Literal,
            None,
        ),
        (
            "literal, ~1% of items (first 50)",
            "status failed".into(),
            SearchMode::Literal,
            None,
        ),
        (
            "ranked, 1 hit",
            format!("{}", n / 2 + 1),
            SearchMode::Ranked,
            None,
        ),
        (
            "ranked, 100 hits",
            "file1234".into(),
            SearchMode::Ranked,
            None,
        ),
        (
            "ranked, ~1% of items",
            "failed".into(),
            SearchMode::Ranked,
            None,
        ),
        (
            "ranked, ~all items",
            "status ok".into(),
            SearchMode::Ranked,
            None,
        ),
        (
            "ranked, ~all + ~1% of items",
            "status failed".into(),
            SearchMode::Ranked,
            None,
        ),
    ];
    for (label, query, mode, limit) in cases {
        let q = SearchQuery {
            query: query.clone(),
            mode,
            filters: ItemsQuery {
                limit,
                ..Default::default()
            },
        };
        let mut times: Vec<Duration> = Vec::new();
        let mut hits = 0;
        for _ in 0..15 {
            let t = Instant::now();
            let page = engine.history_search_contents(&caller, &q).unwrap();
            times.push(t.elapsed());
            hits = page.hits.len();
        }
        times.sort();
        println!(
            "{label:<34} {query:<20} median {:>8.2} ms  (min {:.2}, max {:.2}; {hits} hits returned)",
            times[times.len() / 2].as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3,
        );
        assert!(hits > 0, "{label}: no hit");
    }
    println!("peak RSS: {:.0} MB", peak_rss_mb());
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
