//! One request measured: one walk of the projection, each change charged to its mechanism.

use super::{tokens_of_bytes, ByMechanism};
use crate::distill::record::blocks_chars;
use crate::model::{EntryKind, Session};
use crate::view::{unpaired, Change, Item, ItemKind, Projector};
use crate::wm::amnesia;
use crate::wm::digest::is_digest_edit;

/// What one request sends against what the whole branch would have been.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measure {
    /// Tokens sent upstream: system prompt, tools (the client's and ctxd's) and the projection.
    pub sent: u64,
    /// Tokens the branch would have sent without ctxd: since the client's last compaction,
    /// every message as written, no reminder, no boot, none of ctxd's tools.
    pub whole: u64,
    /// `whole - sent`, by mechanism (the sum is exact).
    pub saved: ByMechanism,
}

impl Measure {
    /// `whole - sent`.
    pub fn saved_total(&self) -> i64 {
        self.whole as i64 - self.sent as i64
    }

    /// The measure of a request whose conversation went upstream as the client sent it (only
    /// ctxd's tool definitions, if any, were added): nothing saved but that cost.
    pub fn unchanged(&self) -> Measure {
        let served = self.saved.served_tools;
        Measure {
            sent: (self.whole as i64 - served).max(0) as u64,
            whole: self.whole,
            saved: ByMechanism {
                served_tools: served,
                ..ByMechanism::default()
            },
        }
    }

    /// This measure with `avoided` tokens of the client's tool definitions left out of the
    /// request (lazy tools): sent less, the difference charged to `lazy-tools`.
    pub fn with_lazy(mut self, avoided: u64) -> Measure {
        let avoided = avoided.min(self.sent);
        self.sent -= avoided;
        self.saved.lazy_tools += avoided as i64;
        self
    }
}

/// Tokens of each entry's content by position, filled as the walk meets them: entries are
/// never modified, so a session's next request reads only its new entries. Keep one per
/// session log, and start a new one whenever the log is rebuilt.
#[derive(Clone, Debug, Default)]
pub struct Memo {
    tokens: Vec<u32>,
}

const UNKNOWN: u32 = u32::MAX;

impl Memo {
    /// The tokens of the content the entry at `pos` shows (a message's, a boot's, an edit's
    /// replacement, a summary, a system prompt, tool definitions).
    fn get(&mut self, session: &Session, pos: usize) -> u64 {
        if self.tokens.len() <= pos {
            self.tokens
                .resize(session.entries.len().max(pos + 1), UNKNOWN);
        }
        let cached = self.tokens[pos];
        if cached != UNKNOWN {
            return u64::from(cached);
        }
        let t = session
            .entries
            .get(pos)
            .map_or(0, |e| entry_tokens(&e.kind));
        self.tokens[pos] = u32::try_from(t).unwrap_or(UNKNOWN - 1);
        t
    }
}

fn entry_tokens(kind: &EntryKind) -> u64 {
    match kind {
        EntryKind::Message(m) | EntryKind::WindowBoot { message: m, .. } => {
            tokens_of_bytes(blocks_chars(&m.content))
        }
        EntryKind::ContextEdit {
            replacement: Some(content),
            ..
        }
        | EntryKind::ArgsEdit {
            replacement: content,
            ..
        } => tokens_of_bytes(blocks_chars(content)),
        EntryKind::BranchSummary { summary, .. } => tokens_of_bytes(summary.len()),
        EntryKind::Compaction(c) => tokens_of_bytes(c.summary.len()),
        EntryKind::SystemPrompt { text } => tokens_of_bytes(text.len()),
        EntryKind::ToolDefs { tools } => tools.iter().map(crate::wm::lazy::def_tokens).sum(),
        _ => 0,
    }
}

/// Whose an item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// The conversation's own (the client's messages, the model's answers, summaries).
    Client,
    /// A message ctxd injected (budget reminders and warnings).
    Reminder,
    /// A window's boot.
    Boot,
}

/// One live item of the projection: the tokens the whole branch would show for it (`raw`, zero
/// for ctxd's own) and the tokens shown now.
#[derive(Clone, Copy, Debug)]
struct Acct {
    raw: u64,
    shown: u64,
    owner: Owner,
    /// Shown through an [`EntryKind::ArgsEdit`] (write facts: the stripped content saved, the
    /// fact that stands for it a cost) rather than a distillation edit.
    write_fact: bool,
    /// What a digest took off it (`raw` minus the digest), charged to the digests; what later
    /// edits take off the digest is distillation's.
    digested: u64,
}

fn owner_of(session: &Session, pos: usize) -> Owner {
    match session.entries.get(pos).map(|e| &e.kind) {
        Some(EntryKind::WindowBoot { .. }) => Owner::Boot,
        Some(EntryKind::Message(m))
            if m.injected
                .as_deref()
                .is_some_and(|k| k.starts_with("ctxd/")) =>
        {
            Owner::Reminder
        }
        _ => Owner::Client,
    }
}

/// The tokens an item shows, read from its content (for items a compaction made, which share
/// one entry).
fn item_tokens(item: &Item<'_>) -> u64 {
    match &item.kind {
        ItemKind::Message { content, .. } => tokens_of_bytes(blocks_chars(content)),
        ItemKind::Summary { text, .. } => tokens_of_bytes(text.len()),
    }
}

fn acct(session: &Session, memo: &mut Memo, pos: usize) -> Acct {
    let owner = owner_of(session, pos);
    let shown = memo.get(session, pos);
    Acct {
        raw: if owner == Owner::Client { shown } else { 0 },
        shown,
        owner,
        write_fact: false,
        digested: 0,
    }
}

/// Measure the request whose upstream conversation is the projection of `branch` (positions,
/// root first), with `served` tokens of ctxd's tool definitions added to it. Tolerant: a
/// marker without its boot measures what the walk saw (the gateway sends no such request).
pub fn measure(session: &Session, branch: &[usize], memo: &mut Memo, served: u64) -> Measure {
    let mut p = Projector::new(session);
    let mut live: Vec<Acct> = Vec::new();
    // The rounds meta-amnesia pruned (their omissions are amnesia's, not distillation's).
    let pruned = amnesia::pruned_on(session, branch);
    let mut omitted_amnesia = 0u64;
    // Folded away by resets in earlier windows (raw), and omitted by edits in this one.
    let mut folded = 0u64;
    let mut omitted = 0u64;
    // The digests' share of what edits omitted in this window.
    let mut omitted_digested = 0u64;
    for &pos in branch {
        match p.step(pos) {
            Change::Added => live.push(acct(session, memo, pos)),
            Change::Edited { index } => {
                if let Some(a) = live.get_mut(index) {
                    a.shown = memo.get(session, pos);
                    a.write_fact = matches!(
                        session.entries.get(pos).map(|e| &e.kind),
                        Some(EntryKind::ArgsEdit { .. })
                    );
                    if session
                        .entries
                        .get(pos)
                        .is_some_and(|e| is_digest_edit(&e.kind))
                    {
                        a.digested = a.raw.saturating_sub(a.shown);
                    }
                }
            }
            Change::Omitted { index } => {
                if index < live.len() {
                    let a = live.remove(index);
                    let by_amnesia = !pruned.is_empty()
                        && matches!(
                            session.entries.get(pos).map(|e| &e.kind),
                            Some(EntryKind::ContextEdit { target, replacement: None })
                                if pruned.contains(target)
                        );
                    if a.owner == Owner::Client {
                        if by_amnesia {
                            omitted_amnesia += a.raw - a.digested;
                        } else {
                            omitted += a.raw - a.digested;
                        }
                        omitted_digested += a.digested;
                    }
                }
            }
            Change::Window => {
                // What this window's predecessors showed, at their full size, is now the
                // reset's; the boot stands for it.
                folded += live.iter().map(|a| a.raw).sum::<u64>()
                    + omitted
                    + omitted_digested
                    + omitted_amnesia;
                omitted = 0;
                omitted_digested = 0;
                omitted_amnesia = 0;
                // The client's leading instructions stay (see `view`): their accounts too.
                let kept = p.items.len().saturating_sub(1);
                live.truncate(kept);
                folded -= live.iter().map(|a| a.raw).sum::<u64>();
                live.push(acct(session, memo, pos));
            }
            Change::Reset => {
                // The client's own compaction: what it left out is not ctxd's saving; the
                // items it kept keep their accounts.
                folded = 0;
                omitted = 0;
                omitted_digested = 0;
                omitted_amnesia = 0;
                let fresh = p.items.iter().take_while(|it| it.entry == pos).count();
                let kept = p.items.len() - fresh;
                let tail = live.split_off(live.len().saturating_sub(kept));
                live = p.items[..fresh]
                    .iter()
                    .map(|it| Acct {
                        raw: item_tokens(it),
                        shown: item_tokens(it),
                        owner: Owner::Client,
                        write_fact: false,
                        digested: 0,
                    })
                    .collect();
                live.extend(tail);
            }
            Change::System | Change::Tools | Change::None => {}
        }
    }
    let settings = p.system.map_or(0, |(pos, _)| memo.get(session, pos))
        + p.tools.map_or(0, |(pos, _)| memo.get(session, pos));
    let mut saved = ByMechanism {
        windows: folded as i64,
        distillation: omitted as i64,
        digests: omitted_digested as i64,
        amnesia: omitted_amnesia as i64,
        served_tools: -(served as i64),
        ..ByMechanism::default()
    };
    let mut dropped = unpaired(&p.items).into_iter().peekable();
    let (mut sent, mut whole) = (
        settings + served,
        settings + folded + omitted + omitted_digested + omitted_amnesia,
    );
    for (i, a) in live.iter().enumerate() {
        if dropped.next_if_eq(&i).is_some() {
            if a.owner == Owner::Client {
                saved.pairing += a.raw as i64;
                whole += a.raw;
            }
            continue;
        }
        sent += a.shown;
        whole += a.raw;
        match a.owner {
            Owner::Client if a.write_fact => saved.write_facts += a.raw as i64 - a.shown as i64,
            Owner::Client => {
                saved.digests += a.digested as i64;
                saved.distillation += a.raw as i64 - a.shown as i64 - a.digested as i64;
            }
            Owner::Reminder => saved.reminders -= a.shown as i64,
            Owner::Boot => saved.windows -= a.shown as i64,
        }
    }
    Measure { sent, whole, saved }
}
