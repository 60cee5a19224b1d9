//! The three wire APIs' message shapes, parsed into the session model.
//!
//! Tolerant by design: an unknown block or item type is kept as text (its JSON), so its size
//! still counts and nothing is dropped. The gateway and the importers share these parsers.

pub mod anthropic;
pub mod gemini;
pub mod openai_chat;
pub mod openai_responses;
pub mod stream;

use ctxd_core::model::{EntryKind, Message, ToolDef};

/// What a request body holds, in the order the model reads it.
#[derive(Debug, Default)]
pub struct Request {
    pub model: Option<String>,
    pub system: Option<String>,
    pub tools: Vec<ToolDef>,
    pub messages: Vec<Message>,
}

impl Request {
    /// Entries for this request: system prompt, tools, then messages.
    pub fn into_entry_kinds(self) -> Vec<EntryKind> {
        let mut kinds = Vec::with_capacity(self.messages.len() + 2);
        if let Some(text) = self.system {
            kinds.push(EntryKind::SystemPrompt { text });
        }
        if !self.tools.is_empty() {
            kinds.push(EntryKind::ToolDefs { tools: self.tools });
        }
        kinds.extend(self.messages.into_iter().map(EntryKind::Message));
        kinds
    }
}

/// A value that could not be mapped, kept as its JSON text.
pub(crate) fn json_text(v: &serde_json::Value) -> String {
    v.to_string()
}
