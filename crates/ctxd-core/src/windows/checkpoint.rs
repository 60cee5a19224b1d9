//! The recovery checkpoint a new window's boot carries: recent user requests (with their window
//! and item ids), the prior window's recovery context and excerpts of this session's notes,
//! capped at [`CHECKPOINT_MAX_CHARS`] characters. Full notes and history stay behind the tools.

use crate::model::{ContentBlock, EntryKind, Role, Session};
use crate::notes::{HomeScope, NotesSnapshot};

use super::history_window_id;

/// The most characters a checkpoint has, its truncation notice included.
pub const CHECKPOINT_MAX_CHARS: usize = 36_000;
/// Recent user requests carried.
const REQUESTS: usize = 8;
/// Characters of one request.
const REQUEST_CHARS: usize = 2_000;
/// Characters of the prior recovery context.
const PRIOR_CHARS: usize = 8_000;
/// Session notes excerpted, and characters of each excerpt.
const NOTES: usize = 5;
const NOTE_CHARS: usize = 4_000;

const REQUESTS_HEADING: &str = "Recent user requests (oldest first):";
const PRIOR_HEADING: &str = "Recovery context of the previous window:";
const NOTES_HEADING: &str = "Excerpts of this session's notes (newest first):";
const TRUNCATED: &str = "\n[checkpoint cut here: it has a size limit]";

/// The checkpoint's limit in a window of `window` tokens: [`CHECKPOINT_MAX_CHARS`], or about a
/// quarter of a smaller window (at ~3 characters a token), so that a boot fits a small model
/// with room to work.
pub fn checkpoint_limit(window: Option<u64>) -> usize {
    let quarter = window.map_or(usize::MAX, |w| {
        usize::try_from(w.saturating_mul(3) / 4).unwrap_or(usize::MAX)
    });
    CHECKPOINT_MAX_CHARS.min(quarter).max(1_000)
}

/// The first `max` characters of `text`, with `…` when cut.
fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// The text of a user's request: its text blocks (tool results are not requests).
fn request_text(blocks: &[ContentBlock]) -> Option<String> {
    let texts: Vec<&str> = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if !text.trim().is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

/// The checkpoint section of a boot's text, without its own prior context (one generation
/// back only, so checkpoints do not nest).
fn prior_context(boot: &str) -> Option<String> {
    let start = boot.find("<checkpoint>\n")? + "<checkpoint>\n".len();
    let end = boot[start..].find("\n</checkpoint>")? + start;
    let body = &boot[start..end];
    let body = match body.find(PRIOR_HEADING) {
        Some(i) => {
            let rest = &body[i..];
            let notes = rest.find(NOTES_HEADING).map_or("", |j| &rest[j..]);
            format!("{}{notes}", &body[..i])
        }
        None => body.to_owned(),
    };
    let body = body.trim();
    (!body.is_empty()).then(|| body.to_owned())
}

/// The checkpoint for a window opening at the end of `branch` of store session
/// `store_session`. Requests are named by their history ids (`w_…`, `i_…`).
pub fn checkpoint(
    session: &Session,
    branch: &[usize],
    store_session: i64,
    notes: &NotesSnapshot,
    max_chars: usize,
) -> String {
    let mut window = branch
        .first()
        .and_then(|&p| session.entries.get(p))
        .map(|e| history_window_id(store_session, &e.id))
        .unwrap_or_default();
    // The marker's own id of the current window, to find its boot.
    let mut marker = "";
    let mut requests: Vec<(String, String, String)> = Vec::new();
    let mut prior: Option<String> = None;
    for &pos in branch {
        let Some(entry) = session.entries.get(pos) else {
            continue;
        };
        match &entry.kind {
            EntryKind::WindowMarker { window_id, .. } => {
                window = history_window_id(store_session, &entry.id);
                marker = window_id.as_str();
                prior = None;
            }
            EntryKind::WindowBoot { window_id, message } if window_id == marker => {
                prior = message.content.iter().find_map(|b| match b {
                    ContentBlock::Text { text } => prior_context(text),
                    _ => None,
                });
            }
            EntryKind::Message(m) if m.role == Role::User && m.injected.is_none() => {
                if let Some(text) = request_text(&m.content) {
                    let item = crate::history::item_id(crate::history::item_key(
                        store_session,
                        entry.id.as_str(),
                    ));
                    requests.push((window.clone(), item, text));
                }
            }
            _ => {}
        }
    }
    let mut sections: Vec<String> = Vec::new();
    let recent = &requests[requests.len().saturating_sub(REQUESTS)..];
    if !recent.is_empty() {
        let mut s = REQUESTS_HEADING.to_owned();
        for (window, item, text) in recent {
            s.push_str(&format!(
                "\n- window {window}, item {item}:\n{}",
                excerpt(text, REQUEST_CHARS)
            ));
        }
        sections.push(s);
    }
    if let Some(prior) = prior {
        sections.push(format!("{PRIOR_HEADING}\n{}", excerpt(&prior, PRIOR_CHARS)));
    }
    let session_notes: Vec<_> = notes
        .homes
        .get(&HomeScope::Session)
        .map(|rows| rows.iter().filter(|r| !r.stale).take(NOTES).collect())
        .unwrap_or_default();
    if !session_notes.is_empty() {
        let mut s = NOTES_HEADING.to_owned();
        for row in session_notes {
            s.push_str(&format!(
                "\n--- {} ({} lines) ---\n{}",
                row.address,
                row.lines,
                excerpt(&row.body, NOTE_CHARS)
            ));
        }
        sections.push(s);
    }
    cap(sections.join("\n\n"), max_chars)
}

/// At most `max` characters, the notice included when cut.
pub(crate) fn cap(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        return text;
    }
    let keep = max.saturating_sub(TRUNCATED.chars().count());
    let cut = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    format!("{}{TRUNCATED}", &text[..cut])
}
