//! The context report: where a session's window goes (the `/context` seed, for every agent).
//!
//! [`build`] is a pure function of a session, a token counter and options. Its output is the
//! stable JSON schema documented in `docs/report-schema.md` (`schema: "ctxd.report/1"`);
//! [`text::render`] prints it for people, and the CLI's TUI draws it.
//!
//! How the numbers relate:
//! - `composition.total` is ctxd's own estimate of the projection, and the rows add up to it.
//! - `headline.tokens` is the provider's figure when the session has one: the prompt tokens the
//!   provider reported for the last answered request, plus the estimate of what came after it.
//! - `drift` is their difference, named rather than hidden; `calibration` fits
//!   `provider ≈ scale × estimate + overhead` over every turn that has usage, which separates a
//!   tokenizer mismatch (`scale`) from context the file does not record (`overhead`: a system
//!   prompt or tool definitions the agent sent but never wrote down).

mod compose;
pub mod text;
mod walk;

use serde::Serialize;

use crate::model::{Agent, EntryKind, Session, Usage};
use crate::model_limits::{self, Threshold};
use crate::tokens::TokenCounter;
use crate::tree;

pub use compose::{sanitize, Category, Composition, Row, Unpaired, UNPAIRED_IDS};

/// The schema id of [`Report`]'s JSON form. Bumped only on an incompatible change.
pub const SCHEMA: &str = "ctxd.report/1";

#[derive(Clone, Debug)]
pub struct Options {
    /// Report the context as it was sent for this turn (1-based) instead of now.
    pub at_turn: Option<usize>,
    /// How many of the largest messages to list.
    pub largest: usize,
    /// The model's window, when the caller knows better than the model name.
    pub window: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            at_turn: None,
            largest: 5,
            window: None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub session: SessionInfo,
    pub tokenizer: String,
    pub headline: Headline,
    pub composition: Composition,
    /// The context window (reset) in effect: `None` in the root window (no marker on the
    /// branch).
    pub context_window: Option<ContextWindow>,
    pub drift: Option<Drift>,
    pub calibration: Option<Calibration>,
    pub compactions: Compactions,
    pub largest: Vec<Largest>,
    pub turns: Vec<TurnPoint>,
    pub billed: Billed,
    /// What ctxd's mechanisms saved over the session's managed requests (their `ctxd.request`
    /// records, every branch); only for a session the gateway recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings: Option<crate::savings::Totals>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SessionInfo {
    pub id: Option<String>,
    pub agent: Option<Agent>,
    pub format: String,
    pub model: Option<String>,
    pub started_at: Option<String>,
    pub cwd: Option<String>,
    pub title: Option<String>,
    /// Entries in the file, on every branch.
    pub entries: usize,
    /// Entries on the active branch.
    pub branch_entries: usize,
    /// Entries written by inline subagents (never on the branch).
    pub sidechain_entries: usize,
    /// Turns (model responses) on the active branch.
    pub turn_count: usize,
    pub at_turn: Option<usize>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Headline {
    /// The context size: provider-based when the session reports usage, else the estimate.
    /// `None` right after a compaction, until the next response reports usage.
    pub tokens: Option<u64>,
    /// `provider` (the last usage plus the estimate after it), `estimate`, or `pending`.
    pub source: &'static str,
    pub window: Option<u64>,
    pub percent: Option<f64>,
    pub free: Option<i64>,
    pub threshold: Option<Threshold>,
    /// Tokens left before the agent compacts on its own (negative when past it).
    pub headroom: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ContextWindow {
    pub window_id: String,
    pub marker_entry_id: String,
    /// `None` when the boot is missing.
    pub boot_entry_id: Option<String>,
    /// The marker has no boot after it on the branch: the gateway refuses to send this branch
    /// (never the raw history), and the composition shows the raw history the walk saw.
    pub boot_missing: bool,
    /// With `boot_missing`: what the narrow repair would do.
    pub note: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Drift {
    pub provider_tokens: u64,
    pub estimate: u64,
    /// `provider_tokens - estimate`.
    pub drift: i64,
    pub note: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    pub scale: f64,
    pub overhead: f64,
    pub samples: usize,
    /// `scale × composition.total + overhead`.
    pub calibrated_tokens: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Compactions {
    pub count: usize,
    pub history: Vec<CompactionPoint>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CompactionPoint {
    pub entry_id: String,
    pub timestamp: Option<String>,
    /// The agent's own figure for the context before it compacted, when recorded.
    pub tokens_before_reported: Option<u64>,
    /// ctxd's estimate just before and just after the compaction.
    pub estimate_before: u64,
    pub estimate_after: u64,
    pub summary_tokens: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Largest {
    pub entry_id: String,
    pub role: String,
    pub category: Category,
    pub tokens: u64,
    /// One sanitized line of at most 40 characters: a tool name, an injected type or text.
    pub descriptor: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct TurnPoint {
    pub turn: usize,
    pub entry_id: String,
    pub timestamp: Option<String>,
    /// The estimated size of the prompt this turn was answered on.
    pub estimate: u64,
    /// The prompt size the provider reported for it.
    pub provider: Option<u64>,
    /// The model that answered it.
    pub model: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Billed {
    /// Responses with usage (counted once per response).
    pub responses: usize,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// `usage` (per-response usage in the file), `totals` (only session totals recorded), `none`.
    pub source: &'static str,
}

/// Build the report of `session` as it is now (or at `options.at_turn`).
pub fn build(session: &Session, counter: &dyn TokenCounter, options: &Options) -> Report {
    let branch = tree::active_branch(session);
    let full = walk::walk(session, &branch, counter, None);
    let at_turn = options.at_turn.filter(|&n| n >= 1 && n <= full.turns.len());
    let cut;
    let state = match at_turn {
        Some(n) => {
            cut = walk::walk(session, &branch, counter, Some(n));
            &cut
        }
        None => &full,
    };
    let composition = compose::compose(session, state);
    let context_window = context_window(
        session,
        state,
        at_turn.is_none().then_some(branch.as_slice()),
    );
    let estimate = composition.total;

    let model = at_turn
        .and_then(|n| full.turn_model(n))
        .or_else(|| state.model_at_cut.clone())
        .or_else(|| session.meta.model.clone());
    let window = options
        .window
        .or(session.meta.context_window)
        .or_else(|| model.as_deref().and_then(model_limits::context_window));
    let threshold = window.and_then(|w| model_limits::compaction_threshold(session.meta.agent, w));

    // The provider's figure: the last answered turn (at or before the cut) with usage.
    let turns_upto = at_turn.unwrap_or(full.turns.len());
    let measured = full.turns[..turns_upto]
        .iter()
        .rev()
        .find(|t| t.provider.is_some());
    let compacted_since = measured.is_some_and(|t| state.last_compaction_step > Some(t.step));
    let (tokens, source) = match measured {
        Some(t) if !compacted_since => {
            let provider = t.provider.unwrap_or(0);
            let after = if at_turn.is_some() && t.turn == turns_upto {
                0
            } else {
                estimate.saturating_sub(t.estimate)
            };
            (Some(provider + after), "provider")
        }
        Some(_) => (None, "pending"),
        None => (Some(estimate), "estimate"),
    };
    let drift = match (measured, tokens) {
        (Some(_), Some(tokens)) if source == "provider" => Some(drift_of(tokens, estimate)),
        _ => None,
    };
    let shown = tokens.unwrap_or(estimate);
    let headline = Headline {
        tokens,
        source,
        window,
        percent: window
            .filter(|&w| w > 0)
            .map(|w| shown as f64 * 100.0 / w as f64),
        free: window.map(|w| w as i64 - shown as i64),
        headroom: threshold.as_ref().map(|t| t.tokens as i64 - shown as i64),
        threshold,
    };

    let turns: Vec<TurnPoint> = full.turns[..turns_upto]
        .iter()
        .map(|t| TurnPoint {
            turn: t.turn,
            entry_id: session.entries[t.entry].id.0.clone(),
            timestamp: session.entries[t.entry].timestamp.clone(),
            estimate: t.estimate,
            provider: t.provider,
            model: t.model.clone(),
        })
        .collect();
    let calibration = calibrate(&turns, estimate);

    Report {
        schema: SCHEMA,
        session: SessionInfo {
            id: session.meta.id.clone(),
            agent: session.meta.agent,
            format: session.meta.format.clone(),
            model,
            started_at: session.meta.started_at.clone(),
            cwd: session.meta.cwd.clone(),
            title: session.meta.title.clone(),
            entries: session.entries.len(),
            branch_entries: branch.len(),
            sidechain_entries: session.entries.iter().filter(|e| e.sidechain).count(),
            turn_count: full.turns.len(),
            at_turn,
        },
        tokenizer: counter.name().to_owned(),
        headline,
        context_window,
        drift,
        calibration,
        compactions: compactions(session, state, counter),
        largest: compose::largest(session, state, options.largest),
        turns,
        billed: billed(session),
        savings: Some(crate::savings::record::totals(session)).filter(|t| t.requests > 0),
        composition,
    }
}

/// The window the walk ended in. `branch` (the whole branch, for a report of now) lets a missing
/// boot say whether the narrow repair would add it.
fn context_window(
    session: &Session,
    state: &walk::Walk<'_>,
    branch: Option<&[usize]>,
) -> Option<ContextWindow> {
    let w = state.projector.window.as_ref()?;
    let id = |pos: usize| session.entries.get(pos).map(|e| e.id.0.clone());
    let boot_missing = w.boot.is_none();
    let note = boot_missing.then(|| {
        let repair = branch.map(|b| crate::windows::repair_plan(session, b));
        match repair {
            Some(crate::windows::Repair::AppendBoot { .. }) => format!(
                "context window {} has no boot: only metadata follows its marker, so the \
                 narrow repair can append the boot",
                w.window_id
            ),
            Some(crate::windows::Repair::Refuse { reason, .. }) => reason,
            _ => format!(
                "context window {} has no boot after its marker",
                w.window_id
            ),
        }
    });
    Some(ContextWindow {
        window_id: w.window_id.to_owned(),
        marker_entry_id: id(w.marker).unwrap_or_default(),
        boot_entry_id: w.boot.and_then(id),
        boot_missing,
        note,
    })
}

fn drift_of(provider: u64, estimate: u64) -> Drift {
    let drift = provider as i64 - estimate as i64;
    let note = if drift > 0 {
        format!(
            "+{drift} unattributed: context the provider counted that the rows do not explain \
             (a system prompt or tool definitions the file does not record, or tokenizer difference)"
        )
    } else if drift < 0 {
        format!("{drift}: the estimate is above the provider's count (tokenizer difference)")
    } else {
        "none".to_owned()
    };
    Drift {
        provider_tokens: provider,
        estimate,
        drift,
        note,
    }
}

/// Least-squares fit of `provider = scale × estimate + overhead` over the turns with usage.
fn calibrate(turns: &[TurnPoint], estimate_now: u64) -> Option<Calibration> {
    let points: Vec<(f64, f64)> = turns
        .iter()
        .filter_map(|t| t.provider.map(|p| (t.estimate as f64, p as f64)))
        .collect();
    let n = points.len();
    if n < 3 {
        return None;
    }
    let nf = n as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / nf;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / nf;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if sxx <= f64::EPSILON {
        return None;
    }
    let scale = sxy / sxx;
    if !(scale.is_finite() && scale > 0.0) {
        return None;
    }
    let overhead = mean_y - scale * mean_x;
    let calibrated = (scale * estimate_now as f64 + overhead).max(0.0).round() as u64;
    Some(Calibration {
        scale: (scale * 1000.0).round() / 1000.0,
        overhead: overhead.round(),
        samples: n,
        calibrated_tokens: calibrated,
    })
}

fn compactions(
    session: &Session,
    state: &walk::Walk<'_>,
    counter: &dyn TokenCounter,
) -> Compactions {
    let history: Vec<CompactionPoint> = state
        .compactions
        .iter()
        .filter_map(|c| {
            let entry = session.entries.get(c.entry)?;
            let EntryKind::Compaction(compaction) = &entry.kind else {
                return None;
            };
            Some(CompactionPoint {
                entry_id: entry.id.0.clone(),
                timestamp: entry.timestamp.clone(),
                tokens_before_reported: compaction.tokens_before,
                estimate_before: c.before,
                estimate_after: c.after,
                summary_tokens: counter.count(&compaction.summary),
            })
        })
        .collect();
    Compactions {
        count: history.len(),
        history,
    }
}

/// Billed totals over every entry of the file (all branches and subagents were paid for).
fn billed(session: &Session) -> Billed {
    let mut totals = Usage::default();
    let mut responses = 0;
    for entry in &session.entries {
        let usage = match &entry.kind {
            EntryKind::Message(m) => m.usage.as_ref(),
            EntryKind::Usage { usage } => Some(usage),
            _ => None,
        };
        if let Some(u) = usage {
            totals.add(u);
            responses += 1;
        }
    }
    if responses > 0 {
        return Billed {
            responses,
            input: totals.input,
            output: totals.output,
            cache_read: totals.cache_read,
            cache_write: totals.cache_write,
            source: "usage",
        };
    }
    let totals = session.entries.iter().rev().find_map(|e| match &e.kind {
        EntryKind::Event {
            name,
            detail: Some(d),
        } if name == "billed_totals" => Some(d),
        _ => None,
    });
    match totals {
        Some(d) => {
            let field = |k: &str| d.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
            Billed {
                responses: field("api_calls") as usize,
                input: field("input"),
                output: field("output"),
                cache_read: 0,
                cache_write: 0,
                source: "totals",
            }
        }
        None => Billed {
            source: "none",
            ..Billed::default()
        },
    }
}

#[cfg(test)]
mod tests;
