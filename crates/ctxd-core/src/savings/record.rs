//! The record of a managed request, and totals read back from the log.
//!
//! A record is an [`EntryKind::Event`] named [`EVENT`] whose `detail` is a [`Record`] (versioned
//! by `v`), appended with the request's turn, after the response: an event, so a build that
//! does not know it loads it as an event, and the projection never shows it. Totals are sums
//! over every record in the session (abandoned branches too: those requests were sent and
//! billed), never state kept in memory.

use serde::{Deserialize, Serialize};

use super::{usd, ByMechanism, Measure};
use crate::model::{EntryKind, Session};

/// The event name of a request's record.
pub const EVENT: &str = "ctxd.request";

/// One managed request: what went upstream on its first call, against the whole branch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Format version: 1.
    pub v: u32,
    /// Tokens sent (estimated: four bytes of text a token).
    pub sent: u64,
    /// Tokens the whole branch would have been.
    pub whole: u64,
    /// `whole - sent` by mechanism.
    #[serde(default)]
    pub saved: ByMechanism,
    /// The model the request named (prices the saving).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The configured route the request went to; absent: its API's upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

impl Record {
    pub fn new(m: &Measure, model: Option<&str>) -> Record {
        Record {
            v: 1,
            sent: m.sent,
            whole: m.whole,
            saved: m.saved,
            model: model.map(str::to_owned),
            upstream: None,
        }
    }

    pub fn to_entry(&self) -> EntryKind {
        EntryKind::event_of(EVENT, self)
    }

    /// The record an entry holds, if it is one (of a version this build reads).
    pub fn from_entry(kind: &EntryKind) -> Option<Record> {
        kind.event_detail::<Record>(EVENT).filter(|r| r.v == 1)
    }

    /// `whole - sent`.
    pub fn saved_total(&self) -> i64 {
        self.whole as i64 - self.sent as i64
    }

    /// The saving at the model's list price of uncached input (an upper bound).
    pub fn usd(&self) -> Option<f64> {
        usd(self.saved_total(), self.model.as_deref())
    }
}

/// Sums over records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    pub requests: u64,
    pub sent: u64,
    pub whole: u64,
    /// `whole - sent`.
    pub saved: i64,
    pub saved_by: ByMechanism,
    /// Of the records whose model has a known price.
    pub cost_saved_usd: f64,
    /// Records whose model has no known price (not in `cost_saved_usd`).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub unpriced: u64,
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

impl Totals {
    pub fn add(&mut self, r: &Record) {
        self.requests += 1;
        self.sent += r.sent;
        self.whole += r.whole;
        self.saved += r.saved_total();
        self.saved_by.add(&r.saved);
        match r.usd() {
            Some(usd) => self.cost_saved_usd += usd,
            None => self.unpriced += 1,
        }
    }

    pub fn merge(&mut self, o: &Totals) {
        self.requests += o.requests;
        self.sent += o.sent;
        self.whole += o.whole;
        self.saved += o.saved;
        self.saved_by.add(&o.saved_by);
        self.cost_saved_usd += o.cost_saved_usd;
        self.unpriced += o.unpriced;
    }
}

/// Every request record of the session, in log order, with its entry's position.
pub fn requests(session: &Session) -> Vec<(usize, Record)> {
    session
        .entries
        .iter()
        .enumerate()
        .filter_map(|(pos, e)| Record::from_entry(&e.kind).map(|r| (pos, r)))
        .collect()
}

/// Where the session's requests went, each route once in the order first taken; `None` for
/// its API's upstream.
pub fn upstreams(session: &Session) -> Vec<Option<String>> {
    let mut out: Vec<Option<String>> = Vec::new();
    for (_, r) in requests(session) {
        if !out.contains(&r.upstream) {
            out.push(r.upstream);
        }
    }
    out
}

/// The session's totals: every record it holds.
pub fn totals(session: &Session) -> Totals {
    let mut t = Totals::default();
    for e in &session.entries {
        if let Some(r) = Record::from_entry(&e.kind) {
            t.add(&r);
        }
    }
    t
}
