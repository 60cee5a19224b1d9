//! The record of a pass, and savings read back from the log.
//!
//! A record is an [`EntryKind::Event`] named [`EVENT`] whose `detail` is a [`Record`] (versioned
//! by `v`). An event, not a new entry kind, so every store written before distillation existed
//! reads the same, and a build that does not know records still loads them (as events).
//!
//! Savings are derived, never stored as state: **this window** from the projection (each edited
//! item: what its entry shows raw minus what it shows now; each omitted exchange: its entries'
//! raw size minus its stub); **lifetime** from the records on the branch (their `saved_chars`,
//! which compactions and resets do not undo).

use serde::{Deserialize, Serialize};

use super::{ItemKind, Phase};
use crate::model::{ContentBlock, EntryKind, Session};

/// The event name of a pass's record.
pub const EVENT: &str = "ctxd.distill";

/// What became of an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Kept chunks verbatim, the rest as omission lines.
    Distilled,
    /// Replaced by a one-line stub (the images: by a stub and the text).
    Removed,
    /// An exchange omitted whole (its prompt shows the stub).
    Omitted,
    Kept,
}

/// Classifier usage of a pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub requests: u64,
    pub input_tokens: u64,
    pub ms: u64,
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub cost_usd: f64,
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

impl Usage {
    pub fn add(&mut self, o: &Usage) {
        self.requests += o.requests;
        self.input_tokens += o.input_tokens;
        self.ms += o.ms;
        self.cost_usd += o.cost_usd;
    }
}

/// One item's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemResult {
    pub kind: ItemKind,
    /// The entry edited (for an exchange, its prompt).
    pub entry_id: String,
    pub tool: String,
    pub label: String,
    pub outcome: Outcome,
    /// `chunks`, `none-needed`, `not-worth`, `all-chunks`, `whole-needed`, `whole-chosen`,
    /// `needed`, `not-needed`, `superseded`, `relevant`, `unrelated`, `deferred`, `pinned:…`,
    /// `quoted`, `age`, or why there was no answer (`no-answer`, `error`, `timeout`); several
    /// joined with commas.
    pub reason: String,
    pub before_chars: usize,
    pub after_chars: usize,
    /// Per segment (or whole item): the classifier's probabilities and the result, e.g.
    /// `kw.15 focus=chunk_4:.52 keep 9/29`, or `p.06`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<String>,
    /// An omitted exchange: the ids of the entries omitted with its prompt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<String>,
}

/// The record of one pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Format version: 1.
    pub v: u32,
    pub phase: Phase,
    /// The classifier's name.
    pub classifier: String,
    /// Characters this pass's edits took out of the model's view.
    pub saved_chars: usize,
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
    pub results: Vec<ItemResult>,
}

impl Record {
    pub fn to_entry(&self) -> EntryKind {
        EntryKind::event_of(EVENT, self)
    }

    /// The record an entry holds, if it is one (of a version this build reads).
    pub fn from_entry(kind: &EntryKind) -> Option<Record> {
        kind.event_detail::<Record>(EVENT).filter(|r| r.v == 1)
    }
}

/// Savings of a branch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Savings {
    /// Characters the current projection does not show because of ctxd's edits.
    pub window_chars: usize,
    /// Items the current projection shows edited by ctxd, and exchanges omitted.
    pub window_items: usize,
    /// Characters all passes on the branch saved.
    pub lifetime_chars: usize,
    /// Passes on the branch and their classifier usage.
    pub passes: usize,
    pub usage: Usage,
}

/// The characters a model sees of blocks: text, tool calls' arguments, results' text (images
/// as 4 characters per token, the size rule of [`crate::tokens::image_tokens`]).
pub fn blocks_chars(blocks: &[ContentBlock]) -> usize {
    blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => text.len(),
            ContentBlock::Thinking { thinking, .. } => thinking.len(),
            ContentBlock::Image(img) => {
                usize::try_from(crate::tokens::image_tokens(img) * 4).unwrap_or(0)
            }
            ContentBlock::ToolCall { arguments, .. } => arguments.to_string().len(),
            ContentBlock::ToolResult { content, .. } => blocks_chars(content),
        })
        .sum()
}

/// Some text of `blocks` (or of their tool results) starts with ctxd's marker: ctxd's own edit.
pub(crate) fn starts_with_marker(blocks: &[ContentBlock]) -> bool {
    blocks.iter().any(|b| match b {
        ContentBlock::Text { text } => text.starts_with(super::render::MARKER),
        ContentBlock::ToolResult { content, .. } => starts_with_marker(content),
        _ => false,
    })
}

/// Savings of the branch `branch` (positions, root first).
pub fn savings(session: &Session, branch: &[usize]) -> Savings {
    let mut s = Savings::default();
    for &p in branch {
        if let Some(r) = session
            .entries
            .get(p)
            .and_then(|e| Record::from_entry(&e.kind))
        {
            s.passes += 1;
            s.lifetime_chars += r.saved_chars;
            s.usage.add(&r.usage);
        }
    }
    let projector = crate::view::project(session, branch);
    let shown: rustc_hash::FxHashSet<usize> = projector.items.iter().map(|it| it.entry).collect();
    for item in &projector.items {
        if let crate::view::ItemKind::Message {
            message,
            content,
            edited: true,
        } = &item.kind
        {
            if !starts_with_marker(content) {
                continue;
            }
            s.window_items += 1;
            let raw = blocks_chars(&message.content);
            let now = blocks_chars(content);
            s.window_chars += raw.saturating_sub(now);
            if super::run::is_prompt(message) {
                // An omitted exchange's stub: add what its omitted entries showed.
                for q in crate::recall::omitted_exchange(session, branch, item.entry) {
                    if shown.contains(&q) {
                        continue;
                    }
                    if let Some(EntryKind::Message(m)) = session.entries.get(q).map(|e| &e.kind) {
                        s.window_chars += blocks_chars(&m.content);
                    }
                }
            }
        }
    }
    s
}
