//! The plain text of entries: what history search indexes and what excerpts show.

use crate::model::{ContentBlock, EntryKind, Message};

/// Append the text of blocks (tool calls as `name arguments`, tool results' text; images and
/// signatures say nothing) to `out`, one block a line.
pub fn push_blocks_text(blocks: &[ContentBlock], out: &mut String) {
    for b in blocks {
        match b {
            ContentBlock::Text { text } => push_line(out, text),
            ContentBlock::Thinking { thinking, .. } => push_line(out, thinking),
            ContentBlock::Image(_) => {}
            ContentBlock::ToolCall {
                name, arguments, ..
            } => {
                let args = match arguments {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                push_line(out, &format!("{name} {args}"));
            }
            ContentBlock::ToolResult { content, .. } => push_blocks_text(content, out),
        }
    }
}

fn push_line(out: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(text);
}

/// The text of a message.
pub fn message_text(message: &Message) -> String {
    let mut out = String::new();
    push_blocks_text(&message.content, &mut out);
    out
}

/// The searchable text of an entry (empty for entries that say nothing).
pub fn entry_text(kind: &EntryKind) -> String {
    let mut out = String::new();
    match kind {
        EntryKind::Message(m) => push_blocks_text(&m.content, &mut out),
        EntryKind::WindowBoot { message, .. } => push_blocks_text(&message.content, &mut out),
        EntryKind::SystemPrompt { text } => out.push_str(text),
        EntryKind::Compaction(c) => out.push_str(&c.summary),
        EntryKind::BranchSummary { summary, .. } => out.push_str(summary),
        EntryKind::ContextEdit {
            replacement: Some(blocks),
            ..
        } => push_blocks_text(blocks, &mut out),
        _ => {}
    }
    out
}

/// `2345` → `2,345`: counts in texts people and models read.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
