//! Shell-output digests through the gateway, against the strict mock: a tool loop whose every
//! answer is a shell call answered with ~30 KB of output (an error line and a marker line in
//! its middle). Each API, JSON and SSE.
//!
//! What must hold: every request accepted; the raw output never in an upstream request (its
//! middle marker never goes up), its digest (the error line kept) in every request from the
//! first that carries it; consecutive upstream conversations share their bytes up to the new
//! elements (the digest is the same on every request: the cache prefix holds); the model's
//! `recall` of the digest's id (a hidden round) brings the raw output back; the store keeps
//! the raw output and the digests' edits; the savings headers charge the digests.

use std::fmt::Write as _;

use ctxd_core::model::EntryKind;
use ctxd_mock::{Config, Reply};
use serde_json::json;

use crate::distill::recall_id;
use crate::loops::{shell_output, tool_turn, Api};
use crate::served::{no_ctxd_calls, text_of, turn};
use crate::support::Rig;

const TURNS: usize = 8;
const DIGEST: &str = "[ctxd] Digest of bash";

/// Turn `turn`'s output: ~30 KB of test lines with an error and a marker in the middle.
fn output(turn: usize) -> String {
    let body = shell_output(turn, 30_000);
    let mid = body.len() / 2;
    let cut = body[mid..].find('\n').map_or(body.len(), |n| mid + n + 1);
    let mut out = body[..cut].to_owned();
    let _ = writeln!(
        out,
        "error[E0{turn}42]: DIGEST-ERR-{turn} in src/lib.rs:{turn}"
    );
    let _ = writeln!(out, "test mid::RAW-MIDDLE-{turn} ... ok");
    out.push_str(&body[cut..]);
    out
}

/// The byte range of the conversation array of an upstream body (string-aware bracket
/// matching from the array's key).
pub(crate) fn array_span(api: Api, body: &[u8]) -> std::ops::Range<usize> {
    let key: &[u8] = match api {
        Api::Responses => b"\"input\":[",
        _ => b"\"messages\":[",
    };
    let start = body
        .windows(key.len())
        .position(|w| w == key)
        .expect("no conversation array")
        + key.len()
        - 1;
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, &b) in body.iter().enumerate().skip(start) {
        if in_str {
            match b {
                _ if esc => esc = false,
                b'\\' => esc = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return start..i + 1;
                }
            }
            _ => {}
        }
    }
    panic!("the conversation array does not close");
}

async fn digest_loop(api: Api, stream: bool) {
    let mut rig = Rig::with(Config::default(), |s| {
        s.distill_wait = std::time::Duration::from_secs(10);
    })
    .await;
    let script = rig.mock.script();
    for i in 0..TURNS {
        script.push(Reply::tool_call(
            "bash",
            json!({"command": format!("cargo test # {i}")}),
        ));
    }
    let mut conversation = api.first_messages();
    let mut saved_by = String::new();
    for t in 0..TURNS {
        let body = api.body(&conversation, stream, false);
        let (headers, assembled) =
            tool_turn(&rig, api, &mut conversation, &body, stream, &output(t)).await;
        saved_by = headers
            .get("x-ctxd-tokens-saved-by")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        no_ctxd_calls(api, &assembled);
    }
    let digests: i64 = saved_by
        .split(',')
        .find_map(|kv| kv.strip_prefix("digests="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        digests > 5_000,
        "{api:?}: the savings do not charge the digests: {saved_by:?}"
    );

    // The last outputs go up digested too; the model recalls the first (a hidden round).
    let sent = rig.mock.requests();
    let last = String::from_utf8_lossy(&sent[TURNS - 1].body).into_owned();
    let id = recall_id(&last).unwrap_or_else(|| panic!("{api:?}: no recall id:\n{last}"));
    script.push(Reply::tool_call("recall", json!({"entryId": id})));
    script.push(Reply::text("The first run failed with DIGEST-ERR-0."));
    let (answer, _) = turn(&rig, api, &conversation, stream, false).await;
    no_ctxd_calls(api, &answer);
    assert!(text_of(&answer).contains("DIGEST-ERR-0"), "{api:?}");

    let sent = rig.mock.requests();
    assert_eq!(
        sent.len(),
        TURNS + 2,
        "{api:?}: one request per turn and the hidden round"
    );
    for (i, r) in sent.iter().enumerate() {
        assert!(
            r.refused.is_none(),
            "{api:?} stream={stream} request {i} refused: {:?}",
            r.refused
        );
    }
    // Requests 0..=TURNS: the client's. Request i carries the outputs of turns 0..i.
    for (i, r) in sent[..=TURNS].iter().enumerate() {
        let body = String::from_utf8_lossy(&r.body);
        assert!(
            !body.contains("RAW-MIDDLE-"),
            "{api:?} stream={stream} request {i}: a raw output went upstream"
        );
        assert_eq!(
            body.matches(DIGEST).count(),
            i,
            "{api:?} stream={stream} request {i}: one digest per output so far"
        );
        for t in 0..i {
            assert!(
                body.contains(&format!("DIGEST-ERR-{t}")),
                "{api:?} request {i}: the error line of turn {t} is not in its digest"
            );
            assert!(
                body.contains(&format!("run-{t}-start")),
                "{api:?} request {i}: the head of turn {t} is not in its digest"
            );
        }
        assert!(
            r.body.len() < 12_000 + i * 6_000,
            "{api:?} request {i}: {} bytes",
            r.body.len()
        );
    }
    // Cache stability: each conversation array starts with the previous one's elements.
    for i in 1..TURNS {
        let (a, b) = (&sent[i].body, &sent[i + 1].body);
        let (ra, rb) = (array_span(api, a), array_span(api, b));
        let prev = &a[ra.start..ra.end - 1];
        assert!(
            b[rb.start..].starts_with(prev),
            "{api:?} stream={stream}: request {} does not extend request {i}'s bytes",
            i + 1
        );
    }
    // The hidden round's continuation: the raw output, recalled.
    let continuation = String::from_utf8_lossy(&sent[TURNS + 1].body);
    assert!(
        continuation.contains("RAW-MIDDLE-0"),
        "{api:?}: recall did not bring the raw output back"
    );

    // The store: every raw output, and one digest edit per output.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let s = stored.load(&record);
    for t in 0..TURNS {
        let marker = format!("RAW-MIDDLE-{t}");
        assert!(
            s.entries
                .iter()
                .any(|e| matches!(&e.kind, EntryKind::Message(m)
                if ctxd_core::text::message_text(m).contains(&marker))),
            "{api:?}: the raw output of turn {t} is not in the store"
        );
    }
    let edits = s
        .entries
        .iter()
        .filter(|e| ctxd_core::mechanisms::digest::is_digest_edit(&e.kind))
        .count();
    assert_eq!(edits, TURNS, "{api:?}: one digest edit per output");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_json_shell_outputs_reach_the_model_as_digests() {
    digest_loop(Api::Anthropic, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sse_shell_outputs_reach_the_model_as_digests() {
    digest_loop(Api::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_json_shell_outputs_reach_the_model_as_digests() {
    digest_loop(Api::Chat, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_sse_shell_outputs_reach_the_model_as_digests() {
    digest_loop(Api::Chat, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_json_shell_outputs_reach_the_model_as_digests() {
    digest_loop(Api::Responses, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sse_shell_outputs_reach_the_model_as_digests() {
    digest_loop(Api::Responses, true).await;
}
