//! One forward walk of the branch: the projection, each live item's tokens, turns and
//! compactions. Every item is counted once, when it appears (or is edited). At the end the
//! projection's pairing rule leaves out calls without results and results without calls, as
//! the gateway would, so the composition counts what the model is sent.

use std::collections::HashMap;

use crate::model::{ContentBlock, EntryKind, Role, Session, Usage};
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
    let mut w = Walk {
        projector: Projector::new(session),
        live: Vec::new(),
        system_tokens: 0,
        tools_tokens: Vec::new(),
        turns: Vec::new(),
        compactions: Vec::new(),
        last_compaction_step: None,
        model_at_cut: session.meta.model.clone(),
        unpaired: Vec::new(),
    };
    let mut tool_names: HashMap<&'a str, &'a str> = HashMap::new();
    let mut items_total: u64 = 0;
    // `Some(response id)` while the previous message was the assistant's.
    let mut prev_assistant: Option<Option<&'a str>> = None;

    for (step, &pos) in branch.iter().enumerate() {
        let Some(entry) = session.entries.get(pos) else {
            continue;
        };
        let mut usage: Option<&Usage> = None;
        match &entry.kind {
            EntryKind::Message(m) => {
                if m.role == Role::Assistant {
                    let rid = m.response_id.as_deref();
                    let new_turn = match prev_assistant {
                        None => true,
                        Some(prev) => prev.is_some() && rid.is_some() && prev != rid,
                    };
                    if new_turn {
                        let turn = w.turns.len() + 1;
                        if stop_at_turn == Some(turn) {
                            break;
                        }
                        let fixed =
                            w.system_tokens + w.tools_tokens.iter().map(|t| t.1).sum::<u64>();
                        w.turns.push(Turn {
                            turn,
                            entry: pos,
                            step,
                            estimate: fixed + items_total,
                            provider: None,
                            model: m.model.clone().or_else(|| w.model_at_cut.clone()),
                        });
                    }
                    if let Some(model) = &m.model {
                        w.model_at_cut = Some(model.clone());
                    }
                    prev_assistant = Some(rid);
                    for b in &m.content {
                        if let ContentBlock::ToolCall { id, name, .. } = b {
                            tool_names.insert(id, name);
                        }
                    }
                } else {
                    prev_assistant = None;
                }
                usage = m.usage.as_ref();
            }
            EntryKind::Usage { usage: u } => usage = Some(u),
            EntryKind::ModelChange { model, .. } => w.model_at_cut = Some(model.clone()),
            _ => {}
        }
        if let (Some(u), Some(turn)) = (usage, w.turns.last_mut()) {
            if turn.provider.is_none() && u.prompt_tokens() > 0 {
                turn.provider = Some(u.prompt_tokens());
            }
        }

        let before = items_total;
        let change = w.projector.step(pos);
        match change {
            Change::None => {}
            Change::System => {
                w.system_tokens = w.projector.system.map_or(0, |(_, t)| counter.count(t));
            }
            Change::Tools => {
                w.tools_tokens = w.projector.tools.map_or_else(Vec::new, |(_, tools)| {
                    tools
                        .iter()
                        .map(|t| (t.name.as_str(), tool_def_tokens(counter, t)))
                        .collect()
                });
            }
            Change::Added => {
                if let Some(item) = w.projector.items.last() {
                    let c = count_item(item, &tool_names, counter);
                    items_total += c.total;
                    w.live.push(c);
                }
            }
            Change::Edited { index } => {
                if let Some(item) = w.projector.items.get(index) {
                    let c = count_item(item, &tool_names, counter);
                    items_total = items_total - w.live[index].total + c.total;
                    w.live[index] = c;
                }
            }
            Change::Omitted { index } => {
                items_total -= w.live.remove(index).total;
            }
            Change::Reset | Change::Window => {
                // A compaction keeps some items (from `first_kept` on): recount only new ones.
                // A window boot replaces every item by itself (not a compaction).
                let mut by_entry: HashMap<usize, ItemCount<'a>> = std::mem::take(&mut w.live)
                    .into_iter()
                    .map(|c| (c.entry, c))
                    .collect();
                let fixed = w.system_tokens + w.tools_tokens.iter().map(|t| t.1).sum::<u64>();
                w.live = w
                    .projector
                    .items
                    .iter()
                    .map(|item| {
                        by_entry
                            .remove(&item.entry)
                            .unwrap_or_else(|| count_item(item, &tool_names, counter))
                    })
                    .collect();
                items_total = w.live.iter().map(|c| c.total).sum();
                if change == Change::Window {
                    continue;
                }
                w.compactions.push(CompactionStat {
                    entry: pos,
                    before: fixed + before,
                    after: fixed + items_total,
                });
                w.last_compaction_step = Some(step);
            }
        }
    }
    leave_out_unpaired(&mut w);
    w
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
