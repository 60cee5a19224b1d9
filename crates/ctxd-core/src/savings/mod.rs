//! Accounting per mechanism: what each managed request sends upstream against what
//! the whole branch would have been without ctxd, split by the mechanism that made the
//! difference.
//!
//! - [`measure`]: one forward walk of the projection ([`crate::view::Projector`]), each change
//!   charged to its mechanism: `windows` (what resets folded away, net of the boot that stands
//!   for it), `distillation` (context edits: replaced content and omitted items), `digests`
//!   (shell outputs replaced by a digest, [`crate::mechanisms::digest`]; what later edits take off a
//!   digest is distillation's), `reminders`
//!   (ctxd's injected messages: a cost), `served-tools` (ctxd's tool definitions: a cost),
//!   `write-facts` (write calls' content stripped, net of the fact that stands for it:
//!   [`EntryKind::ArgsEdit`](crate::model::EntryKind::ArgsEdit)) and `pairing` (calls and
//!   results dropped together). `whole - sent` is the sum of the
//!   mechanisms, exactly. Sizes per entry are kept in a [`EntryTokens`], so a request re-reads only
//!   the entries it has not seen.
//! - [`record`]: the request's record, an event `ctxd.request` appended with the turn, and the
//!   totals read back from the log ([`record::totals`], [`record::requests`]).
//!
//! Tokens are estimated at four characters (bytes of text) a token, per item, rounded up: a
//! tokenizer per request was too slow on large conversations, and the figures are for
//! comparing mechanisms, not for billing.
//!
//! `amnesia` is what meta-amnesia's pruning removed ([`crate::mechanisms::amnesia`]: the omissions
//! its records name). `lazy-tools` is the client's tool definitions a request left out
//! ([`crate::mechanisms::lazy`], [`Measure::with_lazy`]); `find_capability`'s own definition is among
//! `served-tools`.

mod measure;
pub mod record;
#[cfg(test)]
mod tests;

pub use measure::{measure, EntryTokens, Measure};
pub use record::{Record, Totals};

use serde::{Deserialize, Serialize};

/// One of ctxd's mechanisms that changes what goes upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    Windows,
    Distillation,
    Reminders,
    ServedTools,
    Pairing,
    Digests,
    Amnesia,
    WriteFacts,
    LazyTools,
}

impl Mechanism {
    /// Every mechanism, in report order.
    pub const ALL: [Mechanism; 9] = [
        Mechanism::Windows,
        Mechanism::Distillation,
        Mechanism::Reminders,
        Mechanism::ServedTools,
        Mechanism::Pairing,
        Mechanism::Digests,
        Mechanism::Amnesia,
        Mechanism::WriteFacts,
        Mechanism::LazyTools,
    ];

    /// The mechanisms ctxd has today (the others are always zero).
    pub const EXISTING: [Mechanism; 9] = [
        Mechanism::Windows,
        Mechanism::Distillation,
        Mechanism::Reminders,
        Mechanism::ServedTools,
        Mechanism::Pairing,
        Mechanism::Digests,
        Mechanism::Amnesia,
        Mechanism::WriteFacts,
        Mechanism::LazyTools,
    ];

    /// The name in headers, JSON and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Windows => "windows",
            Mechanism::Distillation => "distillation",
            Mechanism::Reminders => "reminders",
            Mechanism::ServedTools => "served-tools",
            Mechanism::Pairing => "pairing",
            Mechanism::Digests => "digests",
            Mechanism::Amnesia => "amnesia",
            Mechanism::WriteFacts => "write-facts",
            Mechanism::LazyTools => "lazy-tools",
        }
    }
}

fn is_zero(x: &i64) -> bool {
    *x == 0
}

/// Tokens saved per mechanism (negative: a cost, e.g. reminders and ctxd's tool definitions).
/// Serialized with zeros left out; fields this build does not know are ignored, so records
/// of later builds still read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ByMechanism {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub windows: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub distillation: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reminders: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub served_tools: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pairing: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub digests: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub amnesia: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub write_facts: i64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lazy_tools: i64,
}

impl ByMechanism {
    pub fn get(&self, m: Mechanism) -> i64 {
        match m {
            Mechanism::Windows => self.windows,
            Mechanism::Distillation => self.distillation,
            Mechanism::Reminders => self.reminders,
            Mechanism::ServedTools => self.served_tools,
            Mechanism::Pairing => self.pairing,
            Mechanism::Digests => self.digests,
            Mechanism::Amnesia => self.amnesia,
            Mechanism::WriteFacts => self.write_facts,
            Mechanism::LazyTools => self.lazy_tools,
        }
    }

    pub fn get_mut(&mut self, m: Mechanism) -> &mut i64 {
        match m {
            Mechanism::Windows => &mut self.windows,
            Mechanism::Distillation => &mut self.distillation,
            Mechanism::Reminders => &mut self.reminders,
            Mechanism::ServedTools => &mut self.served_tools,
            Mechanism::Pairing => &mut self.pairing,
            Mechanism::Digests => &mut self.digests,
            Mechanism::Amnesia => &mut self.amnesia,
            Mechanism::WriteFacts => &mut self.write_facts,
            Mechanism::LazyTools => &mut self.lazy_tools,
        }
    }

    /// Every mechanism with its figure, in [`Mechanism::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (Mechanism, i64)> + '_ {
        Mechanism::ALL.into_iter().map(|m| (m, self.get(m)))
    }

    /// The sum over the mechanisms.
    pub fn total(&self) -> i64 {
        self.iter().map(|(_, v)| v).sum()
    }

    pub fn add(&mut self, other: &ByMechanism) {
        for m in Mechanism::ALL {
            *self.get_mut(m) += other.get(m);
        }
    }

    /// `windows=123,distillation=456,…`: the mechanisms ctxd has, zeros included, for the
    /// `x-ctxd-tokens-saved-by` header.
    pub fn header_value(&self) -> String {
        Mechanism::EXISTING
            .iter()
            .map(|&m| format!("{}={}", m.name(), self.get(m)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Tokens of `bytes` bytes of text: four a token, rounded up.
pub fn tokens_of_bytes(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// `tokens` at `model`'s list price of uncached input (an upper bound of the money: cached
/// input is billed at a fraction); `None` when the model's price is not known.
pub fn usd(tokens: i64, model: Option<&str>) -> Option<f64> {
    let price = crate::model_limits::input_usd_per_mtok(model?)?;
    Some(tokens as f64 * price / 1e6)
}
