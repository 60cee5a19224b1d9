//! The response side: relay the upstream's event stream to the client chunk by chunk while an
//! assembler reads the same bytes, then record the turn's outcome ([`Completion`]). A stream
//! that fails midway ends with an `error` event in the API's shape and records nothing of the
//! response; a client that goes away is an abort.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ctxd_core::model::{Entry, EntryId, EntryKind};
use ctxd_engine::windows::{TurnEnd, WindowPolicy};
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
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        app: Arc<Gateway>,
        slot: Arc<Slot>,
        caller: Caller,
        policy: WindowPolicy,
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
            attach,
            api,
            started,
            before_upstream,
            relaying: Duration::ZERO,
            done: false,
        }
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
        self.attach = attach;
    }

    /// Record `outcome`; `upstream` is the time spent waiting on the provider.
    pub fn finish(self, outcome: Outcome, upstream: Duration) {
        if let Some(work) = self.finish_later(outcome, upstream) {
            work.spawn();
        }
    }

    /// [`Completion::finish`], with the log's work handed back to run later.
    fn finish_later(mut self, outcome: Outcome, upstream: Duration) -> Option<TurnRecord> {
        self.done = true;
        self.settle(outcome, upstream)
    }

    /// Count the turn and make the session's next request wait for its outcome to reach the
    /// log; the work of getting it there is returned, to run now or once the response's last
    /// bytes are out ([`TurnRecord::spawn`]). `None` when nothing is recorded.
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
        if matches!(outcome, Outcome::Failed) {
            return None;
        }
        // Until the outcome is in the log, the session's next request waits (see
        // `Slot::settled`), and shutdown waits too.
        Some(TurnRecord {
            ticket: Recording::start(&self.app, &self.slot),
            app: self.app.clone(),
            slot: self.slot.clone(),
            caller: self.caller.clone(),
            policy: self.policy,
            attach: self.attach.clone(),
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
    attach: Option<EntryId>,
    outcome: Outcome,
}

impl TurnRecord {
    /// Run on this worker once the current task yields (a spawned task waits in the worker's
    /// LIFO slot: no thread is woken for it). The decision is CPU work over the indexed log;
    /// the one I/O, the notes for a new window's boot, runs on a blocking thread.
    fn spawn(self) {
        let TurnRecord {
            ticket,
            app,
            slot,
            caller,
            policy,
            attach,
            outcome,
        } = self;
        tokio::spawn(async move {
            let _ticket = ticket;
            let mut state = slot.state.lock().await;
            if slot.stale.load(std::sync::atomic::Ordering::Acquire) {
                return; // the next request reloads the session; its log is the truth
            }
            let Some(loaded) = state.as_mut() else { return };
            // The response and the boundary's drafts go to the store as one batch.
            let mut batch = Vec::new();
            let end = match outcome {
                Outcome::Response(assembled) => {
                    batch = append_response(&app, &slot, loaded, attach.as_ref(), assembled);
                    TurnEnd::Completed
                }
                Outcome::Aborted => TurnEnd::Aborted,
                Outcome::Failed => return,
            };
            // An answer that called tools ends no turn: the boundary comes with their results.
            let branch = loaded.log.branch();
            let (_, entries) =
                crate::turn::end_turn(&app, loaded, &branch, &caller, &policy, end).await;
            batch.extend(entries);
            if !batch.is_empty() {
                app.writer.send(Job::Append {
                    session: loaded.record.id,
                    entries: batch,
                    stale: slot.stale.clone(),
                });
            }
        });
    }
}

/// The response's elements into the log under `attach` (those already there are found, not
/// appended again): the entries for the store, or, when all were there, the leaf moved (queued
/// at once).
fn append_response(
    app: &Gateway,
    slot: &Slot,
    loaded: &mut crate::sessions::Loaded,
    attach: Option<&EntryId>,
    assembled: Assembled,
) -> Vec<NewEntry> {
    let log = &mut loaded.log;
    let stamp = Some(ctxd_core::windows::iso8601(now_ms()));
    let mut batch: Vec<NewEntry> = Vec::new();
    let mut cur = attach.and_then(|id| log.position(id));
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
    batch
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
                work.spawn();
            }
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
    /// The complete response's way into the log, run once the stream's last bytes are out:
    /// the client must not wait for it (its next request waits instead, see [`Slot::settled`]).
    recording: Option<TurnRecord>,
    api: Api,
    /// Time to the upstream's response headers, then every wait for a chunk is added.
    upstream: Duration,
    waiting_since: Instant,
    /// The upstream's end (`None`) or failure, seen while gathering chunks, handled on the
    /// next poll once what came before it is out.
    closing: Option<Option<reqwest::Error>>,
    /// Chunks gathered, not yet sent (see `poll_next`).
    held: Option<BytesMut>,
    /// Yields in a row that brought no new chunk.
    idle_yields: u32,
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
            recording: None,
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
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(work) = self.recording.take() {
            work.spawn();
        }
    }
}

/// At most this many bytes of chunks already at hand go to the client as one chunk.
const COALESCE: usize = 64 * 1024;
/// Yields without a new chunk before what is gathered goes out.
const GATHER_YIELDS: u32 = 3;

impl Relay {
    /// A chunk from upstream: the assembler reads it; a complete response is settled (counted,
    /// and the session's next request made to wait for it) before the client sees its end.
    fn observe(&mut self, chunk: &Bytes, since: Instant) {
        let complete = match self.assembler.as_mut() {
            Some(a) => {
                for ev in self.parser.feed(chunk) {
                    a.push(&ev);
                }
                a.is_complete()
            }
            None => false,
        };
        if !complete {
            return;
        }
        let outcome = match self.assembler.take().map(Assembler::finish) {
            Some(Ok(assembled)) => Outcome::Response(assembled),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "response not recorded");
                Outcome::Failed
            }
            None => Outcome::Failed,
        };
        if let Some(mut c) = self.completion.take() {
            c.relaying += since.elapsed();
            self.recording = c.finish_later(outcome, self.upstream);
        }
    }

    /// The upstream stream ended (`None`) or failed: what the client gets last.
    fn close(&mut self, end: Option<reqwest::Error>) -> Option<Bytes> {
        self.ended = true;
        if let Some(work) = self.recording.take() {
            work.spawn();
        }
        if let Some(e) = end {
            // The response was complete: a broken tail changes nothing.
            self.completion.as_ref()?;
            tracing::warn!(error = %e, "upstream stream failed");
            self.end(Outcome::Failed);
            return Some(Bytes::from(
                self.api
                    .sse_error_event(&format!("ctxd: upstream stream failed: {e}")),
            ));
        }
        let mut assembler = self.assembler.take();
        if let (Some(a), Some(ev)) = (assembler.as_mut(), self.parser.finish()) {
            a.push(&ev);
        }
        match assembler.map(Assembler::finish) {
            Some(Ok(assembled)) => {
                self.end(Outcome::Response(assembled));
                None
            }
            Some(Err(StreamError::Truncated)) => {
                tracing::warn!("upstream stream ended before it completed");
                self.end(Outcome::Failed);
                Some(Bytes::from(self.api.sse_error_event(
                    "ctxd: the upstream response ended before it completed",
                )))
            }
            Some(Err(e)) => {
                // The provider's own error event already reached the client.
                tracing::warn!(error = %e, "response not recorded");
                self.end(Outcome::Failed);
                None
            }
            None => None,
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
    /// waits those few scheduler rounds, microseconds.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let mut out = this.held.take();
        let mut fresh = false;
        while this.closing.is_none() && out.as_ref().map_or(0, BytesMut::len) < COALESCE {
            let Poll::Ready(item) = this.inner.as_mut().poll_next(cx) else {
                break;
            };
            this.upstream += this.waiting_since.elapsed();
            let started = Instant::now();
            match item {
                Some(Ok(chunk)) => {
                    this.observe(&chunk, started);
                    out.get_or_insert_with(BytesMut::new)
                        .extend_from_slice(&chunk);
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
                    && bytes.len() < COALESCE =>
            {
                // More may be handed over at once: yield, then send all there is.
                this.idle_yields += 1;
                this.held = Some(bytes);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Some(bytes) => Poll::Ready(Some(Ok(bytes.freeze()))),
            None => match this.closing.take() {
                Some(end) => Poll::Ready(this.close(end).map(Ok)),
                None => Poll::Pending,
            },
        }
    }
}
