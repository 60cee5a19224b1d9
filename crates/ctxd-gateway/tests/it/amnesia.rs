//! Meta-amnesia through the gateway against the strict mock: a 15-turn tool loop (thinking on
//! Anthropic and Responses) whose calls are, in turn, a read the task does not need (`cat` of
//! an unrelated file: dropped), a read it does (the file the task names: retained) and a
//! command that is not a read (never judged). Each API, JSON and SSE.
//!
//! What must hold: nothing refused; a dropped read's call and output are in no upstream
//! request, from the one that first carried them on; a retained read's output is in every
//! request from its first; each upstream conversation array starts with the previous one's
//! bytes (the pruned round was the tail: the prefix never moves); the store keeps every raw
//! output, and one judgment record per read; the savings header charges `amnesia`.

use std::fmt::Write as _;

use ctxd_core::mechanisms::amnesia::{Decision, Record};
use ctxd_core::model::EntryKind;
use ctxd_mock::Reply;
use serde_json::{json, Value};

use crate::digest::array_span;
use crate::loops::{saved_by, scripted, tool_turn, Api};
use crate::support::Rig;

const TURNS: usize = 15;
const TASK: &str = "Fix parse_config in src/config_loader.py: it drops the last section.";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// A read of a file the task does not need.
    Unneeded,
    /// A read of the file the task names.
    Needed,
    /// A command that is not a read.
    Other,
}

fn kind(t: usize) -> Kind {
    match t % 3 {
        0 => Kind::Unneeded,
        1 => Kind::Needed,
        _ => Kind::Other,
    }
}

fn command(t: usize) -> String {
    match kind(t) {
        Kind::Unneeded => format!("cat notes/menagerie_{t}.txt"),
        Kind::Needed => format!("sed -n '1,200p' src/config_loader.py # {t}"),
        Kind::Other => format!("python -m pytest # {t}"),
    }
}

/// Turn `t`'s output (~3 KB: above the judging threshold, below the digests').
fn output(t: usize) -> String {
    let mut out = String::new();
    match kind(t) {
        Kind::Unneeded => {
            let _ = writeln!(out, "ZOO-DROP-{t}");
            let animals = [
                "zebra", "quokka", "platypus", "wombat", "axolotl", "narwhal",
            ];
            for l in 0..60 {
                let _ = writeln!(
                    out,
                    "the {} visited the {} near the river, twice.",
                    animals[l % 6],
                    animals[(l + t) % 6]
                );
            }
        }
        Kind::Needed => {
            let _ = writeln!(out, "# KEEP-{t}");
            for l in 0..60 {
                let _ = writeln!(
                    out,
                    "def parse_config(path, section_{l}): return load(path)"
                );
            }
        }
        Kind::Other => {
            let _ = writeln!(out, "OTHER-{t}: collected 3 items, 1 failed");
        }
    }
    out
}

fn first_messages(api: Api) -> Vec<Value> {
    match api {
        Api::Anthropic => vec![json!({"role": "user", "content": TASK})],
        Api::Chat => vec![
            json!({"role": "system", "content": "You are a coding agent."}),
            json!({"role": "user", "content": TASK}),
        ],
        Api::Responses => vec![json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": TASK}]})],
    }
}

async fn amnesia_loop(api: Api, stream: bool) {
    let thinking = !matches!(api, Api::Chat);
    let config = scripted(
        (0..TURNS)
            .map(|t| Reply::tool_call("bash", json!({"command": command(t)})))
            .collect(),
        thinking,
    );
    // Distillation off: its edits of earlier outputs change the prefix on purpose.
    let mut rig = Rig::with(config, |s| {
        s.management.mechanisms.distill = false;
        s.management.mechanisms.amnesia = true;
    })
    .await;
    let mut conversation = first_messages(api);
    let mut amnesia_saved = 0i64;
    for t in 0..TURNS {
        let body = api.body(&conversation, stream, thinking);
        let (headers, _) = tool_turn(&rig, api, &mut conversation, &body, stream, &output(t)).await;
        amnesia_saved = saved_by(&headers, "amnesia");
    }
    assert!(
        amnesia_saved > 1_000,
        "{api:?} stream={stream}: the savings do not charge amnesia ({amnesia_saved})"
    );

    let sent = rig.mock.requests();
    assert_eq!(sent.len(), TURNS, "{api:?}: one upstream request per turn");
    for (i, r) in sent.iter().enumerate() {
        assert!(
            r.refused.is_none(),
            "{api:?} stream={stream} request {i} refused: {:?}",
            r.refused
        );
    }
    // Request i carries the outputs of turns 0..i.
    for (i, r) in sent.iter().enumerate() {
        let body = String::from_utf8_lossy(&r.body);
        for t in 0..i {
            let (marker, call) = match kind(t) {
                Kind::Unneeded => (format!("ZOO-DROP-{t}"), Some(format!("menagerie_{t}"))),
                Kind::Needed => (format!("KEEP-{t}"), None),
                Kind::Other => (format!("OTHER-{t}"), None),
            };
            if let Some(call) = call {
                assert!(
                    !body.contains(&marker) && !body.contains(&call),
                    "{api:?} stream={stream} request {i}: dropped read {t} went upstream"
                );
            } else {
                assert!(
                    body.contains(&marker),
                    "{api:?} stream={stream} request {i}: output {t} is missing"
                );
            }
        }
    }
    // Cache stability: each conversation array starts with the previous one's elements.
    for i in 1..TURNS {
        let (a, b) = (&sent[i - 1].body, &sent[i].body);
        let (ra, rb) = (array_span(api, a), array_span(api, b));
        let prev = &a[ra.start..ra.end - 1];
        assert!(
            b[rb.start..].starts_with(prev),
            "{api:?} stream={stream}: request {i} does not extend request {}'s bytes",
            i - 1
        );
    }

    // The store: every raw output, and a record per judged read.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let s = stored.load(&record);
    for t in 0..TURNS - 1 {
        let marker = output(t).lines().next().unwrap().to_owned();
        assert!(
            s.entries
                .iter()
                .any(|e| matches!(&e.kind, EntryKind::Message(m)
                if ctxd_core::text::message_text(m).contains(&marker))),
            "{api:?}: the raw output of turn {t} is not in the store"
        );
    }
    let records: Vec<Record> = s
        .entries
        .iter()
        .filter_map(|e| Record::from_entry(&e.kind))
        .collect();
    let reads = (0..TURNS - 1).filter(|&t| kind(t) != Kind::Other).count();
    assert_eq!(records.len(), reads, "{api:?}: one record per read");
    for r in &records {
        let j = &r.judgments[0];
        let dropped = j.label.contains("menagerie");
        assert_eq!(
            j.decision == Decision::Drop,
            dropped,
            "{api:?}: {} judged {:?} ({})",
            j.label,
            j.decision,
            j.reason
        );
        assert_eq!(!r.pruned.is_empty(), dropped);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_json_dropped_reads_never_go_upstream() {
    amnesia_loop(Api::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sse_dropped_reads_never_go_upstream() {
    amnesia_loop(Api::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_json_dropped_reads_never_go_upstream() {
    amnesia_loop(Api::Chat, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_sse_dropped_reads_never_go_upstream() {
    amnesia_loop(Api::Chat, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_json_dropped_reads_never_go_upstream() {
    amnesia_loop(Api::Responses, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sse_dropped_reads_never_go_upstream() {
    amnesia_loop(Api::Responses, true).await;
}
