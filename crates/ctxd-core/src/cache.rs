//! Cache planning: what an edit costs in the provider's prompt cache, and
//! where Anthropic `cache_control` breakpoints go on a request ctxd rewrites.
//!
//! Three pure parts:
//!
//! - [`pays_off`], the break-even rule every edit of an already-sent prefix passes (distillation
//!   mid-run and its old items at run end), with a factor per [`Provider`] derived from its
//!   prices ([`Provider::factor`]);
//! - the **ledger** of cache entries ctxd saw written ([`Ledger::read`]): each request ctxd sends
//!   to Anthropic leaves a [`Record`] in the log (an `Event` named [`EVENT`]: model, time, the
//!   head's hash, the entries carrying breakpoints), so what is still cached is read back from
//!   the log, never kept in memory;
//! - the **breakpoint plan** ([`plan`]): the client's rolling breakpoint at the end (moved to the
//!   last message when ctxd re-rendered or dropped the one the client marked), the question
//!   pin, and after an edit of the sent prefix the read point and the write anchor; at most
//!   [`MAX_BREAKPOINTS`] counting the system prompt's and the tools', the client's other ones
//!   dropped first.

use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};

use crate::model::{ContentBlock, EntryKind, Message, Role, Session};

/// The name of a cache record's event.
pub const EVENT: &str = "ctxd.cache";

/// Anthropic refuses a request with more `cache_control` blocks than this.
pub const MAX_BREAKPOINTS: usize = 4;

/// How long an Anthropic cache entry lives after its last write or read (the default
/// `ephemeral` TTL; a client's `1h` entries are treated as 5-minute ones, which only errs
/// towards distrust).
pub const TTL_MS: u64 = 5 * 60 * 1000;

/// Whose prompt cache a request goes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    /// Explicit breakpoints; writes cost 1.25× base input, reads 0.1×. The default: of the
    /// two, the one where an edit costs most, so an unknown provider errs towards keeping.
    #[default]
    Anthropic,
    /// Automatic prefix caching: no write premium; reads at 0.25× to 0.5× base input (0.25×
    /// taken: the cheaper the reads, the less an edit saves).
    OpenAi,
}

impl Provider {
    /// Cache write and read prices in thousandths of the base input price.
    const fn prices(self) -> (u64, u64) {
        match self {
            Provider::Anthropic => (1_250, 100),
            Provider::OpenAi => (1_000, 250),
        }
    }

    /// The break-even factor `(write − read) / read`: 11.5 for Anthropic, 3 for OpenAI.
    ///
    /// Without the edit, each later request reads the `pending` characters from the cache
    /// (`read` each). With it they are gone, but the next request sends the `rewrite`
    /// characters after its cache read point again, at the write price instead of the read
    /// price, once. So the edit pays when `turns × read × pending ≥ (write − read) × rewrite`,
    /// with the turns still to come estimated by the turns so far.
    pub fn factor(self) -> f64 {
        let (w, r) = self.prices();
        (w - r) as f64 / r as f64
    }

    /// The provider behind a session the gateway recorded (`gateway/messages` is Anthropic's
    /// Messages API), else by the model's name.
    pub fn of(format: &str, model: Option<&str>) -> Provider {
        let claude = model.is_some_and(|m| m.starts_with("claude"));
        if format == "gateway/messages" || claude {
            Provider::Anthropic
        } else if format.starts_with("gateway/") || model.is_some() {
            Provider::OpenAi
        } else {
            Provider::Anthropic
        }
    }
}

/// The break-even rule: removing `pending_chars` pays for the one-time cache rewrite of
/// `rewrite_chars` when `pending × turns so far ≥ factor × rewrite` ([`Provider::factor`]).
pub fn pays_off(
    pending_chars: usize,
    turns_so_far: usize,
    rewrite_chars: usize,
    provider: Provider,
) -> bool {
    let (w, r) = provider.prices();
    let gain = (pending_chars as u128)
        .saturating_mul(turns_so_far.max(1) as u128)
        .saturating_mul(u128::from(r));
    gain >= (rewrite_chars as u128).saturating_mul(u128::from(w - r))
}

/// One request's breakpoints as ctxd sent them to Anthropic (versioned; read back by
/// [`Ledger::read`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    pub model: String,
    /// When the request went upstream (Unix milliseconds).
    pub at_ms: u64,
    /// A hash of the tools and the system prompt as sent, their breakpoints aside: what every
    /// cached prefix starts with.
    pub head: u64,
    /// The messages that carried a breakpoint, in order.
    pub marks: Vec<Mark>,
}

/// A breakpoint on a message: the entry shown and the content block (wire index).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub entry: String,
    pub block: u32,
}

impl Record {
    pub fn new(model: &str, at_ms: u64, head: u64, marks: Vec<Mark>) -> Record {
        Record {
            v: 1,
            model: model.to_owned(),
            at_ms,
            head,
            marks,
        }
    }

    pub fn to_entry(&self) -> EntryKind {
        EntryKind::event_of(EVENT, self)
    }

    pub fn from_entry(kind: &EntryKind) -> Option<Record> {
        kind.event_detail::<Record>(EVENT).filter(|r| r.v == 1)
    }
}

/// A cache entry ctxd saw written (or read through) and nothing has invalidated since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Index in the branch of the entry whose message ends the cached prefix.
    pub at: usize,
    /// The content block carrying the breakpoint.
    pub block: u32,
    pub model: String,
    pub head: u64,
    /// Its last write or read-through.
    pub at_ms: u64,
}

/// What the log says about Anthropic's cache on a branch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Cache entries still valid as far as the log tells (not yet checked against a time,
    /// model or head), in branch order.
    pub written: Vec<Written>,
    /// The latest record on the branch: its index and contents.
    pub latest: Option<(usize, Record)>,
    /// The earliest branch index an edit since the latest record changed at or before the end
    /// of a cached prefix (`None`: no cache entry was broken since).
    pub first_edit: Option<usize>,
}

impl Ledger {
    /// Read the records on `branch` (positions, root first). An entry stays valid until an
    /// edit changes it or anything before it, or a compaction, summary or new window replaces
    /// the history; a later request of the same model and head refreshes it (Anthropic keeps
    /// the entries on a prefix it reads alive).
    pub fn read(session: &Session, branch: &[usize]) -> Ledger {
        let mut ledger = Ledger::default();
        let mut index: HashMap<&str, usize> = HashMap::default();
        for (i, &pos) in branch.iter().enumerate() {
            let Some(entry) = session.entries.get(pos) else {
                continue;
            };
            match &entry.kind {
                EntryKind::ContextEdit { target, .. } | EntryKind::ArgsEdit { target, .. } => {
                    let Some(&t) = index.get(target.as_str()) else {
                        continue;
                    };
                    // Only an edit at or before a cached prefix's end costs a rewrite.
                    if ledger.written.iter().any(|w| w.at >= t) {
                        ledger.first_edit = Some(ledger.first_edit.map_or(t, |f| f.min(t)));
                    }
                    ledger.written.retain(|w| w.at < t);
                }
                EntryKind::Compaction(_)
                | EntryKind::BranchSummary { .. }
                | EntryKind::WindowMarker { .. }
                | EntryKind::WindowBoot { .. } => {
                    ledger.written.clear();
                    ledger.first_edit = None;
                }
                kind => {
                    if let Some(rec) = Record::from_entry(kind) {
                        ledger.note(&index, i, rec);
                    }
                }
            }
            index.insert(entry.id.as_str(), i);
        }
        ledger
    }

    fn note(&mut self, index: &HashMap<&str, usize>, i: usize, rec: Record) {
        let marks: Vec<(usize, u32)> = rec
            .marks
            .iter()
            .filter_map(|m| Some((*index.get(m.entry.as_str())?, m.block)))
            .collect();
        let reach = marks.iter().map(|m| m.0).max();
        // Read through: the request's prefix covers earlier entries of the same model and head
        // (still alive when it was sent).
        for w in &mut self.written {
            if reach.is_some_and(|r| w.at <= r)
                && w.model == rec.model
                && w.head == rec.head
                && rec.at_ms <= w.at_ms.saturating_add(TTL_MS)
            {
                w.at_ms = w.at_ms.max(rec.at_ms);
            }
        }
        for (at, block) in marks {
            match self
                .written
                .iter_mut()
                .find(|w| w.at == at && w.block == block)
            {
                Some(w) => {
                    w.model.clone_from(&rec.model);
                    w.head = rec.head;
                    w.at_ms = rec.at_ms;
                }
                None => self.written.push(Written {
                    at,
                    block,
                    model: rec.model.clone(),
                    head: rec.head,
                    at_ms: rec.at_ms,
                }),
            }
        }
        self.written.sort_by_key(|w| (w.at, w.block));
        self.latest = Some((i, rec));
        self.first_edit = None;
    }

    /// The entries a request of `model` with `head` at `now_ms` can read.
    pub fn trusted<'a>(
        &'a self,
        model: &'a str,
        head: u64,
        now_ms: u64,
    ) -> impl Iterator<Item = &'a Written> + 'a {
        self.written.iter().filter(move |w| {
            w.model == model && w.head == head && now_ms <= w.at_ms.saturating_add(TTL_MS)
        })
    }

    /// The latest trusted entry before branch index `before` (the read point of an edit
    /// there), as the latest record's request would see it: the distillation pass runs right
    /// after that request, with its model and head.
    pub fn read_point_before(&self, before: usize) -> Option<&Written> {
        let (_, rec) = self.latest.as_ref()?;
        self.trusted(&rec.model, rec.head, rec.at_ms)
            .filter(|w| w.at < before)
            .last()
    }
}

/// The characters the next request sends past the provider's cache after an edit at
/// projection item `first`: for Anthropic everything after the latest trusted cache entry
/// before it (the read point), or everything without one (but from the edit on when the log
/// has no record at all); for OpenAI's automatic prefix cache everything from the edit on. `item_chars` are the projection's items; `item_branch` their
/// entries' branch indices (ascending).
pub fn rewrite_chars(
    provider: Provider,
    ledger: &Ledger,
    item_chars: &[usize],
    item_branch: &[usize],
    first: usize,
) -> usize {
    let from = match provider {
        // No record at all (an imported session, a replay): the client's own rolling
        // breakpoints are assumed to have cached everything before the edit.
        Provider::OpenAi => first,
        Provider::Anthropic if ledger.latest.is_none() => first,
        Provider::Anthropic => item_branch
            .get(first)
            .and_then(|&b| ledger.read_point_before(b))
            .and_then(|w| item_branch.iter().rposition(|&b| b <= w.at))
            .map_or(0, |i| i + 1),
    };
    item_chars.iter().skip(from).sum()
}

/// What an edit of a projection costs in the provider's cache: the projection's item sizes and
/// the ledger, for planners that weigh edits ([`pays_off`] over [`Costs::rewrite_from`]).
#[derive(Clone, Debug, Default)]
pub struct Costs {
    pub provider: Provider,
    /// Model-visible assistant messages: the turns so far, which stand in for the turns to
    /// come.
    pub turns: usize,
    ledger: Ledger,
    chars: Vec<usize>,
    /// Each item's entry's branch index.
    branch_at: Vec<usize>,
    /// Each item's entry position.
    entries: Vec<usize>,
}

impl Costs {
    /// `items`: the projection's items as (entry position, characters, is an assistant
    /// message), in order.
    pub fn new(
        provider: Provider,
        session: &Session,
        branch: &[usize],
        items: impl IntoIterator<Item = (usize, usize, bool)>,
    ) -> Costs {
        let mut at = vec![usize::MAX; session.entries.len()];
        for (i, &p) in branch.iter().enumerate() {
            if let Some(slot) = at.get_mut(p) {
                *slot = i;
            }
        }
        let mut c = Costs {
            provider,
            ledger: Ledger::read(session, branch),
            ..Costs::default()
        };
        for (pos, chars, assistant) in items {
            c.chars.push(chars);
            c.entries.push(pos);
            c.branch_at.push(at.get(pos).copied().unwrap_or(usize::MAX));
            c.turns += usize::from(assistant);
        }
        c
    }

    /// The projection item showing the entry at `pos`.
    pub fn item_of(&self, pos: usize) -> Option<usize> {
        self.entries.iter().position(|&p| p == pos)
    }

    /// The characters rewritten after an edit at projection item `first` ([`rewrite_chars`]).
    pub fn rewrite_from(&self, first: usize) -> usize {
        rewrite_chars(
            self.provider,
            &self.ledger,
            &self.chars,
            &self.branch_at,
            first,
        )
    }
}

/// Why a breakpoint is where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The client's rolling breakpoint at the end of the request.
    Tail,
    /// The previous user question: everything before it survives edits after it.
    Question,
    /// A cache entry ctxd saw written before the first edited entry: read instead of rewritten.
    Read,
    /// The end of the tool-result batch holding the first edited entry: an entry for the
    /// edited prefix, which a later edit can read. (At the last edited batch instead, the
    /// cache test's loop read more at each edit but the rule, seeing cheaper rewrites, let more
    /// checkpoints through: 4% more input cost. The seed's place stays.)
    Write,
    /// Another of the client's breakpoints on a message.
    Client,
}

/// A breakpoint on an upstream message: the block (`None`: its last block that can carry one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    pub message: usize,
    pub block: Option<u32>,
    pub why: Why,
}

/// The client's breakpoints on a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientMarks {
    /// On messages ctxd sends as the client's bytes: (upstream message index, block).
    pub messages: Vec<(usize, u32)>,
    /// The client's last message carries one (its rolling breakpoint).
    pub tail: bool,
    pub system: usize,
    pub tools: usize,
}

impl ClientMarks {
    pub fn any(&self) -> bool {
        self.tail || !self.messages.is_empty() || self.system > 0 || self.tools > 0
    }
}

/// What [`plan`] reads of a request.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The branch index of each upstream message's entry.
    pub messages: &'a [usize],
    pub client: ClientMarks,
    pub model: &'a str,
    pub head: u64,
    pub now_ms: u64,
}

/// Breakpoints for a request: on messages (in upstream order), and how many of the client's
/// on the system prompt and the tools stay (the last ones of each).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub marks: Vec<Placed>,
    pub system: usize,
    pub tools: usize,
}

impl Plan {
    pub fn count(&self) -> usize {
        self.marks.len() + self.system + self.tools
    }
}

/// The breakpoints of `req` on `branch`: in priority order the client's tail, the question
/// pin, and after an edit of the sent prefix the read point and the write anchor; then the
/// client's other breakpoints on messages (latest first), the system prompt's and the tools'
/// while fewer than [`MAX_BREAKPOINTS`]. A client that sends no breakpoint gets none: it did
/// not ask for caching, and a write costs more than plain input.
pub fn plan(session: &Session, branch: &[usize], req: &Request<'_>) -> Plan {
    let mut out = Plan::default();
    if !req.client.any() || req.messages.is_empty() {
        return out;
    }
    let last = req.messages.len() - 1;
    let message = |m: usize| {
        let pos = *branch.get(*req.messages.get(m)?)?;
        session.entries.get(pos)?.kind.as_message()
    };
    let mut wanted: Vec<Placed> = Vec::new();
    if req.client.tail {
        let block = req
            .client
            .messages
            .iter()
            .rev()
            .find(|(m, _)| *m == last)
            .map(|(_, b)| *b);
        wanted.push(Placed {
            message: last,
            block,
            why: Why::Tail,
        });
    }
    if let Some(q) = (0..last)
        .rev()
        .find(|&m| message(m).is_some_and(is_question))
    {
        wanted.push(Placed {
            message: q,
            block: None,
            why: Why::Question,
        });
    }
    let ledger = Ledger::read(session, branch);
    if let Some(first) = ledger.first_edit {
        let read = ledger
            .trusted(req.model, req.head, req.now_ms)
            .filter(|w| w.at < first)
            .last()
            .and_then(|w| {
                let m = req.messages.iter().position(|&b| b == w.at)?;
                Some(Placed {
                    message: m,
                    block: Some(w.block),
                    why: Why::Read,
                })
            });
        wanted.extend(read);
        if let Some(mut m) = req.messages.iter().position(|&b| b >= first) {
            while m < last && message(m + 1).is_some_and(is_results) {
                m += 1;
            }
            wanted.push(Placed {
                message: m,
                block: None,
                why: Why::Write,
            });
        }
    }
    for &(m, b) in req.client.messages.iter().rev() {
        wanted.push(Placed {
            message: m,
            block: Some(b),
            why: Why::Client,
        });
    }
    for p in wanted {
        if out.marks.len() == MAX_BREAKPOINTS {
            break;
        }
        // One breakpoint per message: a second on the same message adds nothing ctxd needs.
        if out.marks.iter().all(|q| q.message != p.message) {
            out.marks.push(p);
        }
    }
    let room = MAX_BREAKPOINTS - out.marks.len();
    out.system = req.client.system.min(room);
    out.tools = req.client.tools.min(room - out.system);
    out.marks.sort_by_key(|p| p.message);
    out
}

/// A question: the user's own text (not ctxd's or an agent's injected message, not results).
fn is_question(m: &Message) -> bool {
    m.role == Role::User
        && m.injected.is_none()
        && !is_results(m)
        && m.content
            .iter()
            .any(|b| matches!(b, ContentBlock::Text { text } if !text.trim().is_empty()))
}

fn is_results(m: &Message) -> bool {
    matches!(m.role, Role::User | Role::Tool)
        && m.content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

#[cfg(test)]
mod tests;
