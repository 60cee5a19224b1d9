//! Store benchmarks: append throughput, load + projection of a 10,000-entry branch, peak RSS.
//!
//! ```text
//! cargo run --release -p ctxd-store --example store_bench            # full run
//! cargo run --release -p ctxd-store --example store_bench -- --quick # smoke run
//! ```
//!
//! Every figure is the median of several repeats, on a temporary file store. The load average
//! is printed before and after, since the figures mean little on a busy machine.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use ctxd_core::model::{
    ContentBlock, Entry, EntryId, EntryKind, Message, Role, SessionMeta, ToolDef,
};
use ctxd_core::tree::active_branch;
use ctxd_core::view::project;
use ctxd_store::{Durability, NewEntry, SqliteStore, Store};

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

const WORDS: &[&str] = &[
    "fn",
    "let",
    "store",
    "session",
    "entry",
    "batch",
    "the",
    "a",
    "error",
    "result",
    "cargo",
    "test",
    "window",
    "notes",
    "projection",
    "leaf",
    "branch",
    "src/lib.rs",
    "=>",
    "{",
    "}",
    "assert_eq!",
    "Vec<String>",
    "match",
    "Some(x)",
    "None",
    "println!",
    "0x1f",
    "42",
    "return",
];

/// About `bytes` bytes of code-like text.
fn text(rng: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 16);
    while s.len() < bytes {
        s.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        s.push(if rng.below(12) == 0 { '\n' } else { ' ' });
    }
    s
}

/// The kind of the `k`-th entry of a realistic agent session: user turns, assistant tool calls
/// and tool results of 1 to 4 KB, now and then a context edit of an old result. No compaction:
/// the projection benchmark measures the worst case, where every entry stays visible.
fn kind(rng: &mut Rng, k: u64) -> EntryKind {
    let size = 1024 + rng.below(3072) as usize;
    match k % 4 {
        0 => EntryKind::Message(Message::text(Role::User, text(rng, size))),
        1 => {
            let mut m = Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::text(text(rng, size / 4)),
                    ContentBlock::ToolCall {
                        id: format!("call-{k}"),
                        name: "bash".into(),
                        arguments: serde_json::json!({ "command": text(rng, size / 2) }),
                    },
                ],
            );
            m.model = Some("claude-sonnet-4".into());
            EntryKind::Message(m)
        }
        2 => EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: format!("call-{}", k - 1),
                tool_name: Some("bash".into()),
                content: vec![ContentBlock::text(text(rng, size))],
                is_error: false,
            }],
        )),
        // Trim the tool result 401 entries back (k - 401 is a result, k - 402 its call).
        _ if k > 402 && rng.below(8) == 0 => EntryKind::ContextEdit {
            target: EntryId::new(format!("e{}", k - 401)),
            replacement: Some(vec![ContentBlock::ToolResult {
                call_id: format!("call-{}", k - 402),
                tool_name: Some("bash".into()),
                content: vec![ContentBlock::text("[output trimmed]")],
                is_error: false,
            }]),
        },
        _ => EntryKind::Message(Message::text(Role::Assistant, text(rng, size))),
    }
}

fn entry(rng: &mut Rng, k: u64) -> NewEntry {
    let kind = match k {
        0 => EntryKind::SystemPrompt {
            text: text(rng, 8000),
        },
        1 => EntryKind::ToolDefs {
            tools: (0..12)
                .map(|i| ToolDef {
                    name: format!("tool_{i}"),
                    description: text(rng, 300),
                    schema: serde_json::json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                })
                .collect(),
        },
        _ => kind(rng, k),
    };
    NewEntry::new(Entry {
        id: EntryId::new(format!("e{k}")),
        parent: k.checked_sub(1).map(|p| EntryId::new(format!("e{p}"))),
        timestamp: Some("2025-06-01T12:00:00.000Z".into()),
        sidechain: false,
        kind,
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn vm_hwm_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Entries/s appending `total` entries in batches of `batch` to a fresh store.
type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn append_rate(
    dir: &Path,
    durability: Durability,
    batch: usize,
    total: usize,
    seed: u64,
) -> Res<f64> {
    let path = dir.join(format!("append-{seed}.db"));
    let store = SqliteStore::open(&path, durability)?;
    let s = store.open_session("", "bench", &SessionMeta::default())?;
    let mut rng = Rng(seed | 1);
    let entries: Vec<NewEntry> = (0..total as u64).map(|k| entry(&mut rng, k + 2)).collect();
    let start = Instant::now();
    for chunk in entries.chunks(batch) {
        store.append(s.id, chunk, None)?;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(total as f64 / secs)
}

/// CPU time this thread has run, from `/proc/thread-self/schedstat` (Linux), in ns.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() -> Res<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let repeats = if quick { 3 } else { 7 };
    let dir = tempfile::tempdir()?;
    println!(
        "ctxd-store benchmarks ({} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!("load average before: {}", loadavg());
    println!("repeats: {repeats} (medians)\n");

    println!("## Append throughput (entries of 1-4 KB, one session, temp file)\n");
    println!("| synchronous | batch | entries | entries/s (median) | min | max |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, durability) in [("FULL", Durability::Full), ("NORMAL", Durability::Normal)] {
        for batch in [1usize, 100] {
            let total = match (batch, quick) {
                (1, true) => 100,
                (1, false) => 300,
                (_, true) => 2000,
                (_, false) => 5000,
            };
            let rates: Vec<f64> = (0..repeats)
                .map(|r| append_rate(dir.path(), durability, batch, total, 7 + r as u64))
                .collect::<Res<_>>()?;
            let (lo, hi) = (
                rates.iter().copied().fold(f64::INFINITY, f64::min),
                rates.iter().copied().fold(0.0, f64::max),
            );
            println!(
                "| {name} | {batch} | {total} | {:.0} | {lo:.0} | {hi:.0} |",
                median(rates.clone())
            );
        }
    }

    println!("\n## Load + projection of a 10,000-entry branch\n");
    let n = 10_000u64;
    let path = dir.path().join("branch.db");
    let store = SqliteStore::open(&path, Durability::Normal)?;
    let s = store.open_session("", "branch", &SessionMeta::default())?;
    let mut rng = Rng(99);
    let entries: Vec<NewEntry> = (0..n).map(|k| entry(&mut rng, k)).collect();
    for chunk in entries.chunks(500) {
        store.append(s.id, chunk, None)?;
    }
    drop(entries);
    let db_mb = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;

    let mut loads = Vec::new();
    let mut session = None;
    for _ in 0..repeats {
        let t = Instant::now();
        session = Some(store.load(s.id)?);
        loads.push(ms(t.elapsed()));
    }
    let session = session.ok_or("no repeats")?;
    // The pure steps are cheap: more repeats. On a shared machine wall time includes waiting for
    // a core, so this thread's CPU time is measured too: over all runs at once, because the
    // kernel's per-thread clock (`schedstat`) only advances at scheduler ticks.
    let runs = 101;
    let (mut branches, mut projections) = (Vec::new(), Vec::new());
    let (mut branch_cpu, mut project_cpu) = (0u64, 0u64);
    let mut items = 0;
    for _ in 0..runs {
        let (t, c0) = (Instant::now(), thread_cpu_ns());
        let branch = active_branch(black_box(&session));
        let c1 = thread_cpu_ns();
        branches.push(ms(t.elapsed()));
        assert_eq!(branch.len(), n as usize);
        let t = Instant::now();
        let p = project(black_box(&session), black_box(&branch));
        items = black_box(p.items.len());
        projections.push(ms(t.elapsed()));
        let c2 = thread_cpu_ns();
        branch_cpu += c1.saturating_sub(c0);
        project_cpu += c2.saturating_sub(c1);
    }
    println!("store file: {db_mb:.1} MB; projection: {items} items (no compaction: every entry but the context edits is visible)\n");
    println!("| step | runs | median ms | min ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    let row = |name: &str, xs: &[f64]| {
        let (lo, hi) = (
            xs.iter().copied().fold(f64::INFINITY, f64::min),
            xs.iter().copied().fold(0.0, f64::max),
        );
        println!(
            "| {name} | {} | {:.2} | {lo:.2} | {hi:.2} |",
            xs.len(),
            median(xs.to_vec())
        );
    };
    let mean_row = |name: &str, ns: u64| {
        println!(
            "| {name} | mean of {runs} | {:.2} | | |",
            ns as f64 / 1e6 / runs as f64
        );
    };
    row("load (SQLite read + JSON decode)", &loads);
    row("active_branch, wall", &branches);
    mean_row("active_branch, thread CPU", branch_cpu);
    row("project, wall (target < 5 ms)", &projections);
    mean_row("project, thread CPU", project_cpu);

    // Appends into a long session: each batch should cost the same at entry 10,000 as at 1.
    println!("\n## Append into a session that already holds {n} entries (NORMAL, batch 1)\n");
    let empty = store.open_session("", "empty", &SessionMeta::default())?;
    let mut rng = Rng(5);
    let extra: Vec<NewEntry> = (0..100).map(|k| entry(&mut rng, n + k)).collect();
    println!("| session | entries/s (median of {repeats}) |");
    println!("|---|---:|");
    for (name, id, chain) in [("empty", empty.id, false), ("10,000 entries", s.id, true)] {
        let mut rates = Vec::new();
        for r in 0..repeats {
            let t = Instant::now();
            for (k, new) in extra.iter().enumerate() {
                let mut new = new.clone();
                new.entry.id = EntryId::new(format!("x{r}-{k}"));
                new.entry.parent = chain.then(|| EntryId::new(format!("e{}", n - 1)));
                store.append(id, &[new], None)?;
            }
            rates.push(extra.len() as f64 / t.elapsed().as_secs_f64());
        }
        println!("| {name} | {:.0} |", median(rates));
    }
    println!(
        "\npeak RSS (VmHWM): {} MB",
        vm_hwm_kb().map_or("?".into(), |kb| format!("{:.1}", kb as f64 / 1024.0))
    );
    println!("load average after: {}", loadavg());
    Ok(())
}
