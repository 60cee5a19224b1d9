//! The session cache's byte budget holds only if what it counts is what the heap holds. This
//! binary counts the bytes actually allocated (`stats_alloc` as the global allocator, one test
//! so nothing else allocates meanwhile) for a loaded session log and for a kept previous
//! request, and checks the estimates the cache charges against them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;

use ctxd_engine::turn::SessionLog;
use ctxd_gateway::request::{ParsedRequest, PrevRequest};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes still allocated after `make` returns, held by what it returned.
fn held<T>(make: impl FnOnce() -> T) -> (T, usize) {
    let region = Region::new(ALLOCATOR);
    let value = make();
    let change = region.change();
    // `stats_alloc` counts a realloc's growth in `bytes_allocated` (and its shrinking in
    // `bytes_deallocated`) already.
    let live = change.bytes_allocated as isize - change.bytes_deallocated as isize;
    (value, live.max(0) as usize)
}

use ctxd_test_support::shared;

/// An agent's request of `turns` tool-using turns with results of `result` bytes.
fn request_body(turns: usize, result: usize) -> Vec<u8> {
    let mut messages = Vec::new();
    for t in 0..turns {
        let id = format!("toolu_{t:04}");
        messages.push(
            serde_json::json!({"role": "user", "content": [{"type": "text",
            "text": format!("turn {t}: what does the config loader do with missing keys?")}]}),
        );
        messages.push(serde_json::json!({"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "grep -rn key src/"}}]}));
        messages.push(serde_json::json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": id, "content": "src/config.rs:12: let key = value;\n".repeat(result / 36)}]}));
        messages.push(serde_json::json!({"role": "assistant", "content": [
            {"type": "text", "text": "Missing keys fall back to the defaults."}]}));
    }
    serde_json::to_vec(
        &serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 1024,
        "system": "You are a coding agent.", "messages": messages}),
    )
    .unwrap_or_default()
}

#[test]
fn the_cache_charges_what_the_heap_holds() {
    // Loaded logs: real sessions of each agent, and one of many small entries.
    let dir = shared().join("sessions");
    let files = [
        "claude-code/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
        "pi/large-session.jsonl",
        "codex/kcosr-codex-0.63.jsonl",
        "swe-agent/pydicom__pydicom-1458.traj",
    ];
    let mut measured = 0;
    let mut failures = Vec::new();
    for file in files {
        let path = dir.join(file);
        let Ok(import) = ctxd_formats::import_path(&path) else {
            eprintln!("skipped {} (not found)", path.display());
            continue;
        };
        let session = import.session;
        let (log, heap) = held(|| SessionLog::new(session.clone()));
        let charged = log.approx_bytes();
        let ratio = charged as f64 / heap as f64;
        eprintln!(
            "{file}: {} entries, heap {heap} B, charged {charged} B ({ratio:.2}×)",
            log.session.entries.len()
        );
        if !(1.0..=1.6).contains(&ratio) {
            failures.push(format!(
                "{file}: the cache charges {charged} B for a log holding {heap} B ({ratio:.2}×)"
            ));
        }
        measured += 1;
        drop(log);
    }
    assert!(
        std::env::var_os("CI").is_none() || measured == files.len(),
        "CI runs with ../shared in place"
    );

    // Kept previous requests: the body and its parsed elements.
    for (turns, result) in [(4, 8_192), (40, 2_048), (200, 256)] {
        let body = request_body(turns, result);
        let (prev, heap) = held(|| {
            let parsed = ParsedRequest::parse(ctxd_gateway::api::Api::Anthropic, &body);
            parsed.map(|parsed| PrevRequest {
                body: bytes::Bytes::from(body.clone()),
                parsed,
            })
        });
        let prev = prev.expect("the body parses");
        let charged = prev.weight();
        let ratio = charged as f64 / heap as f64;
        eprintln!(
            "request of {turns} turns ({} B): heap {heap} B, charged {charged} B ({ratio:.2}×)",
            body.len()
        );
        if !(1.0..=1.6).contains(&ratio) {
            failures.push(format!(
                "a kept request of {} B holds {heap} B; the cache charges {charged} B",
                body.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
