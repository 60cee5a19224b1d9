//! What ctxd knows about models and agents: context windows and compaction thresholds.

use serde::Serialize;

use crate::model::Agent;

/// The context window of a model, from its name. `None` when the name is not known.
pub fn context_window(model: &str) -> Option<u64> {
    let m = model.to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    if m.contains("[1m]") || m.ends_with("-1m") {
        return Some(1_000_000);
    }
    let table: &[(&str, u64)] = &[
        ("claude", 200_000),
        ("gpt-5", 400_000),
        ("codex", 400_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-4o", 128_000),
        ("gpt-4-turbo", 128_000),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4", 200_000),
        ("gpt-4", 8_192),
        ("gpt-3.5", 16_385),
        ("deepseek", 128_000),
        ("gemini", 1_048_576),
        ("qwen", 131_072),
    ];
    table
        .iter()
        .find(|(prefix, _)| m.starts_with(prefix) || m.contains(&format!("-{prefix}")))
        .map(|&(_, w)| w)
}

/// The point at which an agent compacts on its own, and how that was derived.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Threshold {
    pub tokens: u64,
    pub rule: &'static str,
}

/// Pi's default `compaction.reserveTokens`.
pub const PI_RESERVE_TOKENS: u64 = 16_384;
/// Claude Code reserves room for its output (20k) and an auto-compact buffer (13k).
pub const CLAUDE_CODE_RESERVE_TOKENS: u64 = 33_000;

/// The context window a provider states in its "prompt too long" error, in tokens: what the
/// provider really allows, where ctxd's table may say more (a deployment with a smaller
/// window, an OpenAI-compatible server started with a small context). The wordings of
/// Anthropic ("prompt is too long: 37400 tokens > 30000 maximum"), OpenAI and vLLM ("maximum
/// context length is 8192 tokens"), OpenAI's Responses ("context window of 8192 tokens"),
/// llama.cpp ("exceeds the available context size (4096 tokens)") and LM Studio / Ollama-style
/// "n_ctx" messages.
pub fn stated_window(error: &str) -> Option<u64> {
    static PATTERNS: std::sync::OnceLock<Vec<regex::Regex>> = std::sync::OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        [
            r"(?i)\d[\d,_]*\s*tokens?\s*>\s*([\d,_]+)",
            r"(?i)maximum context length is\s*([\d,_]+)",
            r"(?i)context (?:window|length|size) (?:of|is)\s*([\d,_]+)",
            r"(?i)available context size \(([\d,_]+)",
            r"(?i)n_ctx(?:_slot|_train)?\s*[=:]?\s*([\d,_]+)",
            r"(?i)context (?:window|length|size)[^\d]{0,24}?\(([\d,_]+) tokens?\)",
            // Google's Gemini API.
            r"(?i)maximum number of tokens allowed \(([\d,_]+)\)",
        ]
        .iter()
        .filter_map(|p| regex::Regex::new(p).ok())
        .collect()
    });
    patterns.iter().find_map(|re| {
        let digits: String = re
            .captures(error)?
            .get(1)?
            .as_str()
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse::<u64>().ok().filter(|&n| n >= 256)
    })
}

/// The automatic compaction threshold of `agent` for a model with `window` tokens.
pub fn compaction_threshold(agent: Option<Agent>, window: u64) -> Option<Threshold> {
    match agent? {
        Agent::Pi => Some(Threshold {
            tokens: window.saturating_sub(PI_RESERVE_TOKENS),
            rule: "pi: window - reserveTokens (16,384)",
        }),
        Agent::ClaudeCode => Some(Threshold {
            tokens: window.saturating_sub(CLAUDE_CODE_RESERVE_TOKENS),
            rule: "claude-code: window - 20k output reserve - 13k buffer",
        }),
        Agent::Codex => Some(Threshold {
            tokens: window / 10 * 9,
            rule: "codex: 90% of the window",
        }),
        Agent::SweAgent | Agent::MiniSweAgent | Agent::GeminiCli | Agent::Api => None,
    }
}

/// The provider's list price of one million uncached input tokens, in US dollars, by model-name
/// prefix (longest first), as published by Anthropic and OpenAI in 2025. What the dashboard
/// multiplies saved tokens by: an upper bound, since cached input is billed at a tenth.
pub fn input_usd_per_mtok(model: &str) -> Option<f64> {
    const PRICES: &[(&str, f64)] = &[
        ("claude-opus-4-5", 5.0),
        ("claude-opus-4", 15.0),
        ("claude-3-opus", 15.0),
        ("claude-sonnet-4", 3.0),
        ("claude-3-7-sonnet", 3.0),
        ("claude-3-5-sonnet", 3.0),
        ("claude-haiku-4", 1.0),
        ("claude-3-5-haiku", 0.8),
        ("gpt-5-nano", 0.05),
        ("gpt-5-mini", 0.25),
        ("gpt-5", 1.25),
        ("gpt-4.1-nano", 0.1),
        ("gpt-4.1-mini", 0.4),
        ("gpt-4.1", 2.0),
        ("gpt-4o-mini", 0.15),
        ("gpt-4o", 2.5),
        ("o4-mini", 1.1),
        ("o3-mini", 1.1),
        ("o3", 2.0),
    ];
    let m = model.to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    PRICES
        .iter()
        .find(|(prefix, _)| m.starts_with(prefix))
        .map(|&(_, usd)| usd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_a_provider_states_is_read_from_its_overflow_error() {
        let cases = [
            (
                "prompt is too long: 37400 tokens > 30000 maximum",
                Some(30_000),
            ),
            (
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210,345 tokens > 200,000 maximum"}}"#,
                Some(200_000),
            ),
            (
                "This model's maximum context length is 128000 tokens. However, your messages \
                 resulted in 130512 tokens. Please reduce the length of the messages.",
                Some(128_000),
            ),
            (
                "This model's maximum context length is 4096 tokens. However, you requested 5000 \
                 tokens (4000 in the messages, 1000 in the completion).",
                Some(4_096),
            ),
            (
                "request (5000 tokens) exceeds the available context size (4096 tokens), try \
                 increasing it",
                Some(4_096),
            ),
            (
                "the request exceeds the available context size (n_ctx = 8192)",
                Some(8_192),
            ),
            (
                "Input exceeds the context window of 32768 tokens",
                Some(32_768),
            ),
            (
                "The input token count (1200000) exceeds the maximum number of tokens allowed \
                 (1048576).",
                Some(1_048_576),
            ),
            // No number: nothing to learn.
            ("Your input exceeds the context window of this model.", None),
            ("context_length_exceeded", None),
            ("rate limited; try again in 20 seconds", None),
        ];
        for (text, want) in cases {
            assert_eq!(stated_window(text), want, "{text}");
        }
    }

    #[test]
    fn windows_by_name() {
        assert_eq!(context_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(context_window("claude-opus-4-8[1m]"), Some(1_000_000));
        assert_eq!(context_window("gpt-5.1-codex"), Some(400_000));
        assert_eq!(context_window("openai/gpt-4o-mini"), Some(128_000));
        assert_eq!(context_window("gpt-4"), Some(8_192));
        assert_eq!(context_window("deepseek/deepseek-chat"), Some(128_000));
        assert_eq!(context_window("llama-3"), None);
    }

    #[test]
    fn thresholds_per_agent() {
        let t = compaction_threshold(Some(Agent::ClaudeCode), 200_000);
        assert_eq!(t.map(|t| t.tokens), Some(167_000));
        let t = compaction_threshold(Some(Agent::Codex), 400_000);
        assert_eq!(t.map(|t| t.tokens), Some(360_000));
        assert_eq!(compaction_threshold(Some(Agent::Api), 1), None);
    }

    #[test]
    fn input_prices_by_longest_prefix() {
        assert_eq!(input_usd_per_mtok("claude-sonnet-4-5-20250929"), Some(3.0));
        assert_eq!(input_usd_per_mtok("claude-opus-4-5"), Some(5.0));
        assert_eq!(input_usd_per_mtok("claude-opus-4-1"), Some(15.0));
        assert_eq!(input_usd_per_mtok("openai/gpt-5-mini"), Some(0.25));
        assert_eq!(input_usd_per_mtok("gpt-4o-mini"), Some(0.15));
        assert_eq!(input_usd_per_mtok("llama-3"), None);
    }
}
