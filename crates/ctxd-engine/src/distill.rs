//! Distillation's classifier: the trait, the runner that asks a plan's questions, the
//! default local classifier, a logprob classifier over any OpenAI-compatible model
//! ([`openai`]), the local rules plus a MiniLM sentence model (`minilm`, with the cargo
//! feature `minilm`), and [`Configured`], the one type a configuration makes ([`configured`]).
//!
//! The core lays a pass out ([`ctxd_core::distill::plan`]) and decides from the answers
//! ([`ctxd_core::distill::decide`]); only asking is asynchronous, and it lives here. The runner
//! sends a plan's batches (one per segment of a large output, or per group of whole items) to a
//! [`Classifier`] with at most `concurrency` in flight, inside a time budget. A batch that fails,
//! answers the wrong number of questions or is not back in time leaves its questions without an
//! answer, and the core keeps their items (asked again at the next pass, or at the next run
//! end once the run is over: `ctxd_core::distill::plan`). Usage (requests,
//! tokens, ms) goes into the pass's record.

mod configured;
#[cfg(feature = "minilm")]
pub mod minilm;
pub mod openai;

pub use configured::{
    ClassifierKind, ClassifierSettings, Configured, SettingsError, DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_MS, MINILM_NOT_BUILT,
};
#[cfg(feature = "minilm")]
pub use minilm::MiniLmClassifier;
pub use openai::{LogprobClassifier, LogprobSettings};

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures_util::stream::{self, StreamExt};

use ctxd_core::distill::record::Usage;
use ctxd_core::distill::{local, Answer, Batch, Config, Decisions, Missing, Phase, Plan};
use ctxd_core::model::{ContentBlock, EntryKind, Role, Session};
use ctxd_store::NewEntry;

use crate::turn::{hash, SessionLog};

/// One pass's shared view for a classifier: the plan, and what a classifier prepares once per
/// pass (the local classifier's citation index).
pub struct Pass<'a> {
    pub plan: &'a Plan,
    local: OnceLock<local::Index>,
}

impl<'a> Pass<'a> {
    pub fn new(plan: &'a Plan) -> Self {
        Self {
            plan,
            local: OnceLock::new(),
        }
    }
}

/// A classifier's reply to one batch: an answer per question, in order, and what it cost.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    pub answers: Vec<Answer>,
    /// Requests the batch took (0 counts as one: a local classifier's batch is one "request").
    pub requests: u64,
    pub input_tokens: u64,
    pub cost_usd: f64,
}

/// Why a batch has no reply.
#[derive(Debug, thiserror::Error)]
#[error("classifier: {0}")]
pub struct ClassifierError(pub String);

/// Answers yes/no and choice questions with probabilities, a batch at a time.
pub trait Classifier: Send + Sync {
    /// The name records and `ctxd eval` show.
    fn name(&self) -> &str;
    fn classify<'a>(
        &'a self,
        pass: &'a Pass<'a>,
        batch: &'a Batch,
    ) -> impl Future<Output = Result<Reply, ClassifierError>> + Send + 'a;
}

/// The default: the core's local rules (citations, superseded and recency signals). No network,
/// no model files; microseconds per batch. It remembers the terms of the texts it read
/// ([`local::TermMemo`], shared by its clones), so the passes of a long run read each output
/// once, not at every turn end.
#[derive(Clone, Debug, Default)]
pub struct LocalClassifier {
    memo: std::sync::Arc<std::sync::Mutex<local::TermMemo>>,
}

impl LocalClassifier {
    /// The pass's index, read through the shared memo; a memo another pass holds (or one a
    /// panic poisoned) is not waited for: this pass reads its texts afresh.
    fn index(&self, plan: &Plan) -> local::Index {
        match self.memo.try_lock() {
            Ok(mut memo) => local::Index::with_memo(plan, &mut memo),
            Err(_) => local::Index::new(plan),
        }
    }
}

impl Classifier for LocalClassifier {
    fn name(&self) -> &str {
        local::NAME
    }
    fn classify<'a>(
        &'a self,
        pass: &'a Pass<'a>,
        batch: &'a Batch,
    ) -> impl Future<Output = Result<Reply, ClassifierError>> + Send + 'a {
        let index = pass.local.get_or_init(|| self.index(pass.plan));
        let answers = local::answer_batch(pass.plan, index, batch);
        std::future::ready(Ok(Reply {
            answers,
            requests: 1,
            input_tokens: 0,
            cost_usd: 0.0,
        }))
    }
}

/// The runner's limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The whole pass's time budget.
    pub budget: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            budget: Duration::from_secs(20),
            concurrency: 6,
        }
    }
}

/// A plan's questions answered (or why not), and the pass's classifier usage.
#[derive(Clone, Debug)]
pub struct Answered {
    pub answers: Vec<Result<Answer, Missing>>,
    pub usage: Usage,
    pub timed_out: bool,
}

/// Ask every batch of `plan`, at most `limits.concurrency` at once, within `limits.budget`.
pub async fn ask<C: Classifier>(classifier: &C, plan: &Plan, limits: &Limits) -> Answered {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + limits.budget;
    let pass = Pass::new(plan);
    let mut answers: Vec<Result<Answer, Missing>> =
        vec![Err(Missing::Timeout); plan.questions.len()];
    let mut usage = Usage::default();
    let pass_ref = &pass;
    // The futures are made before the stream (not by a closure inside it), which keeps the
    // whole future `Send` for `tokio::spawn` (a higher-ranked closure in the stream is not).
    let asking: Vec<_> = plan
        .batches
        .iter()
        .map(|batch| async move { (batch, classifier.classify(pass_ref, batch).await) })
        .collect();
    let mut replies = stream::iter(asking).buffer_unordered(limits.concurrency.max(1));
    let mut timed_out = false;
    loop {
        match tokio::time::timeout_at(deadline, replies.next()).await {
            Err(_) => {
                timed_out = true;
                break;
            }
            Ok(None) => break,
            Ok(Some((batch, reply))) => {
                usage.requests += reply.as_ref().map_or(1, |r| r.requests.max(1));
                match reply {
                    Ok(r) if r.answers.len() == batch.questions.len() => {
                        usage.input_tokens += r.input_tokens;
                        usage.cost_usd += r.cost_usd;
                        for (&q, a) in batch.questions.iter().zip(r.answers) {
                            answers[q] = Ok(a);
                        }
                    }
                    Ok(_) => batch
                        .questions
                        .iter()
                        .for_each(|&q| answers[q] = Err(Missing::NoAnswer)),
                    Err(e) => {
                        tracing::warn!(error = %e, questions = batch.questions.len(), "a classifier batch failed; its items are kept");
                        batch
                            .questions
                            .iter()
                            .for_each(|&q| answers[q] = Err(Missing::Error));
                    }
                }
            }
        }
    }
    usage.ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Answered {
        answers,
        usage,
        timed_out,
    }
}

/// CPU time of classifier work run in the background off its caller's thread (a MiniLM model
/// on its own thread, [`Configured::in_background`]), in nanoseconds since the process began.
static MODEL_CPU_NANOS: AtomicU64 = AtomicU64::new(0);

/// The CPU time background classifier work has used so far (the gateway exports it as
/// `ctxd_distill_model_cpu_seconds`).
pub fn model_cpu() -> Duration {
    Duration::from_nanos(MODEL_CPU_NANOS.load(Ordering::Relaxed))
}

/// Count `used` in [`model_cpu`].
#[cfg_attr(not(feature = "minilm"), allow(dead_code))]
pub(crate) fn charge_model_cpu(used: Duration) {
    let nanos = u64::try_from(used.as_nanos()).unwrap_or(u64::MAX);
    MODEL_CPU_NANOS.fetch_add(nanos, Ordering::Relaxed);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use ctxd_core::distill::{self, Ask, Config, Phase};
    use ctxd_core::model::{ContentBlock, EntryKind, Message, Role, Session};
    use ctxd_core::tree::active_branch;
    use serde_json::json;

    use super::*;

    /// A run with three large outputs: three batches.
    fn session() -> Session {
        let mut s = Session::default();
        let mut push = |kind: EntryKind| s.push_linear(kind);
        push(EntryKind::Message(Message::text(
            Role::User,
            "count the widgets",
        )));
        for i in 0..3 {
            push(EntryKind::Message(Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    id: format!("c{i}"),
                    name: "bash".into(),
                    arguments: json!({"command": format!("widgets --page {i}")}),
                }],
            )));
            push(EntryKind::Message(Message::new(
                Role::Tool,
                vec![ContentBlock::ToolResult {
                    call_id: format!("c{i}"),
                    tool_name: Some("bash".into()),
                    content: vec![ContentBlock::text("widget_line noise\n".repeat(400))],
                    is_error: false,
                }],
            )));
        }
        push(EntryKind::Message(Message::text(
            Role::Assistant,
            "There are 3 pages.",
        )));
        s
    }

    fn plan(s: &Session) -> Plan {
        distill::plan(s, &active_branch(s), &Config::default(), Phase::RunEnd)
    }

    /// Sleeps per batch, fails the second, and counts requests in flight.
    struct Slow {
        delay: Duration,
        in_flight: AtomicUsize,
        peak: AtomicUsize,
        calls: AtomicUsize,
    }

    impl Classifier for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        async fn classify<'a>(
            &'a self,
            pass: &'a Pass<'a>,
            batch: &'a Batch,
        ) -> Result<Reply, ClassifierError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if n == 1 {
                return Err(ClassifierError("boom".into()));
            }
            // "No" to every question: "none" wins every focus choice.
            let answers = batch
                .questions
                .iter()
                .map(|&q| match &pass.plan.questions[q].ask {
                    Ask::Choice(options) => {
                        let mut p = vec![0.0; options.len()];
                        p[options.len() - 1] = 1.0;
                        Answer::Choice(p)
                    }
                    Ask::YesNo => Answer::Yes(0.0),
                })
                .collect();
            Ok(Reply {
                answers,
                requests: 1,
                input_tokens: 10,
                cost_usd: 0.0,
            })
        }
    }

    #[tokio::test]
    async fn local_answers_everything_and_records_usage() {
        let s = session();
        let p = plan(&s);
        assert_eq!(p.batches.len(), 3);
        let a = ask(&LocalClassifier::default(), &p, &Limits::default()).await;
        assert!(a.answers.iter().all(Result::is_ok));
        assert_eq!(a.usage.requests, 3);
        assert!(!a.timed_out);
        let d = distill::decide(&s, &p, &a.answers, &Config::default());
        assert_eq!(d.edits.len(), 3);
    }

    #[tokio::test]
    async fn errors_and_timeouts_keep_and_concurrency_is_limited() {
        let s = session();
        let p = plan(&s);
        let slow = Slow {
            delay: Duration::from_millis(50),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        };
        let limits = Limits {
            budget: Duration::from_secs(5),
            concurrency: 2,
        };
        let a = ask(&slow, &p, &limits).await;
        assert_eq!(slow.peak.load(Ordering::SeqCst), 2);
        assert_eq!(a.usage.requests, 3);
        assert_eq!(a.usage.input_tokens, 20);
        let errors = a
            .answers
            .iter()
            .filter(|x| **x == Err(Missing::Error))
            .count();
        assert_eq!(errors, p.batches[1].questions.len());
        let d = distill::decide(&s, &p, &a.answers, &Config::default());
        assert_eq!(d.edits.len(), 2, "the failed batch's output is kept");
        assert!(d.results.iter().any(|r| r.reason == "error"));

        let slow = Slow {
            delay: Duration::from_millis(500),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        };
        let limits = Limits {
            budget: Duration::from_millis(50),
            concurrency: 6,
        };
        let a = ask(&slow, &p, &limits).await;
        assert!(a.timed_out);
        assert!(a.answers.iter().all(|x| *x == Err(Missing::Timeout)));
        let d = distill::decide(&s, &p, &a.answers, &Config::default());
        assert!(d.edits.is_empty());
        assert!(d.results.iter().all(|r| r.reason == "timeout"));
    }
}

/// The phase of a pass at the end of `branch`: a run end after an answer without tool calls,
/// a mid-run checkpoint after one with calls; `None` when the branch does not end with an
/// answer (an abort, a failed turn). Passes follow every recorded answer, the gateway's and
/// `ctxd eval`'s alike.
pub fn phase_at_end(log: &SessionLog, branch: &[usize]) -> Option<Phase> {
    let last = branch
        .iter()
        .rev()
        .find_map(|&p| match &log.entry(p)?.kind {
            EntryKind::Message(m) if m.role != Role::System && m.role != Role::Developer => Some(m),
            _ => None,
        })?;
    if last.role != Role::Assistant {
        return None;
    }
    let calls = last
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall { .. }));
    Some(if calls { Phase::MidRun } else { Phase::RunEnd })
}

/// A pass decided: the entries to land (edits, then the record) and the decisions behind
/// them (what `ctxd eval` attributes a hidden line to).
#[derive(Debug)]
pub struct PassOutcome {
    pub drafts: Vec<EntryKind>,
    pub decisions: Decisions,
    pub usage: Usage,
}

/// One distillation pass over `session`'s `branch` (root first, ending at an answer): plan,
/// ask `classifier` within `limits`, decide. `None` when there is nothing to judge.
pub async fn run_pass<C: Classifier>(
    classifier: &C,
    session: &Session,
    branch: &[usize],
    config: &Config,
    phase: Phase,
    limits: &Limits,
) -> Option<PassOutcome> {
    let plan = ctxd_core::distill::plan(session, branch, config, phase);
    if plan.is_empty() {
        return None;
    }
    let answered = ask(classifier, &plan, limits).await;
    let decisions = ctxd_core::distill::decide(session, &plan, &answered.answers, config);
    let drafts = decisions.drafts(classifier.name(), answered.usage, answered.timed_out);
    Some(PassOutcome {
        drafts,
        decisions,
        usage: answered.usage,
    })
}

/// A pass's drafts appended under `log`'s leaf (before the session's next request is
/// planned, or at once when the session is idle): the entries for the store, in order.
pub fn land(log: &mut SessionLog, drafts: Vec<EntryKind>, now: &str) -> Vec<NewEntry> {
    let stamp = Some(now.to_owned());
    let mut parent = log.leaf();
    drafts
        .into_iter()
        .enumerate()
        .map(|(i, kind)| {
            let tag = match &kind {
                EntryKind::ContextEdit { target, .. } => format!("distill {target}"),
                _ => format!("distill record {i}"),
            };
            let (pos, entry) =
                log.append_under(parent, "distill", &hash::text(&tag), kind, stamp.clone());
            parent = Some(pos);
            NewEntry::new(entry)
        })
        .collect()
}
