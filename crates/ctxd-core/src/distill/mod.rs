//! Distillation: what a finished run (or a long run, mid-way) no longer needs of its tool
//! outputs, decided per chunk, and the edits that take it out of the model's view.
//!
//! The pass is split so that only the middle step may be asynchronous, and lives outside the
//! core:
//!
//! 1. [`plan`] reads the branch (the projection the model sees) and lays out the **items** of a
//!    pass: large outputs of the run (chunked, grep-aware), small outputs, old exchanges and old
//!    images, each with its signals (superseded, error, age, quoted by a later edit, pinned);
//! 2. [`Plan::questions`] / [`Plan::batches`] are the yes/no and choice **questions** a
//!    classifier answers with probabilities (the engine's runner asks them, with a time budget
//!    and a concurrency limit; [`local`] is the default classifier, pure and fast);
//! 3. [`decide`] turns the **answers** (missing ones keep) into per-item **decisions** under the
//!    seed's thresholds;
//! 4. [`Decisions::drafts`] gives the entries to append: one [`EntryKind::ContextEdit`] per
//!    changed entry and one record of the pass ([`record::Record`], an `Event` named
//!    [`record::EVENT`], so stores written before this module stay readable).
//!
//! Nothing here keeps state between passes: what was judged before (the mid-run memo, the
//! exchanges judged in this run) is read back from the records on the branch.
//!
//! Module map: [`run`] (run span, question, steps), [`chunk`] (chunking, segments),
//! [`signals`] (superseded, quoted text, pinned), [`local`] (the local classifier's rules),
//! [`render`] (replacement texts), [`record`] (records and savings).

pub mod chunk;
mod decide;
pub mod local;
mod planner;
pub mod record;
pub mod render;
pub mod run;
pub mod signals;

#[cfg(test)]
mod tests;

pub use decide::{decide, Decisions, Outcome};
pub use planner::{base_line, plan, result_text};

use crate::model::EntryId;

/// The thresholds and limits of a pass (the seed's defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Outputs from this many characters are chunked and judged per chunk.
    pub min_result_chars: usize,
    /// Outputs from this many characters (below `min_result_chars`) are judged whole.
    pub small_min_chars: usize,
    /// A chunk is kept when P(needed) reaches this.
    pub chunk_keep: f32,
    /// A whole output goes only when "none" wins with at least this and no chunk is kept.
    pub none_threshold: f32,
    /// Keeping more than this share of an output's characters is not worth an edit.
    pub max_keep_ratio: f32,
    /// A small output is kept when P(needed) reaches this.
    pub small_keep: f32,
    /// An old exchange is omitted only when P(relevant) is below this.
    pub exchange_omit: f32,
    /// The exchanges just before the run's prompt that are never judged.
    pub keep_recent_exchanges: usize,
    /// An exchange needs this much editable content to be judged.
    pub exchange_min_chars: usize,
    /// A pass's exchange omissions must save at least this many characters together.
    pub exchange_min_saving: usize,
    /// Images in tool results this many assistant turns old are replaced by a stub.
    pub image_keep_turns: usize,
    /// A classifier request (segment) holds at most this many characters of chunks...
    pub max_segment_chars: usize,
    /// ...and at most this many chunks (or whole items).
    pub max_chunks_per_segment: usize,
    /// Mid-run: outputs whose call is at least this many turns old are eligible.
    pub mid_run_min_age_turns: usize,
    /// Mid-run: a checkpoint needs at least this many characters of eligible outputs.
    pub mid_run_batch_chars: usize,
    /// Whose prompt cache the session's requests go to: the break-even rule's factor and what
    /// an edit rewrites ([`crate::cache`]).
    pub provider: crate::cache::Provider,
    /// Tools whose outputs are never pruned (a user's exclusions).
    pub exclude_tools: Vec<String>,
    /// With a store session id, `recall` notes name history item ids (`i_…`); without one (an
    /// eval replay), the entry ids.
    pub store_session: Option<i64>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            min_result_chars: 4_000,
            small_min_chars: 400,
            chunk_keep: 0.6,
            none_threshold: 0.5,
            max_keep_ratio: 0.6,
            small_keep: 0.45,
            exchange_omit: 0.2,
            keep_recent_exchanges: 2,
            exchange_min_chars: 2_000,
            exchange_min_saving: 8_000,
            image_keep_turns: 3,
            max_segment_chars: 32_000,
            max_chunks_per_segment: 40,
            mid_run_min_age_turns: 4,
            mid_run_batch_chars: 60_000,
            provider: crate::cache::Provider::Anthropic,
            exclude_tools: Vec::new(),
            store_session: None,
        }
    }
}

impl Config {
    /// The id a `recall` note names for an entry.
    pub fn recall_id(&self, entry: &EntryId) -> String {
        match self.store_session {
            Some(s) => crate::history::item_id(crate::history::item_key(s, entry.as_str())),
            None => entry.0.clone(),
        }
    }
}

/// When a pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// The run just ended with a final answer.
    RunEnd,
    /// A checkpoint inside a long run (after a turn whose tool calls are all answered).
    MidRun,
}

/// What kind of thing an item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemKind {
    /// A tool output of at least `min_result_chars`: chunked.
    Large,
    /// A tool output of `small_min_chars` up to `min_result_chars`: judged whole.
    Small,
    /// An old exchange (a prompt and everything up to the next prompt): judged whole.
    Exchange,
    /// A tool result's images, old enough to be replaced by a stub (no question).
    Image,
}

/// Why a pass reads an item, beside its text: what the classifier weighs with the citations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Signals {
    /// A later call made this output out of date (what and when, in words).
    pub superseded: Option<String>,
    /// Superseded only in part: a later edit replaced some text of the file this read shows
    /// (the rest of the read is still the file's content).
    pub partly: bool,
    /// The tool reported an error.
    pub is_error: bool,
    /// The run's question names what this output reads ("read theme.md in full"): the user
    /// asked for it, so it is reference material for the work, not a step on the way.
    pub requested: bool,
    /// Assistant turns since the call (0: the call of the last turn).
    pub age_turns: usize,
}

/// One thing a pass judges.
#[derive(Clone, Debug)]
pub struct Item {
    pub kind: ItemKind,
    /// Position (in `session.entries`) of the entry edited: the tool result's message, or an
    /// exchange's prompt.
    pub entry: usize,
    pub entry_id: EntryId,
    /// The tool result's block in the message (tool outputs and images).
    pub block: usize,
    /// The tool's name (`exchange` for exchanges).
    pub tool: String,
    /// A short label: the tool and its main argument (`bash \`cargo test\``).
    pub label: String,
    /// The text judged: the output, or for an exchange its prompt, tools and last answer.
    pub text: String,
    /// Characters the model sees of it now (an exchange: all its editable content).
    pub before_chars: usize,
    /// The first step of the run's [`run::Step`]s after this output.
    pub later_from: usize,
    pub signals: Signals,
    /// Large outputs: the chunks, and which must stay (a later edit quotes them).
    pub chunks: Vec<chunk::Chunk>,
    pub forced: Vec<bool>,
    /// Small outputs: a later edit quotes the text.
    pub quoted: bool,
    /// Exchanges: the entries omitted with it (every entry after the prompt).
    pub omit: Vec<usize>,
    /// Exchanges: messages in it (prompt included), and its size in tokens (chars / 4).
    pub messages: usize,
}

/// What a question asks.
#[derive(Clone, Debug, PartialEq)]
pub enum Ask {
    /// Answered with P(yes).
    YesNo,
    /// Answered with a probability per option.
    Choice(Vec<String>),
}

/// What a question is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The whole item (`keep_whole` of a large output; the one question of a whole item).
    Whole,
    /// One chunk of a large output.
    Chunk(usize),
    /// The focus choice of a large output's segment: one of its chunks, `whole` or `none`.
    Focus { first: usize, count: usize },
}

/// One question to the classifier.
#[derive(Clone, Debug)]
pub struct Question {
    /// Index in [`Plan::items`].
    pub item: usize,
    pub target: Target,
    pub ask: Ask,
    /// The question in words (what a model classifier is asked).
    pub text: String,
}

/// Questions asked in one classifier request (a segment of a large output, or a group of
/// whole items).
#[derive(Clone, Debug, Default)]
pub struct Batch {
    /// Indices in [`Plan::questions`].
    pub questions: Vec<usize>,
    /// Characters of item text the request carries.
    pub chars: usize,
}

/// An answer to one question.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Yes(f32),
    Choice(Vec<f32>),
}

/// Why a question has no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    NoAnswer,
    Error,
    Timeout,
}

impl Missing {
    pub fn as_str(self) -> &'static str {
        match self {
            Missing::NoAnswer => "no-answer",
            Missing::Error => "error",
            Missing::Timeout => "timeout",
        }
    }
}

/// A pass laid out: the run's context, the items, the questions and their batches.
#[derive(Clone, Debug)]
pub struct Plan {
    pub phase: Phase,
    pub run: run::Run,
    pub items: Vec<Item>,
    pub questions: Vec<Question>,
    pub batches: Vec<Batch>,
    /// Items the plan judged without a classifier (pinned), as (item label, entry, reason):
    /// recorded as kept.
    pub pinned: Vec<record::ItemResult>,
    /// What edits of the projection cost in the provider's cache (run end: the old items'
    /// break-even in [`decide`]).
    pub costs: crate::cache::Costs,
}

impl Plan {
    /// Nothing to judge and nothing decided without a classifier.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.pinned.is_empty()
    }
}
