//! `recall`: an entry's raw content back, whole, by lines or by a pattern (pure rules).
//!
//! `recall` reads the entry as it was appended, never the edited view. A user prompt whose
//! exchange was omitted (later entries hidden by `ContextEdit { replacement: None }`) comes back
//! as a transcript of the prompt and exactly the omitted entries. Output is capped at
//! [`MAX_LINES`] lines and [`MAX_BYTES`] bytes, with a note saying how to get the rest.
//! Patterns are linear-time regexes (the `regex` crate: no backtracking, so no pattern can
//! freeze a call), at most [`MAX_PATTERN_CHARS`] characters, matched against the first
//! [`LINE_MATCH_CHARS`] characters of each line.

use std::collections::{HashMap, HashSet};

use regex::Regex;

use crate::model::{ContentBlock, Entry, EntryId, EntryKind, Message, Role, Session};

pub const MAX_PATTERN_CHARS: usize = 500;
pub const LINE_MATCH_CHARS: usize = 4_000;
pub const MAX_LINES: usize = 2_000;
pub const MAX_BYTES: usize = 50 * 1024;
/// The compiled size a pattern may reach (the regex crate's own limit is 10 MB).
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// What part of the text to return.
#[derive(Clone, Debug)]
pub struct Selection {
    /// Only lines matching this (shown with their line numbers).
    pub pattern: Option<Regex>,
    /// The 1-based line to start at (default 1).
    pub offset: usize,
    /// At most this many lines (matching lines with a pattern); still capped.
    pub limit: Option<usize>,
}

impl Selection {
    pub fn whole() -> Self {
        Self {
            pattern: None,
            offset: 1,
            limit: None,
        }
    }

    /// Check and build a selection from the tool's arguments.
    pub fn new(
        pattern: Option<&str>,
        offset: Option<i64>,
        limit: Option<i64>,
    ) -> Result<Self, String> {
        let pattern = pattern.map(compile_pattern).transpose()?;
        let offset = match offset {
            None => 1,
            Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX),
            Some(n) => return Err(format!("offset must be a line number from 1; got {n}")),
        };
        let limit = match limit {
            None => None,
            Some(n) if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            Some(n) => return Err(format!("limit must be at least 1; got {n}")),
        };
        Ok(Self {
            pattern,
            offset,
            limit,
        })
    }
}

/// Compile a recall pattern: at most [`MAX_PATTERN_CHARS`] characters, a valid regex.
pub fn compile_pattern(pattern: &str) -> Result<Regex, String> {
    let n = pattern.chars().count();
    if n > MAX_PATTERN_CHARS {
        return Err(format!(
            "pattern is {n} characters; the limit is {MAX_PATTERN_CHARS}: use a shorter pattern"
        ));
    }
    if pattern.is_empty() {
        return Err("pattern is empty: omit it to read the whole entry".into());
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            let detail = e.to_string().replace('\n', " ");
            format!("pattern is not a valid regex (Rust regex syntax, no look-around or backreferences): {detail}")
        })
}

/// The raw text of an entry: message content (tool calls as `[tool call] name {arguments}`,
/// images as `[image W×H]`), summaries, the system prompt; other entries as their JSON.
pub fn entry_text(kind: &EntryKind) -> String {
    let mut out = String::new();
    match kind {
        EntryKind::Message(m) => push_content(&m.content, &mut out),
        EntryKind::WindowBoot { message, .. } => push_content(&message.content, &mut out),
        EntryKind::SystemPrompt { text } => out.push_str(text),
        EntryKind::Compaction(c) => out.push_str(&c.summary),
        EntryKind::BranchSummary { summary, .. } => out.push_str(summary),
        other => {
            out = serde_json::to_string_pretty(other).unwrap_or_default();
        }
    }
    out
}

fn push_line(out: &mut String, line: &str) {
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(line);
}

fn push_content(blocks: &[ContentBlock], out: &mut String) {
    for b in blocks {
        match b {
            ContentBlock::Text { text } => push_line(out, text),
            ContentBlock::Thinking { .. } => {}
            ContentBlock::Image(img) => match (img.width, img.height) {
                (Some(w), Some(h)) => push_line(out, &format!("[image {w}×{h}]")),
                _ => push_line(out, "[image]"),
            },
            ContentBlock::ToolCall {
                name, arguments, ..
            } => push_line(out, &format!("[tool call] {name} {arguments}")),
            ContentBlock::ToolResult { content, .. } => push_content(content, out),
        }
    }
}

/// A user prompt: typed by the user (not injected, not carrying tool results).
pub fn is_prompt(kind: &EntryKind) -> bool {
    matches!(kind, EntryKind::Message(m) if is_prompt_message(m))
}

fn is_prompt_message(m: &Message) -> bool {
    m.role == Role::User
        && m.injected.is_none()
        && !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// The entries of the exchange that starts at the prompt `prompt` (a position on `branch`) and
/// that the branch omits (their latest edit is `replacement: None`). Empty when `prompt` is not
/// a prompt on the branch or nothing of its exchange is omitted.
pub fn omitted_exchange(session: &Session, branch: &[usize], prompt: usize) -> Vec<usize> {
    let Some(at) = branch.iter().position(|&p| p == prompt) else {
        return Vec::new();
    };
    if !session
        .entries
        .get(prompt)
        .is_some_and(|e| is_prompt(&e.kind))
    {
        return Vec::new();
    }
    let mut latest: HashMap<&EntryId, bool> = HashMap::new();
    for &p in branch {
        if let Some(EntryKind::ContextEdit {
            target,
            replacement,
        }) = session.entries.get(p).map(|e| &e.kind)
        {
            latest.insert(target, replacement.is_none());
        }
    }
    let omitted: HashSet<&EntryId> = latest
        .into_iter()
        .filter_map(|(id, gone)| gone.then_some(id))
        .collect();
    branch[at + 1..]
        .iter()
        .copied()
        .take_while(|&p| !session.entries.get(p).is_some_and(|e| is_prompt(&e.kind)))
        .filter(|&p| {
            session
                .entries
                .get(p)
                .is_some_and(|e| omitted.contains(&e.id))
        })
        .collect()
}

/// A transcript of entries: `## user`, `## assistant` (text and `[tool call]` lines),
/// `## tool result (name)`, `## custom message (type)` sections, in order.
pub fn transcript(entries: &[&Entry]) -> String {
    let mut names: HashMap<&str, &str> = HashMap::new();
    for e in entries {
        if let EntryKind::Message(m) = &e.kind {
            for b in &m.content {
                if let ContentBlock::ToolCall { id, name, .. } = b {
                    names.insert(id, name);
                }
            }
        }
    }
    let mut out = String::new();
    for e in entries {
        let (header, body) = match &e.kind {
            EntryKind::Message(m) => {
                let result_name = m.content.iter().find_map(|b| match b {
                    ContentBlock::ToolResult {
                        call_id, tool_name, ..
                    } => Some(
                        tool_name
                            .as_deref()
                            .or_else(|| names.get(call_id.as_str()).copied())
                            .unwrap_or("tool"),
                    ),
                    _ => None,
                });
                let header = match (&m.injected, result_name) {
                    (Some(kind), _) => format!("## custom message ({kind})"),
                    (None, Some(name)) => format!("## tool result ({name})"),
                    (None, None) => format!("## {}", m.role.as_str()),
                };
                let mut body = String::new();
                push_content(&m.content, &mut body);
                (header, body)
            }
            other => (format!("## {}", kind_label(other)), entry_text(other)),
        };
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&header);
        if !body.is_empty() {
            out.push('\n');
            out.push_str(&body);
        }
    }
    out
}

fn kind_label(kind: &EntryKind) -> &'static str {
    match kind {
        EntryKind::Compaction(_) => "compaction summary",
        EntryKind::BranchSummary { .. } => "branch summary",
        EntryKind::WindowBoot { .. } => "window boot",
        EntryKind::SystemPrompt { .. } => "system prompt",
        _ => "entry",
    }
}

/// Render `text` under `selection`, capped, with a continuation note naming `entry_id`.
pub fn render(entry_id: &str, text: &str, selection: &Selection) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let total = lines.len();
    let pattern_arg = selection
        .pattern
        .as_ref()
        .map(|p| format!(",\"pattern\":{}", json_str(p.as_str())))
        .unwrap_or_default();
    let mut out = String::new();
    let mut shown = 0usize;
    let mut last_line = selection.offset.saturating_sub(1);
    let mut stopped_at: Option<usize> = None; // line number not shown because of a cap
    let want = selection.limit.unwrap_or(usize::MAX);
    let mut limited = false;
    for (i, line) in lines
        .iter()
        .enumerate()
        .skip(selection.offset.saturating_sub(1))
    {
        let n = i + 1;
        if let Some(re) = &selection.pattern {
            let head = &line[..byte_at_char(line, LINE_MATCH_CHARS)];
            if !re.is_match(head) {
                last_line = n;
                continue;
            }
        }
        if shown == want {
            limited = true;
            stopped_at = Some(n);
            break;
        }
        if shown == MAX_LINES {
            stopped_at = Some(n);
            break;
        }
        let mut piece = match &selection.pattern {
            Some(_) => format!("{n}: {line}"),
            None => (*line).to_string(),
        };
        if piece.len() > MAX_BYTES {
            let cut = floor_boundary(&piece, MAX_BYTES);
            piece.truncate(cut);
            piece.push_str(&format!(" [line {n} cut at 50KB]"));
        }
        let extra = piece.len() + usize::from(!out.is_empty());
        if out.len() + extra > MAX_BYTES && shown > 0 {
            stopped_at = Some(n);
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&piece);
        shown += 1;
        last_line = n;
    }
    if selection.pattern.is_some() && shown == 0 {
        let from = if selection.offset > 1 {
            format!(" from line {}", selection.offset)
        } else {
            String::new()
        };
        return format!(
            "No line of entry {entry_id}{from} matches the pattern ({total} lines; each line is \
             matched on its first {LINE_MATCH_CHARS} characters)."
        );
    }
    if shown == 0 && selection.offset > total {
        return format!(
            "Entry {entry_id} has {total} lines; offset {} is past the end.",
            selection.offset
        );
    }
    if let Some(next) = stopped_at {
        let why = if limited {
            "limit reached".to_string()
        } else {
            format!("output capped at {MAX_LINES} lines / 50 KB")
        };
        let first = selection.offset;
        out.push_str(&format!(
            "\n\n[{why}: showed lines {first}-{last_line} of {total}. More: recall({{\"entryId\":{}{pattern_arg},\"offset\":{next}}})]",
            json_str(entry_id)
        ));
    }
    out
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

fn byte_at_char(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

fn floor_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The error for an id that names no entry.
pub fn unknown_entry(entry_id: &str) -> String {
    format!(
        "No entry {entry_id:?} in this session. recall takes an entry id: the one in a \
         recall({{\"entryId\":…}}) line of a stub, or the entry_id field of \
         history_list_items / history_search_contents results."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EntryId, Image};

    fn entry(id: &str, parent: Option<&str>, kind: EntryKind) -> Entry {
        Entry {
            id: EntryId::new(id),
            parent: parent.map(EntryId::new),
            timestamp: None,
            sidechain: false,
            kind,
        }
    }

    fn user(t: &str) -> EntryKind {
        EntryKind::Message(Message::text(Role::User, t))
    }

    #[test]
    fn pattern_limits_and_errors_are_clear() {
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        assert!(compile_pattern(&long).unwrap_err().contains("limit is 500"));
        assert!(compile_pattern(&"a".repeat(MAX_PATTERN_CHARS)).is_ok());
        assert!(compile_pattern("(unclosed")
            .unwrap_err()
            .contains("not a valid regex"));
        assert!(compile_pattern("(?=x)").is_err(), "no look-around");
        assert!(compile_pattern("").is_err());
        assert!(Selection::new(None, Some(0), None).is_err());
        assert!(Selection::new(None, None, Some(0)).is_err());
        // A pattern whose compiled form is huge is refused, not built.
        assert!(compile_pattern("\\w{1000}\\w{1000}").is_err());
    }

    #[test]
    fn whole_pattern_and_ranges() {
        let text = "alpha\nbeta\ngamma\nalphabet";
        assert_eq!(render("e", text, &Selection::whole()), text);
        let s = Selection::new(Some("^alpha"), None, None).unwrap();
        assert_eq!(render("e", text, &s), "1: alpha\n4: alphabet");
        let s = Selection::new(None, Some(2), Some(2)).unwrap();
        let out = render("e", text, &s);
        assert!(out.starts_with("beta\ngamma\n\n[limit reached: showed lines 2-3 of 4. More: recall({\"entryId\":\"e\",\"offset\":4})]"), "{out}");
        let s = Selection::new(Some("zzz"), None, None).unwrap();
        assert!(render("e", text, &s).starts_with("No line of entry e matches"));
        let s = Selection::new(None, Some(9), None).unwrap();
        assert!(render("e", text, &s).contains("past the end"));
    }

    #[test]
    fn pattern_sees_only_the_first_4000_chars_of_a_line() {
        let line = format!("{}TAIL", "x".repeat(LINE_MATCH_CHARS));
        let s = Selection::new(Some("TAIL"), None, None).unwrap();
        assert!(render("e", &line, &s).starts_with("No line"));
        let line = format!("{}HEAD{}", "x".repeat(LINE_MATCH_CHARS - 4), "y".repeat(10));
        let s = Selection::new(Some("HEAD"), None, None).unwrap();
        assert!(render("e", &line, &s).starts_with("1: "));
    }

    #[test]
    fn output_is_capped_with_a_continuation_note() {
        let text: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
        let out = render("id1", &text, &Selection::whole());
        let body_lines = out.split("\n\n[").next().unwrap().lines().count();
        assert_eq!(body_lines, MAX_LINES);
        assert!(
            out.contains("showed lines 1-2000 of 5001"),
            "{}",
            &out[out.len() - 200..]
        );
        assert!(out.ends_with("recall({\"entryId\":\"id1\",\"offset\":2001})]"));
        // Bytes: 100 lines of 1,000 chars is 100 KB.
        let text = vec!["z".repeat(1000); 100].join("\n");
        let out = render("id1", &text, &Selection::whole());
        let body = out.split("\n\n[").next().unwrap();
        assert!(body.len() <= MAX_BYTES);
        assert!(
            out.contains("\"offset\":52}"),
            "{}",
            &out[out.len() - 120..]
        );
        // One line over 50 KB is cut, on a char boundary.
        let text = "é".repeat(40_000);
        let out = render("id1", &text, &Selection::whole());
        assert!(out.ends_with("[line 1 cut at 50KB]"));
        assert!(out.len() <= MAX_BYTES + 30);
        // The pattern is carried into the note.
        let text: String = (1..=3000).map(|i| format!("hit {i}\n")).collect();
        let s = Selection::new(Some("hit \"?"), None, None).unwrap();
        let out = render("id1", &text, &s);
        assert!(
            out.ends_with("\"pattern\":\"hit \\\"?\",\"offset\":2001})]"),
            "{}",
            &out[out.len() - 100..]
        );
    }

    #[test]
    fn raw_text_of_entries() {
        let m = EntryKind::Message(Message::new(
            Role::Assistant,
            vec![
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    signature: None,
                    redacted: false,
                },
                ContentBlock::text("ok"),
                ContentBlock::ToolCall {
                    id: "c".into(),
                    name: "bash".into(),
                    arguments: serde_json::json!({"cmd":"ls"}),
                },
                ContentBlock::Image(Image {
                    width: Some(10),
                    height: Some(20),
                    ..Default::default()
                }),
            ],
        ));
        assert_eq!(
            entry_text(&m),
            "ok\n[tool call] bash {\"cmd\":\"ls\"}\n[image 10×20]"
        );
        let ev = EntryKind::Event {
            name: "label".into(),
            detail: None,
        };
        assert!(entry_text(&ev).contains("\"label\""));
    }

    #[test]
    fn omitted_exchange_comes_back_as_a_transcript() {
        let call = EntryKind::Message(Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: serde_json::json!({"cmd":"make"}),
            }],
        ));
        let result = EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: "c1".into(),
                tool_name: None,
                content: vec![ContentBlock::text("built")],
                is_error: false,
            }],
        ));
        let omit = |t: &str| EntryKind::ContextEdit {
            target: EntryId::new(t),
            replacement: None,
        };
        let session = Session {
            entries: vec![
                entry("p", None, user("build it")),
                entry("a", Some("p"), call),
                entry("r", Some("a"), result),
                entry(
                    "d",
                    Some("r"),
                    EntryKind::Message(Message::text(Role::Assistant, "done")),
                ),
                entry("p2", Some("d"), user("next")),
                entry("x1", Some("p2"), omit("a")),
                entry("x2", Some("x1"), omit("r")),
                entry("x3", Some("x2"), omit("p2")),
            ],
            ..Default::default()
        };
        let branch = crate::tree::active_branch(&session);
        let omitted = omitted_exchange(&session, &branch, 0);
        assert_eq!(
            omitted,
            vec![1, 2],
            "d was not omitted; p2 belongs to the next exchange"
        );
        let mut parts = vec![&session.entries[0]];
        parts.extend(omitted.iter().map(|&p| &session.entries[p]));
        assert_eq!(
            transcript(&parts),
            "## user\nbuild it\n\n## assistant\n[tool call] bash {\"cmd\":\"make\"}\n\n## tool result (bash)\nbuilt"
        );
        assert!(omitted_exchange(&session, &branch, 4).is_empty());
        assert!(
            omitted_exchange(&session, &branch, 1).is_empty(),
            "not a prompt"
        );
    }
}
