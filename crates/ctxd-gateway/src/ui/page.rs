//! A session page's data: the report (the one `ctxd report --json` prints), the client's own
//! size per turn beside it, where windows reset and the client compacted, savings per
//! mechanism and the items ctxd pruned, all read from the log. Pure over a loaded session.

use std::collections::{HashMap, HashSet};

use ctxd_core::distill::record::{Outcome, Record};
use ctxd_core::distill::ItemKind;
use ctxd_core::model::{ContentBlock, EntryKind, Session};
use ctxd_core::report::Report;
use ctxd_core::tokens::TokenCounter;
use ctxd_core::tree;
use serde::Serialize;

use super::summary::{chars_to_tokens, report_of, summarize, usd, Summary};

/// Everything the session page shows but the notes (read through the engine).
#[derive(Clone, Debug, Serialize)]
pub struct Page {
    pub id: i64,
    pub key: String,
    pub summary: Summary,
    /// The report, as `ctxd report --json` prints it for this session.
    pub report: Report,
    /// Per turn of `report.turns`: the size of the conversation as the client holds it (the
    /// log without ctxd's windows, reminders and edits), counted by the same report code.
    pub client_sizes: Vec<Option<u64>>,
    pub marks: Vec<Mark>,
    pub savings: Vec<Saving>,
    pub pruned: Vec<Pruned>,
}

/// A reset or a compaction, between two turns.
#[derive(Clone, Debug, Serialize)]
pub struct Mark {
    /// Turns answered before it.
    pub after_turn: usize,
    /// `reset` (a window ctxd opened) or `compaction` (the client's own).
    pub kind: &'static str,
    pub label: String,
}

/// What one mechanism saved, from what the log records.
#[derive(Clone, Debug, Serialize)]
pub struct Saving {
    pub mechanism: String,
    pub items: usize,
    /// Negative: a cost (ctxd's reminders, its tool definitions).
    pub tokens: i64,
    pub usd: Option<f64>,
    /// Where the figure comes from.
    pub basis: &'static str,
}

/// An item a distillation pass took out of the view (its raw entry stays in the log).
#[derive(Clone, Debug, Serialize)]
pub struct Pruned {
    pub entry_id: String,
    pub kind: &'static str,
    pub tool: String,
    pub label: String,
    pub outcome: &'static str,
    pub before_chars: usize,
    pub after_chars: usize,
    pub reason: String,
}

/// The most pruned items a page lists (the newest).
pub const MAX_PRUNED: usize = 500;

/// Build the page of a loaded session, counting with `counter` (the session's own).
pub fn build(id: i64, key: &str, session: &Session, counter: &dyn TokenCounter) -> Page {
    let branch = tree::active_branch(session);
    let report = report_of(session, counter);
    let summary = summarize(session, &report, &branch);
    let records: Vec<Record> = branch
        .iter()
        .filter_map(|&p| session.entries.get(p))
        .filter_map(|e| Record::from_entry(&e.kind))
        .collect();
    // Without any entry of ctxd's, the client's conversation is the upstream one.
    let client_report = client_view(session, &records).map(|view| report_of(&view, counter));
    let client = client_report.as_ref().unwrap_or(&report);
    let by_entry: HashMap<&str, u64> = client
        .turns
        .iter()
        .map(|t| (t.entry_id.as_str(), t.estimate))
        .collect();
    let client_sizes = report
        .turns
        .iter()
        .map(|t| by_entry.get(t.entry_id.as_str()).copied())
        .collect();
    let model = report.session.model.clone();
    let mut savings = distill_savings(&records, model.as_deref());
    // Resets: what the client holds now minus what goes upstream now (both estimates).
    if summary.windows_opened > 0 {
        let tokens = client
            .composition
            .total
            .saturating_sub(report.composition.total);
        savings.push(Saving {
            mechanism: "context windows (resets)".into(),
            items: summary.windows_opened,
            tokens: tokens as i64,
            usd: usd(tokens, model.as_deref()),
            basis: "now: the client's conversation minus the window sent",
        });
    }
    savings.extend(request_savings(session, model.as_deref()));
    Page {
        id,
        key: key.to_owned(),
        marks: marks(session, &branch, &report),
        pruned: pruned(&records),
        summary,
        report,
        client_sizes,
        savings,
    }
}

/// The session as its client holds it: ctxd's own entries (window markers and boots, budget
/// reminders, distillation's edits) become inert events, so the tree and every turn stay.
/// `None` when the log holds none of them (the client's conversation is the session).
pub fn client_view(session: &Session, records: &[Record]) -> Option<Session> {
    let edited: HashSet<&str> = records
        .iter()
        .flat_map(|r| r.results.iter())
        .filter(|r| r.outcome != Outcome::Kept)
        .flat_map(|r| {
            std::iter::once(r.entry_id.as_str()).chain(r.omitted.iter().map(String::as_str))
        })
        .collect();
    let ours = |kind: &EntryKind| match kind {
        EntryKind::WindowMarker { .. } | EntryKind::WindowBoot { .. } => true,
        EntryKind::Message(m) => m
            .injected
            .as_deref()
            .is_some_and(|k| k.starts_with("ctxd/")),
        EntryKind::ContextEdit {
            target,
            replacement,
        } => edited.contains(target.as_str()) || replacement.as_deref().is_some_and(is_marked),
        _ => false,
    };
    if !session.entries.iter().any(|e| ours(&e.kind)) {
        return None;
    }
    let mut view = session.clone();
    for entry in &mut view.entries {
        if ours(&entry.kind) {
            entry.kind = EntryKind::Event {
                name: "ctxd.client-view".into(),
                detail: None,
            };
        }
    }
    Some(view)
}

/// A replacement text of distillation's (`[ctxd] ...`).
fn is_marked(blocks: &[ContentBlock]) -> bool {
    blocks.iter().any(|b| match b {
        ContentBlock::Text { text } => text.starts_with(ctxd_core::distill::render::MARKER),
        ContentBlock::ToolResult { content, .. } => is_marked(content),
        _ => false,
    })
}

fn kind_name(kind: ItemKind) -> &'static str {
    match kind {
        ItemKind::Large => "large tool outputs distilled",
        ItemKind::Small => "small tool outputs removed",
        ItemKind::Exchange => "old exchanges omitted",
        ItemKind::Image => "old images replaced",
    }
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Distilled => "distilled",
        Outcome::Removed => "removed",
        Outcome::Omitted => "omitted",
        Outcome::Kept => "kept",
    }
}

/// Distillation's savings per kind of item, from its records (`before - after` of each result
/// that changed the view), in the order the kinds first appear.
fn distill_savings(records: &[Record], model: Option<&str>) -> Vec<Saving> {
    let mut by_kind: Vec<(ItemKind, usize, usize)> = Vec::new();
    for r in records.iter().flat_map(|r| &r.results) {
        if r.outcome == Outcome::Kept {
            continue;
        }
        let saved = r.before_chars.saturating_sub(r.after_chars);
        match by_kind.iter_mut().find(|(k, _, _)| *k == r.kind) {
            Some(slot) => {
                slot.1 += 1;
                slot.2 += saved;
            }
            None => by_kind.push((r.kind, 1, saved)),
        }
    }
    by_kind
        .into_iter()
        .map(|(kind, items, chars)| {
            let tokens = chars_to_tokens(chars);
            Saving {
                mechanism: kind_name(kind).into(),
                items,
                tokens: tokens as i64,
                usd: usd(tokens, model),
                basis: "distillation records (ctxd.distill), 4 characters a token",
            }
        })
        .collect()
}

/// Per mechanism, over every managed request the gateway recorded: the tokens not sent (or
/// added), from the request records, as `ctxd stats` and `GET /stats` sum them.
fn request_savings(session: &Session, model: Option<&str>) -> Vec<Saving> {
    let totals = ctxd_core::savings::record::totals(session);
    if totals.requests == 0 {
        return Vec::new();
    }
    totals
        .saved_by
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(m, tokens)| Saving {
            mechanism: format!("{} (over every request)", m.name()),
            items: totals.requests as usize,
            tokens,
            usd: ctxd_core::savings::usd(tokens, model),
            basis: "request records (ctxd.request): tokens not sent, summed over the managed \
                    requests, 4 bytes a token",
        })
        .collect()
}

fn pruned(records: &[Record]) -> Vec<Pruned> {
    let mut out: Vec<Pruned> = records
        .iter()
        .rev()
        .flat_map(|r| &r.results)
        .filter(|r| r.outcome != Outcome::Kept)
        .take(MAX_PRUNED)
        .map(|r| Pruned {
            entry_id: r.entry_id.clone(),
            kind: kind_name(r.kind),
            tool: r.tool.clone(),
            label: r.label.clone(),
            outcome: outcome_name(r.outcome),
            before_chars: r.before_chars,
            after_chars: r.after_chars,
            reason: r.reason.clone(),
        })
        .collect();
    out.reverse();
    out
}

/// Window markers and compactions on the branch, placed after the turns answered before them.
fn marks(session: &Session, branch: &[usize], report: &Report) -> Vec<Mark> {
    let turn_of: HashMap<&str, usize> = report
        .turns
        .iter()
        .map(|t| (t.entry_id.as_str(), t.turn))
        .collect();
    let mut done = 0;
    let mut out = Vec::new();
    for entry in branch.iter().filter_map(|&p| session.entries.get(p)) {
        if let Some(&t) = turn_of.get(entry.id.as_str()) {
            done = t;
        }
        match &entry.kind {
            EntryKind::WindowMarker { reason, .. } => out.push(Mark {
                after_turn: done,
                kind: "reset",
                label: format!("window reset ({reason})"),
            }),
            EntryKind::Compaction(c) => out.push(Mark {
                after_turn: done,
                kind: "compaction",
                label: match c.tokens_before {
                    Some(t) => format!("client compaction (at {t} tokens)"),
                    None => "client compaction".to_owned(),
                },
            }),
            _ => {}
        }
    }
    out
}
