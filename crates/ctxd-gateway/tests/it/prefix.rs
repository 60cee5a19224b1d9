//! A scripted 50-request session through the gateway with every mechanism on (distillation at
//! run ends and mid-run checkpoints, shell-output digests, write facts, meta-amnesia), against
//! the strict mock: five runs of ten requests (nine tool calls, then an answer citing what the
//! run found), each run a new user question. The tool calls mix large greps, unrelated and
//! needed file reads, file writes and test runs with large logs. Each API, JSON and SSE, with
//! thinking where the API has it.
//!
//! What it reports (stderr): per request, the byte prefix it shares with the previous upstream
//! request, as a share of that request. What must hold: nothing refused; a request whose
//! conversation does not start with the previous one's bytes is one where ctxd's edits of
//! earlier outputs landed (a distillation pass's `ContextEdit`s, each pass recorded in the
//! store, mid-run ones only where the provider's break-even rule let them through, checked
//! against the planner's own costs); everywhere else the previous request is a byte prefix of
//! the next (the prompt cache reads it whole).

use std::fmt::Write as _;

use ctxd_core::cache::Provider;
use ctxd_core::distill::{record::Record, Phase};
use ctxd_mock::Reply;
use serde_json::{json, Value};

use crate::cache::check_the_rule;
use crate::digest::array_span;
use crate::loops::{client_turn, scripted, Api};
use crate::served::user_text;
use crate::support::Rig;

/// Requests per run (the last one the answer): one long tool loop, then four short tasks;
/// 50 in all.
const RUNS: [usize; 5] = [30, 5, 5, 5, 5];
/// Each run's topic: a file and the identifier the task is about.
const TOPICS: [(&str, &str); 5] = [
    ("src/config_loader.py", "parse_config"),
    ("src/ui/badge.py", "render_badge"),
    ("src/net/retry.py", "backoff_delay"),
    ("src/db/pool.py", "acquire_conn"),
    ("src/cli/args.py", "parse_flags"),
];

/// Run `r`'s question.
fn question(r: usize) -> String {
    let (file, ident) = TOPICS[r];
    format!(
        "Task {r}: {ident} in {file} returns the wrong value for section_{r}; find why and fix it."
    )
}

/// What the model does at request `j` of run `r`: a tool call with the client's output, or
/// (the run's last request) the answer.
fn step(r: usize, j: usize) -> (Reply, Option<String>) {
    let (file, ident) = TOPICS[r];
    let call = |cmd: String| Reply::tool_call("bash", json!({ "command": cmd }));
    if j == RUNS[r] - 1 {
        return (
            Reply::text(format!(
                "Fixed: {ident} in {file} (line {}) now handles section_{r}.",
                40 + r
            )),
            None,
        );
    }
    match j % 6 {
        0 | 2 => (
            call(format!("grep -rn {ident} src/ # {j}")),
            Some(grep_output(r, j)),
        ),
        1 => (
            call(format!("cat notes/menagerie_{r}_{j}.txt")),
            Some(unrelated(r)),
        ),
        3 => (
            Reply::tool_call(
                "write",
                json!({"path": format!("src/section_{r}_{j}.py"), "content": file_body(r, j)}),
            ),
            Some(format!("Wrote src/section_{r}_{j}.py")),
        ),
        4 => (
            call(format!("python -m pytest -x # {r}.{j}")),
            Some(test_log(r, j)),
        ),
        _ => (
            call(format!("sed -n '1,200p' {file} # {j}")),
            Some(needed(r, j)),
        ),
    }
}

/// ~12 KB of grep hits (a distillation candidate: over 4,000 characters, under the digests'
/// threshold set below), one of which the answer cites.
fn grep_output(r: usize, j: usize) -> String {
    let (file, ident) = TOPICS[r];
    let mut out = String::new();
    for i in 0..150 {
        let _ = writeln!(
            out,
            "src/module_{i:03}/handler_{r}_{j}.py:{}: retry_limit_{i} = backoff(attempt, {})",
            10 + i,
            i * 3 + r
        );
    }
    let _ = writeln!(out, "{file}:{}: def {ident}(path, section_{r}):", 40 + r);
    out
}

/// ~3 KB of a file the task does not need.
fn unrelated(r: usize) -> String {
    let mut out = format!("ZOO-{r}\n");
    for l in 0..60 {
        let _ = writeln!(out, "the zebra {l} visited the quokka near the river {r}.");
    }
    out
}

/// ~3 KB of the file the task names.
fn needed(r: usize, j: usize) -> String {
    let (file, ident) = TOPICS[r];
    let mut out = format!("# {file} ({r}.{j})\n");
    for l in 0..60 {
        let _ = writeln!(out, "def {ident}_{l}(path, section_{l}): return load(path)");
    }
    out
}

/// ~3 KB of Python written to a file (above write facts' threshold).
fn file_body(r: usize, j: usize) -> String {
    let mut out = format!("\"\"\"Section {r} helpers ({j}).\"\"\"\n");
    for l in 0..70 {
        let _ = writeln!(out, "def helper_{r}_{j}_{l}(x):\n    return x + {l}");
    }
    out
}

/// ~55 KB of a test run's log (above the digests' threshold), with one failure.
fn test_log(r: usize, j: usize) -> String {
    let mut out = format!("============ test session starts ({r}.{j}) ============\n");
    for i in 0..1200 {
        let _ = writeln!(out, "tests/test_config.py::test_case_{i}_{r}_{j} PASSED");
    }
    let _ = writeln!(
        out,
        "FAILED tests/test_config.py::test_section_{r} - KeyError: 'section_{r}'"
    );
    out.push_str("============ 1 failed, 1200 passed ============\n");
    out
}

/// The client's request: its tools are a shell and a file writer.
fn body(api: Api, conversation: &[Value], stream: bool, thinking: bool) -> Value {
    let mut body = api.body(conversation, stream, thinking);
    let write = match api {
        Api::Anthropic => json!({"name": "write", "description": "Write a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
            "content": {"type": "string"}}, "required": ["path", "content"]}}),
        Api::Chat => json!({"type": "function", "function": {"name": "write",
            "description": "Write a file", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}}}}}),
        Api::Responses => json!({"type": "function", "name": "write",
            "description": "Write a file", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}}}}),
    };
    body["tools"].as_array_mut().unwrap().push(write);
    body
}

/// The bytes of request `a` that request `b` repeats as a prompt cache reads them: the
/// providers put tools and the system prompt before the conversation whatever the JSON's key
/// order, so what counts is everything outside the conversation array (when it is unchanged)
/// and the conversation's byte prefix.
fn cached_bytes(api: Api, a: &[u8], b: &[u8]) -> usize {
    let (ra, rb) = (array_span(api, a), array_span(api, b));
    let outside = [&a[..ra.start], &a[ra.end..]];
    let same_outside = outside == [&b[..rb.start], &b[rb.end..]];
    let shared = a[ra.clone()]
        .iter()
        .zip(&b[rb])
        .take_while(|(x, y)| x == y)
        .count();
    if same_outside {
        ra.start + (a.len() - ra.end) + shared
    } else {
        0
    }
}

async fn session(api: Api, stream: bool) {
    let thinking = !matches!(api, Api::Chat);
    let script = (0..RUNS.len())
        .flat_map(|r| (0..RUNS[r]).map(move |j| step(r, j).0))
        .collect();
    let mut rig = Rig::with(scripted(script, thinking), |s| {
        s.management.mechanisms.amnesia = true;
        // The test logs (~55 KB) are digested, the greps (~12 KB) left to distillation.
        s.digest.min_tokens = 8_000;
        // Deterministic: each request waits for the previous turn end's pass.
        s.distill_wait = std::time::Duration::from_secs(10);
    })
    .await;
    let mut conversation: Vec<Value> = Vec::new();
    if let Api::Chat = api {
        conversation.push(json!({"role": "system", "content": "You are a coding agent."}));
    }
    // The upstream requests that start a run (a new question).
    let mut run_starts = Vec::new();
    for (r, &requests) in RUNS.iter().enumerate() {
        conversation.push(user_text(api, &question(r)));
        for j in 0..requests {
            if j == 0 {
                run_starts.push(rig.mock.requests().len());
            }
            let output = step(r, j).1;
            let body = body(api, &conversation, stream, thinking);
            client_turn(
                &rig,
                api,
                &mut conversation,
                &body,
                stream,
                output.as_deref(),
            )
            .await;
        }
    }

    let sent = rig.mock.requests();
    assert_eq!(
        sent.len(),
        RUNS.iter().sum::<usize>(),
        "{api:?}: one upstream request per turn"
    );
    for (i, r) in sent.iter().enumerate() {
        assert!(
            r.refused.is_none(),
            "{api:?} stream={stream} request {i} refused: {:?}",
            r.refused
        );
    }

    // The prefix each request shares with the previous one, and where it broke.
    let mut report = String::new();
    let mut breaks = Vec::new();
    let mut shares = Vec::new();
    for i in 1..sent.len() {
        let (a, b) = (&sent[i - 1].body, &sent[i].body);
        let share = cached_bytes(api, a, b) as f64 / a.len() as f64;
        shares.push(share);
        let (ra, rb) = (array_span(api, a), array_span(api, b));
        let extends = b[rb.start..].starts_with(&a[ra.start..ra.end - 1]);
        if !extends {
            breaks.push(i);
        }
        let _ = write!(
            report,
            " {i}:{:.0}%{}",
            share * 100.0,
            if extends { "" } else { "*" }
        );
    }
    shares.sort_by(f64::total_cmp);
    eprintln!(
        "prefix {api:?} stream={stream}: shared with the previous request, median {:.1}%, min {:.1}%; \
         {} of {} requests rewrote an earlier part (*) at {breaks:?}; run starts at {run_starts:?}\n{report}",
        shares[shares.len() / 2] * 100.0,
        shares[0] * 100.0,
        breaks.len(),
        sent.len() - 1,
    );

    // Every break is a request that carries an edit the previous one did not: a distilled
    // or omitted output.
    let edit_texts = |body: &[u8]| {
        let text = String::from_utf8_lossy(body);
        text.matches("[ctxd] Distilled output of").count() + text.matches("[ctxd] Omitted").count()
    };
    for &i in &breaks {
        assert!(
            edit_texts(&sent[i].body) > 0,
            "{api:?} stream={stream}: request {i} rewrote an earlier part without any edit of ctxd's"
        );
    }

    // The store: the passes that made edits. Mid-run passes with edits only where the
    // break-even rule let them (the planner returns nothing otherwise): at most one break per
    // such pass, and a break inside a run only when a mid-run pass edited.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let s = stored.load(&record);
    let all_passes: Vec<Record> = s
        .entries
        .iter()
        .filter_map(|e| Record::from_entry(&e.kind))
        .collect();
    let passes: Vec<Record> = all_passes
        .into_iter()
        .filter(|r| r.saved_chars > 0)
        .collect();
    eprintln!(
        "prefix {api:?} stream={stream}: passes with edits (phase, characters saved): {:?}",
        passes
            .iter()
            .map(|r| (r.phase, r.saved_chars))
            .collect::<Vec<_>>()
    );
    let mid_run = passes.iter().filter(|r| r.phase == Phase::MidRun).count();
    let mid_run_breaks = breaks.iter().filter(|i| !run_starts.contains(i)).count();
    assert!(
        breaks.len() <= passes.len(),
        "{api:?} stream={stream}: {} breaks, {} passes with edits",
        breaks.len(),
        passes.len()
    );
    assert!(
        mid_run_breaks <= mid_run,
        "{api:?} stream={stream}: {mid_run_breaks} breaks inside runs, {mid_run} mid-run passes with edits"
    );
    // The runs' large outputs were distilled at some point: the session is not sent whole.
    assert!(
        !passes.is_empty(),
        "{api:?} stream={stream}: no pass edited anything"
    );
    // Every checkpoint that edited passed the provider's break-even rule, and the turn ends
    // it refused edited nothing (most of the long run's).
    let provider = match api {
        Api::Anthropic => Provider::Anthropic,
        Api::Chat | Api::Responses => Provider::OpenAi,
    };
    let (checked, refused) = check_the_rule(&s, provider);
    assert_eq!(checked, mid_run, "{api:?} stream={stream}");
    assert!(
        refused > 0,
        "{api:?} stream={stream}: the rule refused no turn end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_json_session_keeps_its_prefix() {
    session(Api::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sse_session_keeps_its_prefix() {
    session(Api::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_json_session_keeps_its_prefix() {
    session(Api::Chat, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_sse_session_keeps_its_prefix() {
    session(Api::Chat, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_json_session_keeps_its_prefix() {
    session(Api::Responses, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sse_session_keeps_its_prefix() {
    session(Api::Responses, true).await;
}
