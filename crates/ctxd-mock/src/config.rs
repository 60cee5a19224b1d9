//! Server settings.

use std::path::PathBuf;

use crate::script::{Reply, Shape};

/// Settings for a [`crate::MockServer`]; `Config::default()` is what tests usually want.
#[derive(Clone, Debug)]
pub struct Config {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The text of a final answer (after a tool result, or when no tool is offered).
    pub final_text: String,
    /// When replies carry a thinking block / reasoning item.
    pub reasoning: Reasoning,
    /// What is kept of each request in memory.
    pub recording: Recording,
    /// Appends each request as one JSON line to this file (the `/_mock/requests` shape).
    pub log: Option<PathBuf>,
    /// Delays, truncation and padding of replies that the script does not provide.
    pub shape: Shape,
    /// Replies queued before the first request.
    pub script: Vec<Reply>,
    /// Status of `HEAD /` (Claude Code's connectivity preflight).
    pub head_status: u16,
    /// Largest request body accepted (413 above it).
    pub body_limit: usize,
    /// Refuse, with the provider's own 400 error, the request shapes the real APIs refuse
    /// (see the crate doc). `false` is the old lax mode: any shape gets a reply.
    pub strict: bool,
    /// Context windows in tokens by model-name prefix (the longest matching prefix wins),
    /// checked before the built-in table.
    pub windows: Vec<(String, u64)>,
    /// The window of a model neither [`Config::windows`] nor the built-in table knows.
    pub default_window: u64,
    /// The simulated Anthropic prompt cache (`cache.rs`): how long an entry lives after
    /// its last write or read (Anthropic's default is 5 minutes)...
    pub cache_ttl: std::time::Duration,
    /// ...and the shortest prefix written, in the mock's tokens (1,024 for Sonnet and Opus).
    pub cache_min_tokens: u64,
    /// Replies report usage (`false`: `usage` is null, as from a provider that reports none;
    /// a gateway then counts its window with its own tokenizer, as `ctxd eval` does).
    pub usage: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            port: 0,
            final_text: "done".to_owned(),
            reasoning: Reasoning::Off,
            recording: Recording::Full,
            log: None,
            shape: Shape::default(),
            script: Vec::new(),
            head_status: 200,
            body_limit: 256 << 20,
            strict: true,
            windows: Vec::new(),
            default_window: 200_000,
            cache_ttl: std::time::Duration::from_secs(300),
            cache_min_tokens: 1_024,
            usage: true,
        }
    }
}

/// When an Anthropic reply starts with a signed thinking block, a Responses reply with a
/// reasoning item carrying `encrypted_content` and a Gemini reply with a signed thought part
/// (Chat replies never carry reasoning; a Gemini `functionCall` is signed either way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reasoning {
    #[default]
    Off,
    /// When the request asks: Anthropic `thinking.type` enabled/adaptive; Responses a
    /// `reasoning` object or `include: ["reasoning.encrypted_content"]`; Gemini
    /// `generationConfig.thinkingConfig.includeThoughts: true`.
    WhenAsked,
    Always,
}

/// What the server keeps of each request. Benchmarks sending 1 MB bodies at 200/s want `Meta`
/// or `Off`: a full record grows by 200 MB a second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recording {
    /// Method, path, headers and the raw body.
    #[default]
    Full,
    /// Method, path, headers and the body's length.
    Meta,
    Off,
}
