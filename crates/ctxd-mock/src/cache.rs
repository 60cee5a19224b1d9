//! Anthropic's prompt cache, simulated, so tests and benchmarks can measure hit rates.
//!
//! A prompt is its blocks in Anthropic's order: each tool, the system prompt's blocks, each
//! message's content blocks (a string content is one text block). A prefix is named by a chained
//! hash of the model and its blocks in canonical JSON (keys sorted, `cache_control` left out,
//! the message's role included), so ctxd's re-rendered blocks and the client's bytes of the same
//! content are the same prefix, as they are to the real tokenizer. As the real cache:
//!
//! - a breakpoint (`cache_control` on a block) **writes** an entry for the prefix ending there,
//!   when that prefix reaches the minimum cacheable length ([`Config::cache_min_tokens`]);
//! - a **read** is the longest prefix ending at an earlier written entry found within 20 blocks
//!   before one of the request's breakpoints (the automatic lookback);
//! - entries live 5 minutes ([`Config::cache_ttl`]; `"ttl": "1h"` an hour) after their last
//!   write or read, and a read keeps every entry on the prefix it read alive;
//! - more than [`MAX_BREAKPOINTS`] `cache_control` blocks are refused with the API's own error.
//!
//! Tokens are the mock's estimate (a quarter of the canonical bytes). The usage reports
//! `cache_read_input_tokens`, `cache_creation_input_tokens` (the prefix past the read up to the
//! last breakpoint written) and `input_tokens` (the rest), as the real API does.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::Config;

/// Anthropic refuses more `cache_control` blocks than this.
pub(crate) const MAX_BREAKPOINTS: usize = 4;

/// Blocks before a breakpoint the cache looks back for an earlier entry.
const LOOKBACK: usize = 20;

/// What a request got from the cache, in tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub read: u64,
    pub creation: u64,
}

/// One block of a prompt: the prefix's hash up to and including it, the prefix's tokens, and
/// its breakpoint's TTL if it has one.
#[derive(Debug)]
struct Block {
    prefix: u64,
    tokens: u64,
    ttl: Option<Duration>,
}

/// The prompt of a body: its blocks, and the number of `cache_control` markers anywhere
/// (nested ones and a top-level one too).
#[derive(Debug)]
pub(crate) struct Prompt {
    blocks: Vec<Block>,
    pub markers: usize,
}

/// The API's refusal message for `found` breakpoints.
pub(crate) fn too_many(found: usize) -> String {
    format!(
        "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."
    )
}

fn ttl_of(cc: &Value, config: &Config) -> Duration {
    match cc.get("ttl").and_then(Value::as_str) {
        Some("1h") => Duration::from_secs(3600),
        _ => config.cache_ttl,
    }
}

/// Count the `cache_control` keys in `v` (every depth) and remove them.
fn strip(v: &mut Value) -> usize {
    match v {
        Value::Object(o) => {
            let own = usize::from(o.remove("cache_control").is_some());
            own + o.values_mut().map(strip).sum::<usize>()
        }
        Value::Array(a) => a.iter_mut().map(strip).sum(),
        _ => 0,
    }
}

impl Prompt {
    /// Read an Anthropic body; `None` when it is not JSON. Cheap for bodies without any
    /// `cache_control` is not a goal: the mock parses only bodies that have one.
    pub(crate) fn read(body: &[u8], model: &str, config: &Config) -> Option<Prompt> {
        let mut v: Value = serde_json::from_slice(body).ok()?;
        let mut prompt = Prompt {
            blocks: Vec::new(),
            markers: 0,
        };
        let mut h = DefaultHasher::new();
        model.hash(&mut h);
        let mut tokens = 0u64;
        let mut push = |prompt: &mut Prompt, role: &str, mut block: Value| {
            let ttl = block.get("cache_control").map(|cc| ttl_of(cc, config));
            prompt.markers += strip(&mut block);
            let text = block.to_string();
            role.hash(&mut h);
            text.hash(&mut h);
            tokens += (text.len() / 4) as u64;
            prompt.blocks.push(Block {
                prefix: h.finish(),
                tokens,
                ttl,
            });
        };
        if let Some(top) = v.as_object_mut() {
            if top.remove("cache_control").is_some() {
                prompt.markers += 1;
            }
        }
        if let Some(Value::Array(tools)) = v.get_mut("tools").map(Value::take) {
            for t in tools {
                push(&mut prompt, "tool", t);
            }
        }
        match v.get_mut("system").map(Value::take) {
            Some(Value::String(s)) => push(
                &mut prompt,
                "system",
                serde_json::json!({"type": "text", "text": s}),
            ),
            Some(Value::Array(blocks)) => {
                for b in blocks {
                    push(&mut prompt, "system", b);
                }
            }
            _ => {}
        }
        if let Some(Value::Array(messages)) = v.get_mut("messages").map(Value::take) {
            for mut m in messages {
                let role = m
                    .get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("user")
                    .to_owned();
                match m.get_mut("content").map(Value::take) {
                    Some(Value::String(s)) => push(
                        &mut prompt,
                        &role,
                        serde_json::json!({"type": "text", "text": s}),
                    ),
                    Some(Value::Array(blocks)) => {
                        for b in blocks {
                            push(&mut prompt, &role, b);
                        }
                    }
                    _ => {}
                }
            }
        }
        Some(prompt)
    }
}

/// The entries written so far: prefix hash → expiry and TTL.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    entries: Mutex<HashMap<u64, (Instant, Duration)>>,
}

impl Cache {
    /// Look `prompt` up and write its breakpoints' entries at `now`.
    pub(crate) fn serve(&self, prompt: &Prompt, config: &Config, now: Instant) -> Usage {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, (expires, _)| *expires > now);
        let marks: Vec<usize> = (0..prompt.blocks.len())
            .filter(|&i| prompt.blocks[i].ttl.is_some())
            .collect();
        // The longest prefix ending at a live entry within the lookback of a breakpoint.
        let hit = marks
            .iter()
            .filter_map(|&b| {
                (b.saturating_sub(LOOKBACK)..=b)
                    .rev()
                    .find(|&j| entries.contains_key(&prompt.blocks[j].prefix))
            })
            .max();
        let read = hit.map_or(0, |j| prompt.blocks[j].tokens);
        if let Some(j) = hit {
            for b in &prompt.blocks[..=j] {
                if let Some((expires, ttl)) = entries.get_mut(&b.prefix) {
                    *expires = now + *ttl;
                }
            }
        }
        let mut written_to = None;
        for &b in &marks {
            let block = &prompt.blocks[b];
            if block.tokens < config.cache_min_tokens || hit.is_some_and(|j| b <= j) {
                continue;
            }
            let ttl = block.ttl.unwrap_or(config.cache_ttl);
            entries.insert(block.prefix, (now + ttl, ttl));
            written_to = Some(block.tokens);
        }
        Usage {
            read,
            creation: written_to.map_or(0, |t| t.saturating_sub(read)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(n: usize, mark_at: &[usize], edit: Option<usize>) -> Vec<u8> {
        let messages: Vec<Value> = (0..n)
            .map(|i| {
                let text = if Some(i) == edit {
                    "edited".to_owned()
                } else {
                    format!("{i} {}", "x".repeat(4_000))
                };
                let mut block = json!({"type": "text", "text": text});
                if mark_at.contains(&i) {
                    block["cache_control"] = json!({"type": "ephemeral"});
                }
                json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": [block]})
            })
            .collect();
        serde_json::to_vec(&json!({"model": "m", "messages": messages})).unwrap()
    }

    fn serve(cache: &Cache, b: &[u8], now: Instant) -> Usage {
        let config = Config::default();
        let p = Prompt::read(b, "m", &config).unwrap();
        cache.serve(&p, &config, now)
    }

    #[test]
    fn a_breakpoint_writes_and_a_longer_prompt_reads_it() {
        let cache = Cache::default();
        let t = Instant::now();
        let first = serve(&cache, &body(3, &[2], None), t);
        assert_eq!(first.read, 0);
        assert!(first.creation > 2_000, "{first:?}");
        let second = serve(&cache, &body(5, &[4], None), t);
        assert_eq!(second.read, first.creation);
        assert!(
            second.creation > 1_000 && second.creation < 2_100,
            "{second:?}"
        );
        // Another model reads nothing.
        let config = Config::default();
        let p = Prompt::read(&body(5, &[4], None), "other", &config).unwrap();
        assert_eq!(cache.serve(&p, &config, t).read, 0);
    }

    #[test]
    fn an_edit_breaks_the_prefix_unless_a_breakpoint_reads_before_it() {
        let cache = Cache::default();
        let t = Instant::now();
        serve(&cache, &body(30, &[5, 29], None), t);
        // Message 10 edited: the tail's lookback (20 blocks) does not reach message 5.
        let missed = serve(&cache, &body(31, &[30], Some(10)), t);
        assert_eq!(missed.read, 0);
        let read = serve(&cache, &body(31, &[5, 30], Some(10)), t);
        assert!(read.read > 5_000, "{read:?}");
    }

    #[test]
    fn entries_expire_and_short_prefixes_are_not_written() {
        let cache = Cache::default();
        let t = Instant::now();
        serve(&cache, &body(3, &[2], None), t);
        let later = t + Duration::from_secs(301);
        assert_eq!(serve(&cache, &body(3, &[2], None), later).read, 0);
        let tiny = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#;
        let u = serve(&cache, tiny, t);
        assert_eq!(u, Usage::default());
    }

    #[test]
    fn every_marker_counts() {
        let b = br#"{"model":"m","cache_control":{"type":"ephemeral"},"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],
        "messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","cache_control":{"type":"ephemeral"},
        "content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}]}]}"#;
        let p = Prompt::read(b, "m", &Config::default()).unwrap();
        assert_eq!(p.markers, 4);
        assert_eq!(
            too_many(5),
            "A maximum of 4 blocks with cache_control may be provided. Found 5."
        );
    }
}
