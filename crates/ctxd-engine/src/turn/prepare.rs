//! A request's turn over the session view, in the one order every caller takes: the gateway
//! for each client request, and `ctxd eval` for each request of a recorded session. Adapters
//! choose the policy and render the result; the sequence and the gating of the mechanisms
//! live here only.
//!
//! 1. the edits of a finished distillation pass land under the previous turn;
//! 2. the client's request is mapped onto the log ([`plan_request`]);
//! 3. write facts strip the content of writes whose results this request brings;
//! 4. shell outputs above the threshold become digests from their first request on;
//! 5. meta-amnesia judges the round of read-like results the request ends with;
//! 6. results that complete a tool batch end the turn that called the tools (reminder, reset);
//! 7. the branch is projected as the parts of the upstream conversation.
//!
//! Everything appended goes back to the caller, in order, as one batch for the store.

use std::sync::Arc;
use std::time::Duration;

use ctxd_core::mechanisms::amnesia::Record as AmnesiaRecord;
use ctxd_core::model::{EntryId, EntryKind};
use ctxd_core::tokens::TokenCounter;
use ctxd_core::view::ProjectionError;
use ctxd_store::{NewEntry, Store};

use super::{completes_batch, end_turn, plan_request, upstream, ClientRequest, RequestPlan};
use super::{SessionView, Upstream};
use crate::digest::{DigestContext, Summarizer};
use crate::distill::Classifier;
use crate::windows::{TurnEnd, TurnEndOutcome, WindowPolicy};
use crate::{Caller, Engine};

/// Which of ctxd's mechanisms act on a session: the per-agent choice of the configuration.
/// All on by default but meta-amnesia and lazy tools: they are what keeps a long session
/// inside its window (reminders warn the model; resets fold the old window away;
/// distillation takes the tool outputs the work no longer needs out of its view).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mechanisms {
    /// The budget's early reminder and final warning.
    pub reminders: bool,
    /// Threshold resets and overflow recovery.
    pub resets: bool,
    /// Distillation passes at turn ends (only where the model is offered `recall`, which
    /// every replacement text names).
    pub distill: bool,
    /// Shell outputs above `digest-min-tokens` replaced by a digest before the model first
    /// sees them.
    pub digests: bool,
    /// Meta-amnesia: a round of read-like results judged all drops is taken out of the
    /// request while it is the tail. Off by default: measured on the shared sessions it costs
    /// retention (`ctxd eval`, README).
    pub amnesia: bool,
    /// Lazy tools: only the agent's base set of the client's tools and `find_capability` go
    /// upstream. Off by default: each change of the set rewrites the provider's whole cached
    /// prompt (README).
    pub lazy_tools: bool,
}

impl Default for Mechanisms {
    fn default() -> Self {
        Mechanisms {
            reminders: true,
            resets: true,
            distill: true,
            digests: true,
            amnesia: false,
            lazy_tools: false,
        }
    }
}

/// The settings of the mechanisms, the same for every session of a gateway (or an eval).
#[derive(Clone, Copy, Debug)]
pub struct TurnSettings<'a> {
    pub write_facts: &'a ctxd_core::mechanisms::writes::Settings,
    pub digest: &'a ctxd_core::mechanisms::digest::Config,
    pub amnesia: &'a ctxd_core::mechanisms::amnesia::Config,
    /// The amnesia judge's time budget per request.
    pub amnesia_budget: Duration,
}

/// One turn's policy: the window and budget, and what acts. A turn only recorded (the
/// operator's record-only mode, a conversation the provider keeps) has every mechanism off.
#[derive(Clone, Copy, Debug)]
pub struct TurnPolicy {
    pub window: WindowPolicy,
    pub mechanisms: Mechanisms,
    pub record_only: bool,
}

impl TurnPolicy {
    /// Whether mechanism `on` acts on this turn.
    fn acts(&self, on: bool) -> bool {
        on && !self.record_only
    }

    /// Distillation passes follow this turn: their replacement texts name `recall`, so only
    /// where the model has it.
    pub fn distills(&self) -> bool {
        self.acts(self.mechanisms.distill) && self.window.tools.recall
    }
}

/// What a turn needs beyond the log: the engine (the notes a new window's boot reads), the
/// mechanisms' settings, the shell-output summarizer, the amnesia judge, and a token counter
/// for the session's model (made where it is used: a counter is not `Send`, and is never held
/// across an await).
pub struct Services<'a, S: ?Sized, C> {
    pub engine: &'a Arc<Engine<S>>,
    pub settings: TurnSettings<'a>,
    pub summarizer: &'a Summarizer,
    pub judge: &'a C,
    pub counter: &'a (dyn Fn() -> Box<dyn TokenCounter> + Send + Sync),
}

/// What preparing a request did.
#[derive(Debug)]
pub struct PreparedTurn {
    /// The request's elements on the log ([`RequestPlan::appended`] is moved into
    /// [`PreparedTurn::appended`]).
    pub plan: RequestPlan,
    /// Every entry appended, in order: one batch for the store.
    pub appended: Vec<NewEntry>,
    /// The conversation upstream: `Ok(None)` when it is exactly the client's (or the turn is
    /// only recorded).
    pub upstream: Result<Option<Upstream>, ProjectionError>,
    /// The digests made, by what wrote each (`local`, `model`, `fallback`).
    pub digests: Vec<&'static str>,
    /// Meta-amnesia's judgment of the request's round, when one was judged.
    pub amnesia: Option<AmnesiaRecord>,
    /// The end of the turn whose tool batch this request completes.
    pub turn_end: Option<TurnEndOutcome>,
    /// The entries this request's mechanisms edited, and which mechanism (`write-facts`,
    /// `digest`, `amnesia`): what `ctxd eval` names when a line the work used was hidden.
    pub edited: Vec<(EntryId, &'static str)>,
}

impl PreparedTurn {
    fn append(&mut self, entries: Vec<NewEntry>, mechanism: &'static str) {
        for e in &entries {
            if let EntryKind::ContextEdit { target, .. } = &e.entry.kind {
                self.edited.push((target.clone(), mechanism));
            }
        }
        self.appended.extend(entries);
    }
}

/// Prepare `req` on `view` (see the module docs). `landed`: a finished distillation pass's
/// edits, already appended to the log ([`crate::distill::land`]). `now_ms` stamps new entries.
pub async fn prepare_turn<S, C, R>(
    svc: &Services<'_, S, C>,
    caller: &Caller,
    view: &mut SessionView,
    landed: Vec<NewEntry>,
    req: &R,
    policy: &TurnPolicy,
    now_ms: i64,
) -> PreparedTurn
where
    S: Store + Send + Sync + ?Sized + 'static,
    C: Classifier,
    R: ClientRequest + Sync,
{
    let settings = &svc.settings;
    let now = ctxd_core::windows::iso8601(now_ms);
    let mut plan = plan_request(&mut view.log, req, &now);
    let mut appended = landed;
    appended.append(&mut plan.appended);
    let fresh = plan.element_entries[plan.matched.min(plan.element_entries.len())..].to_vec();
    let mut prepared = PreparedTurn {
        plan,
        appended,
        upstream: Ok(None),
        digests: Vec::new(),
        amnesia: None,
        turn_end: None,
        edited: Vec::new(),
    };
    if policy.record_only {
        return prepared;
    }
    if policy.acts(settings.write_facts.enabled) {
        let stripped = super::strip_writes(&mut view.log, settings.write_facts, &fresh, &now);
        prepared.append(stripped, "write-facts");
    }
    if policy.acts(policy.mechanisms.digests) && !fresh.is_empty() {
        let (entries, sources) = digests(svc, caller, view, &fresh, policy, settings, &now).await;
        prepared.append(entries, "digest");
        prepared.digests = sources;
    }
    if policy.acts(policy.mechanisms.amnesia) && !fresh.is_empty() {
        if let Some((record, entries)) = amnesia(svc, caller, view, &fresh, settings, &now).await {
            prepared.append(entries, "amnesia");
            prepared.amnesia = Some(record);
        }
    }
    if completes_batch(&view.log, &fresh) {
        let (outcome, entries) = end(
            svc,
            caller,
            view,
            &policy.window,
            TurnEnd::Completed,
            now_ms,
        )
        .await;
        prepared.appended.extend(entries);
        prepared.turn_end = Some(outcome);
    }
    prepared.upstream = upstream(&view.log, &prepared.plan.element_entries);
    prepared
}

/// End the turn on `view` (an answer without tool calls, a tool batch completed, an
/// overflow): the decision and the entries appended for the store.
pub async fn end<S, C>(
    svc: &Services<'_, S, C>,
    caller: &Caller,
    view: &mut SessionView,
    window: &WindowPolicy,
    how: TurnEnd,
    now_ms: i64,
) -> (TurnEndOutcome, Vec<NewEntry>)
where
    S: Store + Send + Sync + ?Sized + 'static,
{
    let ending = {
        let counter = (svc.counter)();
        end_turn(svc.engine, caller, view, window, how, &*counter, now_ms)
    };
    let (outcome, entries) = ending.await;
    (outcome, entries.into_iter().map(NewEntry::new).collect())
}

async fn digests<S: ?Sized, C>(
    svc: &Services<'_, S, C>,
    caller: &Caller,
    view: &mut SessionView,
    fresh: &[usize],
    policy: &TurnPolicy,
    settings: &TurnSettings<'_>,
    now: &str,
) -> (Vec<NewEntry>, Vec<&'static str>) {
    let cx = DigestContext {
        agent: caller.agent.as_deref(),
        recall: policy.window.tools.recall,
        store_session: Some(view.record.id),
        summarized: svc.summarizer.is_model(),
    };
    let mut prepared = {
        let counter = (svc.counter)();
        crate::digest::prepare(&view.log, fresh, settings.digest, cx, &*counter)
    };
    if prepared.is_empty() {
        return (Vec::new(), Vec::new());
    }
    svc.summarizer
        .summarize(&mut prepared, settings.digest)
        .await;
    let sources = prepared.digests.iter().map(|p| p.source).collect();
    (crate::digest::commit(&mut view.log, prepared, now), sources)
}

async fn amnesia<S: ?Sized, C: Classifier>(
    svc: &Services<'_, S, C>,
    caller: &Caller,
    view: &mut SessionView,
    fresh: &[usize],
    settings: &TurnSettings<'_>,
    now: &str,
) -> Option<(AmnesiaRecord, Vec<NewEntry>)> {
    let prepared = {
        let counter = (svc.counter)();
        crate::amnesia::prepare(
            &view.log,
            fresh,
            caller.agent.as_deref(),
            settings.amnesia,
            &*counter,
        )
    }?;
    let judged = crate::amnesia::judge(svc.judge, prepared, settings.amnesia_budget).await;
    Some(crate::amnesia::commit(
        &mut view.log,
        judged,
        svc.judge.name(),
        now,
    ))
}
