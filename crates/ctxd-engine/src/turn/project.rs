//! What goes upstream: the projection of the session's branch as parts of the conversation
//! array, the client's own elements (by index, sent as their bytes) and messages ctxd renders.

use ctxd_core::model::Message;
use ctxd_core::view::{project_checked, ItemKind, ProjectionError};

use super::log::SessionLog;

/// One element of the upstream conversation array.
#[derive(Debug, PartialEq)]
pub enum Part {
    /// The client's element at this index, as its own bytes.
    Client(usize),
    /// A message ctxd shows (boot, reminder, summary, edited content).
    Rendered(Message),
}

/// The projection of `log`'s branch as parts; `Ok(None)` when it is exactly the client's
/// elements in order (nothing to rewrite). `element_entries` is the log entry of each of the
/// request's elements ([`RequestPlan::element_entries`]).
pub fn upstream_parts(
    log: &SessionLog,
    element_entries: &[usize],
) -> Result<Option<Vec<Part>>, ProjectionError> {
    Ok(upstream(log, element_entries)?.map(|u| u.parts))
}

/// A rewritten conversation array: its parts, and the log entry each shows (what cache
/// planning reads).
#[derive(Debug, PartialEq)]
pub struct Upstream {
    pub parts: Vec<Part>,
    /// The entry position of each part.
    pub entries: Vec<usize>,
}

/// [`upstream_parts`] with each part's entry.
pub fn upstream(
    log: &SessionLog,
    element_entries: &[usize],
) -> Result<Option<Upstream>, ProjectionError> {
    let branch = log.branch();
    let projection = project_checked(&log.session, &branch)?;
    // Entry position → the request's element showing it.
    let mut element_of: Vec<Option<usize>> = vec![None; log.len()];
    for (i, &pos) in element_entries.iter().enumerate() {
        if let Some(slot) = element_of.get_mut(pos) {
            *slot = Some(i);
        }
    }
    let parts: Vec<Part> = projection
        .items
        .iter()
        .map(
            |item| match (&item.kind, element_of.get(item.entry).copied().flatten()) {
                (ItemKind::Message { edited: false, .. }, Some(i)) => Part::Client(i),
                _ => Part::Rendered(item.to_message()),
            },
        )
        .collect();
    let unchanged = parts.len() == element_entries.len()
        && parts
            .iter()
            .enumerate()
            .all(|(n, p)| matches!(p, Part::Client(i) if *i == n));
    let entries = projection.items.iter().map(|item| item.entry).collect();
    Ok((!unchanged).then_some(Upstream { parts, entries }))
}

/// The breakpoints of a rewritten Anthropic request ([`ctxd_core::cache::plan`]) over `log`'s
/// branch: `entries` are the upstream messages' entries ([`Upstream::entries`]).
pub fn breakpoints(
    log: &SessionLog,
    entries: &[usize],
    client: ctxd_core::cache::ClientMarks,
    model: &str,
    head: u64,
    now_ms: u64,
) -> ctxd_core::cache::Plan {
    let branch = log.branch();
    let mut at = vec![usize::MAX; log.len()];
    for (i, &p) in branch.iter().enumerate() {
        if let Some(slot) = at.get_mut(p) {
            *slot = i;
        }
    }
    let messages: Vec<usize> = entries
        .iter()
        .map(|&p| at.get(p).copied().unwrap_or(usize::MAX))
        .collect();
    let req = ctxd_core::cache::Request {
        messages: &messages,
        client,
        model,
        head,
        now_ms,
    };
    ctxd_core::cache::plan(&log.session, &branch, &req)
}
