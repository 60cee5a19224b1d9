//! One request measured: one walk of the projection, each change charged to its mechanism.

use std::collections::HashSet;

use super::{tokens_of_bytes, ByMechanism};
use crate::distill::record::blocks_chars;
use crate::mechanisms::amnesia;
use crate::mechanisms::digest::is_digest_edit;
use crate::model::{EntryId, EntryKind, Session};
use crate::view::{unpaired, Change, Item, ItemKind, Projector};

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
pub struct EntryTokens {
    tokens: Vec<u32>,
}

const UNKNOWN: u32 = u32::MAX;

impl EntryTokens {
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
        EntryKind::ToolDefs { tools } => {
            tools.iter().map(crate::mechanisms::lazy::def_tokens).sum()
        }
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

fn acct(session: &Session, memo: &mut EntryTokens, pos: usize) -> Acct {
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
pub fn measure(
    session: &Session,
    branch: &[usize],
    memo: &mut EntryTokens,
    served: u64,
) -> Measure {
    let mut p = Projector::new(session);
    let mut t = Tally {
        session,
        live: Vec::new(),
        pruned: amnesia::pruned_on(session, branch),
        omitted_amnesia: 0,
        folded: 0,
        omitted: 0,
        omitted_digested: 0,
    };
    for &pos in branch {
        match p.step(pos) {
            Change::Added => t.live.push(acct(session, memo, pos)),
            Change::Edited { index } => t.edited(memo, index, pos),
            Change::Omitted { index } => t.omitted(index, pos),
            Change::Window => t.window(memo, p.items.len(), pos),
            Change::Reset => t.reset(&p.items, pos),
            Change::System | Change::Tools | Change::None => {}
        }
    }
    let settings = p.system.map_or(0, |(pos, _)| memo.get(session, pos))
        + p.tools.map_or(0, |(pos, _)| memo.get(session, pos));
    t.finish(&p.items, settings, served)
}

/// The accounts of a walk over the branch.
struct Tally<'a> {
    session: &'a Session,
    /// Per live item, its account.
    live: Vec<Acct>,
    /// The rounds meta-amnesia pruned (their omissions are amnesia's, not distillation's).
    pruned: HashSet<EntryId>,
    omitted_amnesia: u64,
    /// Folded away by resets in earlier windows (raw), and omitted by edits in this one.
    folded: u64,
    omitted: u64,
    /// The digests' share of what edits omitted in this window.
    omitted_digested: u64,
}

impl Tally<'_> {
    /// Item `index` now shows the edit at `pos`.
    fn edited(&mut self, memo: &mut EntryTokens, index: usize, pos: usize) {
        let session = self.session;
        if let Some(a) = self.live.get_mut(index) {
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

    /// Item `index` omitted by the edit at `pos`: the client's items are amnesia's or
    /// distillation's saving (less their digests' share).
    fn omitted(&mut self, index: usize, pos: usize) {
        if index >= self.live.len() {
            return;
        }
        let a = self.live.remove(index);
        let by_amnesia = !self.pruned.is_empty()
            && matches!(
                self.session.entries.get(pos).map(|e| &e.kind),
                Some(EntryKind::ContextEdit { target, replacement: None })
                    if self.pruned.contains(target)
            );
        if a.owner == Owner::Client {
            if by_amnesia {
                self.omitted_amnesia += a.raw - a.digested;
            } else {
                self.omitted += a.raw - a.digested;
            }
            self.omitted_digested += a.digested;
        }
    }

    /// A window's boot at `pos`, the projection now `items` long.
    fn window(&mut self, memo: &mut EntryTokens, items: usize, pos: usize) {
        // What this window's predecessors showed, at their full size, is now the
        // reset's; the boot stands for it.
        self.folded += self.live.iter().map(|a| a.raw).sum::<u64>()
            + self.omitted
            + self.omitted_digested
            + self.omitted_amnesia;
        self.omitted = 0;
        self.omitted_digested = 0;
        self.omitted_amnesia = 0;
        // The client's leading instructions stay (see `view`): their accounts too.
        let kept = items.saturating_sub(1);
        self.live.truncate(kept);
        self.folded -= self.live.iter().map(|a| a.raw).sum::<u64>();
        self.live.push(acct(self.session, memo, pos));
    }

    /// The client's own compaction at `pos`: what it left out is not ctxd's saving; the
    /// items it kept keep their accounts.
    fn reset(&mut self, items: &[Item<'_>], pos: usize) {
        self.folded = 0;
        self.omitted = 0;
        self.omitted_digested = 0;
        self.omitted_amnesia = 0;
        let fresh = items.iter().take_while(|it| it.entry == pos).count();
        let kept = items.len() - fresh;
        let tail = self.live.split_off(self.live.len().saturating_sub(kept));
        self.live = items[..fresh]
            .iter()
            .map(|it| Acct {
                raw: item_tokens(it),
                shown: item_tokens(it),
                owner: Owner::Client,
                write_fact: false,
                digested: 0,
            })
            .collect();
        self.live.extend(tail);
    }

    /// The request's measure: the live items the pairing rule keeps, with `settings` tokens
    /// of system prompt and tools and `served` of ctxd's tools.
    fn finish(&self, items: &[Item<'_>], settings: u64, served: u64) -> Measure {
        let (folded, omitted) = (self.folded, self.omitted);
        let (omitted_digested, omitted_amnesia) = (self.omitted_digested, self.omitted_amnesia);
        let mut saved = ByMechanism {
            windows: folded as i64,
            distillation: omitted as i64,
            digests: omitted_digested as i64,
            amnesia: omitted_amnesia as i64,
            served_tools: -(served as i64),
            ..ByMechanism::default()
        };
        let mut dropped = unpaired(items).into_iter().peekable();
        let (mut sent, mut whole) = (
            settings + served,
            settings + folded + omitted + omitted_digested + omitted_amnesia,
        );
        for (i, a) in self.live.iter().enumerate() {
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
}
