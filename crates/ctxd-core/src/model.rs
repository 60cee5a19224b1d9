//! The session model: an append-only tree of entries.
//!
//! Every agent format (Pi, Claude Code, Codex, SWE-agent, raw API bodies) is imported into this one
//! shape, and every policy (projection, report, windows, distillation) reads it. Entries are never
//! modified after they are appended: a change to what the model sees is a new entry
//! ([`EntryKind::ContextEdit`], [`EntryKind::Compaction`], ...), so the raw history is never lost.

use serde::{Deserialize, Serialize};

/// The id of an entry, unique within its session. Importers keep the agent's own ids where it has
/// them (Pi v2+, Claude Code uuids) and synthesise stable ones (`L<line>`) where it has none.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EntryId(pub String);

impl EntryId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which agent wrote a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Agent {
    Pi,
    ClaudeCode,
    Codex,
    SweAgent,
    MiniSweAgent,
    GeminiCli,
    /// A raw API request body (or a capture of several), from any client.
    Api,
}

impl Agent {
    pub fn as_str(self) -> &'static str {
        match self {
            Agent::Pi => "pi",
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::SweAgent => "swe-agent",
            Agent::MiniSweAgent => "mini-swe-agent",
            Agent::GeminiCli => "gemini-cli",
            Agent::Api => "api",
        }
    }
}

/// Which wire API a message list was written for. Decides the tokenizer family and what the
/// gateway speaks upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireApi {
    AnthropicMessages,
    OpenaiChat,
    OpenaiResponses,
    /// Google's Gemini API (`generateContent`).
    GeminiGenerateContent,
}

/// Facts about the session as a whole, read from the file's header lines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// The agent's own session id, when the file names one.
    pub id: Option<String>,
    pub agent: Option<Agent>,
    /// The source format with its version, e.g. `pi/v1`, `claude-code/1.0.98`, `codex/rollout`.
    pub format: String,
    pub cwd: Option<String>,
    /// ISO-8601 time of the first entry or the header.
    pub started_at: Option<String>,
    /// The model of the session's first assistant response (or the header's model).
    pub model: Option<String>,
    /// The model's context window when the file states it (Codex `model_context_window`).
    pub context_window: Option<u64>,
    /// The session this one was forked from, or the parent of a subagent.
    pub parent_session: Option<String>,
    pub title: Option<String>,
}

/// A whole session: its metadata and every entry in append order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub meta: SessionMeta,
    /// Entries in the order they were appended. Parents always come before their children.
    pub entries: Vec<Entry>,
    /// The current position in the tree; the active branch is the path from here to the root.
    /// `None` means the last entry.
    pub leaf: Option<EntryId>,
}

impl Session {
    /// Append `kind` as a child of the last entry, with the id `e<position>`: a linear
    /// session built in order (tests, benchmarks, replays).
    pub fn push_linear(&mut self, kind: EntryKind) {
        let parent = self.entries.last().map(|e| e.id.clone());
        let id = EntryId::new(format!("e{}", self.entries.len()));
        self.entries.push(Entry {
            id,
            parent,
            timestamp: None,
            sidechain: false,
            kind,
        });
    }
}

/// One appended fact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub id: EntryId,
    pub parent: Option<EntryId>,
    pub timestamp: Option<String>,
    /// Written by a subagent inline in its parent's file (Claude Code 1.0.x sidechains). Such
    /// entries form their own chains and are never on the parent's active branch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sidechain: bool,
    pub kind: EntryKind,
}

/// What an entry records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EntryKind {
    /// A message the model sees (or saw).
    Message(Message),
    /// The system prompt in effect from this entry on.
    SystemPrompt { text: String },
    /// The tool definitions in effect from this entry on.
    ToolDefs { tools: Vec<ToolDef> },
    /// Everything before this point is replaced by a summary (plus, with `first_kept`, the entries
    /// from that one on; with `replacement`, exactly those messages, as Codex's
    /// `replacement_history`).
    Compaction(Compaction),
    /// A summary of a branch the user left, shown where the new branch starts.
    BranchSummary {
        from: Option<EntryId>,
        summary: String,
    },
    /// Replace (or with `None`, omit) what the model sees of an earlier entry. The latest edit of
    /// a target on the branch wins; the target itself stays untouched in the log.
    ContextEdit {
        target: EntryId,
        replacement: Option<Vec<ContentBlock>>,
    },
    /// Replace the arguments of tool calls in an earlier assistant message, nothing else: the
    /// write-facts mechanism ([`crate::mechanisms::writes`]) strips a write's content once its result
    /// is in. `replacement` is the whole content the model sees from then on; the projection
    /// applies it only when every block but the named arguments of the named calls is
    /// identical to what is shown (thinking and signatures, ids, names, order, the other
    /// arguments) and each named argument keeps its JSON type; otherwise the edit is ignored.
    ArgsEdit {
        target: EntryId,
        replacement: Vec<ContentBlock>,
        args: Vec<EditedArg>,
    },
    ModelChange {
        provider: Option<String>,
        model: String,
    },
    /// Provider-reported usage that the file records apart from a message (Codex `token_count`).
    Usage { usage: Usage },
    /// The start of a new context window (`new_context`, a threshold or an overflow). Everything
    /// before the matching [`EntryKind::WindowBoot`] folds away, except the system prompt.
    WindowMarker { window_id: String, reason: String },
    /// The first message of a window: identity, notes index, checkpoint and protocol. A marker
    /// without its boot is an error in the projection, never silently the raw history.
    WindowBoot { window_id: String, message: Message },
    /// Anything else the agent recorded that is not model context (thinking level changes,
    /// labels, session names, extension state). Kept so nothing is lost.
    Event {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<serde_json::Value>,
    },
}

impl EntryKind {
    /// An [`EntryKind::Event`] named `name` whose detail is `detail` as JSON: how ctxd's own
    /// records (distillation passes, requests) go into the log.
    pub fn event_of<T: Serialize>(name: &str, detail: &T) -> EntryKind {
        EntryKind::Event {
            name: name.to_owned(),
            detail: serde_json::to_value(detail).ok(),
        }
    }

    /// The detail of an [`EntryKind::Event`] named `name`, read as `T`, if this is one and it
    /// reads (a record of another shape or version is `None`).
    pub fn event_detail<'de, T: Deserialize<'de>>(&'de self, name: &str) -> Option<T> {
        match self {
            EntryKind::Event {
                name: n,
                detail: Some(d),
            } if n == name => T::deserialize(d).ok(),
            _ => None,
        }
    }

    /// The message an entry records, if it is one.
    pub fn as_message(&self) -> Option<&Message> {
        match self {
            EntryKind::Message(m) => Some(m),
            _ => None,
        }
    }
}

/// One argument an [`EntryKind::ArgsEdit`] replaces: of the call with id `call`, the argument
/// `key` of its JSON object, or (`key` absent) its whole arguments when they are a string (a
/// freeform tool's input, e.g. Codex's `apply_patch`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditedArg {
    pub call: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub summary: String,
    pub first_kept: Option<EntryId>,
    /// The context size before the compaction, as the agent reported it.
    pub tokens_before: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<Vec<Message>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    /// A message that carries tool results (Pi `toolResult`, OpenAI `tool`). Anthropic-style
    /// tool results inside a `user` message keep the `user` role.
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
    /// Set when the message was injected by the agent or an extension rather than typed by the
    /// user or written by the model (Pi `custom_message` types, Claude Code `system-reminder`,
    /// Codex `environment_context`, shell output). The report groups injected context by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The provider's id of the response this message belongs to. One response can be split over
    /// several entries (Claude Code); its usage is recorded on one of them only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

impl Message {
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self {
            role,
            content,
            injected: None,
            model: None,
            response_id: None,
            usage: None,
            stop_reason: None,
        }
    }

    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self::new(role, vec![ContentBlock::text(text)])
    }

    pub fn injected(mut self, kind: impl Into<String>) -> Self {
        self.injected = Some(kind.into());
        self
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Model reasoning. `signature` is the opaque blob a provider needs back (Anthropic's
    /// signature, Codex's `encrypted_content`); `redacted` marks reasoning the provider hid.
    Thinking {
        thinking: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        redacted: bool,
    },
    Image(Image),
    ToolCall {
        id: String,
        name: String,
        /// The arguments as the model wrote them (a JSON object, or a string for non-JSON tools).
        arguments: serde_json::Value,
    },
    ToolResult {
        call_id: String,
        /// The tool's name when the format records it beside the result (Pi); otherwise the
        /// report finds it from the call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_name: Option<String>,
        content: Vec<ContentBlock>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Image {
    pub media_type: Option<String>,
    /// Pixel size, from the format or read from the image header.
    pub width: Option<u32>,
    pub height: Option<u32>,
    /// Base64 data when the format inlines it (kept: raw data is never lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// A URL or file path when the image is referenced instead of inlined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A tool the model was offered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The parameter schema (or, for non-function tools, the tool's whole definition).
    #[serde(default)]
    pub schema: serde_json::Value,
}

/// Provider-reported token usage of one response, normalised so that `input` excludes cached
/// tokens on every API (OpenAI's `input_tokens` include `cached_tokens`; Anthropic's do not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Usage {
    /// The size of the prompt this response was computed on: the context the model saw.
    pub fn prompt_tokens(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }

    pub fn add(&mut self, other: &Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}
