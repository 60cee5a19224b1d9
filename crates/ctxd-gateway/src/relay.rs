//! The response side: relay the upstream's event stream to the client chunk by chunk while an
//! assembler reads the same bytes, then record the turn's outcome ([`Completion`]). A stream
//! that fails midway ends with an `error` event in the API's shape and records nothing of the
//! response; a client that goes away is an abort.
//!
//! Durable before acknowledged: a complete response's terminal part (the bytes from the event
//! that completes it; a JSON body whole) reaches the client only once the store has committed
//! the turn, usage and ids included. What came before flows as it arrives, so the time to the
//! first byte is unchanged; the stream's end leaves in the same write as the terminal part when
//! the upstream's end is at hand by then (`Relay::fold_trailing`). A commit that fails or takes
//! longer than `commit-timeout` ends the response with the API's error instead: the client
//! never holds an answer the store lacks.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ctxd_core::model::EntryId;
use ctxd_engine::turn::{record_view, ResponseElement};
use ctxd_engine::windows::{TurnEnd, WindowPolicy};
use ctxd_engine::{now_ms, Caller};
use ctxd_formats::wire::stream::{
    Assembled, Assembler, JsonArraySplitter, SseEvent, SseParser, StreamError,
};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, Stream};
use tokio::sync::oneshot;

use crate::api::Api;
use crate::served::exchange::{Hidden, SharedTail, Tail};
use crate::server::Gateway;
use crate::sessions::Slot;
use crate::writer::Job;

/// How a turn ended, as far as the log is concerned.
pub enum Outcome {
    /// A complete response: its elements are appended, then the turn boundary runs when the
    /// answer called no tools (else the request carrying their results is the boundary).
    Response(Assembled),
    /// The client went away before the response completed.
    Aborted,
    /// Anything else: nothing of the response is recorded.
    Failed,
}

/// What is left to do once the response is over. Dropped unfinished (the client disconnected
/// mid-stream), it records an abort.
pub struct Completion {
    app: Arc<Gateway>,
    slot: Arc<Slot>,
    caller: Caller,
    /// The request's budget policy (the turn boundary's, when the response ends the turn).
    policy: WindowPolicy,
    /// A distillation pass follows the committed turn ([`crate::distill`]).
    distill: bool,
    /// Where the response attaches (the request's last entry, or the leaf after ctxd's hidden
    /// rounds), and what those rounds left to record; shared with the exchange.
    tail: SharedTail,
    api: Api,
    started: Instant,
    /// Time spent in the gateway before the upstream request (parse, plan, project).
    before_upstream: Duration,
    /// Time spent in the gateway on the response (assembling chunks).
    relaying: Duration,
    /// The request's accounting, recorded with a complete response (`crate::stats`).
    request: Option<ctxd_core::savings::Record>,
    /// Where the request's Anthropic breakpoints were (`crate::cache`), recorded likewise.
    cache: Option<ctxd_core::cache::Record>,
    /// What the request reserved on its budgets, settled when it ends (`crate::spending`).
    spend: Option<crate::spending::Admission>,
    done: bool,
}

impl Completion {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        app: Arc<Gateway>,
        slot: Arc<Slot>,
        caller: Caller,
        policy: WindowPolicy,
        distill: bool,
        attach: Option<EntryId>,
        api: Api,
        started: Instant,
        before_upstream: Duration,
    ) -> Self {
        Completion {
            app,
            slot,
            caller,
            policy,
            distill,
            tail: Arc::new(std::sync::Mutex::new(Tail {
                attach,
                hidden: None,
            })),
            api,
            started,
            before_upstream,
            relaying: Duration::ZERO,
            request: None,
            cache: None,
            spend: None,
            done: false,
        }
    }

    /// The request as measured for what goes upstream (its headers, and its record).
    /// The request's record, naming the route it takes (the gateway's to know, not the turn's).
    pub fn measured(&mut self, mut record: ctxd_core::savings::Record) {
        let target = self
            .app
            .upstream
            .target(self.api, self.caller.model.as_deref());
        record.upstream = target.route.map(str::to_owned);
        self.request = Some(record);
    }

    /// Where the request's breakpoints went upstream.
    pub fn cached(&mut self, record: Option<ctxd_core::cache::Record>) {
        self.cache = record;
    }

    /// What the request reserved on its budgets.
    pub fn admitted(&mut self, admission: Option<crate::spending::Admission>) {
        self.spend = admission;
    }

    /// The soft limits the request's budgets passed.
    pub fn budget_warnings(&self) -> &[String] {
        self.spend.as_ref().map_or(&[], |a| &a.warnings)
    }

    pub fn request_record(&self) -> Option<&ctxd_core::savings::Record> {
        self.request.as_ref()
    }

    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }

    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The response now attaches under `attach` (the request was re-planned: a window opened
    /// after it).
    pub fn reattach(&mut self, attach: Option<EntryId>) {
        self.tail.lock().unwrap_or_else(|p| p.into_inner()).attach = attach;
    }

    /// The attachment point and hidden rounds, for an exchange answering ctxd's calls.
    pub fn tail(&self) -> SharedTail {
        self.tail.clone()
    }

    /// Record `outcome` without waiting for the store (a failure or an abort: nothing the
    /// client holds depends on it); `upstream` is the time spent waiting on the provider.
    pub fn finish(self, outcome: Outcome, upstream: Duration) {
        if let Some(work) = self.finish_later(outcome, upstream) {
            drop(work.spawn(false));
        }
    }

    /// Record `outcome` and wait until the store has committed it (at most the gateway's
    /// `commit-timeout`): the client may be given the response only after `Ok`.
    pub async fn finish_durable(self, outcome: Outcome, upstream: Duration) -> Result<(), String> {
        let limit = self.app.settings.commit_timeout;
        match self.finish_later(outcome, upstream) {
            Some(work) => committed(work.spawn(false), limit).await,
            None => Ok(()),
        }
    }

    /// [`Completion::finish`], with the log's work handed back to run later.
    fn finish_later(mut self, outcome: Outcome, upstream: Duration) -> Option<TurnRecord> {
        self.done = true;
        self.settle(outcome, upstream)
    }

    /// The request is over: what it reserved on its budgets gives way to what the provider
    /// billed for the response (nothing for a failure or an abort), off the request's path.
    fn settle_spending(&mut self, outcome: &Outcome) {
        let Some(admission) = self.spend.take() else {
            return;
        };
        let billed = match outcome {
            Outcome::Response(view) => view.usage.as_ref().map(|u| {
                let model = view.model.as_deref().or(self.caller.model.as_deref());
                self.app.spending.cost(model, u)
            }),
            Outcome::Aborted | Outcome::Failed => None,
        };
        crate::spending::Spending::settle_later(&self.app, admission, billed.unwrap_or_default());
    }

    /// The request's span, when OpenTelemetry is configured (`crate::telemetry`).
    fn export_span(&self, outcome: &Outcome, label: &'static str) {
        if !self.app.telemetry.is_on() {
            return;
        }
        let response = match outcome {
            Outcome::Response(view) => Some(view),
            Outcome::Aborted | Outcome::Failed => None,
        };
        let cost_usd = response.and_then(|view| {
            let usage = view.usage.as_ref()?;
            let model = view.model.as_deref().or(self.caller.model.as_deref());
            let price = self.app.spending.prices().price(model?)?;
            Some(price.micro_usd(usage) as f64 / 1e6)
        });
        let ended = std::time::SystemTime::now();
        let served_tools = self
            .tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .hidden
            .is_some();
        self.app.telemetry.request(crate::telemetry::RequestSpan {
            api: self.api,
            upstream: self
                .app
                .upstream
                .target(self.api, self.caller.model.as_deref())
                .base,
            started: ended - self.started.elapsed(),
            ended,
            caller: &self.caller,
            response,
            outcome: label,
            cost_usd,
            measured: self.request.as_ref(),
            served_tools,
        });
    }

    /// Count the turn and make the session's next request wait for its outcome to reach the
    /// log; the work of getting it there is returned ([`TurnRecord::spawn`]). `None` when
    /// nothing is recorded.
    fn settle(&mut self, outcome: Outcome, upstream: Duration) -> Option<TurnRecord> {
        let route = self.api.route();
        let total = self.started.elapsed();
        let label = match &outcome {
            Outcome::Response(_) => "completed",
            Outcome::Aborted => "aborted",
            Outcome::Failed => "failed",
        };
        metrics::counter!("ctxd_requests_total", "route" => route, "outcome" => label).increment(1);
        metrics::histogram!("ctxd_request_seconds", "route" => route).record(total.as_secs_f64());
        metrics::histogram!("ctxd_upstream_seconds", "route" => route)
            .record(upstream.as_secs_f64());
        metrics::histogram!("ctxd_overhead_seconds", "route" => route)
            .record((self.before_upstream + self.relaying).as_secs_f64());
        tracing::info!(
            outcome = label,
            total_us = total.as_micros() as u64,
            upstream_us = upstream.as_micros() as u64,
            overhead_us = (self.before_upstream + self.relaying).as_micros() as u64,
            "turn over"
        );
        self.settle_spending(&outcome);
        self.export_span(&outcome, label);
        if matches!(outcome, Outcome::Failed) {
            return None;
        }
        // Until the outcome is in the log, the session's next request waits (see
        // `Slot::settled`), and shutdown waits too.
        let (attach, hidden) = {
            let mut tail = self.tail.lock().unwrap_or_else(|p| p.into_inner());
            (tail.attach.clone(), tail.hidden.take())
        };
        Some(TurnRecord {
            ticket: Recording::start(&self.app, &self.slot),
            app: self.app.clone(),
            slot: self.slot.clone(),
            caller: self.caller.clone(),
            policy: self.policy,
            distill: self.distill,
            attach,
            hidden,
            request: self.request.take(),
            cache: self.cache.take(),
            outcome,
        })
    }
}

/// A turn's outcome on its way into the log: the response's elements, then the turn boundary
/// (budget reminder, a new window), queued for the store as one batch.
struct TurnRecord {
    ticket: Recording,
    app: Arc<Gateway>,
    slot: Arc<Slot>,
    caller: Caller,
    policy: WindowPolicy,
    distill: bool,
    attach: Option<EntryId>,
    /// ctxd answered calls in this request: the response is the client's view of them.
    hidden: Option<Hidden>,
    /// The request's accounting, recorded after a complete response.
    request: Option<ctxd_core::savings::Record>,
    cache: Option<ctxd_core::cache::Record>,
    outcome: Outcome,
}

/// The store's answer for a turn's batch: `Ok` once committed (or when there was nothing to
/// write).
type CommitRx = oneshot::Receiver<Result<(), String>>;

/// Wait for `rx` at most `limit`. The wait is visible: `ctxd_commit_wait_seconds`, and each
/// response withheld for want of a commit is counted and logged.
async fn committed(rx: CommitRx, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    let result = match tokio::time::timeout(limit, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err("the store writer has stopped".to_owned()),
        Err(_) => Err(format!(
            "the store did not commit within {} s",
            limit.as_secs_f64()
        )),
    };
    metrics::histogram!("ctxd_commit_wait_seconds").record(started.elapsed().as_secs_f64());
    if let Err(e) = &result {
        metrics::counter!("ctxd_responses_withheld_total").increment(1);
        tracing::error!(error = %e, "response not stored: its end is withheld from the client");
    }
    result
}

impl TurnRecord {
    /// Run on this worker once the current task yields (a spawned task waits in the worker's
    /// LIFO slot: no thread is woken for it). The decision is CPU work over the indexed log;
    /// the one I/O, the notes for a new window's boot, runs on a blocking thread. The answer
    /// comes once the store has committed the batch. `after_ready`: tasks already woken on
    /// this worker run first; a stream's relay asks for it so the upstream connection's task
    /// delivers the body's end before the commit holds the worker (the terminal part and the
    /// client stream's end then leave in one write, see `Relay::fold_trailing`).
    fn spawn(self, after_ready: bool) -> CommitRx {
        let (done, rx) = oneshot::channel();
        let TurnRecord {
            ticket,
            app,
            slot,
            caller,
            policy,
            distill,
            attach,
            hidden,
            request,
            cache,
            outcome,
        } = self;
        let distill = distill && matches!(outcome, Outcome::Response(_));
        tokio::spawn(async move {
            let _ticket = ticket;
            if after_ready {
                tokio::task::yield_now().await;
            }
            let mut state = slot.state.lock().await;
            if slot.stale.load(std::sync::atomic::Ordering::Acquire) {
                // An earlier write of the session failed: the log here is not the store's, and
                // the next request reloads it.
                let _ = done.send(Err("an earlier write of this session failed".to_owned()));
                return;
            }
            let Some(loaded) = state.as_mut() else {
                let _ = done.send(Err("the session is not loaded".to_owned()));
                return;
            };
            // The response and the boundary's drafts go to the store as one batch.
            let now_ms = now_ms();
            let now = ctxd_core::windows::iso8601(now_ms);
            let counter = crate::turn::counter_for(caller.model.clone());
            let svc = crate::turn::services(&app, &counter);
            let (batch, leaf) = match (outcome, hidden) {
                (Outcome::Response(assembled), None) => {
                    app.mcp_seen.note(
                        &caller.tenant,
                        loaded.record.id,
                        assembled.elements.iter().flat_map(|e| {
                            e.message.content.iter().filter_map(|b| match b {
                                ctxd_core::model::ContentBlock::ToolCall { name, .. } => {
                                    Some(name.as_str())
                                }
                                _ => None,
                            })
                        }),
                    );
                    crate::turn::record_answer(
                        &svc,
                        loaded,
                        &caller,
                        &policy,
                        attach.as_ref(),
                        elements(assembled),
                        request.as_ref(),
                        cache.as_ref(),
                        now_ms,
                    )
                    .await
                }
                (Outcome::Response(view), Some(Hidden { covered, last })) => {
                    let shown = record_view(
                        &mut loaded.log,
                        attach.as_ref(),
                        covered,
                        last.map(elements),
                        elements(view),
                        &now,
                    );
                    let batch = crate::turn::after_answer(
                        &svc,
                        loaded,
                        &caller,
                        &policy,
                        shown,
                        request.as_ref(),
                        cache.as_ref(),
                        now_ms,
                    )
                    .await;
                    (batch, None)
                }
                (Outcome::Aborted, _) => {
                    let (_, entries) =
                        crate::turn::end_turn(&app, loaded, &caller, &policy, TurnEnd::Aborted)
                            .await;
                    (entries, None)
                }
                (Outcome::Failed, _) => {
                    let _ = done.send(Ok(()));
                    return;
                }
            };
            let session = loaded.record.id;
            let stale = slot.stale.clone();
            // Committed here when nothing else is writing (no hand-off to the writer thread);
            // see `writer.rs`.
            if !batch.is_empty() {
                app.writer.commit(Job::Append {
                    session,
                    entries: batch,
                    expect_leaf: None,
                    stale,
                    ack: Some(done),
                });
            } else if let Some(leaf) = leaf {
                app.writer.commit(Job::SetLeaf {
                    session,
                    leaf,
                    stale,
                    ack: Some(done),
                });
            } else {
                let _ = done.send(Ok(()));
            }
            // After the commit, and before the session's next request can come (it may wait
            // for the pass). The yield lets the response's end, woken by the commit's ack, go
            // out first: the branch copy took 0.1 ms at the median (up to 8 ms) of every
            // acknowledged response on this worker.
            if distill {
                tokio::task::yield_now().await;
                app.distiller.turn_ended(&slot, loaded);
            }
        });
        rx
    }
}

/// A response's elements as the engine records them (message and wire bytes).
pub(crate) fn elements(assembled: Assembled) -> Vec<ResponseElement> {
    assembled
        .elements
        .into_iter()
        .map(|e| (e.message, e.wire))
        .collect()
}

/// A response being recorded: counted on its session and on the gateway while it lasts.
struct Recording {
    app: Arc<Gateway>,
    slot: Arc<Slot>,
}

impl Recording {
    fn start(app: &Arc<Gateway>, slot: &Arc<Slot>) -> Self {
        slot.recording.fetch_add(1, Ordering::AcqRel);
        app.recording.fetch_add(1, Ordering::AcqRel);
        Recording {
            app: app.clone(),
            slot: slot.clone(),
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.slot.recording.fetch_sub(1, Ordering::AcqRel);
        self.slot.settled.notify_waiters();
        self.app.recording.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            if let Some(work) = self.settle(Outcome::Aborted, Duration::ZERO) {
                drop(work.spawn(false));
            }
        }
    }
}

/// How a response's body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events.
    Sse,
    /// Gemini's stream without `alt=sse`: one JSON array, an element per chunk.
    JsonArray,
    /// One JSON body.
    Whole,
}

/// The events of a streamed body, whatever its framing: an SSE event, or a JSON array's
/// element as the data of one.
#[derive(Debug)]
pub enum EventReader {
    Sse(SseParser),
    JsonArray(JsonArraySplitter),
}

impl EventReader {
    pub fn new(framing: Framing) -> Self {
        match framing {
            Framing::JsonArray => EventReader::JsonArray(JsonArraySplitter::new()),
            Framing::Sse | Framing::Whole => EventReader::Sse(SseParser::new()),
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        match self {
            EventReader::Sse(p) => p.feed(bytes),
            EventReader::JsonArray(s) => s
                .feed(bytes)
                .into_iter()
                .map(|element| SseEvent {
                    event: None,
                    data: String::from_utf8_lossy(&element).into_owned(),
                })
                .collect(),
        }
    }

    /// The event the body's end completes (SSE without its final blank line).
    pub fn finish(&mut self) -> Option<SseEvent> {
        match self {
            EventReader::Sse(p) => p.finish(),
            EventReader::JsonArray(_) => None,
        }
    }

    fn is_sse(&self) -> bool {
        matches!(self, EventReader::Sse(_))
    }
}

/// The upstream's body (or ctxd's spliced one); an error is only logged.
type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

/// The response's terminal part, held until the store has committed the turn.
struct Held {
    commit: BoxFuture<'static, Result<(), String>>,
    /// The bytes from the completing event on, and what the upstream sent after it while the
    /// commit ran (empty when the upstream's end completed it).
    tail: Bytes,
}

/// The client's response body: the upstream's chunks as they arrive, read by an assembler on
/// the way.
pub struct Relay {
    inner: ByteStream,
    parser: EventReader,
    assembler: Option<Assembler>,
    completion: Option<Completion>,
    /// The terminal part waiting for its commit (see the module doc).
    held_end: Option<Held>,
    api: Api,
    /// Time to the upstream's response headers, then every wait for a chunk is added.
    upstream: Duration,
    waiting_since: Instant,
    /// The upstream's end (`None`) or failure, seen while gathering chunks, handled on the
    /// next poll once what came before it is out.
    closing: Option<Option<String>>,
    /// Chunks gathered, not yet sent (see `poll_next`).
    held: Option<BytesMut>,
    /// Yields in a row that brought no new chunk.
    idle_yields: u32,
    /// Resolves when the gateway's shutdown deadline has passed.
    shutdown_deadline: BoxFuture<'static, ()>,
    ended: bool,
}

impl Relay {
    pub fn new(
        api: Api,
        framing: Framing,
        inner: impl Stream<Item = Result<Bytes, String>> + Send + 'static,
        completion: Completion,
        upstream: Duration,
    ) -> Self {
        let mut closing = completion.app.closing.subscribe();
        let shutdown_deadline = async move {
            let _ = closing.wait_for(|c| *c).await;
        }
        .boxed();
        Relay {
            shutdown_deadline,
            inner: Box::pin(inner),
            parser: EventReader::new(framing),
            assembler: Some(Assembler::new(api.stream_api())),
            completion: Some(completion),
            held_end: None,
            api,
            upstream,
            waiting_since: Instant::now(),
            closing: None,
            held: None,
            idle_yields: 0,
            ended: false,
        }
    }

    fn end(&mut self, outcome: Outcome) {
        if let Some(c) = self.completion.take() {
            c.finish(outcome, self.upstream);
        }
    }

    /// Settle `outcome` and, for a response, hold `tail` until its commit.
    fn settle(&mut self, outcome: Outcome, since: Option<Instant>, tail: Bytes) {
        let Some(mut c) = self.completion.take() else {
            return;
        };
        if let Some(since) = since {
            c.relaying += since.elapsed();
        }
        let limit = c.app.settings.commit_timeout;
        if let Some(work) = c.finish_later(outcome, self.upstream) {
            self.held_end = Some(Held {
                commit: committed(work.spawn(true), limit).boxed(),
                tail,
            });
        }
    }
}

/// At most this many bytes of chunks already at hand go to the client as one chunk.
const COALESCE: usize = 64 * 1024;
/// Yields without a new chunk before what is gathered goes out.
const GATHER_YIELDS: u32 = 3;

impl Relay {
    /// A chunk from upstream: the assembler reads it; a complete response is settled (counted,
    /// the session's next request made to wait for it, its commit started). Returns where the
    /// chunk's terminal part starts when it completed the response: the end of the last event
    /// dispatched before the completing one (the chunk is fed a line at a time to find it).
    fn observe(&mut self, chunk: &Bytes, since: Instant) -> Option<usize> {
        let a = self.assembler.as_mut()?;
        let mut fed = 0;
        let mut before_terminal = 0;
        while fed < chunk.len() {
            let end = memchr::memchr(b'\n', &chunk[fed..]).map_or(chunk.len(), |i| fed + i + 1);
            let events = self.parser.feed(&chunk[fed..end]);
            for ev in &events {
                a.push(ev);
            }
            fed = end;
            if a.is_complete() {
                break;
            }
            if !events.is_empty() {
                before_terminal = fed;
            }
        }
        if !a.is_complete() {
            return None;
        }
        // Whatever follows the terminal event in this chunk is fed too (nothing more is read).
        if fed < chunk.len() {
            self.parser.feed(&chunk[fed..]);
        }
        let outcome = match self.assembler.take().map(Assembler::finish) {
            Some(Ok(assembled)) => Outcome::Response(assembled),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "response not recorded");
                Outcome::Failed
            }
            None => Outcome::Failed,
        };
        let durable = matches!(outcome, Outcome::Response(_));
        self.settle(outcome, Some(since), chunk.slice(before_terminal..));
        durable.then_some(before_terminal)
    }

    /// The upstream stream ended (`None`) or failed: what the client gets last (a response
    /// the end completed waits for its commit in `held_end`).
    fn close(&mut self, end: Option<String>) -> Option<Bytes> {
        self.ended = true;
        if let Some(e) = end {
            // The response was complete: a broken tail changes nothing.
            self.completion.as_ref()?;
            tracing::warn!(error = %e, "upstream stream failed");
            self.end(Outcome::Failed);
            // A JSON array left open is how its client learns the stream failed.
            return self.parser.is_sse().then(|| {
                Bytes::from(
                    self.api
                        .sse_error_event("ctxd: the upstream stream failed before it completed"),
                )
            });
        }
        let mut assembler = self.assembler.take();
        if let (Some(a), Some(ev)) = (assembler.as_mut(), self.parser.finish()) {
            a.push(&ev);
        }
        match assembler.map(Assembler::finish) {
            Some(Ok(assembled)) => {
                self.settle(Outcome::Response(assembled), None, Bytes::new());
                None
            }
            Some(Err(StreamError::Provider { .. })) => {
                // The provider's own error event already reached the client.
                tracing::warn!("the provider's stream reported an error; response not recorded");
                self.end(Outcome::Failed);
                None
            }
            Some(Err(e)) => {
                // Truncated, or bytes that were no valid stream: the client's SDK must see the
                // stream fail, not end quietly.
                tracing::warn!(error = %e, "upstream stream ended without a valid end");
                self.end(Outcome::Failed);
                self.parser.is_sse().then(|| {
                    Bytes::from(
                        self.api.sse_error_event(
                            "ctxd: the upstream response ended before it completed",
                        ),
                    )
                })
            }
            None => None,
        }
    }

    /// While the terminal part waits for its commit, what the upstream sends after it (its
    /// body's end, as a rule) is read into it: the terminal part and the stream's end then
    /// leave in one write when the commit answers. Otherwise the client's stream ends one
    /// scheduler round later, when the upstream connection's task has delivered its end.
    fn fold_trailing(&mut self, cx: &mut Context<'_>) {
        while !self.ended && self.closing.is_none() {
            let Some(held) = self.held_end.as_mut() else {
                return;
            };
            if held.tail.len() >= COALESCE {
                return;
            }
            match self.inner.as_mut().poll_next(cx) {
                Poll::Pending => return,
                Poll::Ready(Some(Ok(chunk))) => {
                    let mut tail = BytesMut::with_capacity(held.tail.len() + chunk.len());
                    tail.extend_from_slice(&held.tail);
                    tail.extend_from_slice(&chunk);
                    held.tail = tail.freeze();
                }
                Poll::Ready(Some(Err(e))) => self.closing = Some(Some(e)),
                Poll::Ready(None) => self.closing = Some(None),
            }
        }
    }

    /// The held terminal part, once its commit has answered: the bytes, or the API's error
    /// event when the store did not commit (and the stream ends there).
    fn poll_held(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        self.fold_trailing(cx);
        let Some(held) = self.held_end.as_mut() else {
            return Poll::Ready(None);
        };
        let Poll::Ready(result) = held.commit.as_mut().poll(cx) else {
            return Poll::Pending;
        };
        let tail = std::mem::take(&mut held.tail);
        self.held_end = None;
        match result {
            Ok(()) => Poll::Ready((!tail.is_empty()).then_some(tail)),
            Err(e) => {
                self.ended = true;
                Poll::Ready(Some(Bytes::from(self.api.sse_error_event(&format!(
                    "ctxd: the response could not be stored ({e}); retry the request"
                )))))
            }
        }
    }
}

impl Stream for Relay {
    type Item = Result<Bytes, std::io::Error>;

    /// Every chunk the upstream has ready goes out as one (up to [`COALESCE`] bytes). The
    /// upstream connection hands its body over a chunk at a time (one SSE event each), so
    /// after a chunk this task yields (up to [`GATHER_YIELDS`] times in a row without a new
    /// one) to let it hand over what it already holds: a burst of events reaches the client as
    /// one write, not one write (and one client wake-up) per event. A live stream's lone event
    /// waits those few scheduler rounds, microseconds. The chunk completing the response goes
    /// out after its commit; what was gathered before it goes out at once.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.held_end.is_some() {
            match this.poll_held(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(bytes)) => return Poll::Ready(Some(Ok(bytes))),
                Poll::Ready(None) => {}
            }
        }
        if this.ended {
            return Poll::Ready(None);
        }
        if this.held_end.is_none() && this.shutdown_deadline.as_mut().poll(cx).is_ready() {
            // The shutdown deadline: the client learns the stream is cut, nothing is recorded
            // of the response.
            this.ended = true;
            this.end(Outcome::Aborted);
            return Poll::Ready(Some(Ok(Bytes::from(this.api.sse_error_event(
                "ctxd: the gateway is shutting down; retry the request",
            )))));
        }
        let mut out = this.held.take();
        let mut fresh = false;
        while this.closing.is_none()
            && this.held_end.is_none()
            && out.as_ref().map_or(0, BytesMut::len) < COALESCE
        {
            let Poll::Ready(item) = this.inner.as_mut().poll_next(cx) else {
                break;
            };
            this.upstream += this.waiting_since.elapsed();
            let started = Instant::now();
            match item {
                Some(Ok(chunk)) => {
                    let head = match this.observe(&chunk, started) {
                        Some(at) => chunk.slice(..at),
                        None => chunk,
                    };
                    if !head.is_empty() {
                        out.get_or_insert_with(BytesMut::new)
                            .extend_from_slice(&head);
                    }
                    fresh = true;
                }
                Some(Err(e)) => this.closing = Some(Some(e)),
                None => this.closing = Some(None),
            }
            if let Some(c) = this.completion.as_mut() {
                c.relaying += started.elapsed();
            }
            this.waiting_since = Instant::now();
        }
        if fresh {
            this.idle_yields = 0;
        }
        match out {
            Some(bytes)
                if this.idle_yields < GATHER_YIELDS
                    && this.closing.is_none()
                    && this.held_end.is_none()
                    && bytes.len() < COALESCE =>
            {
                // More may be handed over at once: yield, then send all there is.
                this.idle_yields += 1;
                this.held = Some(bytes);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Some(bytes) => Poll::Ready(Some(Ok(bytes.freeze()))),
            None if this.held_end.is_some() => {
                // Nothing before the terminal part: wait for its commit now.
                Pin::new(this).poll_next(cx)
            }
            None => match this.closing.take() {
                Some(end) => {
                    let last = this.close(end);
                    if this.held_end.is_some() {
                        // The end completed the response: the stream ends after its commit.
                        return Pin::new(this).poll_next(cx);
                    }
                    Poll::Ready(last.map(Ok))
                }
                None => Poll::Pending,
            },
        }
    }
}
