//! Strict mode: the request shapes the real APIs refuse, refused here too, with each provider's
//! status (400) and error body, before any scripted reply is used.
//!
//! Each API's rules are pure functions over the decoded body's [`Head`] (per-API submodules);
//! they read only message heads (roles, block types, ids, signatures) and skip text contents,
//! so a 1 MB body costs one more scan. A message whose shape the rules cannot read (a field of
//! an unexpected type) is left alone: the rules judge conversation structure, not the schema.
//!
//! The context-window check is shared: [`estimate_tokens`] of the body (the figure replies
//! report as `input_tokens`) against the model's window ([`window`]).

mod anthropic;
mod chat;
pub(crate) mod gemini;
mod responses;
mod tools;

use axum::http::HeaderMap;

use crate::config::{Config, Reasoning};
use crate::request::Head;
use crate::Api;

/// The response header naming the rule that refused a request (also in [`crate::Recorded`]).
pub const REFUSED_HEADER: &str = "x-mock-refused";

/// A refused request: which rule, and the error the real API returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// A stable name for tests (`anthropic.tool_use_unanswered`, `context_window`, ...).
    pub rule: &'static str,
    pub message: String,
    /// OpenAI's `param` (Anthropic has none).
    pub param: Option<String>,
    /// OpenAI's `code`.
    pub code: Option<&'static str>,
}

impl Refusal {
    pub(crate) fn new(rule: &'static str, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    pub(crate) fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub(crate) fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
}

/// The token estimate of a request: a quarter of its decoded bytes (at least 1). Replies report
/// it as `input_tokens`; the window check compares it.
pub(crate) fn estimate_tokens(body_len: usize) -> u64 {
    (body_len / 4).max(1) as u64
}

/// Every rule of `api`, then the context window.
pub(crate) fn check(
    api: Api,
    head: &Head,
    body_len: usize,
    headers: &HeaderMap,
    config: &Config,
) -> Result<(), Refusal> {
    match api {
        Api::Anthropic => {
            tools::check(api, head)?;
            anthropic::check(head, headers, config.reasoning != Reasoning::Off)?;
        }
        Api::OpenAiChat => {
            tools::check(api, head)?;
            chat::check(head)?;
        }
        Api::OpenAiResponses => {
            tools::check(api, head)?;
            responses::check(head)?;
        }
        // Its rules need the mock's record of signed calls: `gemini::check`, run first.
        Api::Gemini => {}
    }
    let tokens = estimate_tokens(body_len);
    let max = window(head.model(), headers, config);
    if tokens <= max {
        return Ok(());
    }
    Err(match api {
        Api::Anthropic => Refusal::new(
            "context_window",
            format!("prompt is too long: {tokens} tokens > {max} maximum"),
        ),
        Api::OpenAiChat => Refusal::new(
            "context_window",
            format!(
                "This model's maximum context length is {max} tokens. However, your messages \
                 resulted in {tokens} tokens. Please reduce the length of the messages."
            ),
        )
        .param("messages")
        .code("context_length_exceeded"),
        Api::OpenAiResponses => Refusal::new(
            "context_window",
            "Your input exceeds the context window of this model. Please adjust your input and \
             try again.",
        )
        .param("input")
        .code("context_length_exceeded"),
        Api::Gemini => Refusal::new(
            "context_window",
            format!(
                "The input token count ({tokens}) exceeds the maximum number of tokens allowed \
                 ({max})."
            ),
        ),
    })
}

/// The context window of `model` in tokens: the longest matching prefix of
/// [`Config::windows`], else the built-in table, else [`Config::default_window`].
pub(crate) fn window(model: &str, headers: &HeaderMap, config: &Config) -> u64 {
    if let Some((_, w)) = config
        .windows
        .iter()
        .filter(|(prefix, _)| model.starts_with(prefix.as_str()))
        .max_by_key(|(prefix, _)| prefix.len())
    {
        return *w;
    }
    table(model, headers).unwrap_or(config.default_window)
}

/// The built-in windows (as of 2025-2026; every Gemini model 1,048,576).
fn table(model: &str, headers: &HeaderMap) -> Option<u64> {
    let m = model.to_ascii_lowercase();
    let w = if m.starts_with("gemini") {
        1_048_576
    } else if m.starts_with("claude") {
        if m.contains("[1m]") || m.ends_with("-1m") || has_1m_beta(headers) {
            1_000_000
        } else {
            200_000
        }
    } else if m.starts_with("gpt-5") || m.starts_with("codex") {
        400_000
    } else if m.starts_with("gpt-4.1") {
        1_047_576
    } else if m.starts_with("gpt-4o") || m.starts_with("gpt-4-turbo") {
        128_000
    } else if m.starts_with("gpt-4-32k") {
        32_768
    } else if m == "gpt-4" || m.starts_with("gpt-4-0") {
        8_192
    } else if m.starts_with("gpt-3.5") {
        16_385
    } else if ["o1", "o3", "o4"]
        .iter()
        .any(|o| m == *o || m.starts_with(&format!("{o}-")))
    {
        200_000
    } else {
        return None;
    };
    Some(w)
}

/// An `anthropic-beta` header (comma-separated tokens, possibly repeated) asking for the 1M
/// window.
fn has_1m_beta(headers: &HeaderMap) -> bool {
    beta_tokens(headers).any(|t| t.starts_with("context-1m"))
}

/// The tokens of every `anthropic-beta` header.
pub(crate) fn beta_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn w(model: &str) -> u64 {
        window(model, &HeaderMap::new(), &Config::default())
    }

    #[test]
    fn windows_by_model() {
        assert_eq!(w("claude-sonnet-4-5"), 200_000);
        assert_eq!(w("claude-sonnet-4-5[1m]"), 1_000_000);
        assert_eq!(w("claude-opus-4-1m"), 1_000_000);
        assert_eq!(w("gpt-5.5"), 400_000);
        assert_eq!(w("gpt-5-codex"), 400_000);
        assert_eq!(w("codex-mini-latest"), 400_000);
        assert_eq!(w("gpt-4.1-mini"), 1_047_576);
        assert_eq!(w("gpt-4o-mini"), 128_000);
        assert_eq!(w("gpt-4-turbo"), 128_000);
        assert_eq!(w("gpt-4"), 8_192);
        assert_eq!(w("gpt-3.5-turbo"), 16_385);
        assert_eq!(w("o3"), 200_000);
        assert_eq!(w("o4-mini"), 200_000);
        assert_eq!(w("mock-model"), 200_000);
        assert_eq!(w("gemini-2.5-flash"), 1_048_576);
        assert_eq!(w("gemini-3-pro-preview"), 1_048_576);
        let mut h = HeaderMap::new();
        h.append(
            "anthropic-beta",
            HeaderValue::from_static("a-1, context-1m-2025-08-07"),
        );
        assert_eq!(
            window("claude-sonnet-4-5", &h, &Config::default()),
            1_000_000
        );
        assert_eq!(window("gpt-4o", &h, &Config::default()), 128_000);
    }

    #[test]
    fn config_overrides_the_table() {
        let config = Config {
            windows: vec![("gpt-4o".into(), 10), ("gpt-4o-mini".into(), 20)],
            default_window: 5,
            ..Config::default()
        };
        let h = HeaderMap::new();
        assert_eq!(window("gpt-4o-mini-2024", &h, &config), 20);
        assert_eq!(window("gpt-4o", &h, &config), 10);
        assert_eq!(window("claude-x", &h, &config), 200_000);
        assert_eq!(window("mock-model", &h, &config), 5);
    }

    #[test]
    fn overflow_per_api() {
        let config = Config {
            default_window: 10,
            ..Config::default()
        };
        let head: Head = serde_json::from_str(r#"{"model":"m","input":"x"}"#).unwrap();
        let h = HeaderMap::new();
        assert!(check(Api::OpenAiResponses, &head, 40, &h, &config).is_ok());
        let r = check(Api::OpenAiResponses, &head, 44, &h, &config).unwrap_err();
        assert_eq!(
            (r.rule, r.code),
            ("context_window", Some("context_length_exceeded"))
        );
        assert_eq!(r.param.as_deref(), Some("input"));
        let head: Head =
            serde_json::from_str(r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#)
                .unwrap();
        let r = check(Api::Anthropic, &head, 400, &h, &config).unwrap_err();
        assert_eq!(r.message, "prompt is too long: 100 tokens > 10 maximum");
        let r = check(Api::OpenAiChat, &head, 400, &h, &config).unwrap_err();
        assert!(r.message.starts_with(
            "This model's maximum context length is 10 tokens. However, your messages \
             resulted in 100 tokens."
        ));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod perf {
    use super::*;
    use serde_json::json;

    /// The benchmark's shape: a ~1 MiB Claude conversation of tool exchanges. Run with
    /// `cargo test --release -p ctxd-mock --lib -- --ignored validation_cost --nocapture`.
    #[test]
    #[ignore = "timing, release builds only"]
    fn validation_cost() {
        let words = "fn let match self config request session store ".repeat(40);
        let mut messages = Vec::new();
        let mut turn = 0;
        while serde_json::to_vec(&messages).unwrap().len() < 1 << 20 {
            let id = format!("toolu_bench_{turn:04}");
            messages.push(json!({"role": "user", "content": [{"type": "text", "text": words}]}));
            messages.push(json!({"role": "assistant", "content": [
                {"type": "text", "text": &words[..400]},
                {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": words}]}));
            turn += 1;
        }
        let body = json!({"model": "claude-sonnet-4-5[1m]", "messages": messages}).to_string();
        let config = Config::default();
        let h = HeaderMap::new();
        let n = 100;
        let t = std::time::Instant::now();
        for _ in 0..n {
            let head: Head = serde_json::from_str(&body).unwrap();
            std::hint::black_box(&head);
        }
        let parse = t.elapsed() / n;
        let head: Head = serde_json::from_str(&body).unwrap();
        let t = std::time::Instant::now();
        for _ in 0..n {
            check(Api::Anthropic, &head, body.len(), &h, &config).unwrap();
        }
        let check_time = t.elapsed() / n;
        eprintln!(
            "{} bytes, {} messages: head parse {parse:?}, rules {check_time:?}",
            body.len(),
            messages.len()
        );
    }
}
