//! Cache planning through the gateway, against the strict mock's simulated Anthropic prompt
//! cache: a long tool loop with thinking whose client marks breakpoints as Claude Code does
//! (the system prompt and the last message), distillation editing mid-run and at the run's end.
//!
//! What must hold: at most 4 breakpoints on every request, none refused; the requests that
//! bring an edit of the sent prefix still read the cache (the read point), where the client's
//! breakpoints alone read less; every pass's edits passed the break-even rule, and every turn
//! end the rule refused edited nothing; one cache record per request in the store. The hit
//! rates and input costs with and without planning are printed (without planning the client's
//! breakpoints are still recorded, so the rule decides the same edits).

use ctxd_core::cache::{self, Provider};
use ctxd_core::distill::{self, Phase};
use ctxd_core::model::{EntryKind, Session};
use ctxd_mock::Reply;
use serde_json::{json, Value};

use crate::loops::{scripted, shell_output, tool_turn, Api};
use crate::support::Rig;

/// Tool turns of the first run; the second run has two.
const TURNS: usize = 32;
const OUTPUT_BYTES: usize = 20_000;

/// The client's body with Claude Code's breakpoints: the system prompt and the last block of
/// the last message (a string content becomes a text block).
fn marked(conversation: &[Value], stream: bool) -> Value {
    let mut body = Api::Anthropic.body(conversation, stream, true);
    body["system"] = json!([{"type": "text", "text": "You are a coding agent.",
        "cache_control": {"type": "ephemeral"}}]);
    let last = body["messages"].as_array_mut().unwrap().last_mut().unwrap();
    if let Some(text) = last["content"].as_str() {
        last["content"] = json!([{"type": "text", "text": text}]);
    }
    let blocks = last["content"].as_array_mut().unwrap();
    blocks.last_mut().unwrap()["cache_control"] = json!({"type": "ephemeral"});
    body
}

/// The `[ctxd]` replacements in an upstream body: grows when a pass's edits land.
fn edits_in(body: &[u8]) -> usize {
    let text = String::from_utf8_lossy(body);
    text.matches("[ctxd] Distilled output of").count()
        + text.matches("[ctxd] Omitted the output of").count()
}

/// What one loop measured.
#[derive(Debug, Default)]
struct Measured {
    /// Per client request: (cache read, cache write, uncached input) tokens.
    usage: Vec<(u64, u64, u64)>,
    /// Requests that brought new edits of the sent prefix.
    edited: Vec<usize>,
    session: Option<Session>,
}

impl Measured {
    fn hit_rate(&self) -> f64 {
        let read: u64 = self.usage.iter().map(|u| u.0).sum();
        let all: u64 = self.usage.iter().map(|u| u.0 + u.1 + u.2).sum();
        read as f64 / all.max(1) as f64
    }
    /// Input cost in base-input tokens at Anthropic's prices (writes 1.25×, reads 0.1×).
    fn cost(&self) -> f64 {
        self.usage
            .iter()
            .map(|u| u.2 as f64 + 1.25 * u.1 as f64 + 0.1 * u.0 as f64)
            .sum()
    }
    fn read_at_edits(&self) -> u64 {
        self.edited.iter().map(|&i| self.usage[i].0).sum()
    }
}

async fn run(stream: bool, plan: bool) -> Measured {
    let mut script: Vec<Reply> = (0..TURNS)
        .map(|i| Reply::tool_call("bash", json!({"command": format!("cargo test # {i}")})))
        .collect();
    script.push(Reply::text("The suite passes now."));
    for i in 0..2 {
        script.push(Reply::tool_call(
            "bash",
            json!({"command": format!("cargo bench # {i}")}),
        ));
    }
    script.push(Reply::text("Benchmarks run."));
    let mut rig = Rig::with(scripted(script, true), |s| {
        s.management.mechanisms.digests = false;
        s.distill_wait = std::time::Duration::from_secs(10);
        s.cache_plan = plan;
    })
    .await;
    let api = Api::Anthropic;
    let mut m = Measured::default();
    let mut conversation = api.first_messages();
    let mut turn = 0;
    for step in 0..TURNS + 4 {
        if step == TURNS + 1 {
            conversation.push(json!({"role": "user", "content": "Now run the benchmarks."}));
        }
        let body = marked(&conversation, stream);
        let (_, assembled) = if step == TURNS || step == TURNS + 3 {
            // The final answers: no call to answer.
            let resp = rig
                .post(
                    api.path(),
                    &api.headers(),
                    serde_json::to_vec(&body).unwrap(),
                )
                .await;
            assert!(resp.status().is_success(), "step {step}: {}", resp.status());
            let headers = resp.headers().clone();
            let text = resp.bytes().await.unwrap();
            let assembled = crate::loops::read_response(api, stream, &text);
            for e in &assembled.elements {
                conversation.push(serde_json::from_slice(&e.wire).unwrap());
            }
            (headers, assembled)
        } else {
            turn += 1;
            let output = shell_output(turn, OUTPUT_BYTES);
            tool_turn(&rig, api, &mut conversation, &body, stream, &output).await
        };
        let u = assembled.usage.unwrap_or_default();
        m.usage.push((u.cache_read, u.cache_write, u.input));
    }

    let sent = rig.mock.requests();
    assert_eq!(
        sent.len(),
        TURNS + 4,
        "one upstream request per client request"
    );
    let mut before = 0;
    for (i, r) in sent.iter().enumerate() {
        assert!(r.refused.is_none(), "request {i} refused: {:?}", r.refused);
        let marks = String::from_utf8_lossy(&r.body)
            .matches("cache_control")
            .count();
        assert!(marks <= 4, "request {i}: {marks} breakpoints");
        assert!(
            marks >= 2,
            "request {i}: the client's breakpoints went: {marks}"
        );
        let now = edits_in(&r.body);
        if now > before {
            m.edited.push(i);
        }
        before = now;
    }
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let session = stored.load(&record);
    let records = session
        .entries
        .iter()
        .filter_map(|e| cache::Record::from_entry(&e.kind))
        .count();
    assert_eq!(records, TURNS + 4, "one cache record per request");
    m.session = Some(session);
    m
}

/// Every mid-run pass's edits passed the break-even rule of `provider` where it ran, and every
/// turn end where the rule (the planner) laid out nothing edited nothing. The checkpoints that
/// edited, and the turn ends the rule refused.
pub(crate) fn check_the_rule(session: &Session, provider: Provider) -> (usize, usize) {
    let branch = ctxd_core::tree::active_branch(session);
    let cfg = distill::Config {
        provider,
        ..distill::Config::default()
    };
    let mut mid_run = 0;
    for (i, &pos) in branch.iter().enumerate() {
        let kind = &session.entries[pos].kind;
        let Some(record) = distill::record::Record::from_entry(kind) else {
            continue;
        };
        // The pass ran on the branch up to its edits (appended under the turn it judged).
        let mut start = i;
        while start > 0
            && matches!(
                session.entries[branch[start - 1]].kind,
                EntryKind::ContextEdit { .. }
            )
        {
            start -= 1;
        }
        let prefix = &branch[..start];
        if record.phase == Phase::MidRun {
            mid_run += 1;
            let plan = distill::plan(session, prefix, &cfg, Phase::MidRun);
            assert!(
                !plan.items.is_empty(),
                "a checkpoint the rule refused edited"
            );
            let pending: usize = plan.items.iter().map(|it| it.before_chars).sum();
            let first = plan
                .costs
                .item_of(plan.items[0].entry)
                .expect("the first item is shown");
            assert!(cache::pays_off(
                pending,
                plan.run.turns,
                plan.costs.rewrite_from(first),
                provider
            ));
        }
    }
    // Turn ends without a checkpoint: the rule laid out nothing there.
    let mut refused = 0;
    for (i, &pos) in branch.iter().enumerate() {
        let EntryKind::Message(msg) = &session.entries[pos].kind else {
            continue;
        };
        let next_is_edit = branch[i + 1..]
            .iter()
            .map(|&p| &session.entries[p].kind)
            .take_while(|k| !matches!(k, EntryKind::Message(_)))
            .any(|k| matches!(k, EntryKind::ContextEdit { .. }));
        let called = msg
            .content
            .iter()
            .any(|b| matches!(b, ctxd_core::model::ContentBlock::ToolCall { .. }));
        if msg.role != ctxd_core::model::Role::Assistant || !called || next_is_edit {
            continue;
        }
        // The pass saw the branch up to the turn's records (those after the answer).
        let end = branch[i + 1..]
            .iter()
            .position(|&p| matches!(session.entries[p].kind, EntryKind::Message(_)))
            .map_or(branch.len(), |k| i + 1 + k);
        let plan = distill::plan(session, &branch[..end], &cfg, Phase::MidRun);
        if plan.items.is_empty() {
            refused += 1;
        }
    }
    (mid_run, refused)
}

async fn check(stream: bool) {
    let on = run(stream, true).await;
    let off = run(stream, false).await;
    eprintln!(
        "cache stream={stream}: hit rate {:.3} with planning, {:.3} without; input cost {:.0} vs \
         {:.0} base tokens; read at the {} edited requests {} vs {} tokens",
        on.hit_rate(),
        off.hit_rate(),
        on.cost(),
        off.cost(),
        on.edited.len(),
        on.read_at_edits(),
        off.read_at_edits()
    );
    for &i in &on.edited {
        eprintln!(
            "  request {i}: read/write/input {:?} with planning, {:?} without",
            on.usage[i], off.usage[i]
        );
    }
    assert!(on.edited.len() >= 3, "edits landed at {:?}", on.edited);
    assert_eq!(on.edited, off.edited, "planning changed where edits landed");
    // The read point: requests bringing an edit still read the cache.
    assert!(
        on.edited.iter().filter(|&&i| on.usage[i].0 > 0).count() >= 2,
        "{:?}",
        on.edited.iter().map(|&i| on.usage[i]).collect::<Vec<_>>()
    );
    assert!(on.read_at_edits() > off.read_at_edits());
    assert!(
        on.edited.iter().all(|&i| on.usage[i].0 >= off.usage[i].0),
        "the read point read less than the client's own breakpoints"
    );
    assert!(on.hit_rate() > off.hit_rate());
    assert!(on.cost() < off.cost());
    let (mid_run, refused) = check_the_rule(on.session.as_ref().unwrap(), Provider::Anthropic);
    assert!(mid_run >= 2, "{mid_run} checkpoints");
    assert!(refused > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_json_tool_loop_reads_the_cache_across_edits() {
    check(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sse_tool_loop_reads_the_cache_across_edits() {
    check(true).await;
}
