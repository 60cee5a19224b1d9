//! One forward walk of the branch: the projection, each live item's tokens, turns and
//! compactions. Every item is counted once, when it appears (or is edited). At the end the
//! projection's pairing rule leaves out calls without results and results without calls, as
//! the gateway would, so the composition counts what the model is sent.

use std::collections::HashMap;

use crate::model::{ContentBlock, Entry, EntryKind, Message, Role, Session, Usage};
use crate::tokens::{tool_def_tokens, TokenCounter};
use crate::view::{unpaired, Change, Projector};

use super::compose::{count_item, ItemCount};

/// A model response on the branch: the turn starts at its first assistant entry.
#[derive(Clone, Debug)]
pub(crate) struct Turn {
    pub turn: usize,
    /// Position in `session.entries` of the turn's first entry.
    pub entry: usize,
    /// Index in the branch of that entry.
    pub step: usize,
    /// Estimated size of the prompt the turn was answered on.
    pub estimate: u64,
    /// The prompt size the provider reported for the turn.
    pub provider: Option<u64>,
    pub model: Option<String>,
}

#[derive(Clone, Debug)]
pub(crate) struct CompactionStat {
    pub entry: usize,
    pub before: u64,
    pub after: u64,
}

pub(crate) struct Walk<'a> {
    pub projector: Projector<'a>,
    /// Tokens of each live item, parallel to `projector.items`.
    pub live: Vec<ItemCount<'a>>,
    pub system_tokens: u64,
    pub tools_tokens: Vec<(&'a str, u64)>,
    pub turns: Vec<Turn>,
    pub compactions: Vec<CompactionStat>,
    /// Branch index of the last compaction.
    pub last_compaction_step: Option<usize>,
    /// The model in effect where the walk stopped.
    pub model_at_cut: Option<String>,
    /// Items the pairing rule left out at the end: (entry position, tokens).
    pub unpaired: Vec<(usize, u64)>,
}

impl Walk<'_> {
    pub fn total(&self) -> u64 {
        self.system_tokens
            + self.tools_tokens.iter().map(|t| t.1).sum::<u64>()
            + self.live.iter().map(|c| c.total).sum::<u64>()
    }

    pub fn turn_model(&self, turn: usize) -> Option<String> {
        self.turns.get(turn.checked_sub(1)?)?.model.clone()
    }
}

/// Walk `branch`. With `stop_at_turn = Some(n)`, stop just before turn `n`'s first entry: the
/// state is then the prompt that turn was answered on.
pub(crate) fn walk<'a>(
    session: &'a Session,
    branch: &[usize],
    counter: &dyn TokenCounter,
    stop_at_turn: Option<usize>,
) -> Walk<'a> {
    let mut walker = Walker {
        w: Walk {
            projector: Projector::new(session),
            live: Vec::new(),
            system_tokens: 0,
            tools_tokens: Vec::new(),
            turns: Vec::new(),
            compactions: Vec::new(),
            last_compaction_step: None,
            model_at_cut: session.meta.model.clone(),
            unpaired: Vec::new(),
        },
        counter,
        tool_names: HashMap::new(),
        items_total: 0,
        prev_assistant: None,
    };
    for (step, &pos) in branch.iter().enumerate() {
        let Some(entry) = session.entries.get(pos) else {
            continue;
        };
        if !walker.note_entry(entry, step, pos, stop_at_turn) {
            break;
        }
        walker.project(step, pos);
    }
    let mut w = walker.w;
    leave_out_unpaired(&mut w);
    w
}

/// The walk under way.
struct Walker<'a, 'c> {
    w: Walk<'a>,
    counter: &'c dyn TokenCounter,
    /// A call's id → its tool's name.
    tool_names: HashMap<&'a str, &'a str>,
    /// Tokens of the live items.
    items_total: u64,
    /// `Some(response id)` while the previous message was the assistant's.
    prev_assistant: Option<Option<&'a str>>,
}

impl<'a> Walker<'a, '_> {
    /// Tokens of the system prompt and the tool definitions.
    fn fixed(&self) -> u64 {
        self.w.system_tokens + self.w.tools_tokens.iter().map(|t| t.1).sum::<u64>()
    }

    /// What the entry at branch index `step` (position `pos`) says of turns, models and
    /// provider usage; `false` at the first entry of turn `stop_at_turn`.
    fn note_entry(
        &mut self,
        entry: &'a Entry,
        step: usize,
        pos: usize,
        stop_at_turn: Option<usize>,
    ) -> bool {
        let mut usage: Option<&Usage> = None;
        match &entry.kind {
            EntryKind::Message(m) => {
                if m.role == Role::Assistant {
                    if !self.note_assistant(m, step, pos, stop_at_turn) {
                        return false;
                    }
                } else {
                    self.prev_assistant = None;
                }
                usage = m.usage.as_ref();
            }
            EntryKind::Usage { usage: u } => usage = Some(u),
            EntryKind::ModelChange { model, .. } => self.w.model_at_cut = Some(model.clone()),
            _ => {}
        }
        if let (Some(u), Some(turn)) = (usage, self.w.turns.last_mut()) {
            if turn.provider.is_none() && u.prompt_tokens() > 0 {
                turn.provider = Some(u.prompt_tokens());
            }
        }
        true
    }

    /// An assistant message: a new turn when it starts a response, its model and its calls'
    /// tools noted; `false` when the turn is the one to stop before.
    fn note_assistant(
        &mut self,
        m: &'a Message,
        step: usize,
        pos: usize,
        stop_at_turn: Option<usize>,
    ) -> bool {
        let rid = m.response_id.as_deref();
        let new_turn = match self.prev_assistant {
            None => true,
            Some(prev) => prev.is_some() && rid.is_some() && prev != rid,
        };
        if new_turn {
            let turn = self.w.turns.len() + 1;
            if stop_at_turn == Some(turn) {
                return false;
            }
            let estimate = self.fixed() + self.items_total;
            self.w.turns.push(Turn {
                turn,
                entry: pos,
                step,
                estimate,
                provider: None,
                model: m.model.clone().or_else(|| self.w.model_at_cut.clone()),
            });
        }
        if let Some(model) = &m.model {
            self.w.model_at_cut = Some(model.clone());
        }
        self.prev_assistant = Some(rid);
        for b in &m.content {
            if let ContentBlock::ToolCall { id, name, .. } = b {
                self.tool_names.insert(id, name);
            }
        }
        true
    }

    /// The projection's step over the entry at position `pos`, counted.
    fn project(&mut self, step: usize, pos: usize) {
        let counter = self.counter;
        let before = self.items_total;
        let change = self.w.projector.step(pos);
        match change {
            Change::None => {}
            Change::System => {
                self.w.system_tokens = self.w.projector.system.map_or(0, |(_, t)| counter.count(t));
            }
            Change::Tools => {
                self.w.tools_tokens = self.w.projector.tools.map_or_else(Vec::new, |(_, tools)| {
                    tools
                        .iter()
                        .map(|t| (t.name.as_str(), tool_def_tokens(counter, t)))
                        .collect()
                });
            }
            Change::Added => {
                if let Some(item) = self.w.projector.items.last() {
                    let c = count_item(item, &self.tool_names, counter);
                    self.items_total += c.total;
                    self.w.live.push(c);
                }
            }
            Change::Edited { index } => {
                if let Some(item) = self.w.projector.items.get(index) {
                    let c = count_item(item, &self.tool_names, counter);
                    self.items_total = self.items_total - self.w.live[index].total + c.total;
                    self.w.live[index] = c;
                }
            }
            Change::Omitted { index } => {
                self.items_total -= self.w.live.remove(index).total;
            }
            Change::Reset | Change::Window => self.recount(step, pos, before, change),
        }
    }

    /// After a compaction or a window boot: the live items recounted, a compaction noted.
    fn recount(&mut self, step: usize, pos: usize, before: u64, change: Change) {
        let counter = self.counter;
        // A compaction keeps some items (from `first_kept` on): recount only new ones.
        // A window boot replaces every item by itself (not a compaction).
        let mut by_entry: HashMap<usize, ItemCount<'a>> = std::mem::take(&mut self.w.live)
            .into_iter()
            .map(|c| (c.entry, c))
            .collect();
        let fixed = self.fixed();
        let tool_names = &self.tool_names;
        self.w.live = self
            .w
            .projector
            .items
            .iter()
            .map(|item| {
                by_entry
                    .remove(&item.entry)
                    .unwrap_or_else(|| count_item(item, tool_names, counter))
            })
            .collect();
        self.items_total = self.w.live.iter().map(|c| c.total).sum();
        if change == Change::Window {
            return;
        }
        self.w.compactions.push(CompactionStat {
            entry: pos,
            before: fixed + before,
            after: fixed + self.items_total,
        });
        self.w.last_compaction_step = Some(step);
    }
}

/// Apply the pairing rule to the walk's final items (and their counts, kept parallel).
fn leave_out_unpaired(w: &mut Walk<'_>) {
    let drop = unpaired(&w.projector.items);
    if drop.is_empty() {
        return;
    }
    let items = std::mem::take(&mut w.projector.items);
    let live = std::mem::take(&mut w.live);
    let mut next = drop.iter().peekable();
    for (i, (item, count)) in items.into_iter().zip(live).enumerate() {
        if next.next_if_eq(&&i).is_some() {
            w.unpaired.push((item.entry, count.total));
        } else {
            w.projector.items.push(item);
            w.live.push(count);
        }
    }
}
