//! A turn as the gateway runs it, and `ctxd eval` with it: [`plan_turn`] (a request's policy
//! from the settings, the engine's [`prepare_turn`], the body upstream) and [`record_answer`]
//! (the answer recorded, the turn ended), over the services a turn needs (the engine, the
//! summarizer, the judge, a token counter for the model), with the counters of what a turn
//! did. The sequence of the mechanisms is the engine's; HTTP, streaming and the writer stay in
//! the handler and the relay.

use std::sync::Arc;

use axum::body::Bytes;
use ctxd_core::model::EntryId;
use ctxd_core::tokens::TokenCounter;
use ctxd_core::view::ProjectionError;
use ctxd_engine::distill::{Classifier, Configured};
use ctxd_engine::turn::{
    prepare_turn, record_response, PreparedTurn, RequestPlan, ResponseElement, Services,
    SessionLog, TurnPolicy, TurnSettings,
};
use ctxd_engine::windows::{TurnEnd, TurnEndOutcome, WindowPolicy};
use ctxd_engine::{now_ms, Caller};
use ctxd_store::{Backend, NewEntry, Store};

use crate::api::Api;
use crate::config::ToolsSetting;
use crate::policy;
use crate::request::ParsedRequest;
use crate::rewrite::splice;
use crate::served::{Insert, Offer};
use crate::server::Gateway;
use crate::sessions::Loaded;
use crate::Settings;

/// A token counter for `model` (the tokenizer its provider bills by).
pub fn counter_for(model: Option<String>) -> impl Fn() -> Box<dyn TokenCounter> + Send + Sync {
    move || {
        Box::new(ctxd_tokens::CachingCounter::new(
            ctxd_tokens::Tokenizer::for_model(model.as_deref()),
        ))
    }
}

/// The gateway's services for a turn.
pub(crate) fn services<'a>(
    app: &'a Arc<Gateway>,
    counter: &'a (dyn Fn() -> Box<dyn TokenCounter> + Send + Sync),
) -> Services<'a, dyn Backend, Configured> {
    Services {
        engine: &app.engine,
        settings: turn_settings(&app.settings),
        summarizer: &app.summarizer,
        judge: &app.judge,
        counter,
    }
}

/// The mechanisms' settings of a gateway.
pub fn turn_settings(settings: &Settings) -> TurnSettings<'_> {
    TurnSettings {
        write_facts: &settings.management.write_facts,
        digest: &settings.digest,
        amnesia: &settings.amnesia,
        amnesia_budget: settings.amnesia_budget,
    }
}

/// End the turn on `loaded`'s active branch: its drafts (reminder, marker and boot) go into
/// the log after the leaf. Returns what was decided and the entries to write.
pub(crate) async fn end_turn(
    app: &Arc<Gateway>,
    loaded: &mut Loaded,
    caller: &Caller,
    policy: &WindowPolicy,
    end: TurnEnd,
) -> (TurnEndOutcome, Vec<NewEntry>) {
    let counter = counter_for(caller.model.clone());
    let svc = services(app, &counter);
    let (outcome, entries) =
        ctxd_engine::turn::end(&svc, caller, loaded, policy, end, now_ms()).await;
    count_turn_end(&outcome);
    (outcome, entries)
}

/// What a prepared request did, on the gateway's counters.
pub(crate) fn count_prepared(prepared: &PreparedTurn) {
    for source in &prepared.digests {
        metrics::counter!("ctxd_digests_total", "source" => *source).increment(1);
    }
    if let Some(record) = &prepared.amnesia {
        for j in &record.judgments {
            let decision = match j.decision {
                ctxd_core::mechanisms::amnesia::Decision::Retain => "retain",
                ctxd_core::mechanisms::amnesia::Decision::Drop => "drop",
            };
            metrics::counter!("ctxd_amnesia_judgments_total", "decision" => decision).increment(1);
        }
        if !record.pruned.is_empty() {
            metrics::counter!("ctxd_amnesia_pruned_rounds_total").increment(1);
            metrics::counter!("ctxd_amnesia_removed_tokens_total").increment(record.removed_tokens);
        }
    }
    if let Some(outcome) = &prepared.turn_end {
        count_turn_end(outcome);
    }
}

fn count_turn_end(outcome: &TurnEndOutcome) {
    if let Some(kind) = outcome.reminder {
        metrics::counter!("ctxd_reminders_total", "kind" => kind).increment(1);
    }
    if let Some((window, cause)) = &outcome.reset {
        metrics::counter!("ctxd_windows_opened_total", "cause" => *cause).increment(1);
        tracing::info!(window = %window, cause, "new context window");
    }
}

/// One request as the gateway's turn reads it: the client's split request and its body, who
/// sends it, and what the request says about the window.
pub struct TurnRequest<'a> {
    pub api: Api,
    pub req: &'a ParsedRequest,
    pub decoded: &'a Bytes,
    /// The request opts into Anthropic's 1M-token window.
    pub beta_1m: bool,
    /// The window the provider stated for this model (`crate::learned`).
    pub learned: Option<u64>,
    /// Recorded, never managed: the operator's record-only mode or a conversation the
    /// provider keeps (`previous_response_id`).
    pub record_only: bool,
    /// A finished distillation pass's edits, landed under the previous turn.
    pub landed: Vec<NewEntry>,
    pub now_ms: i64,
}

/// A request whose branch cannot be projected (a window marker without its boot): why, the
/// request's window policy (the repair's boot names its tools), and what the turn appended
/// to the log before projecting, which still goes to the store.
#[derive(Debug)]
pub struct Unprojectable {
    pub error: ProjectionError,
    pub window: WindowPolicy,
    pub appended: Vec<NewEntry>,
}

/// A request's turn planned: the engine's work on the log, and the body that goes upstream.
pub struct PlannedTurn {
    /// The request's elements on the log.
    pub plan: RequestPlan,
    /// Every entry appended, in order: one batch for the store.
    pub appended: Vec<NewEntry>,
    /// The body upstream when it is not the client's bytes as they came.
    pub body: Option<Vec<u8>>,
    /// The projection went upstream in place of the client's conversation.
    pub rewritten: bool,
    pub policy: TurnPolicy,
    pub offer: Offer,
    pub(crate) lazy: Option<crate::lazy::Lazy>,
    /// The `tools` edit of the body (ctxd's definitions, lazy tools' selection).
    pub insert: Option<Insert>,
    /// The request's savings (the dashboard's and `/stats`'s figures).
    pub measured: ctxd_core::savings::Record,
    /// Anthropic breakpoints recorded for the session's next requests.
    pub cache: Option<ctxd_core::cache::Record>,
    /// The entries this request's mechanisms edited, and which mechanism.
    pub edited: Vec<(EntryId, &'static str)>,
}

/// Plan one request of `loaded`'s session: the request's policy (window, ctxd's tools, the
/// agent's mechanisms) from `settings`, the engine's turn ([`prepare_turn`]), and the body
/// upstream (the projection spliced into the client's body, ctxd's tool definitions, cache
/// breakpoints). The gateway's requests and `ctxd eval`'s replay both run it; `caller` gets
/// the request's window policy.
pub async fn plan_turn<S, C>(
    settings: &Settings,
    svc: &Services<'_, S, C>,
    loaded: &mut Loaded,
    caller: &mut Caller,
    input: TurnRequest<'_>,
) -> Result<PlannedTurn, Unprojectable>
where
    S: Store + Send + Sync + ?Sized + 'static,
    C: Classifier,
{
    let TurnRequest {
        api,
        req,
        decoded,
        beta_1m,
        learned,
        record_only,
        landed,
        now_ms,
    } = input;
    let management = &settings.management;
    let agent = caller.agent.clone().unwrap_or_else(|| "sdk".to_owned());
    // A Gemini stream without `alt=sse` is one JSON array, which hidden rounds do not splice:
    // such requests go without ctxd's tools (every client seen streams SSE).
    let offer = if record_only
        || req.json_array_stream
        || matches!(management.tools_for(&agent), ToolsSetting::None)
    {
        Offer::default()
    } else {
        let client = crate::served::client_tool_names(req, decoded);
        Offer::new(management, &agent, client.iter().map(String::as_str))
    };
    // Lazy tools: the client's tools beyond the base set wait for `find_capability`.
    let lazy = crate::lazy::Lazy::new(management, &agent, req, decoded).filter(|_| !record_only);
    let offer = if lazy.is_some() {
        offer.with_find_capability()
    } else {
        offer
    };
    let window = policy::window_policy(
        management,
        &agent,
        req.model.as_deref(),
        policy::RequestWindow { beta_1m, learned },
        loaded.log.accepted_tokens(),
        offer.model_tools(),
    );
    let window = if record_only {
        policy::unmanaged(window)
    } else {
        window
    };
    caller.policy = Some(window);
    let turn_policy = TurnPolicy {
        window,
        mechanisms: management.mechanisms_for(&agent),
        record_only,
    };
    let prepared = prepare_turn(
        svc,
        caller,
        loaded,
        landed,
        &req.with_body(decoded),
        &turn_policy,
        now_ms,
    )
    .await;
    count_prepared(&prepared);
    let PreparedTurn {
        plan,
        appended,
        upstream,
        edited,
        ..
    } = prepared;
    let upstream = match upstream {
        Ok(upstream) => upstream,
        Err(error) => {
            return Err(Unprojectable {
                error,
                window,
                appended,
            })
        }
    };
    let (insert, avoided) = tools_edit(req, decoded, &offer, lazy.as_ref(), &loaded.log);
    let measured = crate::stats::measure(
        loaded,
        upstream.is_some(),
        insert.as_ref(),
        avoided,
        req.model.as_deref(),
    );
    // Anthropic breakpoints: planned on a conversation ctxd rewrites, recorded on every
    // request that has any (the client's own where its messages go as they are).
    let cache = (api == Api::Anthropic)
        .then(|| {
            crate::cache::prepare(
                loaded,
                decoded,
                upstream.as_ref(),
                &plan.element_entries,
                req.model.as_deref(),
                settings.cache_plan,
            )
        })
        .flatten();
    let mut body = match (upstream.as_ref(), &insert) {
        (None, None) => None,
        (upstream, insert) => Some(splice(
            req,
            decoded,
            upstream.map(|u| u.parts.as_slice()),
            insert.as_ref(),
        )),
    };
    let mut cache_record = None;
    if let Some(prepared) = cache {
        let (planned, record) = prepared.finish(body.as_deref().unwrap_or(decoded));
        cache_record = record;
        if planned.is_some() {
            body = planned;
        }
    }
    Ok(PlannedTurn {
        plan,
        appended,
        rewritten: body.is_some(),
        body,
        policy: turn_policy,
        offer,
        lazy,
        insert,
        measured,
        cache: cache_record,
        edited,
    })
}

/// The `tools` edit of a body (ctxd's definitions; with lazy tools, the selection the log
/// gives now) and the tokens lazy tools leave out.
pub(crate) fn tools_edit(
    req: &ParsedRequest,
    body: &[u8],
    offer: &Offer,
    lazy: Option<&crate::lazy::Lazy>,
    log: &SessionLog,
) -> (Option<Insert>, u64) {
    let kept = lazy.map(|l| l.kept(log));
    let ranges = kept.as_ref().map(|k| k.ranges.as_slice());
    let insert = crate::served::inject(req, body, offer, ranges);
    (insert, kept.map_or(0, |k| k.avoided))
}

/// An answer recorded under `attach` (the request's last element, or the recovery window's
/// boot), the request's savings and breakpoint records after it, and the turn ended (an
/// answer that called tools ends none: the boundary comes with their results): the entries
/// for the store, in order, or the leaf to move to when the answer was already there.
#[allow(clippy::too_many_arguments)]
pub async fn record_answer<S, C>(
    svc: &Services<'_, S, C>,
    loaded: &mut Loaded,
    caller: &Caller,
    window: &WindowPolicy,
    attach: Option<&EntryId>,
    answer: Vec<ResponseElement>,
    measured: Option<&ctxd_core::savings::Record>,
    cache: Option<&ctxd_core::cache::Record>,
    now_ms: i64,
) -> (Vec<NewEntry>, Option<EntryId>)
where
    S: Store + Send + Sync + ?Sized + 'static,
{
    let now = ctxd_core::windows::iso8601(now_ms);
    let (batch, leaf) = record_response(&mut loaded.log, attach, answer, &now);
    let batch = after_answer(svc, loaded, caller, window, batch, measured, cache, now_ms).await;
    (batch, leaf)
}

/// After an answer's entries (`batch`): the request's savings and breakpoint records, and the
/// turn's end. The whole batch for the store, in order.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn after_answer<S, C>(
    svc: &Services<'_, S, C>,
    loaded: &mut Loaded,
    caller: &Caller,
    window: &WindowPolicy,
    mut batch: Vec<NewEntry>,
    measured: Option<&ctxd_core::savings::Record>,
    cache: Option<&ctxd_core::cache::Record>,
    now_ms: i64,
) -> Vec<NewEntry>
where
    S: Store + Send + Sync + ?Sized + 'static,
{
    if let Some(r) = measured {
        batch.push(crate::stats::append(loaded, r, now_ms));
    }
    if let Some(r) = cache {
        batch.push(crate::cache::append(loaded, r));
    }
    let (outcome, entries) =
        ctxd_engine::turn::end(svc, caller, loaded, window, TurnEnd::Completed, now_ms).await;
    count_turn_end(&outcome);
    batch.extend(entries);
    batch
}

/// The configuration of a pass over a session: the gateway's, with the session's store id
/// (what `recall` names) and whose prompt cache its requests go to. The gateway's passes and
/// `ctxd eval`'s take it from here.
pub fn pass_config(
    base: &ctxd_core::distill::Config,
    store_session: i64,
    provider: ctxd_core::cache::Provider,
) -> ctxd_core::distill::Config {
    ctxd_core::distill::Config {
        store_session: Some(store_session),
        provider,
        ..base.clone()
    }
}

/// Whose prompt cache a session's requests go to (the route it came in on, its model).
pub fn provider_of(log: &SessionLog) -> ctxd_core::cache::Provider {
    let meta = &log.session.meta;
    ctxd_core::cache::Provider::of(&meta.format, meta.model.as_deref())
}
