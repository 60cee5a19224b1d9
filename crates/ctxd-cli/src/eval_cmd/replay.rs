//! One session replayed request by request through the gateway's own turn
//! (`ctxd_gateway::turn::plan_turn`, `record_answer`, and the engine's distillation pass), as
//! if its agent talked to `ctxd serve`; measured beside sending everything and beside
//! keep-the-last-N-outputs masking.
//!
//! The requests are the ones its client would have sent (`ctxd_gateway::replay::client_turns`:
//! one per assistant response, the client's own projection of the session so far, in the
//! API's wire format); each is planned by the gateway's code over an in-memory store, and the
//! recorded answer recorded after it. A distillation pass follows every answer, as in the
//! gateway; with [`Timing::ThinkTime`] (the default) its edits land before the next request
//! (the model's think time let it finish: `ctxd serve --distill-wait-ms` makes that sure),
//! with [`Timing::BackToBack`] one request later (a request sent at once goes without them).
//!
//! **Tokens** per request: the body's system prompt, tool definitions (ctxd's among them) and
//! each conversation element as a message, counted with the session's tokenizer
//! (`ctxd_gateway::replay::measure_body`'s rules). Tokens, not bytes: a session file holds no
//! client bytes (the bodies are rendered), and tokens are what is billed. **Cache-adjusted
//! cost**, in base-input token units: the longest prefix of elements (system, tools, then the
//! conversation, compared by their bytes) a request shares with the previous request of the
//! same variant is a cache read (0.1×), the rest a cache write (1.25×), as Anthropic prices
//! them.
//!
//! **Retention** (see [`super::terms`] for what a used term is): a tool-output line is *used*
//! when a term of it reappears in a later answer. At that answer's request it counts
//! - *client-dropped* when the client's own request no longer showed it (its compaction or
//!   truncation): not ctxd's miss, counted apart;
//! - *retained* when ctxd's request showed it verbatim;
//! - else a *miss*, named with the mechanism and decision that hid it, and *recoverable* when
//!   the request showed a stub naming the output's `recall` id.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ctxd_core::distill::{self, record::Usage};
use ctxd_core::model::{ContentBlock, EntryId, EntryKind, Message, SessionMeta};
use ctxd_core::tokens::{blocks_tokens, TokenCounter};
use ctxd_engine::distill::{land, phase_at_end, run_pass, Classifier, Limits, PassOutcome};
use ctxd_engine::turn::{SessionLog, SessionView};
use ctxd_engine::{Caller, Engine};
use ctxd_gateway::api::Api;
use ctxd_gateway::replay::{BodyTokens, ClientTurn, Measured, Meter};
use ctxd_gateway::request::{ParsedRequest, PrevRequest};
use ctxd_gateway::turn::{self as gw, PlannedTurn, TurnRequest};
use ctxd_store::{NewEntry, SqliteStore, Store};
use serde::Serialize;

use super::terms;

/// Cache prices relative to base input (Anthropic).
const CACHE_WRITE: f64 = 1.25;
const CACHE_READ: f64 = 0.1;
/// The stub SWE-agent's last-N rule puts in place of an older observation.
const MASK_STUB: &str = "Old environment output: (lines omitted)";

/// When a turn's distillation pass lands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Timing {
    /// Before the next request: the model's think time let the pass finish.
    #[default]
    ThinkTime,
    /// One request later: the next request was sent at once, as a fast model sends them.
    BackToBack,
}

/// Totals of one variant.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Sent {
    pub input_tokens: u64,
    /// The tokens of each request's prefix shared with the variant's previous request: what
    /// a prompt cache would have read (the estimated cache hits).
    pub cached_tokens: u64,
    /// Base-input token units.
    pub cost: f64,
}

impl Sent {
    pub fn add(&mut self, o: &Sent) {
        self.input_tokens += o.input_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cost += o.cost;
    }
    /// The estimated cache hit rate: the share of input tokens read from the cache.
    pub fn hit_rate(&self) -> f64 {
        if self.input_tokens == 0 {
            0.0
        } else {
            self.cached_tokens as f64 / self.input_tokens as f64
        }
    }
}

/// Retention of one variant: lines the work used, those shown when used, and (ctxd's
/// variant) those whose stub named `recall` when used, and those the client itself had
/// dropped (not counted in `used_lines`).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Retention {
    pub used_lines: usize,
    pub retained: usize,
    pub recoverable: usize,
    pub client_dropped: usize,
}

impl Retention {
    /// Visible retention.
    pub fn share(&self) -> f64 {
        if self.used_lines == 0 {
            1.0
        } else {
            self.retained as f64 / self.used_lines as f64
        }
    }
    /// Visible or one `recall` away.
    pub fn recoverable_share(&self) -> f64 {
        if self.used_lines == 0 {
            1.0
        } else {
            (self.retained + self.recoverable) as f64 / self.used_lines as f64
        }
    }
    pub fn add(&mut self, o: &Retention) {
        self.used_lines += o.used_lines;
        self.retained += o.retained;
        self.recoverable += o.recoverable;
        self.client_dropped += o.client_dropped;
    }
}

/// A used line ctxd did not show when the agent used it.
#[derive(Clone, Debug, Serialize)]
pub struct Miss {
    /// The tool output's entry id in the replay's log.
    pub entry: String,
    pub tool: String,
    /// 1-based line of the output.
    pub line: usize,
    pub text: String,
    /// The term the agent used, and the request (1-based) that used it.
    pub term: String,
    pub request: usize,
    /// The mechanism that hid the line: `distillation`, `write-facts`, `digest`, `amnesia`,
    /// `window` (a reset folded the output away), or `unattributed`.
    pub mechanism: String,
    /// The decision: the pass's outcome, reason and trace (`distilled/chunks at request 130:
    /// kw.15 keep 9/29`), the window, or the edit.
    pub hidden_by: String,
    /// The request showed a stub naming the output's `recall` id.
    pub recoverable: bool,
}

/// What a replay measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    pub requests: usize,
    pub all: Sent,
    pub ctxd: Sent,
    pub last_n: Sent,
    /// ctxd's cost with one `recall` round per output with recoverable misses at a request:
    /// the continuation resends the request (its prefix a cache read) with the recalled output
    /// (a cache write).
    pub ctxd_cost_with_recall: f64,
    /// The floor at 100% retention: perfect-foresight cuts of every output and call, decided
    /// once or dropped after their last use ([`super::bounds`]).
    pub bounds: super::bounds::Measured,
    pub retention_ctxd: Retention,
    pub retention_last_n: Retention,
    pub timing: Timing,
    pub passes: usize,
    pub edits: usize,
    pub saved_chars: usize,
    /// Edits by mechanism (distillation's counted per pass result, the others per entry).
    pub edited: BTreeMap<String, usize>,
    /// New context windows opened (threshold resets).
    pub windows: usize,
    /// Tokens each mechanism took off (negative: added) over every request, as the gateway's
    /// savings accounting counts them (`/stats`, the dashboard; four bytes a token).
    pub saved_by: BTreeMap<&'static str, i64>,
    pub classifier: Usage,
    /// Time in distillation passes, and in the whole turn code (plan, passes, record).
    pub classifier_us: u64,
    pub policy_us: u64,
    /// Items judged, by kind and reason: (count, characters before, characters after).
    pub reasons: BTreeMap<String, (usize, usize, usize)>,
    pub misses: Vec<Miss>,
}

pub struct Options<'a, C> {
    /// The gateway's settings: the mechanisms on or off, their thresholds, distillation's.
    pub settings: &'a ctxd_gateway::Settings,
    pub last_n: usize,
    pub counter: &'a dyn TokenCounter,
    pub runtime: &'a tokio::runtime::Runtime,
    /// What answers the passes' questions and judges meta-amnesia's reads.
    pub classifier: &'a C,
    pub api: Api,
    /// The model the requests name.
    pub model: String,
    pub timing: Timing,
    /// `--requests-with-bodies`: each request's line carries its body.
    pub with_bodies: bool,
}

/// One upstream request written by `--requests`: what the equivalence test compares with the
/// bodies `ctxd serve` sent.
#[derive(Clone, Debug, Serialize)]
pub struct RequestLine {
    pub request: usize,
    pub bytes: usize,
    pub blake3: String,
    pub tokens: BodyTokens,
    /// The body itself, with `--requests-with-bodies`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
}

/// Last-N masking over the eval's [`Meter`].
trait Masking {
    /// The client's body with tool results older than the last `n` masked: its keys.
    fn masked(&mut self, measured: &Measured, n: usize) -> Vec<(u128, u64)>;
}

impl Masking for Meter<'_> {
    fn masked(&mut self, measured: &Measured, n: usize) -> Vec<(u128, u64)> {
        let masked = masked_set(&measured.messages, n);
        let head = measured.head();
        let mut keys = measured.keys[..head].to_vec();
        for (i, m) in measured.messages.iter().enumerate() {
            let (k, t) = measured.keys[head + i];
            if masked.contains(&i) {
                // The masked element's own key (its bytes' key, salted).
                let mk = k ^ 0x5f5f;
                let t = self.remember(mk, |c| blocks_tokens(c, &mask(&m.content)));
                keys.push((mk, t));
            } else {
                keys.push((k, t));
            }
        }
        keys
    }
}

fn mask(blocks: &[ContentBlock]) -> Vec<ContentBlock> {
    blocks
        .iter()
        .map(|b| match b {
            ContentBlock::ToolResult {
                call_id,
                tool_name,
                is_error,
                ..
            } => ContentBlock::ToolResult {
                call_id: call_id.clone(),
                tool_name: tool_name.clone(),
                content: vec![ContentBlock::text(MASK_STUB)],
                is_error: *is_error,
            },
            other => other.clone(),
        })
        .collect()
}

/// One variant's request priced against the previous request's keys.
pub(super) fn price(keys: &[(u128, u64)], prev: &mut Vec<u128>) -> Sent {
    let total: u64 = keys.iter().map(|k| k.1).sum();
    let shared = keys
        .iter()
        .zip(prev.iter())
        .take_while(|(a, b)| a.0 == **b)
        .map(|(a, _)| a.1)
        .sum::<u64>();
    *prev = keys.iter().map(|k| k.0).collect();
    Sent {
        input_tokens: total,
        cached_tokens: shared,
        cost: CACHE_READ * shared as f64 + CACHE_WRITE * (total - shared) as f64,
    }
}

fn has_results(blocks: &[ContentBlock]) -> bool {
    blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// The text of a message's tool results: the lines the tools printed (an older Codex's JSON
/// wrapper unwrapped, as distillation reads it).
fn result_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::ToolResult { content, .. } = b {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&distill::result_text(content));
        }
    }
    out
}

/// What a request shows of tool outputs: every result's text, and every text at all (where a
/// stub's `recall` id is looked for).
struct Shown {
    results: String,
    all: String,
}

impl Shown {
    fn of(messages: &[Message]) -> Self {
        let mut results = String::new();
        let mut all = String::new();
        for m in messages {
            if has_results(&m.content) {
                results.push_str(&result_text(&m.content));
                results.push('\n');
            }
            terms::text_of(&m.content, &mut all);
        }
        Shown { results, all }
    }
}

/// A tool output's lines, as the eval tracks them.
struct Output {
    tool: String,
    /// Its entry in the replay's log, and the id `recall` takes for it.
    entry: EntryId,
    recall_id: String,
    lines: Vec<String>,
}

/// What hid an entry: the mechanism and its decision.
type Hider = (String, String);

/// A pass waiting to land, and what it decided (for the misses).
struct PendingPass {
    land_before: usize,
    outcome: PassOutcome,
}

/// Replay `session`. `requests`: each upstream body's measure, for `--requests`.
pub fn replay<C: Classifier>(
    session: &ctxd_core::model::Session,
    opts: &Options<'_, C>,
    requests: Option<&mut Vec<RequestLine>>,
) -> anyhow::Result<Outcome> {
    let api = opts.api;
    let turns = ctxd_gateway::replay::client_turns(api, session, &opts.model);
    let settings = opts.settings;
    let agent = session.meta.agent.map_or("sdk", |a| a.as_str()).to_owned();
    let key = ctxd_gateway::replay::session_key(session);
    let engine = Arc::new(Engine::new(SqliteStore::open_in_memory()?));
    let loaded = open_log(&engine, &key, api, &opts.model)?;
    let counter_for = gw::counter_for(Some(opts.model.clone()));
    let summarizer = ctxd_engine::digest::Summarizer::Local;
    let svc = ctxd_engine::turn::Services {
        engine: &engine,
        settings: gw::turn_settings(settings),
        summarizer: &summarizer,
        judge: opts.classifier,
        counter: &counter_for,
    };
    let mut r = Replay::new(opts, &svc, key, agent, loaded, requests);
    for (k, turn) in turns.iter().enumerate() {
        r.turn(k, turn)?;
    }
    Ok(r.finish())
}

/// The replay's log: a session of the in-memory store, as the gateway opens one.
fn open_log(
    engine: &Engine<SqliteStore>,
    key: &str,
    api: Api,
    model: &str,
) -> anyhow::Result<SessionView> {
    let meta = SessionMeta {
        id: Some(key.to_owned()),
        agent: None,
        format: format!("gateway/{}", api.route()),
        model: Some(model.to_owned()),
        ..SessionMeta::default()
    };
    let record = engine.store().open_session("", key, &meta)?;
    Ok(SessionView {
        log: SessionLog::new(engine.store().load(record.id)?),
        record,
        savings: Default::default(),
    })
}

/// A replay under way: the gateway's session, the three variants' previous requests, and what
/// retention tracks of the outputs so far.
struct Replay<'a, C> {
    opts: &'a Options<'a, C>,
    svc: &'a ctxd_engine::turn::Services<'a, SqliteStore, C>,
    requests: Option<&'a mut Vec<RequestLine>>,
    key: String,
    agent: String,
    distill_config: distill::Config,
    loaded: SessionView,
    out: Outcome,
    count: Meter<'a>,
    /// Each variant's previous request's keys (sending everything, ctxd's, last-N's).
    prev_all: Vec<u128>,
    prev_ctxd: Vec<u128>,
    prev_mask: Vec<u128>,
    prev: Option<PrevRequest>,
    passes: Vec<PendingPass>,
    hidden: HashMap<EntryId, Hider>,
    /// An entry omitted with an exchange → the exchange's prompt, whose stub names `recall`.
    via: HashMap<EntryId, EntryId>,
    scan: terms::Scanner,
    bounds: super::bounds::Bounds,
    outputs: Vec<Output>,
    /// A call's id → its tool's name (a result names its call, not always its tool).
    called: HashMap<String, String>,
    /// (output, line) → retained so far by ctxd and by last-N.
    lines: HashMap<(usize, usize), (bool, bool)>,
    clock: i64,
}

impl<'a, C: Classifier> Replay<'a, C> {
    fn new(
        opts: &'a Options<'a, C>,
        svc: &'a ctxd_engine::turn::Services<'a, SqliteStore, C>,
        key: String,
        agent: String,
        loaded: SessionView,
        requests: Option<&'a mut Vec<RequestLine>>,
    ) -> Self {
        Replay {
            opts,
            svc,
            requests,
            key,
            agent,
            distill_config: opts.settings.distill_config(),
            loaded,
            out: Outcome {
                timing: opts.timing,
                ..Outcome::default()
            },
            count: Meter::new(opts.counter),
            prev_all: Vec::new(),
            prev_ctxd: Vec::new(),
            prev_mask: Vec::new(),
            prev: None,
            passes: Vec::new(),
            hidden: HashMap::default(),
            via: HashMap::default(),
            scan: terms::Scanner::default(),
            bounds: super::bounds::Bounds::default(),
            outputs: Vec::new(),
            called: HashMap::default(),
            lines: HashMap::default(),
            clock: 1_767_225_600_000_i64, // 2026-01-01: the replay's own clock
        }
    }

    /// Request `k` (0-based): planned as the gateway plans it, measured in the three variants,
    /// its answer's use of earlier outputs checked, the answer recorded and a pass run.
    fn turn(&mut self, k: usize, turn: &ClientTurn) -> anyhow::Result<()> {
        let started = Instant::now();
        self.clock += 1_000;
        let landed = self.land_passes(k);
        let decoded = Bytes::from(turn.body.clone());
        let req = ParsedRequest::parse_after(self.opts.api, &decoded, self.prev.as_ref())
            .map_err(|e| anyhow::anyhow!("request {}: {e}", k + 1))?
            .at_path(&ctxd_gateway::replay::path(self.opts.api, &self.opts.model));
        let mut caller = self.caller(&req, &decoded);
        let planned = self.plan(k, &req, &decoded, &mut caller, landed)?;
        self.note_planned(k, &planned);
        self.out.policy_us += started.elapsed().as_micros() as u64;
        self.out.requests += 1;

        let (sent, client, this) = self.measure(k, turn, &planned)?;
        self.bound(turn, &planned, &client);
        self.note_outputs(&planned, &client);
        self.check_used(k, turn, &sent, &client, &this);
        for m in &turn.reply {
            self.scan.seen(&m.content);
            for b in &m.content {
                if let ContentBlock::ToolCall { id, name, .. } = b {
                    self.called.insert(id.clone(), name.clone());
                }
            }
        }
        self.answer(k, turn, &planned, &caller);
        self.prev = Some(PrevRequest {
            body: decoded,
            parsed: req,
        });
        Ok(())
    }

    /// A pass's edits land before the request its timing allows.
    fn land_passes(&mut self, k: usize) -> Vec<NewEntry> {
        let now = ctxd_core::windows::iso8601(self.clock);
        let mut landed = Vec::new();
        let mut keep = Vec::new();
        for p in self.passes.drain(..) {
            if p.land_before > k {
                keep.push(p);
                continue;
            }
            note_pass(
                &p.outcome,
                k,
                &mut self.out,
                &mut self.hidden,
                &mut self.via,
            );
            landed.extend(land(&mut self.loaded.log, p.outcome.drafts, &now));
        }
        self.passes = keep;
        landed
    }

    /// Who sends the request, as the gateway names its caller.
    fn caller(&self, req: &ParsedRequest, decoded: &Bytes) -> Caller {
        let conversation = req
            .array
            .clone()
            .and_then(|r| decoded.get(r))
            .unwrap_or_default();
        Caller {
            tenant: String::new(),
            session: Some(self.loaded.record.id),
            session_key: Some(self.key.clone()),
            agent: Some(self.agent.clone()),
            model: Some(self.opts.model.clone()),
            project: ctxd_gateway::project::project(
                &Default::default(),
                req.system_bytes(decoded),
                conversation,
            ),
            policy: None,
        }
    }

    /// The gateway's turn for request `k`.
    fn plan(
        &mut self,
        k: usize,
        req: &ParsedRequest,
        decoded: &Bytes,
        caller: &mut Caller,
        landed: Vec<NewEntry>,
    ) -> anyhow::Result<PlannedTurn> {
        let settings = self.opts.settings;
        self.opts
            .runtime
            .block_on(gw::plan_turn(
                settings,
                self.svc,
                &mut self.loaded,
                caller,
                TurnRequest {
                    api: self.opts.api,
                    req,
                    decoded,
                    beta_1m: false,
                    learned: None,
                    record_only: settings.management.record_only,
                    landed,
                    now_ms: self.clock,
                },
            ))
            .map_err(|u| anyhow::anyhow!("request {}: {}", k + 1, u.error))
    }

    /// What the turn's mechanisms saved and edited (the edited entries' hider, for the misses).
    fn note_planned(&mut self, k: usize, planned: &PlannedTurn) {
        for (m, v) in planned.measured.saved.iter() {
            if v != 0 {
                *self.out.saved_by.entry(m.name()).or_default() += v;
            }
        }
        for (target, mechanism) in &planned.edited {
            *self.out.edited.entry((*mechanism).to_owned()).or_default() += 1;
            self.hidden.insert(
                target.clone(),
                (
                    (*mechanism).to_owned(),
                    format!("{mechanism} at request {}", k + 1),
                ),
            );
        }
    }

    /// What went upstream, and what the client sent: both measured, and the three variants
    /// priced (ctxd's price returned for the recall rounds).
    fn measure(
        &mut self,
        k: usize,
        turn: &ClientTurn,
        planned: &PlannedTurn,
    ) -> anyhow::Result<(Measured, Measured, Sent)> {
        let api = self.opts.api;
        let body: &[u8] = planned.body.as_deref().unwrap_or(&turn.body);
        let (Ok(sent), Ok(client)) = (
            self.count.measure(api, body),
            self.count.measure(api, &turn.body),
        ) else {
            anyhow::bail!("request {}: a body ctxd cannot read back", k + 1);
        };
        if let Some(requests) = self.requests.as_deref_mut() {
            requests.push(RequestLine {
                request: k + 1,
                bytes: body.len(),
                blake3: blake3::hash(body).to_hex().to_string(),
                tokens: sent.tokens.clone(),
                body: self
                    .opts
                    .with_bodies
                    .then(|| serde_json::from_slice(body).ok())
                    .flatten(),
            });
        }
        self.out.all.add(&price(&client.keys, &mut self.prev_all));
        let this = price(&sent.keys, &mut self.prev_ctxd);
        self.out.ctxd.add(&this);
        let masked = self.count.masked(&client, self.opts.last_n);
        self.out.last_n.add(&price(&masked, &mut self.prev_mask));
        Ok((sent, client, this))
    }

    /// The bounds see the client's request as it is.
    fn bound(&mut self, turn: &ClientTurn, planned: &PlannedTurn, client: &Measured) {
        let head = client.head();
        let new: Vec<(u128, u64, &Message)> = (planned.plan.matched.min(client.messages.len())
            ..client.messages.len())
            .map(|i| {
                (
                    client.keys[head + i].0,
                    client.keys[head + i].1,
                    &client.messages[i],
                )
            })
            .collect();
        self.bounds.request(
            &client.keys[..head],
            &client.keys[head..],
            &new,
            self.opts.counter,
        );
        self.bounds.answer(&turn.reply);
    }

    /// New tool outputs this request brings (the client's new elements).
    fn note_outputs(&mut self, planned: &PlannedTurn, client: &Measured) {
        for i in planned.plan.matched..client.messages.len() {
            let m = &client.messages[i];
            if !has_results(&m.content) {
                continue;
            }
            let Some(entry) = planned
                .plan
                .element_entries
                .get(i)
                .and_then(|&p| self.loaded.log.entry(p))
                .map(|e| e.id.clone())
            else {
                continue;
            };
            let text = result_text(&m.content);
            let o = self.outputs.len();
            let out_lines: Vec<String> = text.lines().map(str::to_owned).collect();
            self.scan.output(o, &out_lines);
            self.outputs.push(Output {
                tool: m
                    .content
                    .iter()
                    .find_map(|b| match b {
                        ContentBlock::ToolResult {
                            tool_name, call_id, ..
                        } => tool_name
                            .clone()
                            .or_else(|| self.called.get(call_id).cloned()),
                        _ => None,
                    })
                    .unwrap_or_else(|| "tool".to_owned()),
                recall_id: ctxd_core::history::item_id(ctxd_core::history::item_key(
                    self.loaded.record.id,
                    entry.as_str(),
                )),
                entry,
                lines: out_lines,
            });
        }
        for i in planned.plan.matched..client.messages.len() {
            self.scan.seen(&client.messages[i].content);
        }
    }

    /// What this answer uses of earlier outputs: each used line retained, dropped by the
    /// client, or missed (by ctxd's request, by last-N's).
    fn check_used(
        &mut self,
        k: usize,
        turn: &ClientTurn,
        sent: &Measured,
        client: &Measured,
        this: &Sent,
    ) {
        let mut used_text = String::new();
        for m in &turn.reply {
            terms::text_of(&m.content, &mut used_text);
        }
        let used = self.scan.used(&used_text);
        if used.is_empty() {
            return;
        }
        let mut recalled: HashSet<usize> = HashSet::default();
        let shown = Shown::of(&sent.messages);
        let client_shown = Shown::of(&client.messages);
        let masked_shown = Shown::of(&masked_messages(&client.messages, self.opts.last_n));
        for (term, o, l) in used {
            let output = &self.outputs[o];
            let line = output.lines[l].trim();
            let state = self.lines.entry((o, l)).or_insert((true, true));
            if !client_shown.results.contains(line) {
                if state.0 {
                    self.out.retention_ctxd.client_dropped += 1;
                    self.out.retention_last_n.client_dropped += 1;
                }
                state.0 = false;
                state.1 = false;
                continue;
            }
            if state.0 && !shown.results.contains(line) {
                state.0 = false;
                let recoverable = recoverable(output, &shown, &self.via, self.loaded.record.id);
                let (mechanism, hidden_by) = self
                    .hidden
                    .get(&output.entry)
                    .cloned()
                    .unwrap_or_else(|| hider_of(&self.loaded.log, &output.entry));
                // One recall round per output missed at a request: the lines of one output
                // come back together.
                if recoverable && recalled.insert(o) {
                    self.out.ctxd_cost_with_recall += CACHE_READ * this.input_tokens as f64
                        + CACHE_WRITE * self.opts.counter.count(&output.lines.join("\n")) as f64;
                }
                self.out.misses.push(Miss {
                    entry: output.entry.0.clone(),
                    tool: output.tool.clone(),
                    line: l + 1,
                    text: line.chars().take(160).collect(),
                    term,
                    request: k + 1,
                    mechanism,
                    hidden_by,
                    recoverable,
                });
            }
            if state.1 && !masked_shown.results.contains(line) {
                state.1 = false;
            }
        }
    }

    /// The answer recorded as the gateway records it, the turn ended, a pass after it.
    fn answer(&mut self, k: usize, turn: &ClientTurn, planned: &PlannedTurn, caller: &Caller) {
        let started = Instant::now();
        let attach = self
            .loaded
            .log
            .leaf()
            .and_then(|p| self.loaded.log.entry(p))
            .map(|e| e.id.clone());
        let answer = answer_elements(self.opts.api, &turn.reply);
        self.clock += 1_000;
        self.opts.runtime.block_on(gw::record_answer(
            self.svc,
            &mut self.loaded,
            caller,
            &planned.policy.window,
            attach.as_ref(),
            answer,
            Some(&planned.measured),
            planned.cache.as_ref(),
            self.clock,
        ));
        if planned.policy.distills() {
            self.run_pass(k);
        }
        self.out.policy_us += started.elapsed().as_micros() as u64;
    }

    /// The distillation pass after request `k`'s answer, pending until it lands.
    fn run_pass(&mut self, k: usize) {
        let branch = self.loaded.log.branch();
        let Some(phase) = phase_at_end(&self.loaded.log, &branch) else {
            return;
        };
        let config = gw::pass_config(
            &self.distill_config,
            self.loaded.record.id,
            gw::provider_of(&self.loaded.log),
        );
        let asked = Instant::now();
        let pass = self.opts.runtime.block_on(run_pass(
            self.opts.classifier,
            &self.loaded.log.session,
            &branch,
            &config,
            phase,
            &Limits::default(),
        ));
        self.out.classifier_us += asked.elapsed().as_micros() as u64;
        if let Some(outcome) = pass {
            let land_before = match self.opts.timing {
                Timing::ThinkTime => k + 1,
                Timing::BackToBack => k + 2,
            };
            self.passes.push(PendingPass {
                land_before,
                outcome,
            });
        }
    }

    /// The outcome, with the windows opened and the retention over every used line.
    fn finish(mut self) -> Outcome {
        let out = &mut self.out;
        out.windows = self
            .loaded
            .log
            .branch()
            .iter()
            .filter(|&&p| is_marker(&self.loaded.log, p))
            .count();
        let used = self.lines.len() - out.retention_ctxd.client_dropped;
        out.retention_ctxd.used_lines = used;
        out.retention_last_n.used_lines = used;
        out.retention_ctxd.retained = self.lines.values().filter(|s| s.0).count();
        out.retention_last_n.retained = self.lines.values().filter(|s| s.1).count();
        out.retention_ctxd.recoverable = out.misses.iter().filter(|m| m.recoverable).count();
        out.ctxd_cost_with_recall += out.ctxd.cost;
        self.out.bounds = self.bounds.finish(self.opts.counter);
        self.out
    }
}

/// The recorded reply as the gateway's answer elements (message and wire bytes).
fn answer_elements(api: Api, reply: &[Message]) -> Vec<(Message, Vec<u8>)> {
    // A reply the session holds empty (an aborted response) comes back as an empty
    // message, as a provider (and the equivalence test's mock) sends one.
    let empty = [Message::new(ctxd_core::model::Role::Assistant, Vec::new())];
    let reply: &[Message] = if reply.is_empty() { &empty } else { reply };
    // Without the session's usage: it is of the requests the client sent unmanaged, not
    // of ctxd's. The budget then counts the window with the tokenizer, as the gateway does
    // with a provider that reports none.
    reply
        .iter()
        .map(|m| {
            let wire =
                serde_json::to_vec(&ctxd_gateway::render::elements(api, m)).unwrap_or_default();
            let m = Message {
                usage: None,
                ..m.clone()
            };
            (m, wire)
        })
        .collect()
}

/// A request shows a stub naming the output's `recall` id: the output's own stub, or (an
/// omitted exchange) the stub of the exchange it went with, which `recall` gives back whole.
fn recoverable(
    output: &Output,
    shown: &Shown,
    via: &HashMap<EntryId, EntryId>,
    session: ctxd_store::SessionId,
) -> bool {
    let recall_of = |id: &EntryId| {
        ctxd_core::history::item_id(ctxd_core::history::item_key(session, id.as_str()))
    };
    shown.all.contains(&output.recall_id)
        || shown.all.contains(output.entry.as_str())
        || via
            .get(&output.entry)
            .is_some_and(|prompt| shown.all.contains(&recall_of(prompt)))
}

/// The messages (indices) whose tool results are older than the last `n` results: what
/// last-N masking stubs.
fn masked_set(messages: &[Message], n: usize) -> HashSet<usize> {
    let with_results: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| has_results(&m.content))
        .map(|(i, _)| i)
        .collect();
    with_results[..with_results.len().saturating_sub(n)]
        .iter()
        .copied()
        .collect()
}

/// The client's messages with tool results older than the last `n` masked.
fn masked_messages(messages: &[Message], n: usize) -> Vec<Message> {
    let masked = masked_set(messages, n);
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if masked.contains(&i) {
                Message {
                    content: mask(&m.content),
                    ..m.clone()
                }
            } else {
                m.clone()
            }
        })
        .collect()
}

fn is_marker(log: &SessionLog, pos: usize) -> bool {
    matches!(
        log.entry(pos).map(|e| &e.kind),
        Some(EntryKind::WindowMarker { .. })
    )
}

/// What hid `entry` when no edit of a mechanism did: a window reset, else nothing known.
fn hider_of(log: &SessionLog, entry: &EntryId) -> Hider {
    let branch = log.branch();
    let at = log.position(entry);
    let reset = at.is_some_and(|at| branch.iter().any(|&p| p > at && is_marker(log, p)));
    if reset {
        ("window".to_owned(), "a context window reset".to_owned())
    } else if at.is_some_and(|at| !branch.contains(&at)) {
        (
            "unattributed".to_owned(),
            "the output is off the active branch".to_owned(),
        )
    } else {
        ("unattributed".to_owned(), "no edit names it".to_owned())
    }
}

/// A landed pass's decisions: which entries it hid and why, for the misses.
fn note_pass(
    pass: &PassOutcome,
    request: usize,
    out: &mut Outcome,
    hidden: &mut HashMap<EntryId, Hider>,
    via: &mut HashMap<EntryId, EntryId>,
) {
    out.passes += 1;
    out.edits += pass.decisions.edits.len();
    out.saved_chars += pass.decisions.saved_chars;
    out.classifier.add(&pass.usage);
    for r in &pass.decisions.results {
        let key = format!(
            "{}/{}",
            serde_json::to_value(r.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            r.reason
        );
        if r.outcome != distill::record::Outcome::Kept {
            *out.edited.entry("distillation".to_owned()).or_default() += 1;
            let how = format!(
                "{:?} {key} landed before request {}: {}",
                r.outcome,
                request + 1,
                r.trace.join("; ")
            )
            .to_lowercase();
            for id in &r.omitted {
                via.insert(EntryId::new(id.clone()), EntryId::new(r.entry_id.clone()));
            }
            for id in std::iter::once(&r.entry_id).chain(&r.omitted) {
                hidden.insert(
                    EntryId::new(id.clone()),
                    ("distillation".to_owned(), how.clone()),
                );
            }
        }
        let e = out.reasons.entry(key).or_default();
        e.0 += 1;
        e.1 += r.before_chars;
        e.2 += r.after_chars;
    }
}
