//! Meta-amnesia (the seed's "Mechanism 2 — Meta-amnesia"): the results of
//! read-like tools are judged retain or drop out of band, and a round whose every result is
//! dropped is taken out of the request while it is still the request's tail, so the model
//! never sees it and the cache prefix never moves.
//!
//! **Which results** ([`ReadTools`], data per agent, configurable): Claude Code's `Read`,
//! `Grep`, `Glob`, `LS`; Pi's `read`, `grep`, `find`, `ls`; Codex's reads through its shell
//! tools, and Pi's read-only `bash`, decided by parsing the command ([`shell::is_read_only`]:
//! `cat`, `sed -n`, `rg`, `ls`, `find` without actions, ...; never a command that could write).
//!
//! **Judged once, out of band, never dropped on uncertainty.** A result is judged by the
//! request that first carries it ([`prepare`], [`decide`]): error results, results with
//! images, ctxd's own texts and results under [`Config::min_tokens`] are retained without a
//! question; the others go to the configured classifier (a distillation [`Plan`] of one
//! question per result against the run's question and its earlier steps); a missing, failed or
//! late answer retains. P(needed) below [`DROP_BELOW`] drops. A call identical to one dropped
//! before on the branch (same tool, same arguments) is retained: the model asks again because
//! it needs it, and a second drop would loop. The judgment is a record in the log
//! ([`Record`], an `Event` named [`EVENT`]), read back by later requests and the accounting.
//!
//! **Pruned only as the contiguous tail** ([`tail_round`]): the request's last items must be
//! the round's results (messages of tool results only, all new in this request), just after
//! the assistant messages that called them (tool calls and thinking only: no text the model
//! wrote for the user), and before them an item the model already saw that is not an
//! assistant message (so the pruned request never ends with one: no prefill). Every result of
//! the round must be a drop: a mixed parallel round stays whole, and so does a round with any
//! other tool's result. The pruning is one `ContextEdit` omitting each of the round's entries
//! (whole messages: no thinking-only or empty message is left, no signature touched, no call
//! without its result), so the round stays out of every later request of the branch and the
//! prefix of consecutive requests stays byte-stable. A round the model already saw is never
//! pruned afterwards (its results are no longer new).

mod shell;
#[cfg(test)]
mod tests;

pub use crate::distill::signals::command_of;
pub use shell::{is_read_only, READERS};

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::distill::render::MARKER;
use crate::distill::{
    self, record::blocks_chars, run, signals, Answer, Ask, Batch, Item as JudgedItem,
    ItemKind as JudgedKind, Missing, Phase, Plan, Question, Target,
};
use crate::model::{ContentBlock, EntryId, EntryKind, Role, Session};
use crate::tokens::TokenCounter;
use crate::view::{project_checked, Item, ItemKind};

/// The name of the judgment records' event.
pub const EVENT: &str = "ctxd.amnesia";
/// The record's format version (later versions add fields; older ones still read).
pub const RECORD_VERSION: u32 = 1;
/// The seed's `PI_CTX_AMNESIA_MIN_TOKENS`.
pub const DEFAULT_MIN_TOKENS: u64 = 250;
/// The accepted range of [`Config::min_tokens`] (0: every read is judged, as the seed allows).
pub const MIN_TOKENS_RANGE: std::ops::RangeInclusive<u64> = 0..=10_000_000;
/// The seed's `PI_CTX_AMNESIA_MAX_CHARS`: how much of a result the classifier reads.
pub const DEFAULT_MAX_CHARS: usize = 6_000;
/// A result is dropped when the classifier's P(needed) is below this. Low on purpose: the
/// local classifier gives 0.15 only to a result sharing no term with the task.
pub const DROP_BELOW: f32 = 0.25;
/// Characters of a call (tool and arguments) a judgment keeps, for the repeat rule.
const CALL_CHARS: usize = 600;

/// One agent's read-like tools: `tools` whose every result is a read, and `shell` tools whose
/// result is a read when the command only reads ([`is_read_only`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentReads {
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub shell: Vec<String>,
}

/// The read-like tools per agent (the gateway's agent names); agents without a row use
/// `other`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadTools {
    pub agents: BTreeMap<String, AgentReads>,
    pub other: AgentReads,
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

impl Default for ReadTools {
    fn default() -> Self {
        let mut agents = BTreeMap::new();
        agents.insert(
            "claude-code".to_owned(),
            AgentReads {
                tools: names(&["Read", "Grep", "Glob", "LS"]),
                shell: Vec::new(),
            },
        );
        // Codex reads through its shell tools (and the read tools newer builds offer).
        agents.insert(
            "codex".to_owned(),
            AgentReads {
                tools: names(&["read_file", "list_dir", "grep_files"]),
                shell: names(&["shell", "exec_command", "local_shell", "container.exec"]),
            },
        );
        agents.insert(
            "pi".to_owned(),
            AgentReads {
                tools: names(&["read", "grep", "find", "ls"]),
                shell: names(&["bash"]),
            },
        );
        Self {
            agents,
            other: AgentReads {
                tools: names(&["Read", "Grep", "Glob", "LS", "read", "grep", "find", "ls"]),
                shell: names(&["bash", "Bash", "shell", "exec_command"]),
            },
        }
    }
}

impl ReadTools {
    /// The row of `agent` (`None`: an agent ctxd does not know).
    pub fn row(&self, agent: Option<&str>) -> &AgentReads {
        agent
            .and_then(|a| self.agents.get(a))
            .unwrap_or(&self.other)
    }

    /// Whether a call of `tool` with `arguments` only reads, for `agent`.
    pub fn is_read(&self, agent: Option<&str>, tool: &str, arguments: &serde_json::Value) -> bool {
        let row = self.row(agent);
        row.tools.iter().any(|t| t == tool)
            || (row.shell.iter().any(|t| t == tool)
                && command_of(arguments).is_some_and(|c| is_read_only(&c)))
    }
}

/// The mechanism's settings (`--no-amnesia`, `--amnesia-min-tokens`, `[amnesia-read-tools]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Results under this many tokens are retained unjudged.
    pub min_tokens: u64,
    /// Characters of a result the classifier reads (head and tail beyond).
    pub max_chars: usize,
    pub read_tools: ReadTools,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            min_tokens: DEFAULT_MIN_TOKENS,
            max_chars: DEFAULT_MAX_CHARS,
            read_tools: ReadTools::default(),
        }
    }
}

/// A judgment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Decision {
    Retain,
    Drop,
}

/// One result judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Judgment {
    pub call_id: String,
    pub tool: String,
    /// `Read src/x.rs`.
    pub label: String,
    pub decision: Decision,
    /// Why: `classifier` (with `p_needed`), or retained unasked: `error`, `image`, `ctxd`,
    /// `small`, `repeated`, `mixed-round` (another result of the round stays), or without an
    /// answer: `no-answer`, `error`, `timeout`.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p_needed: Option<f32>,
    /// The result's tokens by the injected counter (0 when not counted).
    pub tokens: u64,
    /// The call, tool and arguments (clipped): a later identical call is not dropped again.
    pub call: String,
}

/// The record of one round's judgments (an [`EntryKind::Event`] named [`EVENT`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    /// The classifier asked (`local`, `openai:MODEL`), or `none` when nothing was asked.
    pub classifier: String,
    pub judgments: Vec<Judgment>,
    /// The entries the round's pruning omits (empty: the round is kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<EntryId>,
    /// Tokens the pruning removed from the request (four bytes a token, as the accounting).
    #[serde(default)]
    pub removed_tokens: u64,
}

impl Record {
    pub fn to_entry(&self) -> EntryKind {
        EntryKind::event_of(EVENT, self)
    }

    pub fn from_entry(kind: &EntryKind) -> Option<Record> {
        kind.event_detail(EVENT)
    }
}

/// Whether `kind` is an amnesia record (a cheap test on the name).
pub fn is_record(kind: &EntryKind) -> bool {
    matches!(kind, EntryKind::Event { name, .. } if name == EVENT)
}

/// The entries amnesia pruned on `branch` (positions), by id: what the accounting charges to
/// `amnesia`.
pub fn pruned_on(session: &Session, branch: &[usize]) -> HashSet<EntryId> {
    branch
        .iter()
        .filter_map(|&p| session.entries.get(p))
        .filter(|e| is_record(&e.kind))
        .filter_map(|e| Record::from_entry(&e.kind))
        .flat_map(|r| r.pruned)
        .collect()
}

fn shown<'a>(item: &Item<'a>) -> Option<(Role, &'a [ContentBlock])> {
    match &item.kind {
        ItemKind::Message {
            message, content, ..
        } => Some((message.role, content)),
        ItemKind::Summary { .. } => None,
    }
}

fn is_results(item: &Item<'_>) -> bool {
    shown(item).is_some_and(|(role, c)| {
        role != Role::Assistant
            && !c.is_empty()
            && c.iter()
                .all(|b| matches!(b, ContentBlock::ToolResult { .. }))
    })
}

fn is_calls_only(item: &Item<'_>) -> bool {
    shown(item).is_some_and(|(role, c)| {
        role == Role::Assistant
            && !c.is_empty()
            && c.iter().all(|b| match b {
                ContentBlock::ToolCall { .. } | ContentBlock::Thinking { .. } => true,
                ContentBlock::Text { text } => text.trim().is_empty(),
                _ => false,
            })
    })
}

/// The round a request ends in, as a range of `items` (the projection), when it could be
/// pruned: results only at the end, every one new (`is_new` of its entry position), just after
/// assistant messages of tool calls and thinking only whose calls they answer exactly, and
/// before those an item the model already saw that is not an assistant message.
pub fn tail_round(items: &[Item<'_>], is_new: impl Fn(usize) -> bool) -> Option<Range<usize>> {
    let n = items.len();
    let mut i = n;
    while i > 0 && is_results(&items[i - 1]) {
        i -= 1;
    }
    let results = i;
    if results == n || !items[results..].iter().all(|it| is_new(it.entry)) {
        return None;
    }
    while i > 0 && is_calls_only(&items[i - 1]) {
        i -= 1;
    }
    let start = i;
    if start == results || start == 0 {
        return None;
    }
    let before = &items[start - 1];
    if is_new(before.entry) || shown(before).is_some_and(|(r, _)| r == Role::Assistant) {
        return None;
    }
    let ids = |range: Range<usize>, calls: bool| {
        let mut v: Vec<&str> = items[range]
            .iter()
            .filter_map(shown)
            .flat_map(|(_, c)| c.iter())
            .filter_map(|b| match b {
                ContentBlock::ToolCall { id, .. } if calls => Some(id.as_str()),
                ContentBlock::ToolResult { call_id, .. } if !calls => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v
    };
    let calls = ids(start..results, true);
    (!calls.is_empty() && calls == ids(results..n, false)).then_some(start..n)
}

/// A round being judged, between [`prepare`] and [`decide`].
#[derive(Clone, Debug)]
pub struct Prepared {
    pub judgments: Vec<Judgment>,
    /// The round's entries (positions), in order, and the tokens each shows.
    pub entries: Vec<(usize, EntryId, u64)>,
    /// The classifier's questions for the results still open (`None`: nothing to ask, the
    /// round is kept).
    pub plan: Option<Plan>,
    /// For each item of `plan`, its judgment.
    asked: Vec<usize>,
}

fn text_of(content: &[ContentBlock]) -> Option<String> {
    let mut out = String::new();
    for b in content {
        match b {
            ContentBlock::Text { text } => {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
            _ => return None,
        }
    }
    Some(out)
}

fn call_key(name: &str, arguments: &serde_json::Value) -> String {
    let s = format!("{name} {arguments}");
    run::clip_head(&s, CALL_CHARS).to_owned()
}

/// The calls amnesia dropped before on `branch`.
fn dropped_calls(session: &Session, branch: &[usize]) -> HashSet<String> {
    branch
        .iter()
        .filter_map(|&p| session.entries.get(p))
        .filter(|e| is_record(&e.kind))
        .filter_map(|e| Record::from_entry(&e.kind))
        .filter(|r| !r.pruned.is_empty())
        .flat_map(|r| r.judgments.into_iter().map(|j| j.call))
        .collect()
}

/// Step 1: the round the request ends in, when its results are new (`new`: positions of the
/// request's new entries) and read-like, with what is decided without a classifier and the
/// questions for the rest. `None`: no read-like result to judge.
pub fn prepare(
    session: &Session,
    branch: &[usize],
    new: &[usize],
    agent: Option<&str>,
    cfg: &Config,
    counter: &dyn TokenCounter,
) -> Option<Prepared> {
    // A quick look first: most requests do not end in a read's result.
    let last = *new.last()?;
    let m = session.entries.get(last)?.kind.as_message()?;
    if m.role == Role::Assistant
        || !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
    {
        return None;
    }
    let projection = project_checked(session, branch).ok()?;
    let items = &projection.items;
    let fresh: HashSet<usize> = new.iter().copied().collect();
    let round = tail_round(items, |p| fresh.contains(&p))?;
    let mut calls: BTreeMap<&str, (&str, &serde_json::Value)> = BTreeMap::new();
    let mut entries = Vec::new();
    for it in &items[round.clone()] {
        let (role, content) = shown(it)?;
        let tokens = crate::savings::tokens_of_bytes(blocks_chars(content));
        entries.push((it.entry, session.entries[it.entry].id.clone(), tokens));
        if role == Role::Assistant {
            for b in content {
                if let ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } = b
                {
                    calls.insert(id.as_str(), (name.as_str(), arguments));
                }
            }
        }
    }
    let mut judgments = Vec::new();
    let mut open: Vec<(usize, usize, usize, String)> = Vec::new(); // (judgment, entry, block, text)
    let mut other_tool = false;
    let mut dropped: Option<HashSet<String>> = None;
    for it in &items[round.clone()] {
        let Some((Role::User | Role::Tool, content)) = shown(it) else {
            continue;
        };
        for (b, block) in content.iter().enumerate() {
            let ContentBlock::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } = block
            else {
                continue;
            };
            let Some(&(name, arguments)) = calls.get(call_id.as_str()) else {
                other_tool = true;
                continue;
            };
            if !cfg.read_tools.is_read(agent, name, arguments) {
                other_tool = true;
                continue;
            }
            let mut j = Judgment {
                call_id: call_id.clone(),
                tool: name.to_owned(),
                label: signals::label(name, arguments),
                decision: Decision::Retain,
                reason: String::new(),
                p_needed: None,
                tokens: 0,
                call: call_key(name, arguments),
            };
            let text = text_of(content);
            j.reason = match &text {
                _ if *is_error => "error",
                None => "image",
                Some(t) if t.trim_start().starts_with(MARKER) => "ctxd",
                Some(t) if (t.len() as u64) < cfg.min_tokens => "small",
                Some(t) => {
                    j.tokens = counter.count(t);
                    let again = dropped
                        .get_or_insert_with(|| dropped_calls(session, branch))
                        .contains(&j.call);
                    if j.tokens < cfg.min_tokens {
                        "small"
                    } else if again {
                        "repeated"
                    } else {
                        ""
                    }
                }
            }
            .to_owned();
            if j.reason.is_empty() {
                open.push((judgments.len(), it.entry, b, text.unwrap_or_default()));
            }
            judgments.push(j);
        }
    }
    if judgments.is_empty() {
        return None;
    }
    if other_tool || open.len() < judgments.len() {
        // The round stays whole: no question is worth asking.
        for (k, ..) in open {
            judgments[k].reason = "mixed-round".to_owned();
        }
        return Some(Prepared {
            judgments,
            entries,
            plan: None,
            asked: Vec::new(),
        });
    }
    let run = run::collect(&items[..round.start]);
    let mut plan = Plan {
        phase: Phase::MidRun,
        run,
        items: Vec::new(),
        questions: Vec::new(),
        batches: Vec::new(),
        pinned: Vec::new(),
        costs: crate::cache::Costs::default(),
    };
    let mut batch = Batch::default();
    let mut asked = Vec::new();
    for (k, entry, block, text) in open {
        let j = &judgments[k];
        let text = clip_middle(&text, cfg.max_chars);
        batch.questions.push(plan.questions.len());
        batch.chars += text.len();
        plan.questions.push(Question {
            item: plan.items.len(),
            target: Target::Whole,
            ask: Ask::YesNo,
            text: format!(
                "The agent just called {} and this output is about to enter its context. Will \
                 it need this output, now or later, for user_question? Answer No only if the \
                 output is irrelevant to user_question.",
                j.label
            ),
        });
        plan.items.push(JudgedItem {
            kind: JudgedKind::Small,
            entry,
            entry_id: session.entries[entry].id.clone(),
            block,
            tool: j.tool.clone(),
            label: j.label.clone(),
            before_chars: text.len(),
            text,
            later_from: 0,
            signals: distill::Signals::default(),
            chunks: Vec::new(),
            forced: Vec::new(),
            quoted: false,
            omit: Vec::new(),
            messages: 1,
        });
        asked.push(k);
    }
    plan.batches.push(batch);
    Some(Prepared {
        judgments,
        entries,
        plan: Some(plan),
        asked,
    })
}

/// The head and tail of `text` within `max` bytes (the classifier reads both ends).
fn clip_middle(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let head = run::clip_head(text, max * 2 / 3);
    let tail = run::clip_tail(text, max / 3);
    format!(
        "{head}\n[… {} characters left out …]\n{tail}",
        text.len() - head.len() - tail.len()
    )
}

/// Step 2 is the classifier's (the engine asks `prepared.plan`). Step 3: the answers (one per
/// question of the plan, in order; none when nothing was asked) turned into the record and,
/// when every result of the round is a drop, the edits omitting the round. The record comes
/// first; the drafts are appended in order after the request's last element.
pub fn decide(
    mut prepared: Prepared,
    answers: &[Result<Answer, Missing>],
    classifier: &str,
) -> (Record, Vec<EntryKind>) {
    let asked_any = prepared.plan.is_some();
    if let Some(plan) = &prepared.plan {
        for (q, question) in plan.questions.iter().enumerate() {
            let Some(&k) = prepared.asked.get(question.item) else {
                continue;
            };
            let j = &mut prepared.judgments[k];
            match answers.get(q) {
                Some(Ok(Answer::Yes(p))) => {
                    j.p_needed = Some(*p);
                    j.reason = "classifier".to_owned();
                    if *p < DROP_BELOW {
                        j.decision = Decision::Drop;
                    }
                }
                Some(Ok(Answer::Choice(_))) => j.reason = "no-answer".to_owned(),
                Some(Err(m)) => j.reason = m.as_str().to_owned(),
                None => j.reason = Missing::NoAnswer.as_str().to_owned(),
            }
        }
    }
    let prune = !prepared.judgments.is_empty()
        && prepared
            .judgments
            .iter()
            .all(|j| j.decision == Decision::Drop);
    let mut record = Record {
        version: RECORD_VERSION,
        classifier: if asked_any { classifier } else { "none" }.to_owned(),
        judgments: prepared.judgments,
        pruned: Vec::new(),
        removed_tokens: 0,
    };
    let mut edits = Vec::new();
    if prune {
        for (_, id, tokens) in &prepared.entries {
            record.pruned.push(id.clone());
            record.removed_tokens += tokens;
            edits.push(EntryKind::ContextEdit {
                target: id.clone(),
                replacement: None,
            });
        }
    }
    let mut drafts = vec![record.to_entry()];
    drafts.extend(edits);
    (record, drafts)
}
