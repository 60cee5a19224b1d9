//! The boot message of a window: reset line, identity, the notes homes, the notes index,
//! the checkpoint and the recovery protocol. Rendered from explicit data only: the notes are
//! read once by the caller into a [`NotesSnapshot`].

use crate::notes::{HomeScope, NoteRow, NotesSnapshot};
use crate::offered::ModelTools;

/// Pocket seats per home, in pocket order: session, project, human, agent, model.
pub const POCKET_LIMITS: [(HomeScope, usize); 5] = [
    (HomeScope::Session, 5),
    (HomeScope::Project, 5),
    (HomeScope::Human, 5),
    (HomeScope::Agent, 5),
    (HomeScope::Model, 3),
];

/// Homes whose `MAP.md` is resident in the boot, broadest first. The session home is never
/// among them: a session `MAP.md` is an ordinary note.
const MAP_HOMES: [HomeScope; 4] = [
    HomeScope::Human,
    HomeScope::Project,
    HomeScope::Agent,
    HomeScope::Model,
];

const MAP_PATH: &str = "MAP.md";

const RESET_LINE: &str = "Your context was reset: this is a new context window. What you did \
before is not in front of you any more; your notes and the session history are.";

/// The reset line when the model has neither notes nor history tools.
const RESET_LINE_PLAIN: &str = "Your context was reset: this is a new context window. What you \
did before is not in front of you any more; the checkpoint below carries your recent requests.";

const HOMES_TEXT: &str = "Notes live in five homes. A bare <vpath> is this session's; \
@project/<vpath> is this project's; @human/<vpath> belongs to the human, across projects; \
@self/<vpath> is your own agent home and @agents/<name>/<vpath> another agent's; @model/<vpath> \
is the current model's home and @models/<name>/<vpath> a named model's. @self and @model mean \
whoever is running now, and listings show the resolved names. There is no fallback from one home \
to another, and any other @ prefix, or an @ inside a path, is an error. Notes are not workspace \
files: use the file tools for those.";

const PROTOCOL: &str = "<context_window_protocol>
Your working memory is this context window, and it does not last: when it fills up, or when you \
call new_context, a new window starts and only what was written down carries over. Two records \
outlive every window of this session: your notes (notes_write, notes_append, notes_read, \
notes_list, notes_search) and the session history, read-only (history_list_windows, \
history_list_items, history_read_item, history_search_contents).

Keep a checkpoint note up to date while you work, not at the last moment: the goal, the decisions \
taken and why, progress, what you learned, next steps, and the window id and item id of each user \
request still open. History ids let you pull an exact item back instead of redoing the work.

get_context_remaining tells you how much room is left before the window closes. When it reaches \
zero the window ends without a last turn. Once your checkpoint is written you may call \
new_context yourself; it takes effect after the current batch of tool calls. Mark notes that are \
no longer true as stale, or they will mislead the next window.
</context_window_protocol>";

/// The protocol when the model has no ctxd tools: what happens, and nothing to call.
const PROTOCOL_PLAIN: &str = "<context_window_protocol>
Your working memory is this context window, and it does not last: when it fills up, ctxd starts \
a new window that begins with a checkpoint of your recent requests, and everything else of the \
old window is gone from view. Keep what must outlast a window in the workspace (files, commits), \
and pick up the work from there.
</context_window_protocol>";

/// Everything the boot shows, gathered by the caller.
#[derive(Clone, Debug)]
pub struct BootData<'a> {
    pub agent: &'a str,
    pub model: &'a str,
    pub first_window_id: &'a str,
    pub current_window_id: &'a str,
    pub previous_window_id: Option<&'a str>,
    /// Whether the boot follows a reset (a root window's boot has no reset line).
    pub reset_line: bool,
    pub notes: &'a NotesSnapshot,
    /// The recovery checkpoint ([`super::checkpoint`]), when there is one.
    pub checkpoint: Option<&'a str>,
    /// The ctxd tools the model has: the boot names no other.
    pub tools: ModelTools,
}

fn identity(d: &BootData<'_>) -> String {
    let mut lines = vec![
        "<context_window>".to_owned(),
        format!("Agent: {} (model: {})", d.agent, d.model),
        format!("First context window id: {}", d.first_window_id),
        format!("Current context window id: {}", d.current_window_id),
    ];
    if let Some(previous) = d.previous_window_id {
        lines.push(format!("Previous context window id: {previous}"));
    }
    lines.push("</context_window>".to_owned());
    lines.join("\n")
}

fn home_label(scope: HomeScope) -> &'static str {
    match scope {
        HomeScope::Session => "this session",
        HomeScope::Project => "@project",
        HomeScope::Human => "@human",
        HomeScope::Agent => "@self",
        HomeScope::Model => "@model",
    }
}

/// `3m ago`, `in 2h`: the same rendering as note listings.
pub(crate) use crate::notes::render::relative_time;

fn rows(snapshot: &NotesSnapshot, scope: HomeScope) -> &[NoteRow] {
    snapshot.homes.get(&scope).map_or(&[], Vec::as_slice)
}

/// The notes index: resident maps broadest first, then the pocket (metadata lines only, and
/// only when the model can read notes).
fn notes_index(snapshot: &NotesSnapshot, can_read: bool) -> Option<String> {
    let mut sections: Vec<String> = Vec::new();
    for scope in MAP_HOMES {
        if let Some(map) = rows(snapshot, scope).iter().find(|r| r.path == MAP_PATH) {
            if !map.stale && !map.body.is_empty() {
                sections.push(map.body.clone());
            }
        }
    }
    let pocket: Vec<&NoteRow> = POCKET_LIMITS
        .iter()
        .flat_map(|&(scope, limit)| {
            rows(snapshot, scope)
                .iter()
                .filter(|r| !r.stale && r.path != MAP_PATH)
                .take(limit)
        })
        .collect();
    if !pocket.is_empty() && can_read {
        let n = pocket.len();
        let quotas = POCKET_LIMITS
            .iter()
            .map(|&(scope, limit)| format!("{limit} from {}", home_label(scope)))
            .collect::<Vec<_>>()
            .join(", ");
        let mut lines = vec![format!(
            "Your pocket holds {n} recent note{} (newest first within each home; at most \
             {quotas}). Only names are shown here, never contents: read a note with notes_read.",
            if n == 1 { "" } else { "s" }
        )];
        for row in pocket {
            lines.push(format!(
                "- {} ({} line{}, {} bytes, updated {})",
                row.address,
                row.lines,
                if row.lines == 1 { "" } else { "s" },
                row.bytes,
                relative_time(row.updated_at_ms, snapshot.opened_at_ms)
            ));
        }
        sections.push(lines.join("\n"));
    }
    (!sections.is_empty()).then(|| sections.join("\n\n"))
}

/// The boot's text.
pub fn render_boot(d: &BootData<'_>) -> String {
    let notes = d.tools.notes;
    let mut parts: Vec<String> = Vec::new();
    if d.reset_line {
        let line = if notes || d.tools.history {
            RESET_LINE
        } else {
            RESET_LINE_PLAIN
        };
        parts.push(line.to_owned());
    }
    parts.push(identity(d));
    if notes {
        parts.push(HOMES_TEXT.to_owned());
    }
    if !d.notes.unavailable.is_empty() && notes {
        let homes = d
            .notes
            .unavailable
            .iter()
            .map(|&h| home_label(h))
            .collect::<Vec<_>>()
            .join(", ");
        parts.push(format!(
            "The notes index is incomplete: {homes} could not be read while this window \
             started; notes_list can try again."
        ));
    }
    if let Some(index) = notes_index(d.notes, notes) {
        parts.push(index);
    }
    if let Some(checkpoint) = d.checkpoint.filter(|c| !c.is_empty()) {
        parts.push(format!("<checkpoint>\n{checkpoint}\n</checkpoint>"));
    }
    let full = notes && d.tools.history && d.tools.reset && d.tools.remaining;
    parts.push(if full { PROTOCOL } else { PROTOCOL_PLAIN }.to_owned());
    parts.join("\n\n")
}
