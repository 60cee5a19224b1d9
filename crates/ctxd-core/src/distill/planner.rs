//! [`plan`]: the items of a pass and the questions about them.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::chunk::{chunk_output, segments};
use super::record::{blocks_chars, ItemResult, Outcome};
use super::run::{self, Call, Run};
use super::signals;
use super::{Ask, Batch, Config, Item, ItemKind, Phase, Plan, Question, Signals, Target};
use crate::cache;
use crate::model::{ContentBlock, Message, Role, Session};
use crate::view::{self, Item as ViewItem, ItemKind as ViewKind};

/// Lay out the pass `phase` on `branch` (positions, root first).
///
/// Run end: every output of the run that is not already ctxd's (large, small), the outputs of
/// earlier runs a pass judged without an answer (its classifier timed out or failed) or whose
/// edit waited for the cache, old images, old exchanges. Mid-run: outputs of the run at least
/// `mid_run_min_age_turns` old not judged mid-run before, only when they reach
/// `mid_run_batch_chars` and the break-even rule says the one-time cache rewrite pays off;
/// otherwise an empty plan.
pub fn plan(session: &Session, branch: &[usize], cfg: &Config, phase: Phase) -> Plan {
    let Ok(projection) = view::project_checked(session, branch) else {
        return empty_plan(phase, Run::default());
    };
    let items = &projection.items;
    let run = run::collect(items);
    if phase == Phase::MidRun && mid_run_bound(items, &run, cfg) < cfg.mid_run_batch_chars {
        // Not even every output old enough would make a batch: nothing to lay out (most
        // checkpoints end here, and the eval runs one after every tool batch).
        return empty_plan(phase, run);
    }
    let memo = EarlierJudgments::read(session, branch, run.prompt.map(|p| items[p].entry));
    let mut calls: Vec<&Call> = run.calls.values().collect();
    calls.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
    let quoted = quoted_by(&calls);
    let found = Scan::new(session, cfg, phase, &memo, &run, &calls, &quoted).outputs(items);

    let mut out = empty_plan(phase, run);
    out.items = found.items;
    out.pinned = found.pinned;
    out.costs = costs(session, branch, items, cfg);
    if phase == Phase::MidRun {
        if !mid_run_pays(&out, &found.output_at, cfg) {
            out.items.clear();
            out.pinned.clear();
            return out;
        }
    } else {
        images(session, items, cfg, &mut out.items);
        if let Some(prompt) = out.run.prompt {
            exchanges(session, items, prompt, cfg, &memo, &mut out.items);
        }
    }
    chunk_large(&mut out.items, &found.output_at, &quoted);
    ask(&mut out, cfg);
    out
}

/// A plan of no items.
fn empty_plan(phase: Phase, run: Run) -> Plan {
    Plan {
        phase,
        run,
        items: Vec::new(),
        questions: Vec::new(),
        batches: Vec::new(),
        pinned: Vec::new(),
        costs: cache::Costs::default(),
    }
}

/// A quoted line → the last projection index of a call quoting it.
fn quoted_by(calls: &[&Call]) -> HashMap<String, usize> {
    let mut quoted: HashMap<String, usize> = HashMap::default();
    for &c in calls {
        for line in signals::quoted_lines([c]) {
            let at = quoted.entry(line).or_insert(c.at);
            *at = (*at).max(c.at);
        }
    }
    quoted
}

/// The cache's costs of rewriting from each item of the projection.
fn costs(
    session: &Session,
    branch: &[usize],
    items: &[ViewItem<'_>],
    cfg: &Config,
) -> cache::Costs {
    cache::Costs::new(
        cfg.provider,
        session,
        branch,
        items.iter().map(|it| {
            let assistant = matches!(&it.kind,
                ViewKind::Message { message, .. } if message.role == Role::Assistant);
            (it.entry, item_chars(it), assistant)
        }),
    )
}

/// The break-even rule over the run's turns: the next request rewrites the cache from the read
/// point before the first eligible output (`cache::rewrite_chars`).
fn mid_run_pays(out: &Plan, output_at: &[usize], cfg: &Config) -> bool {
    let pending: usize = out.items.iter().map(|i| i.before_chars).sum();
    pending >= cfg.mid_run_batch_chars
        && output_at.first().is_some_and(|&first| {
            let rewrite = out.costs.rewrite_from(first);
            cache::pays_off(pending, out.run.turns, rewrite, cfg.provider)
        })
}

/// Large outputs are chunked once the pass is known to go ahead; a chunk with a line a later
/// call quotes is kept whatever the answers.
fn chunk_large(items: &mut [Item], output_at: &[usize], quoted: &HashMap<String, usize>) {
    for (item, &at) in items.iter_mut().zip(output_at) {
        if item.kind == ItemKind::Large {
            item.chunks = chunk_output(&item.text);
            item.forced = item
                .chunks
                .iter()
                .map(|c| !quoted.is_empty() && quoted_after(quoted, c.text(&item.text), at))
                .collect();
        }
    }
}

/// The tool outputs of a pass: its items, with each one's projection index (where later calls
/// start), and the results pinned as they are.
struct Found {
    items: Vec<Item>,
    output_at: Vec<usize>,
    pinned: Vec<ItemResult>,
}

/// What one tool output comes to.
enum Output {
    Item(Item),
    Pinned(ItemResult),
}

/// An output's tool and label: its call's, else its record's (an earlier run's output), else
/// the result's tool name.
fn tool_label(
    call: Option<&Call>,
    earlier: Option<&(String, String)>,
    tool_name: Option<&str>,
) -> (String, String) {
    match (call, earlier) {
        (Some(c), _) => (c.name.clone(), signals::label(&c.name, &c.arguments)),
        (None, Some((tool, label))) => (tool.clone(), label.clone()),
        (None, None) => {
            let tool = tool_name.map_or_else(|| "tool".to_owned(), str::to_owned);
            (tool.clone(), tool)
        }
    }
}

/// What every tool output of the pass is judged against.
struct Scan<'a> {
    session: &'a Session,
    cfg: &'a Config,
    phase: Phase,
    memo: &'a EarlierJudgments,
    run: &'a Run,
    /// The run's calls by projection index, then id.
    calls: &'a [&'a Call],
    /// Per call (as in `calls`), what it does to earlier outputs.
    facts: Vec<signals::Facts>,
    /// A call's id → its index in `calls`.
    facts_of: HashMap<&'a str, usize>,
    /// The run's question, lower case.
    question: String,
    quoted: &'a HashMap<String, usize>,
    /// The projection index after the run's prompt: where the run's own outputs start.
    start: usize,
}

impl<'a> Scan<'a> {
    fn new(
        session: &'a Session,
        cfg: &'a Config,
        phase: Phase,
        memo: &'a EarlierJudgments,
        run: &'a Run,
        calls: &'a [&'a Call],
        quoted: &'a HashMap<String, usize>,
    ) -> Self {
        Scan {
            session,
            cfg,
            phase,
            memo,
            run,
            calls,
            facts: calls.iter().map(|c| signals::Facts::of(c)).collect(),
            facts_of: calls
                .iter()
                .enumerate()
                .map(|(i, c)| (c.id.as_str(), i))
                .collect(),
            question: run.question.to_ascii_lowercase(),
            quoted,
            start: run.prompt.map_or(0, |p| p + 1),
        }
    }

    /// Every tool result on the branch from where the pass looks, in order.
    fn outputs(&self, items: &[ViewItem<'_>]) -> Found {
        let mut found = Found {
            items: Vec::new(),
            output_at: Vec::new(),
            pinned: Vec::new(),
        };
        // Before the run, only the outputs still to be judged ([`EarlierJudgments::retry`]).
        let from = if self.phase == Phase::RunEnd && !self.memo.retry.is_empty() {
            0
        } else {
            self.start
        };
        for (at, vitem) in items.iter().enumerate().skip(from) {
            let ViewKind::Message {
                content,
                edited: false,
                ..
            } = &vitem.kind
            else {
                continue;
            };
            for (b, block) in content.iter().enumerate() {
                match self.output(vitem.entry, at, b, block) {
                    Some(Output::Item(item)) => {
                        found.output_at.push(at);
                        found.items.push(item);
                    }
                    Some(Output::Pinned(result)) => found.pinned.push(result),
                    None => {}
                }
            }
        }
        found
    }

    /// Block `b` of the entry at `entry` (projection index `at`), when it is a tool result the
    /// pass judges or pins.
    fn output(&self, entry: usize, at: usize, b: usize, block: &ContentBlock) -> Option<Output> {
        let ContentBlock::ToolResult {
            call_id,
            tool_name,
            content: result,
            is_error,
        } = block
        else {
            return None;
        };
        let cfg = self.cfg;
        let entry_id = self.session.entries[entry].id.clone();
        // An earlier run's output: its call is not among this run's; its record names it.
        let earlier = if at < self.start {
            Some(self.memo.retry.get(entry_id.as_str())?)
        } else {
            None
        };
        let text = result_text(result);
        if text.len() < cfg.small_min_chars {
            return None;
        }
        let call = self.run.calls.get(call_id);
        let (tool, label) = tool_label(call, earlier, tool_name.as_deref());
        let age_turns = match call {
            Some(c) => self.run.turns.saturating_sub(c.turn + 1),
            // An earlier run's output is older than every turn of this one.
            None if earlier.is_some() => self.run.turns,
            None => 0,
        };
        let superseded = call.and_then(|c| self.superseded(c, at));
        let pinned_as = |reason: &str| {
            Some(Output::Pinned(ItemResult {
                kind: if text.len() >= cfg.min_result_chars {
                    ItemKind::Large
                } else {
                    ItemKind::Small
                },
                entry_id: entry_id.0.clone(),
                tool: tool.clone(),
                label: label.clone(),
                outcome: Outcome::Kept,
                reason: reason.to_owned(),
                before_chars: text.len(),
                after_chars: text.len(),
                trace: Vec::new(),
                omitted: Vec::new(),
            }))
        };
        if cfg.exclude_tools.iter().any(|t| t == &tool) {
            return pinned_as("pinned:excluded-tool");
        }
        if self.phase == Phase::MidRun {
            if age_turns < cfg.mid_run_min_age_turns
                || self.memo.mid_run.contains(entry_id.as_str())
                || tool == "recall"
            {
                return None;
            }
            if *is_error && superseded.is_none() {
                return pinned_as("pinned:error");
            }
        }
        let later_from = self
            .run
            .steps
            .iter()
            .position(|s| s.at > at)
            .unwrap_or(self.run.steps.len());
        let signals = self.signals(call, superseded, *is_error, age_turns);
        let item = Item {
            kind: ItemKind::Small,
            entry,
            entry_id,
            block: b,
            tool,
            label,
            text: String::new(),
            before_chars: text.len(),
            later_from,
            signals,
            chunks: Vec::new(),
            forced: Vec::new(),
            quoted: false,
            omit: Vec::new(),
            messages: 1,
        };
        self.sized(item, text, at).map(Output::Item)
    }

    /// What a later call of the run says of `call`'s output (at projection index `at`): out of
    /// date, in part or whole.
    fn superseded(&self, call: &Call, at: usize) -> Option<String> {
        let first_later = self.calls.partition_point(|c| c.at <= at);
        let own = &self.facts[*self.facts_of.get(call.id.as_str())?];
        signals::superseded_with(
            call,
            own,
            self.calls[first_later..]
                .iter()
                .copied()
                .zip(&self.facts[first_later..]),
        )
    }

    fn signals(
        &self,
        call: Option<&Call>,
        superseded: Option<String>,
        is_error: bool,
        age_turns: usize,
    ) -> Signals {
        Signals {
            partly: superseded
                .as_deref()
                .is_some_and(|s| s.starts_with(signals::PARTLY_PREFIX)),
            superseded,
            is_error,
            requested: call
                .is_some_and(|c| signals::requested(&self.question, &c.name, &c.arguments)),
            age_turns,
        }
    }

    /// The item as large (chunked later) or small; `None` for a small one a stub would not
    /// shorten.
    fn sized(&self, mut item: Item, text: String, at: usize) -> Option<Item> {
        if text.len() >= self.cfg.min_result_chars {
            // Chunked once the pass is known to go ahead (`chunk_large`).
            item.kind = ItemKind::Large;
        } else {
            // A stub would not be shorter: nothing to gain.
            let stub = super::render::output_stub(
                &item.label,
                text.len(),
                &self.cfg.recall_id(&item.entry_id),
                "judged no longer needed",
            );
            if stub.len() >= text.len() {
                return None;
            }
            item.quoted = !self.quoted.is_empty() && quoted_after(self.quoted, &text, at);
        }
        item.text = text;
        Some(item)
    }
}

/// An upper bound of a checkpoint's pending characters: the outputs of the run, not edited,
/// from `small_min_chars` on, whose call is at least `mid_run_min_age_turns` old.
fn mid_run_bound(items: &[ViewItem<'_>], run: &Run, cfg: &Config) -> usize {
    let start = run.prompt.map_or(0, |p| p + 1);
    let mut sum = 0usize;
    for vitem in items.iter().skip(start) {
        let ViewKind::Message {
            content,
            edited: false,
            ..
        } = &vitem.kind
        else {
            continue;
        };
        for block in content.iter() {
            let ContentBlock::ToolResult {
                call_id,
                content: result,
                ..
            } = block
            else {
                continue;
            };
            let old = run
                .calls
                .get(call_id)
                .is_some_and(|c| run.turns.saturating_sub(c.turn + 1) >= cfg.mid_run_min_age_turns);
            let len = result_len(result);
            if old && len >= cfg.small_min_chars {
                sum += len;
            }
        }
    }
    sum
}

/// The length of [`result_text`] of `blocks`, without building it.
fn result_len(blocks: &[ContentBlock]) -> usize {
    let mut n = 0usize;
    let mut texts = 0usize;
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            n += text.len();
            texts += 1;
        }
    }
    n + texts.saturating_sub(1)
}

/// Some line of `text` is quoted by a call after projection index `at`.
fn quoted_after(quoted: &HashMap<String, usize>, text: &str, at: usize) -> bool {
    text.lines().any(|l| {
        quoted
            .get(signals::strip_line_number(l))
            .is_some_and(|&q| q > at)
    })
}

/// The text blocks of a tool result, joined by newlines: the text the tool printed. An older
/// Codex's shell wraps its output as one JSON line, `{"output": "...", "metadata": {...}}`
/// (what the model is sent); its `output` is unwrapped, so outputs are judged, chunked and
/// kept by their own lines.
pub fn result_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text { text } = b {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(unwrap_codex_output(text).as_deref().unwrap_or(text));
        }
    }
    out
}

/// The `output` of an older Codex shell result (`{"output": "...", "metadata": {...}}`, no
/// other key), or `None` for any other text.
fn unwrap_codex_output(text: &str) -> Option<String> {
    if !text.starts_with('{') || !text.contains("\"output\"") {
        return None;
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wrapped {
        output: String,
        #[serde(default, rename = "metadata")]
        _metadata: Option<serde_json::Value>,
    }
    serde_json::from_str::<Wrapped>(text).ok().map(|w| w.output)
}

fn item_chars(item: &ViewItem<'_>) -> usize {
    match &item.kind {
        ViewKind::Message { content, .. } => blocks_chars(content),
        ViewKind::Summary { text, .. } => text.len(),
    }
}

/// What earlier records on the branch say was judged.
struct EarlierJudgments {
    /// Entries judged at a checkpoint (with an answer).
    mid_run: HashSet<String>,
    /// Exchange prompts judged in this run (not deferred).
    exchanges: HashSet<String>,
    /// Outputs (by entry) whose latest judgement on the branch has no answer (the classifier
    /// timed out or failed) or waited for the cache: judged again at the next run end, with
    /// the tool and label their record gives.
    retry: HashMap<String, (String, String)>,
}

impl EarlierJudgments {
    fn read(session: &Session, branch: &[usize], prompt_entry: Option<usize>) -> Self {
        let mut memo = EarlierJudgments {
            mid_run: HashSet::default(),
            exchanges: HashSet::default(),
            retry: HashMap::default(),
        };
        let after = prompt_entry
            .and_then(|p| branch.iter().position(|&q| q == p))
            .unwrap_or(0);
        // Every record on the branch (this runs at every run end of a long session), read
        // without copying its strings.
        for (i, &p) in branch.iter().enumerate() {
            let Some(r) = session
                .entries
                .get(p)
                .and_then(|e| e.kind.event_detail::<Judged<'_>>(super::record::EVENT))
                .filter(|r| r.v == 1)
            else {
                continue;
            };
            for res in &r.results {
                memo.note_output(res);
                if i < after {
                    continue; // the rest is about this run's records
                }
                let unanswered = is_unanswered(res.reason);
                if r.phase == Phase::MidRun && res.kind != ItemKind::Exchange && !unanswered {
                    memo.mid_run.insert(res.entry_id.to_owned());
                }
                if res.kind == ItemKind::Exchange && !unanswered && res.reason != "deferred" {
                    memo.exchanges.insert(res.entry_id.to_owned());
                }
            }
        }
        memo
    }

    /// An output's judgement, in branch order: the latest one decides whether it is retried.
    fn note_output(&mut self, res: &JudgedItem<'_>) {
        if !matches!(res.kind, ItemKind::Large | ItemKind::Small) {
            return;
        }
        if is_unanswered(res.reason) || res.reason == "deferred" {
            self.retry.insert(
                res.entry_id.to_owned(),
                (res.tool.to_owned(), res.label.to_owned()),
            );
        } else {
            self.retry.remove(res.entry_id);
        }
    }
}

/// A result's reason says the classifier gave no answer for it.
fn is_unanswered(reason: &str) -> bool {
    use super::Missing;
    reason.split(',').any(|r| {
        [Missing::NoAnswer, Missing::Error, Missing::Timeout]
            .iter()
            .any(|m| m.as_str() == r)
    })
}

/// What [`EarlierJudgments`] reads of a pass's record (`record::Record`): borrowed, the rest skipped.
#[derive(serde::Deserialize)]
struct Judged<'a> {
    v: u32,
    phase: Phase,
    #[serde(borrow)]
    results: Vec<JudgedItem<'a>>,
}

#[derive(serde::Deserialize)]
struct JudgedItem<'a> {
    kind: ItemKind,
    entry_id: &'a str,
    reason: &'a str,
    tool: &'a str,
    label: &'a str,
}

/// Tool results with images that at least `image_keep_turns` assistant messages follow.
fn images(session: &Session, items: &[ViewItem<'_>], cfg: &Config, out: &mut Vec<Item>) {
    let mut after = 0usize; // assistant messages after the item
    let mut found = Vec::new();
    for vitem in items.iter().rev() {
        let Some((m, content)) = run::shown(vitem) else {
            continue;
        };
        if m.role == Role::Assistant {
            after += 1;
            continue;
        }
        if after < cfg.image_keep_turns {
            continue;
        }
        let ViewKind::Message { edited: false, .. } = &vitem.kind else {
            continue;
        };
        for (b, block) in content.iter().enumerate() {
            if let ContentBlock::ToolResult {
                call_id,
                tool_name,
                content,
                ..
            } = block
            {
                let n = content
                    .iter()
                    .filter(|c| matches!(c, ContentBlock::Image(_)))
                    .count();
                if n == 0 {
                    continue;
                }
                let entry_id = session.entries[vitem.entry].id.clone();
                let tool = tool_name.clone().unwrap_or_else(|| "tool".to_owned());
                found.push(Item {
                    kind: ItemKind::Image,
                    entry: vitem.entry,
                    entry_id,
                    block: b,
                    label: format!("{tool} ({call_id})"),
                    tool,
                    text: String::new(),
                    before_chars: blocks_chars(content),
                    later_from: 0,
                    signals: Signals {
                        age_turns: after,
                        ..Signals::default()
                    },
                    chunks: Vec::new(),
                    forced: Vec::new(),
                    quoted: false,
                    omit: Vec::new(),
                    messages: 1,
                });
            }
        }
    }
    found.reverse();
    out.extend(found);
}

/// Old exchanges before the run's prompt (`prompt`, a projection index) that may be omitted.
fn exchanges(
    session: &Session,
    items: &[ViewItem<'_>],
    prompt: usize,
    cfg: &Config,
    memo: &EarlierJudgments,
    out: &mut Vec<Item>,
) {
    let starts = exchange_starts(items, prompt);
    let eligible = starts.len().saturating_sub(cfg.keep_recent_exchanges);
    for (k, &s) in starts[..eligible].iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(prompt);
        let span = &items[s..end];
        let entry_id = session.entries[items[s].entry].id.clone();
        if memo.exchanges.contains(entry_id.as_str()) {
            continue;
        }
        let Some(ex) = Exchange::read(span) else {
            continue;
        };
        if ex.last_calls || ex.chars < cfg.exchange_min_chars {
            continue;
        }
        let messages = span.len();
        let stub = super::render::exchange_stub(
            &ex.prompt_text,
            messages,
            ex.chars / 4,
            &cfg.recall_id(&entry_id),
        );
        if stub.len() >= ex.chars {
            continue;
        }
        out.push(Item {
            kind: ItemKind::Exchange,
            entry: items[s].entry,
            entry_id,
            block: 0,
            tool: "exchange".to_owned(),
            label: format!("exchange \"{}\"", run::clip_head(ex.prompt_text.trim(), 60)),
            text: ex.text(),
            before_chars: ex.chars,
            later_from: 0,
            signals: Signals::default(),
            chunks: Vec::new(),
            forced: Vec::new(),
            quoted: false,
            omit: span[1..].iter().map(|it| it.entry).collect(),
            messages,
        });
    }
}

/// Starts of exchanges before `prompt`: prompts that are not steering messages.
fn exchange_starts(items: &[ViewItem<'_>], prompt: usize) -> Vec<usize> {
    (0..prompt)
        .filter(|&i| {
            run::shown(&items[i]).is_some_and(|(m, _)| run::is_prompt(m))
                && !run::is_steering(items, i)
        })
        .collect()
}

/// What an old exchange says, read from its span of the projection.
struct Exchange {
    chars: usize,
    /// Its last assistant message has tool calls (it did not complete).
    last_calls: bool,
    /// Its last assistant text.
    last_text: String,
    prompt_text: String,
    /// Labels of its first calls.
    tools: Vec<String>,
}

impl Exchange {
    /// `None` unless every item is as written (nobody's edit, no summary inside), without a
    /// correction, and without a call reading what the user asked to read.
    fn read(span: &[ViewItem<'_>]) -> Option<Self> {
        let mut ok = true;
        let mut ex = Exchange {
            chars: 0,
            last_calls: false,
            last_text: String::new(),
            prompt_text: String::new(),
            tools: Vec::new(),
        };
        let mut prompt_lower = String::new();
        for (j, it) in span.iter().enumerate() {
            let ViewKind::Message {
                message,
                content,
                edited,
            } = &it.kind
            else {
                return None;
            };
            // Someone else's edit: what the model sees is not ours to restore. ctxd's own
            // edits (the marker leads) are fine, as in the seed: `recall` gives the raw
            // entries back. An edited assistant message is ctxd's too: only write facts
            // (`EntryKind::ArgsEdit`) edit one.
            if *edited
                && message.role != Role::Assistant
                && !super::record::starts_with_marker(content)
            {
                return None;
            }
            ex.chars += blocks_chars(content);
            if run::is_prompt(message) {
                let t = run::prompt_text(message, content);
                if signals::is_correction(&t) {
                    return None;
                }
                if j == 0 {
                    prompt_lower = t.to_ascii_lowercase();
                    ex.prompt_text = t;
                }
            }
            if message.role == Role::Assistant {
                ex.last_calls = run::has_calls(message, content);
                let t = run::message_text(message);
                if !t.trim().is_empty() {
                    ex.last_text = t;
                }
                for b in content.iter() {
                    if let ContentBlock::ToolCall {
                        name, arguments, ..
                    } = b
                    {
                        if ex.tools.len() < 20 {
                            ex.tools.push(signals::label(name, arguments));
                        }
                        // What the user asked to read is the session's reference material:
                        // its exchange stays (on the shared sessions, the user came back to
                        // such files up to 400 requests later).
                        if signals::requested(&prompt_lower, name, arguments) {
                            ok = false;
                        }
                    }
                }
            }
        }
        ok.then_some(ex)
    }

    /// What the classifier is shown of it: the prompt, the calls, the answer.
    fn text(&self) -> String {
        let mut text = String::new();
        text.push_str("prompt: ");
        text.push_str(run::clip_head(&self.prompt_text, 600));
        if !self.tools.is_empty() {
            text.push_str("\ntools: ");
            text.push_str(&self.tools.join("; "));
        }
        if !self.last_text.is_empty() {
            text.push_str("\nanswer: ");
            text.push_str(run::clip_head(&self.last_text, 800));
        }
        text
    }
}

/// The questions of the plan's items, in batches.
fn ask(plan: &mut Plan, cfg: &Config) {
    let run_end = plan.phase == Phase::RunEnd;
    let mut wholes: Vec<usize> = Vec::new();
    for (i, item) in plan.items.iter().enumerate() {
        match item.kind {
            ItemKind::Image => {}
            ItemKind::Small | ItemKind::Exchange => wholes.push(i),
            ItemKind::Large => {
                for (s, seg) in segments(
                    &item.chunks,
                    cfg.max_segment_chars,
                    cfg.max_chunks_per_segment,
                )
                .into_iter()
                .enumerate()
                {
                    let mut batch = Batch {
                        questions: Vec::new(),
                        chars: item.chunks[seg.clone()].iter().map(|c| c.chars()).sum(),
                    };
                    let mut push = |q: Question| {
                        batch.questions.push(plan.questions.len());
                        plan.questions.push(q);
                    };
                    if s == 0 {
                        push(Question {
                            item: i,
                            target: Target::Whole,
                            ask: Ask::YesNo,
                            text: format!(
                                "Is the whole output of {} still needed, as it is, for user_question?",
                                item.label
                            ),
                        });
                    }
                    let mut options: Vec<String> =
                        seg.clone().map(|k| format!("chunk_{}", k + 1)).collect();
                    options.push("whole".to_owned());
                    options.push("none".to_owned());
                    push(Question {
                        item: i,
                        target: Target::Focus {
                            first: seg.start,
                            count: seg.len(),
                        },
                        ask: Ask::Choice(options),
                        text: "Which part of this output matters most for the work: one chunk, the whole output, or none of it?".to_owned(),
                    });
                    for k in seg {
                        let text = if run_end {
                            format!("Does chunk_{} contain anything final_answer relies on, or that a likely follow-up would need?", k + 1)
                        } else {
                            format!("To finish user_question, will the agent still need the lines in chunk_{}? Lines that are out of date or that the agent has already acted on and moved past are not needed.", k + 1)
                        };
                        push(Question {
                            item: i,
                            target: Target::Chunk(k),
                            ask: Ask::YesNo,
                            text,
                        });
                    }
                    plan.batches.push(batch);
                }
            }
        }
    }
    let mut batch = Batch::default();
    for i in wholes {
        let item = &plan.items[i];
        let chars = item.text.len().min(4_000);
        if !batch.questions.is_empty()
            && (batch.chars + chars > cfg.max_segment_chars
                || batch.questions.len() >= cfg.max_chunks_per_segment)
        {
            plan.batches.push(std::mem::take(&mut batch));
        }
        let text = match (item.kind, run_end) {
            (ItemKind::Exchange, _) => "Is this exchange still relevant to the current work (user_question and what the agent is doing for it)? Relevant means the agent may need its details: the same files, task, decisions or facts.".to_owned(),
            (_, true) => "Does this output contain anything that final_answer relies on, or that a likely follow-up would need? An output marked superseded is out of date.".to_owned(),
            (_, false) => "Will the agent still need this output? An output marked superseded is out of date.".to_owned(),
        };
        batch.questions.push(plan.questions.len());
        batch.chars += chars;
        plan.questions.push(Question {
            item: i,
            target: Target::Whole,
            ask: Ask::YesNo,
            text,
        });
    }
    if !batch.questions.is_empty() {
        plan.batches.push(batch);
    }
}

/// Lines of the recalled text of a message before its block `b` (where an output starts).
pub fn base_line(message: &Message, b: usize) -> usize {
    let before = Message::new(
        message.role,
        message.content[..b.min(message.content.len())].to_vec(),
    );
    let text = crate::recall::entry_text(&crate::model::EntryKind::Message(before));
    if text.is_empty() {
        0
    } else {
        text.split('\n').count()
    }
}
