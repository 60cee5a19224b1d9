//! Distillation through the gateway, against the strict mock: a run greps a large output and
//! answers citing one line of it; the pass at the run's end distils the output; the next
//! request carries the distilled text (the cited line verbatim, the rest replaced by omission
//! lines naming `recall`), and the model's `recall` (answered by the gateway in a hidden round)
//! gives the raw output back. Every upstream request accepted; each API, JSON and SSE.

use std::fmt::Write as _;

use ctxd_core::model::EntryKind;
use ctxd_mock::{Config, Reply};
use serde_json::json;

use crate::loops::Api;
use crate::served::{no_ctxd_calls, text_of, turn, user_text};
use crate::support::Rig;

/// A grep over a source tree: ~12 KB of unrelated matches, one line the answer cites, and a
/// marker line among the unrelated ones (what only `recall` brings back).
fn grep_output() -> String {
    let mut out = String::new();
    for i in 0..160 {
        let _ = writeln!(
            out,
            "src/module_{i:03}/handler.rs:{}: let retry_limit_{i} = backoff(attempt, {});",
            10 + i,
            i * 3
        );
        if i == 40 {
            out.push_str("src/config.rs:42: pub const WIDGET_LIMIT: usize = 7;\n");
        }
        if i == 120 {
            out.push_str("src/module_120/handler.rs:130: // OMITTED-MARK-91 legacy limit\n");
        }
    }
    out
}

/// The id of the first `recall({"entryId":"…"})` in `text`.
pub(crate) fn recall_id(text: &str) -> Option<String> {
    let key = "recall({\\\"entryId\\\":\\\"";
    let at = text.find(key)? + key.len();
    let id: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    (!id.is_empty()).then_some(id)
}

/// Run 1, the same in every test here: the model greps (a large output), then answers citing
/// one line of it. The conversation as the client holds it afterwards.
async fn grep_run(rig: &Rig, api: Api, stream: bool) -> Vec<serde_json::Value> {
    grep_run_printing(rig, api, stream, &grep_output()).await
}

/// [`grep_run`] with the tool's result text `output`.
async fn grep_run_printing(
    rig: &Rig,
    api: Api,
    stream: bool,
    output: &str,
) -> Vec<serde_json::Value> {
    let script = rig.mock.script();
    script.push(Reply::tool_call(
        "bash",
        json!({"command": "grep -rn limit src/"}),
    ));
    script.push(Reply::text(
        "The widget limit is WIDGET_LIMIT in src/config.rs line 42 (set to 7).",
    ));
    let mut conversation = vec![user_text(
        api,
        "Where is the widget limit set? Grep for it.",
    )];
    if let Api::Chat = api {
        conversation.insert(
            0,
            json!({"role": "system", "content": "You are a coding agent."}),
        );
    }
    let (a1, els) = turn(rig, api, &conversation, stream, false).await;
    no_ctxd_calls(api, &a1);
    let results = api.results(&els, output);
    conversation.extend(els);
    conversation.extend(results);
    let (a2, els) = turn(rig, api, &conversation, stream, false).await;
    assert!(text_of(&a2).contains("WIDGET_LIMIT"), "{api:?}");
    conversation.extend(els);
    conversation
}

/// The text of the nearest message above the first stored edit: the answer whose turn end
/// the edits went under (a turn's accounting events come after its answer).
fn text_above_the_edits(s: &ctxd_core::model::Session) -> String {
    let edit = s
        .entries
        .iter()
        .find(|e| matches!(e.kind, EntryKind::ContextEdit { .. }))
        .expect("no edit stored");
    let mut above = edit.parent.clone();
    loop {
        let parent = s
            .entries
            .iter()
            .find(|e| Some(&e.id) == above.as_ref())
            .expect("the edits' ancestors are stored");
        if let EntryKind::Message(m) = &parent.kind {
            return ctxd_core::text::message_text(m);
        }
        above = parent.parent.clone();
    }
}

/// A gateway whose passes ask `judge` (a second mock serving log-probabilities, model
/// `judge-mini`), digests off (distillation is what is tested), then `tweak`.
async fn judged_rig(
    judge: &ctxd_mock::MockServer,
    tweak: impl FnOnce(&mut ctxd_gateway::Settings),
) -> Rig {
    let judge_url = format!("{}/v1", judge.base_url());
    Rig::with(Config::default(), |s| {
        s.management.mechanisms.digests = false;
        s.classifier = ctxd_engine::distill::ClassifierSettings {
            kind: ctxd_engine::distill::ClassifierKind::OpenAi,
            base_url: Some(judge_url),
            model: Some("judge-mini".into()),
            ..Default::default()
        };
        tweak(s);
    })
    .await
}

async fn session(api: Api, stream: bool) {
    let mut rig = Rig::with(Config::default(), |s| {
        // Deterministic: each request waits for the previous turn end's pass.
        s.distill_wait = std::time::Duration::from_secs(10);
        // The grep's output is over the digests' threshold: distillation is what is tested.
        s.management.mechanisms.digests = false;
    })
    .await;
    let mut conversation = grep_run(&rig, api, stream).await;
    let script = rig.mock.script();

    // Run 2: the next prompt goes upstream with the output distilled.
    script.push(Reply::text("Noted."));
    conversation.push(user_text(
        api,
        "Thanks. Which file would I edit to raise it?",
    ));
    let (_, els) = turn(&rig, api, &conversation, stream, false).await;
    conversation.extend(els);
    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 3, "{api:?}");
    let body = String::from_utf8_lossy(&sent[2].body).into_owned();
    assert!(
        body.contains("[ctxd] Distilled output of bash"),
        "{api:?} stream={stream}: the output was not distilled:\n{}",
        &body[..body.len().min(4000)]
    );
    assert!(
        body.contains("src/config.rs:42: pub const WIDGET_LIMIT: usize = 7;"),
        "{api:?}: the cited line is not kept verbatim"
    );
    assert!(
        !body.contains("OMITTED-MARK-91"),
        "{api:?}: the unrelated lines went upstream"
    );
    assert!(
        body.len() + 6_000 < String::from_utf8_lossy(&sent[1].body).len() + 200,
        "{api:?}: the request did not shrink"
    );
    let id = recall_id(&body).unwrap_or_else(|| panic!("{api:?}: no recall id:\n{body}"));

    // Run 3: the model recalls the raw output (a hidden round the client never sees).
    script.push(Reply::tool_call("recall", json!({"entryId": id})));
    script.push(Reply::text("Here is the whole output."));
    conversation.push(user_text(api, "Show me the whole grep output."));
    let (a3, _) = turn(&rig, api, &conversation, stream, false).await;
    no_ctxd_calls(api, &a3);
    assert!(
        text_of(&a3).contains("Here is the whole output."),
        "{api:?}"
    );
    let sent = rig.mock.requests();
    assert_eq!(
        sent.len(),
        5,
        "{api:?}: the prompt and the hidden round's continuation"
    );
    let continuation = String::from_utf8_lossy(&sent[4].body).into_owned();
    assert!(
        continuation.contains("OMITTED-MARK-91") && continuation.contains("retry_limit_159"),
        "{api:?}: recall did not give the raw output back:\n{}",
        &continuation[..continuation.find("\"tools\"").unwrap_or(continuation.len())]
            [continuation
                .find("\"tools\"")
                .unwrap_or(continuation.len())
                .saturating_sub(3000)..]
    );
    for (i, r) in sent.iter().enumerate() {
        assert!(
            r.refused.is_none(),
            "{api:?} stream={stream} request {i} refused: {:?}",
            r.refused
        );
    }

    // The store: the raw output untouched, the edit and the pass's record beside it.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let s = stored.load(&record);
    let raw = s.entries.iter().any(|e| {
        matches!(&e.kind, EntryKind::Message(m) if ctxd_core::text::message_text(m).contains("OMITTED-MARK-91"))
    });
    assert!(raw, "{api:?}: the raw output is not in the store");
    let edits = s
        .entries
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::ContextEdit { .. }))
        .count();
    let records = s
        .entries
        .iter()
        .filter(|e| matches!(&e.kind, EntryKind::Event { name, .. } if name == ctxd_core::distill::record::EVENT))
        .count();
    assert!(edits >= 1, "{api:?}: no edit stored");
    assert!(records >= 1, "{api:?}: no record stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_distilled_outputs_go_upstream_and_recall_brings_them_back() {
    session(Api::Anthropic, false).await;
    session(Api::Anthropic, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_distilled_outputs_go_upstream_and_recall_brings_them_back() {
    session(Api::Chat, false).await;
    session(Api::Chat, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_distilled_outputs_go_upstream_and_recall_brings_them_back() {
    session(Api::Responses, false).await;
    session(Api::Responses, true).await;
}

/// After [`grep_run`]: the next question, answered "Noted."; every upstream request accepted.
/// The body of that question's upstream request (the third).
async fn next_question(
    rig: &Rig,
    api: Api,
    stream: bool,
    mut conversation: Vec<serde_json::Value>,
) -> String {
    rig.mock.script().push(Reply::text("Noted."));
    conversation.push(user_text(
        api,
        "Thanks. Which file would I edit to raise it?",
    ));
    turn(rig, api, &conversation, stream, false).await;
    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 3, "{api:?} stream={stream}");
    assert!(
        sent.iter().all(|r| r.refused.is_none()),
        "{api:?} stream={stream}: refused"
    );
    String::from_utf8_lossy(&sent[2].body).into_owned()
}

/// `--distill-exclude-tools bash`: the pass judges the run but leaves the grep's output
/// whole, so the next request carries every line of it, and the pass's record says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_excluded_tool_keeps_its_outputs_whole() {
    let api = Api::Anthropic;
    let mut rig = Rig::with(Config::default(), |s| {
        s.distill_wait = std::time::Duration::from_secs(10);
        s.management.mechanisms.digests = false;
        s.distill_exclude_tools = vec!["bash".into()];
    })
    .await;
    let conversation = grep_run(&rig, api, true).await;
    let body = next_question(&rig, api, true, conversation).await;
    assert!(
        !body.contains("[ctxd] Distilled output of bash"),
        "distilled"
    );
    assert!(
        body.contains("OMITTED-MARK-91") && body.contains("retry_limit_159"),
        "the excluded tool's output is not whole"
    );
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let s = stored.load(&record);
    assert!(
        !s.entries
            .iter()
            .any(|e| matches!(e.kind, EntryKind::ContextEdit { .. })),
        "an edit was stored"
    );
}

/// An older Codex's shell result is one JSON line (`{"output": …, "metadata": …}`): the pass
/// distils it by the lines inside, so the next request carries the cited line and not the
/// unrelated ones, and the strict mock accepts it. Responses (Codex's API), JSON and SSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapped_codex_output_is_distilled_by_its_lines() {
    for stream in [false, true] {
        let api = Api::Responses;
        let rig = Rig::with(Config::default(), |s| {
            s.distill_wait = std::time::Duration::from_secs(10);
            s.management.mechanisms.digests = false;
        })
        .await;
        let wrapped = json!({
            "output": grep_output(),
            "metadata": {"exit_code": 0, "duration_seconds": 0.2}
        })
        .to_string();
        let conversation = grep_run_printing(&rig, api, stream, &wrapped).await;
        let body = next_question(&rig, api, stream, conversation).await;
        assert!(
            body.contains("[ctxd] Distilled output of bash"),
            "stream={stream}: not distilled"
        );
        assert!(
            body.contains("src/config.rs:42: pub const WIDGET_LIMIT: usize = 7;")
                && !body.contains("OMITTED-MARK-91"),
            "stream={stream}: not distilled by its lines"
        );
    }
}

/// With the default `distill-wait` (0), no request waits for a pass. A pass over a session
/// nobody wrote to since its turn end commits its edits itself: they are in the store before
/// any further request, and the next request carries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_commits_its_edits_at_its_end() {
    let api = Api::Anthropic;
    let rig = Rig::with(Config::default(), |s| {
        s.management.mechanisms.digests = false
    })
    .await;
    let mut conversation = grep_run(&rig, api, true).await;
    let reader = crate::support::Stored(
        ctxd_store::SqliteStore::open(&rig.store_path, ctxd_store::Durability::Full).unwrap(),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let stored_edits = || {
        reader.sessions().iter().any(|r| {
            ctxd_store::Store::load(&reader.0, r.id).is_ok_and(|s| {
                s.entries
                    .iter()
                    .any(|e| matches!(e.kind, EntryKind::ContextEdit { .. }))
            })
        })
    };
    while !stored_edits() {
        assert!(
            std::time::Instant::now() < deadline,
            "the pass's edits were never committed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    rig.mock.script().push(Reply::text("Noted."));
    conversation.push(user_text(api, "Thanks."));
    turn(&rig, api, &conversation, true, false).await;
    let sent = rig.mock.requests();
    let last = sent.last().unwrap();
    assert!(last.refused.is_none(), "refused: {:?}", last.refused);
    assert!(
        String::from_utf8_lossy(&last.body).contains("[ctxd] Distilled output of bash"),
        "the committed edits did not reach the next request"
    );
}

/// A request that comes while the pass still runs (its classifier is slow) goes without it,
/// valid either way; the session moved on, so the edits go under a later turn end (at the
/// pass's end when the session is idle then, else at the next request) and a later request
/// carries them.
///
/// Run alone (`.ci/run`'s step for it): beside the binary's other tests on two cores it failed
/// two CI runs (no edits upstream in two minutes) while it passes alone in about 3 s; what
/// holds the pass back there is not found yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing-sensitive: .ci/run runs it alone"]
async fn without_a_wait_the_edits_land_at_a_later_request() {
    let api = Api::Anthropic;
    let slow = Config {
        shape: ctxd_mock::Shape {
            first_byte_delay: std::time::Duration::from_millis(100),
            ..Default::default()
        },
        ..Config::default()
    };
    let judge = ctxd_mock::MockServer::start(slow).await.unwrap();
    let mut rig = judged_rig(&judge, |_| {}).await;
    let mut conversation = grep_run(&rig, api, true).await;
    let script = rig.mock.script();
    let mut landed = None;
    // Bounded by time, not by a count of follow-ups: on a loaded machine the pass (some 160
    // questions to a judge answering each in 100 ms, six at a time) takes longer. The
    // follow-ups come less and less often (200 ms, growing by half, up to 3 s): on two busy
    // cores, planning a request every 200 ms left the pass no room to finish in two minutes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut pause = std::time::Duration::from_millis(200);
    for i in 0.. {
        if std::time::Instant::now() > deadline {
            break;
        }
        script.push(Reply::text(format!("Reply {i}.")));
        conversation.push(user_text(api, &format!("Question {i}?")));
        let (_, els) = turn(&rig, api, &conversation, true, false).await;
        conversation.extend(els);
        let sent = rig.mock.requests();
        let last = sent.last().unwrap();
        assert!(last.refused.is_none(), "refused: {:?}", last.refused);
        if String::from_utf8_lossy(&last.body).contains("[ctxd] Distilled output of bash") {
            landed = Some(i);
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 3 / 2).min(std::time::Duration::from_secs(3));
    }
    let landed = landed.expect("the pass's edits never reached upstream");
    eprintln!(
        "the edits landed at follow-up request {landed} (the judge was asked {} times)",
        judge.requests().len()
    );
    assert!(
        landed > 0,
        "the first follow-up came while the judge was still answering"
    );
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    // The follow-up answer before the request that carried them.
    let text = text_above_the_edits(&stored.load(&record));
    assert!(
        text.starts_with("Reply "),
        "the edits went under {text:?}, not under the follow-up before the request that carried them"
    );
}

/// A run that ends while a pass runs (its classifier holds the answer) gets its pass when
/// that one is over, and the edits are committed under the later turn end, with no further
/// request: an agent's next message finds them in the store. (They once waited for the next
/// request, and a pass that was slow on a loaded machine left the run end unjudged.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_end_during_a_pass_is_judged_when_the_pass_is_over() {
    let api = Api::Anthropic;
    let judge = ctxd_mock::MockServer::start(Config::default())
        .await
        .unwrap();
    // The first question the classifier is asked waits for the test's word.
    judge
        .script()
        .push(Reply::wait(std::time::Duration::from_secs(20)));
    let mut rig = judged_rig(&judge, |_| {}).await;
    let mut conversation = grep_run(&rig, api, true).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while judge.requests().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no pass asked the classifier"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // A run with an output of its own ends while that pass waits.
    let script = rig.mock.script();
    script.push(Reply::tool_call(
        "bash",
        json!({"command": "grep -rn widget tests/"}),
    ));
    script.push(Reply::text("Noted."));
    conversation.push(user_text(api, "Thanks. Are there widget tests?"));
    let (_, els) = turn(&rig, api, &conversation, true, false).await;
    let results = api.results(&els, &grep_output());
    conversation.extend(els);
    conversation.extend(results);
    turn(&rig, api, &conversation, true, false).await;
    let asked_before = judge.requests().len();
    judge.script().push(Reply::default_turn());

    let reader = crate::support::Stored(
        ctxd_store::SqliteStore::open(&rig.store_path, ctxd_store::Durability::Full).unwrap(),
    );
    let records = || -> (ctxd_core::model::Session, usize) {
        let record = reader.sessions().remove(0);
        let s = reader.load(&record);
        let n = s
            .entries
            .iter()
            .filter(|e| ctxd_core::distill::record::Record::from_entry(&e.kind).is_some())
            .count();
        (s, n)
    };
    // The held pass's edits, then the record of the pass over the later turn end (the
    // classifier answers it too), all without a request.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let s = loop {
        let (s, n) = records();
        if n >= 2 {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{n} pass record(s) stored: the turn end during the pass was not judged"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(
        judge.requests().len() > asked_before,
        "the later pass did not ask the classifier"
    );
    // The held pass's edits went under the later turn end (the "Noted." answer).
    let text = text_above_the_edits(&s);
    assert_eq!(text, "Noted.", "the edits went under {text:?}");
    for r in rig.mock.requests() {
        assert!(r.refused.is_none(), "refused: {:?}", r.refused);
    }
    rig.stop().await;
}

/// A run-end pass whose classifier failed kept the run's outputs; the next run end asks about
/// them again (through the gateway, with the classifier back), and the requests stay valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_a_failed_classifier_left_are_judged_at_the_next_run_end() {
    let api = Api::Chat;
    let judge = ctxd_mock::MockServer::start(Config::default())
        .await
        .unwrap();
    judge
        .script()
        .extend(std::iter::repeat_with(|| Reply::error(400, "overloaded")).take(1_000));
    let mut rig = judged_rig(&judge, |_| {}).await;
    let mut conversation = grep_run(&rig, api, true).await;
    let reader = crate::support::Stored(
        ctxd_store::SqliteStore::open(&rig.store_path, ctxd_store::Durability::Full).unwrap(),
    );
    // The results of every stored pass, in order: (entry, reason).
    let judged = || -> Vec<Vec<(String, String)>> {
        let record = reader.sessions().remove(0);
        reader
            .load(&record)
            .entries
            .iter()
            .filter_map(|e| ctxd_core::distill::record::Record::from_entry(&e.kind))
            .map(|r| {
                r.results
                    .into_iter()
                    .filter(|i| i.tool == "bash")
                    .map(|i| (i.entry_id, i.reason))
                    .collect()
            })
            .collect()
    };
    let wait_for = |passes: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        async move {
            loop {
                let j = judged();
                if j.len() >= passes {
                    return j;
                }
                assert!(std::time::Instant::now() < deadline, "{j:?}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    let first = wait_for(1).await;
    let (output, reason) = first[0].first().cloned().expect("the output was judged");
    assert_eq!(reason, "error");
    judge.script().clear();
    let asked_before = judge.requests().len();

    rig.mock
        .script()
        .push(Reply::text("It is used by the widget counter."));
    conversation.push(user_text(api, "Where is the widget limit used?"));
    turn(&rig, api, &conversation, true, false).await;
    let all = wait_for(2).await;
    let again = all[1..]
        .iter()
        .flatten()
        .find(|(entry, _)| *entry == output)
        .expect("the output the failed pass kept was not judged again");
    eprintln!("judged again: {again:?}");
    assert_ne!(again.1, "error", "{again:?}");
    assert!(judge.requests().len() > asked_before);
    for r in rig.mock.requests() {
        assert!(r.refused.is_none(), "refused: {:?}", r.refused);
    }
    rig.stop().await;
}

/// With an OpenAI-compatible classifier configured (a second mock serving log-probabilities),
/// the gateway's passes ask it, and their records name it and count its requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_logprob_classifier_is_asked_at_turn_ends() {
    let api = Api::Chat;
    let judge = ctxd_mock::MockServer::start(Config::default())
        .await
        .unwrap();
    let mut rig = judged_rig(&judge, |s| {
        s.distill_wait = std::time::Duration::from_secs(10);
    })
    .await;
    let mut conversation = grep_run(&rig, api, false).await;
    rig.mock.script().push(Reply::text("Noted."));
    conversation.push(user_text(api, "Thanks."));
    turn(&rig, api, &conversation, false, false).await;
    for r in rig.mock.requests() {
        assert!(r.refused.is_none(), "refused: {:?}", r.refused);
    }
    let asked = judge.requests();
    assert!(!asked.is_empty(), "the classifier was not asked");
    for r in &asked {
        assert!(
            r.refused.is_none(),
            "the classifier's request was refused: {:?}",
            r.refused
        );
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["model"], "judge-mini");
        assert_eq!(v["logprobs"], true);
    }
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let s = stored.load(&record);
    let named = s.entries.iter().any(|e| {
        matches!(&e.kind, EntryKind::Event { name, detail: Some(d) }
            if name == ctxd_core::distill::record::EVENT
                && d["classifier"].as_str().is_some_and(|c| c.contains("judge-mini"))
                && d["usage"]["requests"].as_u64().is_some_and(|n| n > 0))
    });
    assert!(named, "no record names the classifier with its usage");
}
