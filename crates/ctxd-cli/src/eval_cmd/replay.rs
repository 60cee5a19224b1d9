//! One session replayed turn by turn, as if live, three ways: everything sent (the agent's own
//! projection), ctxd's distillation and write facts, and keep-the-last-N-outputs masking.
//!
//! Each assistant response is one request (Claude Code's split responses are grouped by their
//! response id). Before a request, the policy may run a mid-run checkpoint (when the previous
//! entry is a tool batch's results); after a response without tool calls, a run-end pass. The
//! policy only ever sees the log so far: its drafts are appended to a working copy of the log,
//! which every later request is projected from.
//!
//! **Tokens** per request: system prompt, tools and every projected item, counted with the
//! session's tokenizer (each distinct content once). **Cache-adjusted cost**, in base-input
//! token units: the prefix a request shares with the previous request of the same variant is a
//! cache read (0.1×), the rest a cache write (1.25×), as Anthropic prices them.
//! **Retention**: a tool-output line is *used* when a term of it (a path, an identifier, a
//! number of 3+ digits) that no earlier content had and at most 3 lines of that output hold
//! reappears in a later assistant message's text or tool-call arguments; it is *retained* when,
//! at every such use, the request that produced the message showed the line verbatim.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::time::{Duration, Instant};

use ctxd_core::distill::{self, record::Usage, Config, Phase};
use ctxd_core::model::{ContentBlock, Entry, EntryId, EntryKind, Message, Role, Session};
use ctxd_core::tokens::{blocks_tokens, tool_def_tokens, TokenCounter};
use ctxd_core::tree::active_branch;
use ctxd_core::view::{self, ItemKind as ViewKind, Projection};
use ctxd_engine::distill::{ask, Classifier, Limits};
use serde::Serialize;

/// Cache prices relative to base input (Anthropic).
const CACHE_WRITE: f64 = 1.25;
const CACHE_READ: f64 = 0.1;
/// The stub SWE-agent's last-N rule puts in place of an older observation.
const MASK_STUB: &str = "Old environment output: (lines omitted)";
/// A term in more lines than this of one output is not attributable to a line.
const MAX_TERM_LINES: usize = 3;

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

/// Retention of one variant.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Retention {
    pub used_lines: usize,
    pub retained: usize,
}

impl Retention {
    pub fn share(&self) -> f64 {
        if self.used_lines == 0 {
            1.0
        } else {
            self.retained as f64 / self.used_lines as f64
        }
    }
    pub fn add(&mut self, o: &Retention) {
        self.used_lines += o.used_lines;
        self.retained += o.retained;
    }
}

/// A used line ctxd did not show when the agent used it.
#[derive(Clone, Debug, Serialize)]
pub struct Miss {
    /// The tool output's entry id (what `recall` takes).
    pub entry: String,
    pub tool: String,
    /// 1-based line of the output.
    pub line: usize,
    pub text: String,
    /// The term the agent used, and the request (1-based) that used it.
    pub term: String,
    pub request: usize,
    /// What took the line out of view: the last distillation pass that edited the output
    /// (`distilled/chunks at request 130: kw.15 keep 9/29`), or another mechanism's edit.
    pub hidden_by: String,
}

/// What a replay measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    pub requests: usize,
    pub all: Sent,
    pub ctxd: Sent,
    pub last_n: Sent,
    pub retention_ctxd: Retention,
    pub retention_last_n: Retention,
    pub passes: usize,
    pub edits: usize,
    pub saved_chars: usize,
    /// Shell outputs digested (ctxd's variant, with digests on).
    pub digests: usize,
    /// Tokens the digests took off the requests, summed over every request (the savings
    /// accounting's `digests`, at four bytes a token).
    pub digest_saved_tokens: u64,
    pub classifier: Usage,
    /// Time in the classifier (asking), and in the whole policy (plan, ask, decide).
    pub classifier_us: u64,
    pub policy_us: u64,
    /// Items judged, by kind and reason: (count, characters before, characters after).
    pub reasons: std::collections::BTreeMap<String, (usize, usize, usize)>,
    pub misses: Vec<Miss>,
    /// Entry id → the last pass result that edited it, for [`Miss::hidden_by`].
    #[serde(skip)]
    pub edited_by: HashMap<String, String>,
    /// Write calls whose content write facts stripped, and the tokens that saved over every
    /// later request of the replay (the stripped arguments' tokens net of their facts).
    pub write_facts: usize,
    pub write_facts_tokens: u64,
    /// Meta-amnesia: read-like results judged, those judged a drop, rounds pruned, and the
    /// tokens the pruning took off the requests, summed over every request (the accounting's
    /// `amnesia`).
    pub amnesia_judged: usize,
    pub amnesia_dropped: usize,
    pub amnesia_rounds: usize,
    pub amnesia_saved_tokens: u64,
    /// Tool definitions lazy tools would leave out, summed over every request (the
    /// accounting's `lazy-tools`).
    pub lazy_tools_tokens: u64,
}

pub struct Options<'a, C> {
    /// Distillation's passes (`false`: none, to measure the other mechanisms alone).
    pub distill: bool,
    pub config: Config,
    pub last_n: usize,
    pub counter: &'a dyn TokenCounter,
    pub runtime: &'a tokio::runtime::Runtime,
    /// What answers the passes' questions.
    pub classifier: &'a C,
    /// Write facts (`--no-write-facts` turns them off, `--write-facts-min-bytes`).
    pub write_facts: ctxd_core::wm::writes::Settings,
    /// Shell-output digests (`None`: off), local digests naming entry ids.
    pub digest: Option<ctxd_core::wm::digest::Config>,
    /// Meta-amnesia (`None`: off), judged by `classifier`.
    pub amnesia: Option<ctxd_core::wm::amnesia::Config>,
    /// Lazy tools' base sets (`None`: off).
    pub lazy: Option<ctxd_core::wm::lazy::BaseTools>,
}

/// Token counts by content address (contents never move once appended) and variant.
struct Tokens<'a> {
    counter: &'a dyn TokenCounter,
    memo: HashMap<(usize, usize, bool), u64>,
}

type Key = (usize, usize, bool);

impl Tokens<'_> {
    fn blocks(&mut self, blocks: &[ContentBlock], masked: bool) -> (Key, u64) {
        let key = (blocks.as_ptr() as usize, blocks.len(), masked);
        let counter = self.counter;
        let t = *self.memo.entry(key).or_insert_with(|| {
            if masked {
                blocks_tokens(counter, &mask(blocks))
            } else {
                blocks_tokens(counter, blocks)
            }
        });
        (key, t)
    }
    fn text(&mut self, text: &str) -> (Key, u64) {
        let key = (text.as_ptr() as usize, text.len(), false);
        let counter = self.counter;
        let t = *self.memo.entry(key).or_insert_with(|| counter.count(text));
        (key, t)
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

/// One variant's request: its keys and tokens, priced against the previous request's keys.
fn price(keys: &[(Key, u64)], prev: &mut Vec<Key>) -> Sent {
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

/// Where the working log's copies of raw entries are: the raw log, and per working position
/// the raw position it copies (ctxd's drafts: none).
type Alias<'s> = (&'s Session, &'s [Option<usize>]);

/// A request's keys: system, tools, items (`masked_items`: the items shown masked). With
/// `alias`, an item shown as written counts as its raw entry's content (the same text, counted
/// once for both logs rather than once per copy).
fn request_keys(
    p: &Projection<'_>,
    tokens: &mut Tokens<'_>,
    masked_items: Option<&HashSet<usize>>,
    alias: Option<Alias<'_>>,
) -> Vec<(Key, u64)> {
    let mut keys = Vec::with_capacity(p.items.len() + 2);
    if let Some((_, system)) = p.system {
        keys.push(tokens.text(system));
    }
    if let Some((_, tools)) = p.tools {
        let key = (tools.as_ptr() as usize, tools.len(), false);
        let counter = tokens.counter;
        let t = *tokens
            .memo
            .entry(key)
            .or_insert_with(|| tools.iter().map(|t| tool_def_tokens(counter, t)).sum());
        keys.push((key, t));
    }
    for (i, item) in p.items.iter().enumerate() {
        match &item.kind {
            ViewKind::Message {
                content, edited, ..
            } => {
                let masked = masked_items.is_some_and(|m| m.contains(&i));
                let raw_content = alias
                    .filter(|_| !edited)
                    .and_then(|(raw, of)| raw.entries.get(of.get(item.entry).copied()??))
                    .and_then(|e| e.kind.as_message())
                    .map(|m| m.content.as_slice());
                keys.push(tokens.blocks(raw_content.unwrap_or(content), masked));
            }
            ViewKind::Summary { text, .. } => keys.push(tokens.text(text)),
        }
    }
    keys
}

/// Items (indices) whose tool results are older than the last `n` results.
fn masked(p: &Projection<'_>, n: usize) -> HashSet<usize> {
    let with_results: Vec<usize> = p
        .items
        .iter()
        .enumerate()
        .filter(
            |(_, it)| matches!(&it.kind, ViewKind::Message { content, .. } if has_results(content)),
        )
        .map(|(i, _)| i)
        .collect();
    let keep_from = with_results.len().saturating_sub(n);
    with_results[..keep_from].iter().copied().collect()
}

/// The eval's own term scanner (kept apart from the local classifier's, so tuning the
/// classifier never changes the measurement): paths, identifiers, numbers of 3+ digits.
pub fn used_terms(text: &str, mut f: impl FnMut(&str)) {
    for raw in
        text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')))
    {
        let t = raw.trim_matches(['.', '/', '-']);
        if t.len() < 3 {
            continue;
        }
        let b = t.as_bytes();
        let alpha = b.iter().any(u8::is_ascii_alphabetic);
        let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
        let term = if !alpha {
            digits >= 3
        } else if t.contains('/') || t.contains('.') {
            t.len() >= 4
        } else {
            t.len() >= 4
                && (t.contains('_')
                    || digits > 0
                    || (b[1..].iter().any(u8::is_ascii_uppercase)
                        && b.iter().any(u8::is_ascii_lowercase)))
        };
        if term {
            f(t);
        }
    }
}

fn text_of(blocks: &[ContentBlock], out: &mut String) {
    for b in blocks {
        match b {
            ContentBlock::Text { text } => {
                out.push_str(text);
                out.push('\n');
            }
            ContentBlock::ToolCall {
                name, arguments, ..
            } => {
                out.push_str(name);
                out.push(' ');
                match arguments {
                    serde_json::Value::String(s) => out.push_str(s),
                    other => out.push_str(&other.to_string()),
                }
                out.push('\n');
            }
            ContentBlock::ToolResult { content, .. } => text_of(content, out),
            _ => {}
        }
    }
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

/// A tool output's lines, as the eval tracks them.
struct Output {
    tool: String,
    entry: String,
    lines: Vec<String>,
}

/// Line state: used, and retained so far by ctxd and by last-N.
#[derive(Default)]
struct LineState {
    ctxd: bool,
    last_n: bool,
}

/// Does the item of `raw_pos` show `line`, else does any shown result show it?
fn visible(
    p: &Projection<'_>,
    w_pos: Option<usize>,
    line: &str,
    masked: Option<&HashSet<usize>>,
) -> bool {
    for (i, item) in p.items.iter().enumerate() {
        if Some(item.entry) != w_pos {
            continue;
        }
        if masked.is_some_and(|m| m.contains(&i)) {
            break;
        }
        if let ViewKind::Message {
            content, edited, ..
        } = &item.kind
        {
            if !edited || result_text(content).contains(line) {
                return true;
            }
        }
    }
    p.items.iter().enumerate().any(|(i, item)| {
        !masked.is_some_and(|m| m.contains(&i))
            && matches!(&item.kind, ViewKind::Message { content, .. }
                if has_results(content) && result_text(content).contains(line))
    })
}

fn is_assistant(e: &Entry) -> Option<&Message> {
    match &e.kind {
        EntryKind::Message(m) if m.role == Role::Assistant => Some(m),
        _ => None,
    }
}

fn same_response(a: &Message, b: &Message) -> bool {
    a.response_id.is_some() && a.response_id == b.response_id
}

/// Replay `session`.
pub fn replay<C: Classifier>(session: &Session, opts: &Options<'_, C>) -> Outcome {
    let branch = active_branch(session);
    let entries: Vec<&Entry> = branch.iter().map(|&p| &session.entries[p]).collect();
    let mut out = Outcome::default();
    let mut raw = Session {
        meta: session.meta.clone(),
        ..Session::default()
    };
    let mut work = raw.clone();
    // raw position → working position.
    let mut w_of: Vec<usize> = Vec::with_capacity(entries.len());
    // working position → raw position (the inverse of `w_of`; drafts have none).
    let mut raw_of: Vec<Option<usize>> = Vec::with_capacity(entries.len());
    let mut tokens = Tokens {
        counter: opts.counter,
        memo: HashMap::default(),
    };
    let (mut prev_all, mut prev_ctxd, mut prev_mask) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen: HashSet<String> = HashSet::default();
    let mut pending: HashMap<String, Vec<(usize, usize)>> = HashMap::default();
    let mut outputs: HashMap<usize, Output> = HashMap::default();
    let mut lines: HashMap<(usize, usize), LineState> = HashMap::default();
    let mut drafts = 0usize;
    let limits = Limits {
        budget: Duration::from_secs(20),
        concurrency: 6,
    };
    let agent = session.meta.agent.map(|a| a.as_str());
    let mut memo = ctxd_core::savings::Memo::default();

    for (k, entry) in entries.iter().enumerate() {
        let assistant = is_assistant(entry);
        let starts_request = assistant.is_some_and(|m| {
            k == 0
                || !entries[k - 1..k]
                    .iter()
                    .any(|p| is_assistant(p).is_some_and(|pm| same_response(pm, m)))
        });
        if starts_request {
            // A checkpoint first, when a tool batch just completed.
            let after_results = k > 0
                && matches!(&entries[k - 1].kind, EntryKind::Message(m) if has_results(&m.content));
            if after_results {
                // The gateway strips the writes whose results a request brings as it plans
                // the request, before the pass.
                strip_writes(&mut work, opts, &mut out, &mut drafts);
                amnesia(&mut work, agent, opts, &mut out, &mut drafts);
                run_pass(
                    &mut work,
                    Phase::MidRun,
                    opts,
                    &limits,
                    &mut out,
                    &mut drafts,
                );
            }
            out.requests += 1;
            let wb: Vec<usize> = (0..work.entries.len()).collect();
            let rb: Vec<usize> = (0..raw.entries.len()).collect();
            let (Ok(pw), Ok(pr)) = (
                view::project_checked(&work, &wb),
                view::project_checked(&raw, &rb),
            ) else {
                continue;
            };
            let mask_set = masked(&pr, opts.last_n);
            out.all.add(&price(
                &request_keys(&pr, &mut tokens, None, None),
                &mut prev_all,
            ));
            out.ctxd.add(&price(
                &request_keys(&pw, &mut tokens, None, Some((&raw, &raw_of))),
                &mut prev_ctxd,
            ));
            if opts.digest.is_some() || opts.amnesia.is_some() {
                let saved = ctxd_core::savings::measure(&work, &wb, &mut memo, 0).saved;
                out.digest_saved_tokens += saved.digests.max(0) as u64;
                out.amnesia_saved_tokens += saved.amnesia.max(0) as u64;
            }
            if let Some(base) = &opts.lazy {
                out.lazy_tools_tokens += ctxd_core::wm::lazy::left_out(&work, &wb, base.row(agent));
            }
            out.last_n.add(&price(
                &request_keys(&pr, &mut tokens, Some(&mask_set), None),
                &mut prev_mask,
            ));
            // What the stripped writes save on this request: an assistant message shows other
            // content only through write facts.
            for item in &pw.items {
                if let ViewKind::Message {
                    message,
                    content,
                    edited: true,
                } = &item.kind
                {
                    if message.role == Role::Assistant {
                        let (_, shown) = tokens.blocks(content, false);
                        let (_, raw) = tokens.blocks(&message.content, false);
                        out.write_facts_tokens += raw.saturating_sub(shown);
                    }
                }
            }

            // What this response uses of earlier outputs.
            let mut used_text = String::new();
            let mut j = k;
            while let Some(m) = entries.get(j).and_then(|e| is_assistant(e)) {
                if j > k && !assistant.is_some_and(|a| same_response(a, m)) {
                    break;
                }
                text_of(&m.content, &mut used_text);
                j += 1;
            }
            let mut used: Vec<(String, usize, usize)> = Vec::new();
            used_terms(&used_text, |t| {
                if let Some(ls) = pending.get(t) {
                    used.extend(ls.iter().map(|&(o, l)| (t.to_owned(), o, l)));
                }
            });
            used.sort_by_key(|u| (u.1, u.2));
            used.dedup_by_key(|u| (u.1, u.2));
            for (term, o, l) in used {
                let Some(output) = outputs.get(&o) else {
                    continue;
                };
                let line = output.lines[l].trim();
                let state = lines.entry((o, l)).or_insert(LineState {
                    ctxd: true,
                    last_n: true,
                });
                let w_pos = w_of.get(o).copied();
                if state.ctxd && !visible(&pw, w_pos, line, None) {
                    state.ctxd = false;
                    out.misses.push(Miss {
                        entry: output.entry.clone(),
                        tool: output.tool.clone(),
                        line: l + 1,
                        text: line.chars().take(160).collect(),
                        term,
                        request: out.requests,
                        hidden_by: out
                            .edited_by
                            .get(output.entry.as_str())
                            .cloned()
                            .unwrap_or_else(|| "another mechanism's edit".to_owned()),
                    });
                }
                if state.last_n && !visible(&pr, Some(o), line, Some(&mask_set)) {
                    state.last_n = false;
                }
            }
        }

        // Append the entry to both logs (linear: each entry's parent is the previous one).
        let raw_pos = raw.entries.len();
        let mut copy = (*entry).clone();
        copy.parent = raw.entries.last().map(|e| e.id.clone());
        copy.sidechain = false;
        raw.entries.push(copy.clone());
        copy.parent = work.entries.last().map(|e| e.id.clone());
        w_of.push(work.entries.len());
        raw_of.resize(work.entries.len(), None);
        raw_of.push(Some(raw_pos));
        work.entries.push(copy);
        if let Some(cfg) = &opts.digest {
            let started = Instant::now();
            digest(&mut work, agent, cfg, opts.counter, &mut out, &mut drafts);
            out.policy_us += started.elapsed().as_micros() as u64;
        }

        // Track tool outputs' novel terms, and everything seen.
        if let EntryKind::Message(m) = &entry.kind {
            if has_results(&m.content) {
                let text = result_text(&m.content);
                let out_lines: Vec<String> = text.lines().map(str::to_owned).collect();
                let mut by_term: HashMap<String, Vec<usize>> = HashMap::default();
                for (l, line) in out_lines.iter().enumerate() {
                    if line.trim().len() < 4 {
                        continue;
                    }
                    used_terms(line, |t| {
                        if !seen.contains(t) {
                            let v = by_term.entry(t.to_owned()).or_default();
                            if v.last() != Some(&l) {
                                v.push(l);
                            }
                        }
                    });
                }
                for (t, ls) in by_term {
                    if ls.len() <= MAX_TERM_LINES {
                        pending
                            .entry(t)
                            .or_default()
                            .extend(ls.into_iter().map(|l| (raw_pos, l)));
                    }
                }
                let tool = m
                    .content
                    .iter()
                    .find_map(|b| match b {
                        ContentBlock::ToolResult { tool_name, .. } => tool_name.clone(),
                        _ => None,
                    })
                    .unwrap_or_else(|| "tool".to_owned());
                outputs.insert(
                    raw_pos,
                    Output {
                        tool,
                        entry: entry.id.0.clone(),
                        lines: out_lines,
                    },
                );
            }
            let mut all = String::new();
            text_of(&m.content, &mut all);
            used_terms(&all, |t| {
                if !seen.contains(t) {
                    seen.insert(t.to_owned());
                }
            });
        }

        // A response without tool calls (its last part) ends the run.
        if let Some(m) = assistant {
            let next_same = entries
                .get(k + 1)
                .and_then(|e| is_assistant(e))
                .is_some_and(|n| same_response(m, n));
            let calls = m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolCall { .. }));
            if !next_same && !calls {
                run_pass(
                    &mut work,
                    Phase::RunEnd,
                    opts,
                    &limits,
                    &mut out,
                    &mut drafts,
                );
            }
        }
    }
    out.retention_ctxd.used_lines = lines.len();
    out.retention_ctxd.retained = lines.values().filter(|s| s.ctxd).count();
    out.retention_last_n.used_lines = lines.len();
    out.retention_last_n.retained = lines.values().filter(|s| s.last_n).count();
    out
}

/// Write facts for the request about to start: the write calls of the last assistant message
/// whose results were appended since it ([`ctxd_core::wm::writes::plan`]), their edits appended
/// to the working log.
fn strip_writes<C: Classifier>(
    work: &mut Session,
    opts: &Options<'_, C>,
    out: &mut Outcome,
    drafts: &mut usize,
) {
    if !opts.write_facts.enabled {
        return;
    }
    let started = Instant::now();
    let fresh: Vec<usize> = (0..work.entries.len())
        .rev()
        .take_while(|&p| is_assistant(&work.entries[p]).is_none())
        .collect();
    let branch: Vec<usize> = (0..work.entries.len()).collect();
    for d in ctxd_core::wm::writes::plan(work, &branch, &fresh, &opts.write_facts) {
        out.write_facts += d.calls.len();
        push_draft(work, drafts, d.kind);
    }
    out.policy_us += started.elapsed().as_micros() as u64;
}

/// Meta-amnesia for the request about to start, as the gateway runs it on the request that
/// first carries a round's results: the judgment's record, and the round's omission when
/// every result is a drop, appended to the working log.
fn amnesia<C: Classifier>(
    work: &mut Session,
    agent: Option<&str>,
    opts: &Options<'_, C>,
    out: &mut Outcome,
    drafts: &mut usize,
) {
    let Some(cfg) = &opts.amnesia else {
        return;
    };
    let started = Instant::now();
    let mut fresh: Vec<usize> = (0..work.entries.len())
        .rev()
        .take_while(|&p| is_assistant(&work.entries[p]).is_none())
        .filter(|&p| matches!(work.entries[p].kind, EntryKind::Message(_)))
        .collect();
    fresh.reverse();
    let branch: Vec<usize> = (0..work.entries.len()).collect();
    let Some(prepared) =
        ctxd_core::wm::amnesia::prepare(work, &branch, &fresh, agent, cfg, opts.counter)
    else {
        out.policy_us += started.elapsed().as_micros() as u64;
        return;
    };
    let asked = Instant::now();
    let judged = opts.runtime.block_on(ctxd_engine::amnesia::judge(
        opts.classifier,
        prepared,
        ctxd_engine::amnesia::DEFAULT_BUDGET,
    ));
    out.classifier_us += asked.elapsed().as_micros() as u64;
    let (record, kinds) =
        ctxd_core::wm::amnesia::decide(judged.prepared, &judged.answers, opts.classifier.name());
    out.amnesia_judged += record.judgments.len();
    out.amnesia_dropped += record
        .judgments
        .iter()
        .filter(|j| j.decision == ctxd_core::wm::amnesia::Decision::Drop)
        .count();
    out.amnesia_rounds += usize::from(!record.pruned.is_empty());
    for kind in kinds {
        push_draft(work, drafts, kind);
    }
    out.policy_us += started.elapsed().as_micros() as u64;
}

/// The digests of the last entry of `work` (a tool batch's results), appended after it, as
/// the gateway does on the request that first carries them.
fn digest(
    work: &mut Session,
    agent: Option<&str>,
    cfg: &ctxd_core::wm::digest::Config,
    counter: &dyn TokenCounter,
    out: &mut Outcome,
    drafts: &mut usize,
) {
    use ctxd_core::wm::digest::{candidates, drafts as digest_drafts, render_local, Pointer};
    let Some(last) = work.entries.len().checked_sub(1) else {
        return;
    };
    let branch: Vec<usize> = (0..work.entries.len()).collect();
    let found = candidates(work, &branch, &[last], agent, cfg, counter);
    if found.is_empty() {
        return;
    }
    out.digests += found.len();
    let pairs: Vec<_> = found
        .into_iter()
        .map(|c| {
            let pointer = Pointer::Recall(c.entry_id.0.clone());
            let text = render_local(&c, &pointer, cfg, counter);
            (c, text)
        })
        .collect();
    for kind in digest_drafts(work, &pairs) {
        push_draft(work, drafts, kind);
    }
}

/// Append a draft of ctxd's (an edit, a record) after the last entry of `work`, as the
/// gateway appends its drafts under the leaf; `drafts` numbers their ids.
fn push_draft(work: &mut Session, drafts: &mut usize, kind: EntryKind) {
    *drafts += 1;
    let parent = work.entries.last().map(|e| e.id.clone());
    work.entries.push(Entry {
        id: EntryId::new(format!("ctxd-draft-{drafts}")),
        parent,
        timestamp: None,
        sidechain: false,
        kind,
    });
}

fn run_pass<C: Classifier>(
    work: &mut Session,
    phase: Phase,
    opts: &Options<'_, C>,
    limits: &Limits,
    out: &mut Outcome,
    drafts: &mut usize,
) {
    if !opts.distill {
        return;
    }
    let started = Instant::now();
    let branch: Vec<usize> = (0..work.entries.len()).collect();
    let plan = distill::plan(work, &branch, &opts.config, phase);
    if plan.is_empty() {
        out.policy_us += started.elapsed().as_micros() as u64;
        return;
    }
    let asked = Instant::now();
    let answered = opts.runtime.block_on(ask(opts.classifier, &plan, limits));
    out.classifier_us += asked.elapsed().as_micros() as u64;
    let decisions = distill::decide(work, &plan, &answered.answers, &opts.config);
    out.passes += 1;
    out.edits += decisions.edits.len();
    for r in &decisions.results {
        let key = format!(
            "{}/{}",
            serde_json::to_value(r.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            r.reason
        );
        if r.outcome != distill::record::Outcome::Kept {
            let how = format!(
                "{:?} {key} at request {}: {}",
                r.outcome,
                out.requests,
                r.trace.join("; ")
            )
            .to_lowercase();
            for id in std::iter::once(&r.entry_id).chain(&r.omitted) {
                out.edited_by.insert(id.clone(), how.clone());
            }
        }
        let e = out.reasons.entry(key).or_default();
        e.0 += 1;
        e.1 += r.before_chars;
        e.2 += r.after_chars;
    }
    out.saved_chars += decisions.saved_chars;
    out.classifier.add(&answered.usage);
    for kind in decisions.drafts(opts.classifier.name(), answered.usage, answered.timed_out) {
        push_draft(work, drafts, kind);
    }
    out.policy_us += started.elapsed().as_micros() as u64;
}
