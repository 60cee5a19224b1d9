//! The response side: relay the upstream's event stream to the client chunk by chunk while an
//! assembler reads the same bytes, then record the turn's outcome ([`Completion`]). A stream
//! that fails midway ends with an `error` event in the API's shape and records nothing of the
//! response; a client that goes away is an abort.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxd_core::model::{Entry, EntryId, EntryKind};
use ctxd_engine::windows::TurnEnd;
use ctxd_engine::{now_ms, Caller};
use ctxd_formats::wire::stream::{Assembled, Assembler, SseParser, StreamError};
use ctxd_store::NewEntry;
use futures_util::Stream;

use crate::api::Api;
use crate::hash;
use crate::server::Gateway;
use crate::sessions::Slot;
use crate::writer::Job;

/// How a turn ended, as far as the log is concerned.
pub enum Outcome {
    /// A complete response: its elements are appended, then the turn boundary runs.
    Response(Assembled),
    /// The provider refused the prompt as too long (a window may open).
    Overflow,
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
    /// The request's last entry: the response attaches under it.
    attach: Option<EntryId>,
    api: Api,
    started: Instant,
    /// Time spent in the gateway before the upstream request (parse, plan, project).
    before_upstream: Duration,
    /// Time spent in the gateway on the response (assembling chunks).
    relaying: Duration,
    done: bool,
}

impl Completion {
    pub fn new(
        app: Arc<Gateway>,
        slot: Arc<Slot>,
        caller: Caller,
        attach: Option<EntryId>,
        api: Api,
        started: Instant,
        before_upstream: Duration,
    ) -> Self {
        Completion {
            app,
            slot,
            caller,
            attach,
            api,
            started,
            before_upstream,
            relaying: Duration::ZERO,
            done: false,
        }
    }

    /// Record `outcome`; `upstream` is the time spent waiting on the provider.
    pub fn finish(mut self, outcome: Outcome, upstream: Duration) {
        self.done = true;
        self.record(outcome, upstream);
    }

    fn record(&mut self, outcome: Outcome, upstream: Duration) {
        let route = self.api.route();
        let total = self.started.elapsed();
        let label = match &outcome {
            Outcome::Response(_) => "completed",
            Outcome::Overflow => "overflow",
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
            total_ms = total.as_millis() as u64,
            overhead_us = (self.before_upstream + self.relaying).as_micros() as u64,
            "turn over"
        );
        if matches!(outcome, Outcome::Failed) {
            return;
        }
        let app = self.app.clone();
        let slot = self.slot.clone();
        let caller = self.caller.clone();
        let attach = self.attach.clone();
        // Until the outcome is in the log, the session's next request waits (see
        // `Slot::settled`), and shutdown waits too.
        let ticket = Recording::start(&app, &slot);
        // The turn boundary may read notes (a window's boot): off the async threads.
        let task = tokio::task::spawn_blocking(move || {
            let _ticket = ticket;
            let mut state = slot.state.blocking_lock();
            if slot.stale.load(std::sync::atomic::Ordering::Acquire) {
                return; // the next request reloads the session; its log is the truth
            }
            let Some(loaded) = state.as_mut() else { return };
            let log = &mut loaded.log;
            let stamp = Some(ctxd_core::windows::iso8601(now_ms()));
            let mut batch: Vec<NewEntry> = Vec::new();
            let end = match outcome {
                Outcome::Response(assembled) => {
                    let mut cur = attach.as_ref().and_then(|id| log.position(id));
                    for el in assembled.elements {
                        let h = hash::message(&el.message);
                        log.remember_raw(hash::raw(&el.wire), h);
                        if let Some(existing) = log.find_next(cur, &h) {
                            cur = Some(existing);
                            continue;
                        }
                        let entry = Entry {
                            id: log.new_id(cur, "message", &h),
                            parent: cur.and_then(|p| log.entry(p)).map(|e| e.id.clone()),
                            timestamp: stamp.clone(),
                            sidechain: false,
                            kind: EntryKind::Message(el.message),
                        };
                        cur = Some(log.push(entry.clone()));
                        batch.push(NewEntry {
                            entry,
                            raw: Some(el.wire),
                        });
                    }
                    if batch.is_empty() {
                        if let Some(p) = cur.filter(|&p| log.leaf() != Some(p)) {
                            log.set_leaf(p);
                            if let Some(id) = log.entry(p).map(|e| e.id.clone()) {
                                app.writer.send(Job::SetLeaf {
                                    session: loaded.record.id,
                                    leaf: id,
                                    stale: slot.stale.clone(),
                                });
                            }
                        }
                    }
                    TurnEnd::Completed
                }
                Outcome::Overflow => TurnEnd::Overflow,
                Outcome::Aborted => TurnEnd::Aborted,
                Outcome::Failed => return,
            };
            let counter = ctxd_tokens::CachingCounter::new(ctxd_tokens::Tokenizer::for_model(
                caller.model.as_deref(),
            ));
            let branch = log.branch();
            match app.engine.plan_turn_end(
                &caller,
                &loaded.record,
                &log.session,
                &branch,
                end,
                None,
                &counter,
                now_ms(),
            ) {
                Ok((outcome, entries)) => {
                    if let Some(kind) = outcome.reminder {
                        metrics::counter!("ctxd_reminders_total", "kind" => kind).increment(1);
                    }
                    if let Some((window, cause)) = &outcome.reset {
                        metrics::counter!("ctxd_windows_opened_total", "cause" => *cause)
                            .increment(1);
                        tracing::info!(window = %window, cause, "new context window");
                    }
                    for entry in entries {
                        log.push(entry.clone());
                        batch.push(NewEntry::new(entry));
                    }
                }
                Err(e) => tracing::error!(error = %e, "turn end failed"),
            }
            if !batch.is_empty() {
                app.writer.send(Job::Append {
                    session: loaded.record.id,
                    entries: batch,
                    stale: slot.stale.clone(),
                });
            }
        });
        drop(task);
    }
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
            self.record(Outcome::Aborted, Duration::ZERO);
        }
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The client's response body: the upstream's chunks as they arrive, read by an assembler on
/// the way.
pub struct Relay {
    inner: ByteStream,
    parser: SseParser,
    assembler: Option<Assembler>,
    completion: Option<Completion>,
    api: Api,
    /// Time to the upstream's response headers, then every wait for a chunk is added.
    upstream: Duration,
    waiting_since: Instant,
    ended: bool,
}

impl Relay {
    pub fn new(
        api: Api,
        inner: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
        completion: Completion,
        upstream: Duration,
    ) -> Self {
        Relay {
            inner: Box::pin(inner),
            parser: SseParser::new(),
            assembler: Some(Assembler::new(api.stream_api())),
            completion: Some(completion),
            api,
            upstream,
            waiting_since: Instant::now(),
            ended: false,
        }
    }

    fn end(&mut self, outcome: Outcome) {
        if let Some(c) = self.completion.take() {
            c.finish(outcome, self.upstream);
        }
    }
}

impl Stream for Relay {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let polled = this.inner.as_mut().poll_next(cx);
        let Poll::Ready(item) = polled else {
            return Poll::Pending;
        };
        this.upstream += this.waiting_since.elapsed();
        let busy = Instant::now();
        let out = match item {
            Some(Ok(chunk)) => {
                let complete = match this.assembler.as_mut() {
                    Some(a) => {
                        for ev in this.parser.feed(&chunk) {
                            a.push(&ev);
                        }
                        a.is_complete()
                    }
                    None => false,
                };
                if complete {
                    // Record before the client sees the terminal event: its next request may
                    // follow at once and must find this response in the log.
                    if let Some(c) = this.completion.as_mut() {
                        c.relaying += busy.elapsed();
                    }
                    let outcome = match this.assembler.take().map(Assembler::finish) {
                        Some(Ok(assembled)) => Outcome::Response(assembled),
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "response not recorded");
                            Outcome::Failed
                        }
                        None => Outcome::Failed,
                    };
                    this.end(outcome);
                }
                Some(Ok(chunk))
            }
            Some(Err(e)) => {
                this.ended = true;
                if this.completion.is_some() {
                    tracing::warn!(error = %e, "upstream stream failed");
                    this.end(Outcome::Failed);
                    Some(Ok(Bytes::from(this.api.sse_error_event(&format!(
                        "ctxd: upstream stream failed: {e}"
                    )))))
                } else {
                    None // the response was complete; a broken tail changes nothing
                }
            }
            None => {
                this.ended = true;
                let mut assembler = this.assembler.take();
                if let (Some(a), Some(ev)) = (assembler.as_mut(), this.parser.finish()) {
                    a.push(&ev);
                }
                match assembler.map(Assembler::finish) {
                    Some(Ok(assembled)) => {
                        this.end(Outcome::Response(assembled));
                        None
                    }
                    Some(Err(StreamError::Truncated)) => {
                        tracing::warn!("upstream stream ended before it completed");
                        this.end(Outcome::Failed);
                        Some(Ok(Bytes::from(this.api.sse_error_event(
                            "ctxd: the upstream response ended before it completed",
                        ))))
                    }
                    Some(Err(e)) => {
                        // The provider's own error event already reached the client.
                        tracing::warn!(error = %e, "response not recorded");
                        this.end(Outcome::Failed);
                        None
                    }
                    None => None,
                }
            }
        };
        if let Some(c) = this.completion.as_mut() {
            c.relaying += busy.elapsed();
        }
        this.waiting_since = Instant::now();
        Poll::Ready(out)
    }
}
