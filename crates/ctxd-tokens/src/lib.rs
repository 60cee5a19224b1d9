//! ctxd-tokens: token counts without the network.
//!
//! - OpenAI models get real BPE counts: `o200k_base` (GPT-4o, GPT-4.1, GPT-5, o-series, Codex
//!   models) or `cl100k_base` (GPT-4, GPT-3.5), from the tables `bpe-openai` embeds.
//! - Claude's tokenizer is not public. [`Tokenizer::ClaudeEstimate`] counts with `o200k_base`
//!   and scales by [`CLAUDE_SCALE`], a factor measured against the usage Anthropic reported in
//!   real sessions (see the constant). Reports also fit the scale per session when the session
//!   carries usage, so the estimate is calibrated where it can be.
//! - Any other model is counted with `o200k_base`, and says so.
//!
//! ```
//! use ctxd_core::tokens::TokenCounter;
//! let t = ctxd_tokens::Tokenizer::for_model(Some("gpt-4o"));
//! assert_eq!(t.name(), "o200k_base");
//! assert_eq!(t.count("hello world"), 2);
//! ```

use std::cell::RefCell;
use std::collections::HashMap;

use ctxd_core::model::{EntryKind, Role, Session};
use ctxd_core::tokens::TokenCounter;

/// Anthropic's count relative to `o200k_base` on the same text.
///
/// Measured by fitting `provider = scale × o200k + overhead` over every turn with Anthropic
/// usage in the shared real sessions (`ctxd report --json`, the `turns` series):
/// - Pi `large-session.jsonl`, 438 claude-sonnet-4-5 turns: scale 1.340, median residual 0.5%;
/// - Claude Code 1.0.98 session, 9 claude-sonnet-4 turns: scale 1.341, median residual 0.2%;
/// - Claude Code 1.0.108 session (mostly Japanese), 10 turns: scale 1.472.
///
/// English prose and code: 1.34. Text in other scripts tokenizes worse; a session's own fit
/// (the report's `calibration`) corrects for that where the session carries usage.
pub const CLAUDE_SCALE: f64 = 1.34;

/// A token counter for one model family.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tokenizer {
    O200k,
    Cl100k,
    /// `o200k_base` scaled by [`CLAUDE_SCALE`].
    ClaudeEstimate,
}

impl Tokenizer {
    /// The tokenizer for a model name (`None`: unknown model, counted with `o200k_base`).
    pub fn for_model(model: Option<&str>) -> Self {
        let Some(model) = model else {
            return Tokenizer::O200k;
        };
        let m = model.to_ascii_lowercase();
        let m = m.rsplit('/').next().unwrap_or(&m);
        if m.starts_with("claude") || m.contains("anthropic") {
            Tokenizer::ClaudeEstimate
        } else if m.starts_with("gpt-4o") || m.starts_with("gpt-4.1") || m.starts_with("gpt-4.5") {
            Tokenizer::O200k
        } else if m.starts_with("gpt-4") || m.starts_with("gpt-3.5") || m.contains("text-embedding")
        {
            Tokenizer::Cl100k
        } else {
            Tokenizer::O200k
        }
    }

    fn bpe(self) -> &'static bpe_openai::Tokenizer {
        match self {
            Tokenizer::Cl100k => bpe_openai::cl100k_base(),
            Tokenizer::O200k | Tokenizer::ClaudeEstimate => bpe_openai::o200k_base(),
        }
    }
}

impl TokenCounter for Tokenizer {
    fn count(&self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        let n = self.bpe().count(text) as u64;
        match self {
            Tokenizer::ClaudeEstimate => (n as f64 * CLAUDE_SCALE).round() as u64,
            _ => n,
        }
    }

    fn name(&self) -> &str {
        match self {
            Tokenizer::O200k => "o200k_base",
            Tokenizer::Cl100k => "cl100k_base",
            Tokenizer::ClaudeEstimate => "claude-estimate (o200k_base scaled)",
        }
    }
}

/// Pieces up to this many bytes are memoised: words, identifiers, punctuation runs.
const MEMO_PIECE_BYTES: usize = 32;
/// The model a session ended on: the last assistant response's model, a later model change, or
/// the header's model.
pub fn last_model(session: &Session) -> Option<&str> {
    session
        .entries
        .iter()
        .rev()
        .filter(|e| !e.sidechain)
        .find_map(|e| match &e.kind {
            EntryKind::Message(m) if m.role == Role::Assistant => m.model.as_deref(),
            EntryKind::ModelChange { model, .. } => Some(model.as_str()),
            _ => None,
        })
        .or(session.meta.model.as_deref())
}

/// The counter a session's report uses: its last model's tokenizer, memoising piece counts.
/// One choice for every reader (`ctxd report`, the dashboard), so their numbers agree.
pub fn for_session(session: &Session) -> CachingCounter {
    CachingCounter::new(Tokenizer::for_model(last_model(session)))
}

/// The memo's bound, so a huge session cannot grow it without limit (about 10 MB at most).
const MEMO_ENTRIES: usize = 200_000;

/// A [`Tokenizer`] that remembers the count of each pre-tokenized piece it has seen. Sessions
/// repeat the same words and identifiers endlessly, and BPE-encoding a piece costs far more than
/// looking it up: the report of a 1 MB session counts about twice as fast. Counts are identical
/// to the tokenizer's. One per thread (it is not `Sync`).
pub struct CachingCounter {
    tokenizer: Tokenizer,
    memo: RefCell<HashMap<Box<str>, u32>>,
}

impl CachingCounter {
    pub fn new(tokenizer: Tokenizer) -> Self {
        Self {
            tokenizer,
            memo: RefCell::new(HashMap::new()),
        }
    }

    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }
}

impl TokenCounter for CachingCounter {
    fn count(&self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        let bpe = self.tokenizer.bpe();
        let normalized = bpe.normalize(text);
        let mut memo = self.memo.borrow_mut();
        let mut n = 0u64;
        for piece in bpe.split(normalized.as_str()) {
            if piece.len() > MEMO_PIECE_BYTES {
                n += bpe.bpe.count(piece.as_bytes()) as u64;
                continue;
            }
            if let Some(&c) = memo.get(piece) {
                n += u64::from(c);
                continue;
            }
            let c = bpe.bpe.count(piece.as_bytes());
            if memo.len() < MEMO_ENTRIES {
                memo.insert(piece.into(), c as u32);
            }
            n += c as u64;
        }
        match self.tokenizer {
            Tokenizer::ClaudeEstimate => (n as f64 * CLAUDE_SCALE).round() as u64,
            _ => n,
        }
    }

    fn name(&self) -> &str {
        self.tokenizer.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_family_by_model() {
        assert_eq!(
            Tokenizer::for_model(Some("gpt-5.1-codex")),
            Tokenizer::O200k
        );
        assert_eq!(Tokenizer::for_model(Some("gpt-4-0613")), Tokenizer::Cl100k);
        assert_eq!(
            Tokenizer::for_model(Some("openai/gpt-4o-mini")),
            Tokenizer::O200k
        );
        assert_eq!(
            Tokenizer::for_model(Some("claude-sonnet-4-5")),
            Tokenizer::ClaudeEstimate
        );
        assert_eq!(Tokenizer::for_model(None), Tokenizer::O200k);
    }

    #[test]
    fn the_memo_changes_no_count() {
        let text = "fn main() { let x = 1; }\n// héllo wörld 😀 \t  spaces   and\r\nlines\n"
            .repeat(50)
            + &"x".repeat(100);
        for t in [
            Tokenizer::O200k,
            Tokenizer::Cl100k,
            Tokenizer::ClaudeEstimate,
        ] {
            let cached = CachingCounter::new(t);
            assert_eq!(cached.count(&text), t.count(&text), "{t:?}");
            // Second time from the memo.
            assert_eq!(cached.count(&text), t.count(&text), "{t:?}");
            assert_eq!(cached.name(), t.name());
        }
    }

    #[test]
    fn real_bpe_counts() {
        // Pinned counts (bpe-openai checks its encoders against tiktoken in its own tests).
        assert_eq!(Tokenizer::O200k.count("hello world"), 2);
        assert_eq!(Tokenizer::Cl100k.count("hello world"), 2);
        assert_eq!(Tokenizer::O200k.count("fn main() { println!(\"hi\"); }"), 9);
        assert_eq!(Tokenizer::O200k.count(""), 0);
    }
}
