//! Context windows: the reset lifecycle as pure reads of the log and drafts of new entries.
//!
//! A session starts in its root window. `new_context` (alias `wipe_memory`), a threshold
//! (`reserve` tokens left) or a provider overflow opens a new window: a
//! [`EntryKind::WindowMarker`] and its [`EntryKind::WindowBoot`], appended together at a turn
//! boundary, after the current tool batch. The projection ([`crate::view`]) folds everything
//! before the boot except the system prompt and tool definitions.
//!
//! Nothing here is kept in memory: whether a reset is pending, which window is current, whether
//! overflow recovery was already used, all are read back from the active branch.
//! - A request is a `new_context`/`wipe_memory` tool call in the current window, after the last
//!   aborted turn ([`ABORT_EVENT`]): an abort drops the pending boundary.
//! - The boundary is reached when the last assistant message's calls all have their results.
//! - Overflow recovery happens at most once per failure chain: not again while the current
//!   window was opened by an overflow and no turn has succeeded (or been aborted) since.

mod boot;
mod checkpoint;

pub use boot::{render_boot, BootData, POCKET_LIMITS};
pub use checkpoint::{checkpoint, checkpoint_limit, CHECKPOINT_MAX_CHARS};

use crate::model::{ContentBlock, Entry, EntryId, EntryKind, Message, Role, Session};

/// Tool names that request a new window.
pub const RESET_TOOLS: [&str; 2] = ["new_context", "wipe_memory"];
/// The event the engine appends when a turn is aborted: requests before it are void.
pub const ABORT_EVENT: &str = "ctxd/turn-aborted";
/// `injected` kind of boot messages.
pub const BOOT_KIND: &str = "ctxd/boot";

/// Stop reasons that are not a successful response.
const FAILED_STOPS: [&str; 6] = [
    "error",
    "aborted",
    "overflow",
    "context_length",
    "context_length_exceeded",
    "model_context_window_exceeded",
];

/// Why a window was opened (the marker's `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetCause {
    /// The model called `new_context` / `wipe_memory`.
    Requested,
    /// The window reached `reserve` tokens left.
    Threshold,
    /// The provider refused the request as too long.
    Overflow,
    /// A person asked (CLI), or the repair of a marker without boot.
    Manual,
}

impl ResetCause {
    pub fn as_str(self) -> &'static str {
        match self {
            ResetCause::Requested => "requested",
            ResetCause::Threshold => "threshold",
            ResetCause::Overflow => "overflow",
            ResetCause::Manual => "manual",
        }
    }
}

/// A window on the branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowInfo {
    pub window_id: String,
    /// Marker position in `session.entries` (`None` for the root window).
    pub marker: Option<usize>,
    /// Boot position (`None` for the root window, or a marker whose boot is missing).
    pub boot: Option<usize>,
    pub reason: Option<String>,
}

/// 64-bit FNV-1a: a stable, dependency-free hash for opaque ids.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The root window's id of the session `session_key`: opaque and stable.
pub fn root_window_id(session_key: &str) -> String {
    format!("cw-{:08x}-root", fnv1a(&[session_key]) >> 32)
}

/// The id of a window opened after `after` (the entry the marker follows): opaque, stable, and
/// distinct for windows opened on different branches.
pub fn new_window_id(session_key: &str, after: Option<&EntryId>) -> String {
    let at = after.map_or("", EntryId::as_str);
    format!(
        "cw-{:08x}-{:012x}",
        fnv1a(&[session_key]) >> 32,
        fnv1a(&[session_key, at]) >> 16
    )
}

/// Every window on the branch, root first.
pub fn windows(session: &Session, branch: &[usize], session_key: &str) -> Vec<WindowInfo> {
    let mut out = vec![WindowInfo {
        window_id: root_window_id(session_key),
        marker: None,
        boot: None,
        reason: None,
    }];
    for &pos in branch {
        match session.entries.get(pos).map(|e| &e.kind) {
            Some(EntryKind::WindowMarker { window_id, reason }) => out.push(WindowInfo {
                window_id: window_id.clone(),
                marker: Some(pos),
                boot: None,
                reason: Some(reason.clone()),
            }),
            Some(EntryKind::WindowBoot { window_id, .. }) => {
                if let Some(w) = out
                    .last_mut()
                    .filter(|w| w.marker.is_some() && w.boot.is_none() && &w.window_id == window_id)
                {
                    w.boot = Some(pos);
                }
            }
            _ => {}
        }
    }
    out
}

/// The current window's id: the latest marker's, or the root's.
pub fn current_window_id(session: &Session, branch: &[usize], session_key: &str) -> String {
    latest_marker(session, branch)
        .map(|(_, id, _)| id.to_owned())
        .unwrap_or_else(|| root_window_id(session_key))
}

/// The id the history tools know the window by that opens at entry `start` (a root or a
/// marker) of store session `store_session`: the one id scheme of every text the model reads.
pub fn history_window_id(store_session: i64, start: &EntryId) -> String {
    crate::history::window_id(crate::history::window_key(store_session, start.as_str()))
}

/// The history id of the window current at the end of `branch` (opened by its latest marker,
/// else by the branch's root). `None` for an empty branch.
pub fn current_history_window_id(
    session: &Session,
    branch: &[usize],
    store_session: i64,
) -> Option<String> {
    let start = match latest_marker(session, branch) {
        Some((i, _, _)) => branch[i],
        None => *branch.first()?,
    };
    let entry = session.entries.get(start)?;
    Some(history_window_id(store_session, &entry.id))
}

/// The history id of the first window on `branch` (opened by its root).
pub fn first_history_window_id(
    session: &Session,
    branch: &[usize],
    store_session: i64,
) -> Option<String> {
    let entry = session.entries.get(*branch.first()?)?;
    Some(history_window_id(store_session, &entry.id))
}

/// Index in `branch` of the latest marker, with its window id and reason.
pub fn latest_marker<'a>(
    session: &'a Session,
    branch: &[usize],
) -> Option<(usize, &'a str, &'a str)> {
    branch.iter().enumerate().rev().find_map(|(i, &pos)| {
        match session.entries.get(pos).map(|e| &e.kind) {
            Some(EntryKind::WindowMarker { window_id, reason }) => {
                Some((i, window_id.as_str(), reason.as_str()))
            }
            _ => None,
        }
    })
}

/// Index in `branch` where the current window starts (its marker; 0 for the root window).
pub fn window_start(session: &Session, branch: &[usize]) -> usize {
    latest_marker(session, branch).map_or(0, |(i, _, _)| i)
}

fn is_abort(entry: &Entry) -> bool {
    matches!(&entry.kind, EntryKind::Event { name, .. } if name == ABORT_EVENT)
}

/// The `new_context` / `wipe_memory` calls standing in the current window: after its marker and
/// after the last aborted turn.
pub fn reset_requests(session: &Session, branch: &[usize]) -> usize {
    let start = window_start(session, branch);
    let start = branch
        .iter()
        .enumerate()
        .skip(start)
        .rev()
        .find(|(_, &pos)| session.entries.get(pos).is_some_and(is_abort))
        .map_or(start, |(i, _)| i);
    branch[start.min(branch.len())..]
        .iter()
        .filter_map(|&pos| match session.entries.get(pos).map(|e| &e.kind) {
            Some(EntryKind::Message(m)) if m.role == Role::Assistant => Some(m),
            _ => None,
        })
        .flat_map(|m| m.content.iter())
        .filter(|b| matches!(b, ContentBlock::ToolCall { name, .. } if RESET_TOOLS.contains(&name.as_str())))
        .count()
}

/// Whether the branch is at a batch boundary: every call of the last assistant message has its
/// result after it.
pub fn batch_complete(session: &Session, branch: &[usize]) -> bool {
    let Some(last) = branch.iter().rposition(|&pos| {
        matches!(session.entries.get(pos).map(|e| &e.kind),
            Some(EntryKind::Message(m)) if m.role == Role::Assistant)
    }) else {
        return true;
    };
    let Some(EntryKind::Message(assistant)) = session.entries.get(branch[last]).map(|e| &e.kind)
    else {
        return true;
    };
    let mut results = std::collections::HashSet::new();
    for &pos in &branch[last + 1..] {
        if let Some(EntryKind::Message(m)) = session.entries.get(pos).map(|e| &e.kind) {
            for b in &m.content {
                if let ContentBlock::ToolResult { call_id, .. } = b {
                    results.insert(call_id.as_str());
                }
            }
        }
    }
    assistant.content.iter().all(|b| match b {
        ContentBlock::ToolCall { id, .. } => results.contains(id.as_str()),
        _ => true,
    })
}

/// Whether an explicit reset is pending and due at this boundary.
pub fn reset_pending(session: &Session, branch: &[usize]) -> bool {
    reset_requests(session, branch) > 0 && batch_complete(session, branch)
}

fn succeeded(m: &Message) -> bool {
    m.role == Role::Assistant
        && m.stop_reason
            .as_deref()
            .is_none_or(|r| !FAILED_STOPS.contains(&r))
}

/// Whether an overflow may be recovered by a new window: not when the current window was opened
/// by an overflow and nothing has succeeded (or been aborted) since.
pub fn overflow_recovery_allowed(session: &Session, branch: &[usize]) -> bool {
    let Some((start, _, reason)) = latest_marker(session, branch) else {
        return true;
    };
    if reason != ResetCause::Overflow.as_str() {
        return true;
    }
    branch[start..].iter().any(|&pos| {
        session.entries.get(pos).is_some_and(|e| {
            is_abort(e) || matches!(&e.kind, EntryKind::Message(m) if succeeded(m))
        })
    })
}

/// The marker and boot that open window `window_id`, in that order.
pub fn reset_drafts(window_id: &str, cause: ResetCause, boot_text: String) -> Vec<EntryKind> {
    vec![
        EntryKind::WindowMarker {
            window_id: window_id.to_owned(),
            reason: cause.as_str().to_owned(),
        },
        boot_entry(window_id, boot_text),
    ]
}

fn boot_entry(window_id: &str, text: String) -> EntryKind {
    EntryKind::WindowBoot {
        window_id: window_id.to_owned(),
        message: Message::text(Role::User, text).injected(BOOT_KIND),
    }
}

/// What the narrow repair of a marker without boot decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Repair {
    /// The latest marker has its boot (or there is no marker).
    NotNeeded,
    /// Only metadata follows the marker: append the boot for `window_id`.
    AppendBoot { window_id: String, marker: usize },
    /// Later work follows the marker: refuse; a new window (`new_context` by a person) is the
    /// way out.
    Refuse { window_id: String, reason: String },
}

fn is_metadata(kind: &EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::Event { .. }
            | EntryKind::ModelChange { .. }
            | EntryKind::Usage { .. }
            | EntryKind::SystemPrompt { .. }
            | EntryKind::ToolDefs { .. }
    )
}

/// The seed's narrow repair: a marker whose boot is missing gets one only when nothing but
/// metadata follows it on the branch.
pub fn repair_plan(session: &Session, branch: &[usize]) -> Repair {
    let Some((start, window_id, _)) = latest_marker(session, branch) else {
        return Repair::NotNeeded;
    };
    let mut later_work = None;
    for &pos in &branch[start + 1..] {
        let Some(entry) = session.entries.get(pos) else {
            continue;
        };
        match &entry.kind {
            EntryKind::WindowBoot { window_id: w, .. } if w == window_id => {
                return Repair::NotNeeded;
            }
            kind if is_metadata(kind) => {}
            _ => {
                later_work.get_or_insert(entry.id.0.clone());
            }
        }
    }
    match later_work {
        None => Repair::AppendBoot {
            window_id: window_id.to_owned(),
            marker: branch[start],
        },
        Some(id) => Repair::Refuse {
            window_id: window_id.to_owned(),
            reason: format!(
                "entry {id} follows the marker of window {window_id} without its boot: \
                 start a new window instead"
            ),
        },
    }
}

/// The boot entry for a repair.
pub fn repair_boot(window_id: &str, boot_text: String) -> EntryKind {
    boot_entry(window_id, boot_text)
}

/// Turn drafts into entries chained after `parent`, with ids derived from the parent's id, the
/// position in the batch and the draft's content: the same drafts after the same parent are
/// the same entries, whenever and wherever they are made (no clock: every run of a
/// conversation, the gateway's and `ctxd eval`'s, gives the same ids, and so the same window
/// and `recall` ids in the texts the model reads).
pub fn chain(
    parent: Option<&EntryId>,
    drafts: Vec<EntryKind>,
    timestamp: Option<String>,
) -> Vec<Entry> {
    let mut parent = parent.cloned();
    let mut out = Vec::with_capacity(drafts.len());
    for (n, kind) in drafts.into_iter().enumerate() {
        let at = parent.as_ref().map_or("", EntryId::as_str).to_owned();
        let content = serde_json::to_string(&kind).unwrap_or_default();
        let id = EntryId::new(format!(
            "cx-{:016x}",
            fnv1a(&[&at, &n.to_string(), &content, "ctxd"])
        ));
        out.push(Entry {
            id: id.clone(),
            parent: parent.take(),
            timestamp: timestamp.clone(),
            sidechain: false,
            kind,
        });
        parent = Some(id);
    }
    out
}

/// ISO-8601 UTC (`2025-01-02T03:04:05.678Z`) of milliseconds since the Unix epoch (before
/// the epoch: the epoch). The one formatter of the workspace's timestamps.
pub fn iso8601(ms: i64) -> String {
    let since = std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + since).to_string()
}

#[cfg(test)]
mod tests;
