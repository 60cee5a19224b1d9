//! Which of ctxd's own tools the model can call, so that the texts it reads (a window's boot,
//! the checkpoint, budget reminders) name only tools it has. A text that asks the model to call
//! a tool it was never offered makes it invent the call.
//!
//! The names are fixed here because the texts quote them; the engine's registry serves the
//! same names, and a test there checks every name these texts use against it.

/// `new_context` and its alias.
pub const RESET_TOOL: &str = "new_context";
pub const RESET_ALIAS: &str = "wipe_memory";
pub const REMAINING_TOOL: &str = "get_context_remaining";
pub const NOTES_TOOLS: [&str; 5] = [
    "notes_write",
    "notes_append",
    "notes_read",
    "notes_list",
    "notes_search",
];
pub const HISTORY_TOOLS: [&str; 4] = [
    "history_list_windows",
    "history_list_items",
    "history_read_item",
    "history_search_contents",
];
pub const RECALL_TOOL: &str = "recall";

/// The groups of ctxd tools the model is offered. A group counts as offered only when every
/// tool of it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelTools {
    pub reset: bool,
    pub remaining: bool,
    pub notes: bool,
    pub history: bool,
    pub recall: bool,
}

impl ModelTools {
    /// Every tool: the model reaches ctxd through the engine's whole registry (MCP, the CLI).
    pub const ALL: ModelTools = ModelTools {
        reset: true,
        remaining: true,
        notes: true,
        history: true,
        recall: true,
    };
    /// None: the texts describe what ctxd does, and ask for no call.
    pub const NONE: ModelTools = ModelTools {
        reset: false,
        remaining: false,
        notes: false,
        history: false,
        recall: false,
    };

    /// The groups fully present in `names`.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str> + Clone) -> Self {
        let has = |n: &str| names.clone().into_iter().any(|m| m == n);
        ModelTools {
            reset: has(RESET_TOOL),
            remaining: has(REMAINING_TOOL),
            notes: NOTES_TOOLS.iter().all(|n| has(n)),
            history: HISTORY_TOOLS.iter().all(|n| has(n)),
            recall: has(RECALL_TOOL),
        }
    }

    /// The tool names these groups stand for.
    pub fn names(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.reset {
            out.extend([RESET_TOOL, RESET_ALIAS]);
        }
        if self.remaining {
            out.push(REMAINING_TOOL);
        }
        if self.notes {
            out.extend(NOTES_TOOLS);
        }
        if self.history {
            out.extend(HISTORY_TOOLS);
        }
        if self.recall {
            out.push(RECALL_TOOL);
        }
        out
    }
}

/// Words in `text` shaped like a tool name (lowercase ASCII words joined by `_`), outside
/// `<tags>` and other than history ids (`w_…`, `i_…`): what a test compares with the tools
/// offered.
pub fn tool_like_words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_tag = false;
    let mut start: Option<usize> = None;
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().chain(std::iter::once(&b' ')).enumerate() {
        let word_byte = b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit();
        if word_byte && !in_tag {
            start.get_or_insert(i);
            continue;
        }
        if let Some(s) = start.take() {
            let w = &text[s..i];
            let history_id = (w.starts_with("w_") || w.starts_with("i_"))
                && w[2..].bytes().all(|c| c.is_ascii_hexdigit());
            if w.contains('_') && !w.starts_with('_') && !w.ends_with('_') && !history_id {
                out.push(w);
            }
        }
        match b {
            b'<' => in_tag = true,
            b'>' => in_tag = false,
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_need_every_tool() {
        let t = ModelTools::from_names(["new_context", "notes_read", "recall"]);
        assert!(t.reset && t.recall && !t.notes && !t.history && !t.remaining);
        let all: Vec<&str> = ModelTools::ALL.names();
        assert_eq!(ModelTools::from_names(all.iter().copied()), ModelTools::ALL);
        assert!(ModelTools::NONE.names().is_empty());
    }

    #[test]
    fn tool_like_words_skip_tags() {
        let text = "<context_window_guidance>\ncall notes_write, then new_context.\n\
                    </context_window_guidance> a_b_ x_ w_00ff i_12";
        assert_eq!(tool_like_words(text), ["notes_write", "new_context"]);
    }
}
