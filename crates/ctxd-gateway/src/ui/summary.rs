//! A session's row on the sessions page: the report's headline and the savings the log
//! records, computed once per version of the session (its entry count), or once per refresh
//! interval for a session that keeps growing, and cached, so the page polled every second
//! costs a store listing and a few lookups.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ctxd_core::distill::record;
use ctxd_core::model::{EntryKind, Session};
use ctxd_core::report;
use ctxd_core::tokens::TokenCounter;
use ctxd_store::{SessionId, SessionRecord};
use serde::Serialize;

/// The figures of a session that need its log read.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Turns (model responses) on the active branch.
    pub turns: usize,
    /// The report's headline: the context now (`None` right after a compaction).
    pub context_tokens: Option<u64>,
    pub window: Option<u64>,
    pub percent: Option<f64>,
    /// Window markers in the log: resets ctxd opened.
    pub windows_opened: usize,
    /// Characters ctxd's distillation passes took out of the model's view (their records), as
    /// tokens at four characters each.
    pub saved_tokens: u64,
    /// `saved_tokens` at the model's list price of uncached input.
    pub saved_usd: Option<f64>,
    /// The model the report names.
    pub model: Option<String>,
}

/// Tokens of `chars` characters of saved text: the four-characters rule of
/// `ctxd_core::tokens::CharEstimate` (records keep characters, not tokens).
pub fn chars_to_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

/// `tokens` at `model`'s input price.
pub fn usd(tokens: u64, model: Option<&str>) -> Option<f64> {
    let price = ctxd_core::model_limits::input_usd_per_mtok(model?)?;
    Some(tokens as f64 * price / 1e6)
}

/// The summary of a session, from `report` (built by [`ctxd_core::report::build`] with the
/// session's counter, as `ctxd report --json` builds it).
pub fn summarize(session: &Session, report: &report::Report, branch: &[usize]) -> Summary {
    let savings = record::savings(session, branch);
    let saved_tokens = chars_to_tokens(savings.lifetime_chars);
    let model = report.session.model.clone();
    Summary {
        turns: report.session.turn_count,
        context_tokens: report.headline.tokens,
        window: report.headline.window,
        percent: report.headline.percent,
        windows_opened: session
            .entries
            .iter()
            .filter(|e| matches!(e.kind, EntryKind::WindowMarker { .. }))
            .count(),
        saved_tokens,
        saved_usd: usd(saved_tokens, model.as_deref()),
        model,
    }
}

/// The report of a session as `ctxd report --json` builds it: the same options, and `counter`
/// counts as the session's own (`ctxd_tokens::for_session`, see [`super::counts`]).
pub fn report_of(session: &Session, counter: &dyn TokenCounter) -> report::Report {
    report::build(session, counter, &report::Options::default())
}

/// One row of the sessions page.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub id: SessionId,
    pub key: String,
    /// Only in the operator's view of every tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub agent: Option<String>,
    pub project: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    pub started: String,
    pub last_active: String,
    pub entries: u64,
    /// `None` until computed (a page computes rows within a time budget; the next poll
    /// brings the rest).
    pub summary: Option<Arc<Summary>>,
}

impl Row {
    pub fn new(record: &SessionRecord, with_tenant: bool) -> Row {
        let meta = &record.meta;
        Row {
            id: record.id,
            key: record.key.clone(),
            tenant: with_tenant.then(|| record.tenant.clone()),
            agent: meta.agent.map(|a| a.as_str().to_owned()),
            project: meta.cwd.clone(),
            title: meta.title.clone(),
            model: meta.model.clone(),
            started: meta
                .started_at
                .clone()
                .unwrap_or_else(|| record.created_at.clone()),
            last_active: record.updated_at.clone(),
            entries: record.entry_count,
            summary: None,
        }
    }
}

/// Summaries by session, each valid for the entry count it was computed at (entries are only
/// ever appended, so a count that moved means a new version), or, for a session that moved,
/// until it is the refresh interval old: a live session is summarised once per interval, not per poll.
#[derive(Default)]
pub struct Cache {
    by_session: Mutex<HashMap<SessionId, Computed>>,
    refresh: Duration,
}

/// A summary, the entry count it was computed at, and when.
type Computed = (u64, Instant, Arc<Summary>);

impl Cache {
    pub fn new(refresh: Duration) -> Cache {
        Cache {
            by_session: Mutex::default(),
            refresh,
        }
    }

    pub fn get(&self, id: SessionId, entries: u64) -> Option<Arc<Summary>> {
        let map = self.by_session.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&id)
            .filter(|(count, at, _)| *count == entries || at.elapsed() < self.refresh)
            .map(|(_, _, s)| s.clone())
    }

    pub fn put(&self, id: SessionId, entries: u64, summary: Arc<Summary>) {
        let mut map = self.by_session.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(id, (entries, Instant::now(), summary));
    }

    /// Fill `rows`' summaries: cached ones at once (see [`Cache::get`]), the others computed by
    /// `compute` (newest first, the order rows come in) until `budget` is spent.
    pub fn fill<E>(
        &self,
        rows: &mut [Row],
        budget: Duration,
        mut compute: impl FnMut(SessionId) -> Result<Summary, E>,
    ) -> Result<(), E> {
        let start = Instant::now();
        for row in rows.iter_mut() {
            if let Some(s) = self.get(row.id, row.entries) {
                row.summary = Some(s);
                continue;
            }
            if start.elapsed() >= budget {
                continue;
            }
            let s = Arc::new(compute(row.id)?);
            self.put(row.id, row.entries, s.clone());
            row.summary = Some(s);
        }
        Ok(())
    }
}
