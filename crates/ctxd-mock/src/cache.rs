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
//!
//! A session's requests resend the same blocks, so each block's canonical form is remembered
//! by its bytes ([`Blocks`]): a body is scanned (blocks as raw JSON) and hashed, and only a
//! block not seen before is parsed and re-serialised. Parsing every 1 MiB body whole made the
//! simulation cost ~2.3 ms a request, which on a 2-core machine took CPU from the gateway a
//! benchmark measures.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
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

/// A block as the cache sees it: its canonical form's hash and tokens, its breakpoint (`Some`:
/// with `"ttl": "1h"`), and the `cache_control` markers in it.
#[derive(Clone, Copy, Debug)]
struct Canon {
    hash: u64,
    tokens: u64,
    mark: Option<bool>,
    markers: usize,
}

impl Canon {
    /// `block` (content blocks, a tool, a system block) with its markers counted and removed.
    fn of(mut block: Value) -> Canon {
        let mark = block
            .get("cache_control")
            .map(|cc| cc.get("ttl").and_then(Value::as_str) == Some("1h"));
        let markers = strip(&mut block);
        let text = block.to_string();
        Canon {
            hash: xxhash_rust::xxh3::xxh3_64(text.as_bytes()),
            tokens: (text.len() / 4) as u64,
            mark,
            markers,
        }
    }
}

/// Blocks seen, by a hash of their bytes (and whether they were a string content): their
/// canonical form. Bounded: cleared when full.
#[derive(Debug, Default)]
pub(crate) struct Blocks(HashMap<u128, Canon>);

impl Blocks {
    const MAX: usize = 200_000;

    /// The canonical form of the raw block `raw` (`text: true`: a string content, read as
    /// one text block).
    fn canon(&mut self, raw: &RawValue, text: bool) -> Option<Canon> {
        let key = xxhash_rust::xxh3::xxh3_128(raw.get().as_bytes()) ^ u128::from(text);
        if let Some(c) = self.0.get(&key) {
            return Some(*c);
        }
        let value: Value = serde_json::from_str(raw.get()).ok()?;
        let block = if text {
            serde_json::json!({"type": "text", "text": value})
        } else {
            value
        };
        let c = Canon::of(block);
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
        self.0.insert(key, c);
        Some(c)
    }
}

/// The parts of a body the cache reads, its blocks left as raw JSON.
#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<Vec<RawMessage<'a>>>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawMessage<'a> {
    #[serde(default)]
    role: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// The blocks of a `system` or a message's `content`: a string is one text block (`true`),
/// an array its blocks; anything else none.
fn blocks_of(raw: &RawValue) -> Vec<(&RawValue, bool)> {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => vec![(raw, true)],
        Some(b'[') => serde_json::from_str::<Vec<&RawValue>>(raw.get())
            .map(|blocks| blocks.into_iter().map(|b| (b, false)).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

impl Prompt {
    /// Read an Anthropic body through `memo`; `None` when it is not JSON.
    pub(crate) fn read_with(
        body: &[u8],
        model: &str,
        config: &Config,
        memo: &mut Blocks,
    ) -> Option<Prompt> {
        let raw: RawBody<'_> = serde_json::from_slice(body).ok()?;
        let mut prompt = Prompt {
            blocks: Vec::new(),
            markers: usize::from(raw.cache_control.is_some()),
        };
        let mut h = DefaultHasher::new();
        model.hash(&mut h);
        let mut tokens = 0u64;
        let mut push = |prompt: &mut Prompt, role: &str, c: Canon| {
            prompt.markers += c.markers;
            role.hash(&mut h);
            c.hash.hash(&mut h);
            tokens += c.tokens;
            prompt.blocks.push(Block {
                prefix: h.finish(),
                tokens,
                ttl: c.mark.map(|hour| {
                    if hour {
                        Duration::from_secs(3600)
                    } else {
                        config.cache_ttl
                    }
                }),
            });
        };
        for t in raw.tools.unwrap_or_default() {
            push(&mut prompt, "tool", memo.canon(t, false)?);
        }
        for (b, text) in raw.system.map(blocks_of).unwrap_or_default() {
            push(&mut prompt, "system", memo.canon(b, text)?);
        }
        for m in raw.messages.unwrap_or_default() {
            let role = m.role.as_deref().unwrap_or("user");
            for (b, text) in m.content.map(blocks_of).unwrap_or_default() {
                push(&mut prompt, role, memo.canon(b, text)?);
            }
        }
        Some(prompt)
    }

    /// Read an Anthropic body with a memo of its own; `None` when it is not JSON.
    #[cfg(test)]
    pub(crate) fn read(body: &[u8], model: &str, config: &Config) -> Option<Prompt> {
        Self::read_with(body, model, config, &mut Blocks::default())
    }
}

/// The parts of a Gemini body the implicit cache reads.
#[derive(Deserialize)]
struct GeminiBody<'a> {
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
    #[serde(
        borrow,
        default,
        rename = "systemInstruction",
        alias = "system_instruction"
    )]
    system: Option<GeminiContent<'a>>,
    #[serde(borrow, default)]
    contents: Option<Vec<GeminiContent<'a>>>,
}

#[derive(Deserialize)]
struct GeminiContent<'a> {
    #[serde(default)]
    role: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    parts: Option<Vec<&'a RawValue>>,
}

impl Prompt {
    /// Read a Gemini body through `memo`: its tools, system parts and each content's parts as
    /// blocks, with an implicit breakpoint at the end of every content (Gemini caches any
    /// prefix it has seen, without markers); `None` when it is not JSON.
    pub(crate) fn read_gemini_with(
        body: &[u8],
        model: &str,
        config: &Config,
        memo: &mut Blocks,
    ) -> Option<Prompt> {
        let raw: GeminiBody<'_> = serde_json::from_slice(body).ok()?;
        let mut prompt = Prompt {
            blocks: Vec::new(),
            markers: 0,
        };
        let mut h = DefaultHasher::new();
        ("gemini", model).hash(&mut h);
        let mut tokens = 0u64;
        let mut push = |prompt: &mut Prompt, role: &str, c: Canon, mark: bool| {
            role.hash(&mut h);
            c.hash.hash(&mut h);
            tokens += c.tokens;
            prompt.blocks.push(Block {
                prefix: h.finish(),
                tokens,
                ttl: mark.then_some(config.cache_ttl),
            });
        };
        let tools = raw.tools.unwrap_or_default();
        for (i, t) in tools.iter().enumerate() {
            push(
                &mut prompt,
                "tool",
                memo.canon(t, false)?,
                i + 1 == tools.len(),
            );
        }
        let system = raw.system.into_iter().map(|c| ("system".into(), c));
        let contents = raw.contents.unwrap_or_default().into_iter().map(|c| {
            let role = c.role.clone().unwrap_or_else(|| "user".into());
            (role, c)
        });
        for (role, c) in system.chain(contents) {
            let parts = c.parts.unwrap_or_default();
            for (i, p) in parts.iter().enumerate() {
                push(
                    &mut prompt,
                    &role,
                    memo.canon(p, false)?,
                    i + 1 == parts.len(),
                );
            }
        }
        Some(prompt)
    }
}

/// The entries written so far: prefix hash → expiry and TTL.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    entries: Mutex<HashMap<u64, (Instant, Duration)>>,
    blocks: Mutex<Blocks>,
}

impl Cache {
    /// Read an Anthropic body through the cache's memo of blocks; `None` when it is not JSON.
    pub(crate) fn prompt(&self, body: &[u8], model: &str, config: &Config) -> Option<Prompt> {
        let mut memo = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        Prompt::read_with(body, model, config, &mut memo)
    }

    /// Read a Gemini body through the cache's memo of blocks; `None` when it is not JSON.
    pub(crate) fn gemini_prompt(
        &self,
        body: &[u8],
        model: &str,
        config: &Config,
    ) -> Option<Prompt> {
        let mut memo = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        Prompt::read_gemini_with(body, model, config, &mut memo)
    }

    /// Gemini's implicit cache: the longest prefix of `prompt` already seen (at a content's
    /// end, within its TTL) is read; every content end long enough is written (Google bills
    /// no writes, so none are reported).
    pub(crate) fn serve_implicit(&self, prompt: &Prompt, config: &Config, now: Instant) -> Usage {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, (expires, _)| *expires > now);
        let hit = (0..prompt.blocks.len())
            .rev()
            .find(|&j| entries.contains_key(&prompt.blocks[j].prefix));
        for b in &prompt.blocks {
            let Some(ttl) = b.ttl else { continue };
            if b.tokens >= config.cache_min_tokens {
                entries.insert(b.prefix, (now + ttl, ttl));
            }
        }
        Usage {
            read: hit.map_or(0, |j| prompt.blocks[j].tokens),
            creation: 0,
        }
    }

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

    /// The blocks of `p` as (prefix, tokens, ttl).
    fn shape(p: &Prompt) -> Vec<(u64, u64, Option<Duration>)> {
        p.blocks
            .iter()
            .map(|b| (b.prefix, b.tokens, b.ttl))
            .collect()
    }

    #[test]
    fn the_memo_reads_a_body_as_a_fresh_read_does() {
        let config = Config::default();
        let mut memo = Blocks::default();
        // A string system prompt, a tool, string and block contents, a one-hour breakpoint
        // and a top-level marker.
        let b = serde_json::to_vec(&json!({"model": "m", "system": "be brief",
            "cache_control": {"type": "ephemeral"},
            "tools": [{"name": "t", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "yo",
                    "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}))
        .unwrap();
        for body in [body(6, &[5], None), body(8, &[3, 7], Some(2)), b] {
            let fresh = Prompt::read(&body, "m", &config).unwrap();
            // Twice through one memo: the second read takes every block from it.
            let first = Prompt::read_with(&body, "m", &config, &mut memo).unwrap();
            let remembered = memo.0.len();
            let again = Prompt::read_with(&body, "m", &config, &mut memo).unwrap();
            assert_eq!(memo.0.len(), remembered);
            for p in [&first, &again] {
                assert_eq!(shape(p), shape(&fresh));
                assert_eq!(p.markers, fresh.markers);
            }
        }
        let with_hour = Prompt::read_with(
            &serde_json::to_vec(&json!({"model": "m", "messages": [{"role": "user",
                "content": [{"type": "text", "text": "a",
                    "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}))
            .unwrap(),
            "m",
            &config,
            &mut memo,
        )
        .unwrap();
        assert_eq!(with_hour.blocks[0].ttl, Some(Duration::from_secs(3600)));
        // The same text as a string content and as a text block is one block to the cache.
        let as_string = Prompt::read(
            br#"{"messages":[{"role":"user","content":"a"}]}"#,
            "m",
            &config,
        )
        .unwrap();
        let as_block = Prompt::read(
            br#"{"messages":[{"role":"user","content":[{"text":"a","type":"text"}]}]}"#,
            "m",
            &config,
        )
        .unwrap();
        assert_eq!(shape(&as_string), shape(&as_block));
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
    fn gemini_reads_the_longest_prefix_seen() {
        let cache = Cache::default();
        let config = Config::default();
        let t = Instant::now();
        let big = "x".repeat(8_000);
        let body = |n: usize| {
            let contents: Vec<Value> = (0..n)
                .map(|i| {
                    let role = if i % 2 == 0 { "user" } else { "model" };
                    json!({"role": role, "parts": [{"text": format!("{i} {big}")}]})
                })
                .collect();
            serde_json::to_vec(&json!({"contents": contents})).unwrap()
        };
        let serve = |b: &[u8]| {
            let p = cache.gemini_prompt(b, "gemini-2.5-pro", &config).unwrap();
            cache.serve_implicit(&p, &config, t)
        };
        assert_eq!(serve(&body(1)), Usage::default());
        let second = serve(&body(3));
        assert!(second.read > 1_900 && second.read < 2_100, "{second:?}");
        let third = serve(&body(5));
        assert!(third.read > 5_900, "{third:?}");
        // Another model reads nothing.
        let p = cache
            .gemini_prompt(&body(5), "gemini-2.5-flash", &config)
            .unwrap();
        assert_eq!(cache.serve_implicit(&p, &config, t).read, 0);
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
