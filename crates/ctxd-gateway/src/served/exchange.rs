//! A hidden exchange, the adapter side: run ctxd's calls of a response, put the response and
//! the results into the log (committed before the tools read the store: `new_context` counts
//! the call it answers), end the turn when the batch is complete (a reset the model asked for
//! opens here), and build the continuation's body from the projection. The JSON path loops in
//! [`json_rounds`]; a stream goes through [`spliced`], which the relay reads like any upstream.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use bytes::Bytes;
use ctxd_core::model::{ContentBlock, EntryId, Message, Role};
use ctxd_engine::turn::{
    branch_ids_after, record_events, record_response, record_results, upstream_parts, Part,
};
use ctxd_engine::windows::TurnEnd;
use ctxd_engine::Caller;
use ctxd_formats::wire::stream::{Assembled, Assembler, SseEvent, SseParser};
use ctxd_store::NewEntry;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::splice::{End, Splicer};
use super::{Calls, Offer};
use crate::api::Api;
use crate::handler::Replan;
use crate::server::Gateway;
use crate::sessions::Slot;
use crate::writer::Job;

/// Hidden rounds at most per client request: a model calling ctxd's tools without end gets an
/// ordinary end of turn after these.
pub const MAX_ROUNDS: u32 = 8;

/// What the final record of the client's request needs from the exchange (shared by the
/// exchange and the request's `Completion`).
#[derive(Debug, Default)]
pub struct Tail {
    /// Where the response attaches: the log's leaf after the last hidden round.
    pub attach: Option<EntryId>,
    /// Set once ctxd answered calls in this request: the entries the client did not see, and
    /// the last upstream response when it still has to be appended (it called no ctxd tool).
    pub hidden: Option<Hidden>,
}

#[derive(Debug, Default)]
pub struct Hidden {
    pub covered: Vec<String>,
    pub last: Option<Assembled>,
}

pub type SharedTail = Arc<Mutex<Tail>>;

/// Who the exchange runs for.
#[derive(Clone)]
pub struct Context {
    pub app: Arc<Gateway>,
    pub api: Api,
    pub slot: Arc<Slot>,
    pub caller: Caller,
    pub tail: SharedTail,
    pub replan: Arc<Replan>,
    pub offer: Offer,
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
}

/// Why an exchange could not go on.
#[derive(Debug)]
pub enum ExchangeError {
    /// The provider refused a continuation: its status, `retry-after` and body (already in the
    /// API's own error shape), which the client gets as they are.
    Provider {
        status: StatusCode,
        retry_after: Option<HeaderValue>,
        body: Bytes,
    },
    /// ctxd could not go on (the store, the upstream connection, an unreadable answer).
    Gateway(StatusCode, String),
}

impl ExchangeError {
    fn gateway(message: impl Into<String>) -> Self {
        ExchangeError::Gateway(StatusCode::BAD_GATEWAY, message.into())
    }

    /// The client's response to a JSON request: the provider's own, or ctxd's in the API's shape.
    pub fn respond(self, api: Api) -> axum::response::Response {
        use axum::response::IntoResponse;
        match self {
            ExchangeError::Provider {
                status,
                retry_after,
                body,
            } => {
                let mut r = (status, body).into_response();
                r.headers_mut().insert(
                    axum::http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                if let Some(v) = retry_after {
                    r.headers_mut().insert(axum::http::header::RETRY_AFTER, v);
                }
                r
            }
            ExchangeError::Gateway(status, message) => {
                crate::error::ApiError::new(api, status, message).into_response()
            }
        }
    }

    /// The event that ends a client's stream: the provider's error in the API's event shape,
    /// its message naming the status and `retry-after` (a stream's status is already 200).
    fn sse_event(&self, api: Api) -> String {
        match self {
            ExchangeError::Provider {
                status,
                retry_after,
                body,
            } => api.sse_provider_error(
                *status,
                retry_after.as_ref().and_then(|v| v.to_str().ok()),
                body,
            ),
            ExchangeError::Gateway(_, message) => api.sse_error_event(message),
        }
    }
}

fn lock(tail: &SharedTail) -> std::sync::MutexGuard<'_, Tail> {
    tail.lock().unwrap_or_else(|p| p.into_inner())
}

impl Context {
    /// Run ctxd's calls of `assembled` (a response of this request): the response and the
    /// results go into the log and the store, the covered entries into the tail. With
    /// `continues`, the turn ends (the batch is complete) and the continuation's body is
    /// returned.
    pub async fn run_calls(
        &self,
        assembled: Assembled,
        continues: bool,
    ) -> Result<Option<Bytes>, ExchangeError> {
        self.run_calls_inner(assembled, continues)
            .await
            .map_err(|e| {
                ExchangeError::Gateway(StatusCode::SERVICE_UNAVAILABLE, format!("ctxd: {e}"))
            })
    }

    async fn run_calls_inner(
        &self,
        assembled: Assembled,
        continues: bool,
    ) -> Result<Option<Bytes>, String> {
        let calls: Vec<(String, String, Value)> = assembled
            .elements
            .iter()
            .flat_map(|el| {
                self.offer
                    .calls_in(&el.message.content)
                    .map(|(id, n, a)| (id.to_owned(), n.to_owned(), a.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut state = self.slot.state.lock().await;
        if self.slot.stale.load(std::sync::atomic::Ordering::Acquire) {
            return Err("an earlier write of this session failed".into());
        }
        let loaded = state.as_mut().ok_or("the session is not loaded")?;
        let attach = lock(&self.tail).attach.clone();
        let start = attach.as_ref().and_then(|id| loaded.log.position(id));
        let now = ctxd_core::windows::iso8601(ctxd_engine::now_ms());
        let (batch, _) = record_response(
            &mut loaded.log,
            attach.as_ref(),
            crate::relay::elements(assembled),
            &now,
        );
        let mut covered = branch_ids_after(&loaded.log, start);
        // The call must be in the store before the tools read it.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let session = loaded.record.id;
        if !batch.is_empty() {
            self.app.writer.commit(Job::Append {
                session,
                entries: batch,
                expect_leaf: None,
                stale: self.slot.stale.clone(),
                ack: Some(tx),
            });
            match rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => return Err("the store writer has stopped".into()),
            }
        }
        let engine = self.app.engine.clone();
        let caller = self.caller.clone();
        let run = calls.clone();
        let outputs = tokio::task::spawn_blocking(move || {
            run.iter()
                .map(
                    |(_, name, args)| match engine.call_tool(&caller, name, args) {
                        Ok(out) => (out.text, out.is_error, out.record),
                        Err(e) => (format!("ctxd: {name} failed: {e}"), true, None),
                    },
                )
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| format!("tool task: {e}"))?;
        for (_, name, _) in &calls {
            metrics::counter!("ctxd_tool_calls_total", "tool" => name.clone()).increment(1);
        }
        let records: Vec<_> = outputs.iter().filter_map(|o| o.2.clone()).collect();
        let outputs = outputs.into_iter().map(|(t, e, _)| (t, e)).collect();
        let results = result_messages(self.api, &calls, outputs);
        let now = ctxd_core::windows::iso8601(ctxd_engine::now_ms());
        let mut batch = Vec::new();
        // The results, then what the tools asked to record (lazy tools' activations), which
        // the continuation's `tools` already reads.
        let mut entries = record_results(&mut loaded.log, results, &now);
        entries.extend(record_events(&mut loaded.log, records, &now));
        for entry in entries {
            covered.push(entry.id.as_str().to_owned());
            batch.push(NewEntry::new(entry));
        }
        let mut body = None;
        if continues {
            let (_, drafts) = crate::turn::end_turn(
                &self.app,
                loaded,
                &self.caller,
                &self.replan.policy,
                TurnEnd::Completed,
            )
            .await;
            covered.extend(drafts.iter().map(|d| d.entry.id.as_str().to_owned()));
            batch.extend(drafts);
        }
        self.app.writer.send(Job::Append {
            session,
            entries: batch,
            expect_leaf: None,
            stale: self.slot.stale.clone(),
            ack: None,
        });
        if continues {
            body = Some(self.continuation_body(&loaded.log)?);
        }
        self.advance(&loaded.log, covered);
        Ok(body)
    }

    /// The tail follows the log: the response attaches at its leaf, and `covered` (entries the
    /// client will not see) joins the hidden ones.
    fn advance(&self, log: &ctxd_engine::turn::SessionLog, covered: Vec<String>) {
        let mut tail = lock(&self.tail);
        tail.attach = crate::handler::leaf_id(log);
        tail.hidden
            .get_or_insert_with(Hidden::default)
            .covered
            .extend(covered);
    }

    /// The continuation's body: the projection of the log as it is now, with the tools the
    /// request offers (a hidden round's `find_capability` shows in it).
    fn continuation_body(&self, log: &ctxd_engine::turn::SessionLog) -> Result<Bytes, String> {
        let parts = upstream_parts(log, &self.replan.element_entries)
            .map_err(|e| format!("projection: {e:?}"))?
            .unwrap_or_else(|| {
                (0..self.replan.req.elements.len())
                    .map(Part::Client)
                    .collect()
            });
        let (insert, _) = self.replan.tools_edit(log);
        Ok(Bytes::from(crate::rewrite::splice(
            &self.replan.req,
            &self.replan.decoded,
            Some(&parts),
            insert.as_ref(),
        )))
    }

    /// Send a continuation upstream. A provider's "prompt too long" opens the recovery window
    /// and the continuation goes again, once, as on a first call; any other refusal is the
    /// provider's, for the client.
    pub async fn send(&self, body: Bytes) -> Result<reqwest::Response, ExchangeError> {
        let mut body = body;
        let mut recovered = false;
        loop {
            metrics::counter!("ctxd_continuations_total", "route" => self.api.route()).increment(1);
            let resp = self
                .app
                .upstream
                .send(
                    self.app
                        .upstream
                        .target(self.api, self.caller.model.as_deref()),
                    self.method.clone(),
                    &self.path,
                    &self.headers,
                    body,
                    false,
                )
                .await
                .map_err(|e| {
                    let cause = crate::upstream::describe(&e);
                    tracing::warn!(error = %cause, "continuation failed");
                    ExchangeError::gateway(format!("ctxd: ctxd's continuation {cause}"))
                })?;
            if resp.status().is_success() {
                return Ok(resp);
            }
            let status =
                StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let retry_after = resp.headers().get(axum::http::header::RETRY_AFTER).cloned();
            let text = resp.bytes().await.unwrap_or_default();
            if crate::handler::is_overflow(status, &text) {
                crate::learned::observe_overflow(
                    &self.app,
                    self.replan.req.model.as_deref(),
                    self.replan.beta_1m,
                    &text,
                );
                if !recovered {
                    recovered = true;
                    if let Some(retry) = self.recover_overflow().await {
                        tracing::info!(
                            "prompt too long on a continuation: retried in a recovery window"
                        );
                        body = retry;
                        continue;
                    }
                }
            }
            tracing::warn!(%status, body = %String::from_utf8_lossy(&text[..text.len().min(500)]), "continuation refused upstream");
            return Err(ExchangeError::Provider {
                status,
                retry_after,
                body: text,
            });
        }
    }

    /// The provider found the continuation too long: the turn ends as an overflow (the
    /// recovery window opens, once per failure chain) and the continuation's body is built
    /// again. `None` when no window opened: the refusal stands.
    async fn recover_overflow(&self) -> Option<Bytes> {
        let mut state = self.slot.state.lock().await;
        if self.slot.stale.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let loaded = state.as_mut()?;
        let covered = self
            .replan
            .open_recovery_window(&self.app, &self.slot, loaded, &self.caller)
            .await?;
        let body = self.continuation_body(&loaded.log).ok()?;
        self.advance(&loaded.log, covered);
        Some(body)
    }

    /// The last upstream response of an exchange with hidden rounds: it is appended with them.
    fn finish_with(&self, last: Option<Assembled>) {
        let mut tail = lock(&self.tail);
        if let Some(h) = tail.hidden.as_mut() {
            h.last = last;
        }
    }
}

/// The results of ctxd's calls as the API's conversation has them: one user message with every
/// result (Anthropic, Gemini), a tool message per result (Chat, Responses).
fn result_messages(
    api: Api,
    calls: &[(String, String, Value)],
    outputs: Vec<(String, bool)>,
) -> Vec<Message> {
    let blocks: Vec<ContentBlock> = calls
        .iter()
        .zip(outputs)
        .map(
            |((id, name, _), (text, is_error))| ContentBlock::ToolResult {
                call_id: id.clone(),
                tool_name: Some(name.clone()),
                content: vec![ContentBlock::text(text)],
                is_error,
            },
        )
        .collect();
    match api {
        Api::Anthropic | Api::Gemini => vec![Message::new(Role::User, blocks)],
        Api::Chat | Api::Responses => blocks
            .into_iter()
            .map(|b| Message::new(Role::Tool, vec![b]))
            .collect(),
    }
}

/// The JSON path: the first response's body and its reading. Returns the body the client gets
/// (`None`: the first, as it is, when ctxd had nothing to answer) and its reading (what the
/// client will echo).
pub async fn json_rounds(
    cx: &Context,
    first: &Bytes,
    assembled: Assembled,
) -> Result<(Option<Bytes>, Assembled), ExchangeError> {
    let parse = |b: &Bytes| serde_json::from_slice::<Value>(b).unwrap_or(Value::Null);
    let mut bodies = Vec::new();
    let mut current = assembled;
    let mut rounds = 0;
    let cut = loop {
        let calls = Calls::of(&cx.offer, current.elements.iter().map(|e| &e.message));
        if calls.ctxd == 0 {
            if rounds == 0 {
                // Nothing of ctxd's: the first body goes to the client as it is.
                return Ok((None, current));
            }
            cx.finish_with(Some(current));
            break false;
        }
        if bodies.is_empty() {
            bodies.push(parse(first));
        }
        let hidden = calls.hidden_round() && rounds < MAX_ROUNDS;
        let body = cx.run_calls(current, hidden).await?;
        let Some(body) = body else {
            break calls.hidden_round();
        };
        rounds += 1;
        let resp = cx.send(body).await?;
        let bytes = resp.bytes().await.map_err(|e| {
            ExchangeError::gateway(format!(
                "ctxd: ctxd's continuation: the response {}",
                crate::upstream::describe(&e)
            ))
        })?;
        current = ctxd_formats::wire::stream::assemble_json(cx.api.stream_api(), &bytes)
            .map_err(|e| ExchangeError::gateway(format!("ctxd: continuation: {e}")))?;
        bodies.push(parse(&bytes));
    };
    let merged = super::merge::merge(cx.api, &cx.offer, &bodies, cut);
    let bytes = Bytes::from(merged.to_string());
    let view = ctxd_formats::wire::stream::assemble_json(cx.api.stream_api(), &bytes)
        .map_err(|e| ExchangeError::gateway(format!("ctxd: merged response: {e}")))?;
    Ok((Some(bytes), view))
}

type ByteStream = std::pin::Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The client's stream of an exchange: the upstream's events spliced (ctxd's calls withheld,
/// continuations joined), read by the relay like any upstream stream.
pub fn spliced(
    cx: Context,
    first: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, String>> + Send {
    let state = Spliced {
        splicer: Splicer::new(cx.api, cx.offer.clone()),
        assembler: Assembler::new(cx.api.stream_api()),
        parser: SseParser::new(),
        inner: Box::pin(first),
        cx,
        pending: VecDeque::new(),
        done: false,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        let item = s.next().await?;
        Some((item, s))
    })
}

struct Spliced {
    cx: Context,
    inner: ByteStream,
    parser: SseParser,
    assembler: Assembler,
    splicer: Splicer,
    pending: VecDeque<Bytes>,
    done: bool,
}

impl Spliced {
    /// The client's next bytes; an error (the upstream's, or a failed continuation) is logged
    /// by the relay, which ends the client's stream with the API's error event.
    async fn next(&mut self) -> Option<Result<Bytes, String>> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(Ok(b));
            }
            if self.done {
                return None;
            }
            match self.inner.next().await {
                Some(Ok(chunk)) => {
                    let events = self.parser.feed(&chunk);
                    if let Err(e) = self.take(events).await {
                        return Some(Ok(self.fail(&e)));
                    }
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e.without_url().to_string()));
                }
                None => {
                    let last: Vec<SseEvent> = self.parser.finish().into_iter().collect();
                    if let Err(e) = self.take(last).await {
                        return Some(Ok(self.fail(&e)));
                    }
                    // An upstream that ended early: what was withheld goes out, and the
                    // relay's reading of the client stream finds it incomplete.
                    let mut out = Vec::new();
                    self.splicer.end(End::Final, &mut out);
                    if !out.is_empty() {
                        self.pending.push_back(Bytes::from(out));
                    }
                    self.done = true;
                }
            }
        }
    }

    /// The exchange cannot go on: what the client already has goes out, then the error
    /// event that ends its stream (the relay reads it as the provider's error).
    fn fail(&mut self, e: &ExchangeError) -> Bytes {
        self.done = true;
        let mut out: Vec<u8> = self.pending.drain(..).flat_map(|b| b.to_vec()).collect();
        out.extend_from_slice(e.sse_event(self.cx.api).as_bytes());
        Bytes::from(out)
    }

    /// Splice `events`; at a response's end, run ctxd's calls and continue when due.
    async fn take(&mut self, events: Vec<SseEvent>) -> Result<(), ExchangeError> {
        let mut out = Vec::new();
        for ev in &events {
            self.assembler.push(ev);
            self.splicer.event(ev, &mut out);
            if !self.assembler.is_complete() {
                continue;
            }
            let assembler = std::mem::replace(
                &mut self.assembler,
                Assembler::new(self.cx.api.stream_api()),
            );
            let Ok(assembled) = assembler.finish() else {
                // A provider error: the client's reading fails the same way.
                self.splicer.end(End::Final, &mut out);
                break;
            };
            let calls = Calls::of(
                &self.cx.offer,
                assembled.elements.iter().map(|e| &e.message),
            );
            if calls.ctxd == 0 {
                if self.splicer.rounds() > 0 {
                    self.cx.finish_with(Some(assembled));
                }
                self.splicer.end(End::Final, &mut out);
                break;
            }
            let hidden = calls.hidden_round() && self.splicer.rounds() < MAX_ROUNDS;
            // What the client already has goes out before the tools run.
            if !out.is_empty() {
                self.pending
                    .push_back(Bytes::from(std::mem::take(&mut out)));
            }
            let body = self.cx.run_calls(assembled, hidden).await?;
            match body {
                Some(body) => {
                    let resp = self.cx.send(body).await?;
                    self.inner = Box::pin(resp.bytes_stream());
                    self.parser = SseParser::new();
                    self.splicer.end(End::Continue, &mut out);
                }
                None => {
                    let end = if calls.hidden_round() {
                        End::Cut
                    } else {
                        End::Final
                    };
                    self.splicer.end(end, &mut out);
                }
            }
            break;
        }
        if !out.is_empty() {
            self.pending.push_back(Bytes::from(out));
        }
        Ok(())
    }
}
