//! A deterministic, realistic Pi v3 session of a chosen size, for `ctxd-bench files`.
//!
//! The session looks like a long coding session: a header, model and thinking-level changes, user
//! prompts, assistant turns with thinking (and its signature), text and tool calls, tool results
//! of varied size (source files, grep output, test logs, edits, the odd error), a compaction every
//! fifth of the way and an injected `custom_message` now and then. Everything comes from a seeded
//! splitmix64 generator, so the same size and seed always give the same bytes.

use std::io::Write;

use serde_json::{json, Value};

/// splitmix64: tiny, fast, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; 0 when `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items.get(self.below(items.len())).copied().unwrap_or("")
    }
}

const WORDS: &[&str] = &[
    "the",
    "session",
    "context",
    "window",
    "token",
    "budget",
    "importer",
    "parser",
    "line",
    "entry",
    "branch",
    "tree",
    "leaf",
    "parent",
    "compaction",
    "summary",
    "tool",
    "call",
    "result",
    "report",
    "drift",
    "usage",
    "provider",
    "model",
    "cache",
    "read",
    "write",
    "file",
    "path",
    "error",
    "warning",
    "test",
    "fixture",
    "snapshot",
    "schema",
    "field",
    "value",
    "string",
    "number",
    "array",
    "object",
    "stream",
    "buffer",
    "reader",
    "writer",
    "iterator",
    "closure",
    "trait",
    "struct",
    "enum",
    "match",
    "option",
    "result",
    "handle",
    "request",
    "response",
    "server",
    "client",
    "socket",
    "header",
    "body",
    "chunk",
    "event",
    "queue",
    "worker",
    "thread",
    "lock",
    "mutex",
    "channel",
    "timeout",
    "retry",
    "limit",
    "offset",
    "index",
    "count",
    "total",
    "median",
    "latency",
    "memory",
    "allocation",
    "vector",
    "slice",
    "map",
    "set",
    "key",
    "hash",
    "and",
    "then",
    "but",
    "so",
    "because",
    "when",
    "which",
    "that",
    "with",
    "without",
    "into",
    "from",
    "over",
    "under",
    "after",
    "before",
    "again",
    "now",
    "still",
    "only",
    "also",
    "every",
    "each",
    "some",
    "none",
    "all",
    "first",
    "last",
    "next",
    "previous",
    "new",
    "old",
    "small",
    "large",
    "empty",
    "full",
    "broken",
    "fixed",
    "slow",
    "fast",
    "correct",
    "wrong",
    "missing",
];

const IDENTS: &[&str] = &[
    "session",
    "entry",
    "builder",
    "reader",
    "line_no",
    "parent_id",
    "tokens",
    "usage",
    "report",
    "window",
    "budget",
    "content",
    "blocks",
    "tool_call",
    "result",
    "summary",
    "warnings",
    "counter",
    "options",
    "format",
    "header",
    "payload",
    "message",
    "role",
    "leaf",
    "branch",
    "turns",
    "total",
    "cache",
    "offset",
    "limit",
    "input",
    "output",
    "buffer",
    "state",
    "config",
];

const TYPES: &[&str] = &[
    "Session",
    "Entry",
    "Builder",
    "Report",
    "Usage",
    "Message",
    "ContentBlock",
    "ToolCall",
    "Options",
    "Warning",
    "Format",
    "Headline",
    "Composition",
    "Drift",
    "TurnPoint",
    "Vec<Entry>",
    "Option<u64>",
    "String",
    "&str",
    "u64",
    "usize",
    "bool",
    "Result<(), Error>",
];

const DIRS: &[&str] = &[
    "crates/core/src",
    "crates/core/src/report",
    "crates/formats/src",
    "crates/cli/src",
    "crates/tokens/src",
    "crates/server/src",
    "src/agent",
    "src/tui",
];

const FILES: &[&str] = &[
    "lib.rs",
    "model.rs",
    "tree.rs",
    "builder.rs",
    "compose.rs",
    "walk.rs",
    "detect.rs",
    "jsonl.rs",
    "session.rs",
    "render.rs",
    "state.rs",
    "config.rs",
    "main.rs",
    "util.rs",
];

fn words(rng: &mut Rng, n: usize) -> String {
    let mut s = String::with_capacity(n * 7);
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(rng.pick(WORDS));
    }
    s
}

fn sentence(rng: &mut Rng) -> String {
    let n = rng.range(6, 22);
    let mut s = words(rng, n);
    if let Some(first) = s.get(..1) {
        let upper = first.to_ascii_uppercase();
        s.replace_range(..1, &upper);
    }
    s.push('.');
    s
}

fn paragraph(rng: &mut Rng, sentences: usize) -> String {
    (0..sentences)
        .map(|_| sentence(rng))
        .collect::<Vec<_>>()
        .join(" ")
}

fn file_path(rng: &mut Rng) -> String {
    format!("{}/{}", rng.pick(DIRS), rng.pick(FILES))
}

fn code_line(rng: &mut Rng) -> String {
    let a = rng.pick(IDENTS);
    let b = rng.pick(IDENTS);
    let t = rng.pick(TYPES);
    match rng.below(10) {
        0 => format!("    let {a}: {t} = {b}.iter().map(|x| x.{a}).sum();"),
        1 => format!("    if {a}.is_empty() {{ return Err(Error::Missing(\"{b}\")); }}"),
        2 => format!("    for {a} in &self.{b} {{"),
        3 => format!("        {a}.push({b}.clone());"),
        4 => "    }".to_string(),
        5 => format!("    // {}", sentence(rng)),
        6 => format!("    match {a} {{ Some(v) => v.{b}, None => 0 }}"),
        7 => format!("        self.{a} += {b}.len() as u64;"),
        8 => format!("    let {a} = {b}.get(\"{a}\").and_then(Value::as_str);"),
        _ => format!("    tracing::debug!({a} = ?{b}, \"{}\");", words(rng, 4)),
    }
}

fn lines_of_code(rng: &mut Rng, n: usize) -> String {
    (0..n)
        .map(|_| code_line(rng))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Rust-looking source file of about `lines` lines.
fn source_file(rng: &mut Rng, lines: usize) -> String {
    let mut out = String::with_capacity(lines * 48);
    out.push_str("//! ");
    out.push_str(&sentence(rng));
    out.push_str("\n\nuse std::collections::HashMap;\n\n");
    let mut written = 4;
    while written < lines {
        let name = rng.pick(IDENTS);
        let t = rng.pick(TYPES);
        out.push_str(&format!(
            "/// {}\npub fn {name}_{}(input: &{t}) -> {t} {{\n",
            sentence(rng),
            rng.below(100)
        ));
        let body = rng.range(3, 25);
        for _ in 0..body {
            out.push_str(&code_line(rng));
            out.push('\n');
        }
        out.push_str("}\n\n");
        written += body + 4;
    }
    out
}

fn grep_output(rng: &mut Rng, hits: usize) -> String {
    let mut out = String::with_capacity(hits * 80);
    for _ in 0..hits {
        out.push_str(&format!(
            "{}:{}:{}\n",
            file_path(rng),
            rng.range(1, 900),
            code_line(rng).trim_start()
        ));
    }
    out
}

fn test_log(rng: &mut Rng, tests: usize, failing: bool) -> String {
    let mut out = format!(
        "   Compiling ctxd-core v0.1.0\n   Compiling ctxd-formats v0.1.0\n    Finished test profile in {}.{}s\n     Running unittests src/lib.rs\n\nrunning {tests} tests\n",
        rng.range(1, 40),
        rng.below(100)
    );
    let fail_at = if failing {
        rng.below(tests.max(1))
    } else {
        usize::MAX
    };
    for i in 0..tests {
        let status = if i == fail_at { "FAILED" } else { "ok" };
        out.push_str(&format!(
            "test {}::tests::{}_{} ... {status}\n",
            rng.pick(IDENTS),
            rng.pick(IDENTS),
            rng.pick(IDENTS)
        ));
    }
    if failing {
        out.push_str(&format!(
            "\nfailures:\n\n---- tests stdout ----\nthread 'main' panicked at {}:{}:{}:\nassertion `left == right` failed\n  left: {}\n right: {}\n\ntest result: FAILED. {} passed; 1 failed; 0 ignored\n",
            file_path(rng),
            rng.range(1, 500),
            rng.range(1, 80),
            rng.range(0, 5000),
            rng.range(0, 5000),
            tests.saturating_sub(1)
        ));
    } else {
        out.push_str(&format!(
            "\ntest result: ok. {tests} passed; 0 failed; 0 ignored; finished in 0.{:02}s\n",
            rng.below(100)
        ));
    }
    out
}

/// Lines of a read, skewed towards small files with a long tail.
fn skewed_lines(rng: &mut Rng) -> usize {
    10 * (1 << rng.below(7)) + rng.below(50)
}

fn base64ish(rng: &mut Rng, len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..len)
        .map(|_| char::from(ALPHABET[rng.below(ALPHABET.len())]))
        .collect()
}

fn iso(ms: i64) -> String {
    ctxd_core::windows::iso8601(ms)
}

struct Gen<W: Write> {
    out: W,
    rng: Rng,
    bytes: u64,
    next_id: u32,
    parent: Option<String>,
    clock_ms: i64,
    /// A rough running context size in tokens, for plausible usage figures.
    context_tokens: u64,
    recent_ids: Vec<String>,
}

impl<W: Write> Gen<W> {
    fn id(&mut self) -> String {
        // A multiply by an odd constant is a bijection on u32: ids never repeat.
        self.next_id += 1;
        format!(
            "{:08x}",
            self.next_id.wrapping_mul(0x9E37_79B1) ^ 0x5bd1_e995
        )
    }

    fn tick(&mut self, max_secs: usize) -> i64 {
        self.clock_ms += 200 + self.rng.below(max_secs * 1000) as i64;
        self.clock_ms
    }

    fn emit(&mut self, value: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.out.write_all(&line)?;
        self.bytes += line.len() as u64;
        Ok(())
    }

    /// Emit a tree entry (`id`, `parentId`, `timestamp` added) and make it the new leaf.
    fn entry(&mut self, mut value: Value) -> std::io::Result<String> {
        let id = self.id();
        let ts = iso(self.tick(20));
        if let Value::Object(map) = &mut value {
            map.insert("id".into(), json!(id));
            map.insert("parentId".into(), json!(self.parent));
            map.insert("timestamp".into(), json!(ts));
        }
        self.emit(&value)?;
        self.parent = Some(id.clone());
        self.recent_ids.push(id.clone());
        if self.recent_ids.len() > 64 {
            self.recent_ids.remove(0);
        }
        Ok(id)
    }

    fn usage(&mut self, output: u64) -> Value {
        let cache_read = self.context_tokens * 9 / 10;
        let cache_write = self.context_tokens - cache_read;
        json!({
            "input": 3 + self.rng.below(20),
            "output": output,
            "cacheRead": cache_read,
            "cacheWrite": cache_write,
            "totalTokens": self.context_tokens + output,
            "cost": {"input": 0.00001, "output": output as f64 * 0.000015,
                     "cacheRead": cache_read as f64 * 0.0000003,
                     "cacheWrite": cache_write as f64 * 0.00000375, "total": 0.01}
        })
    }

    fn tool_call(&mut self) -> (Value, String, &'static str, String) {
        let call_id = format!(
            "toolu_{}",
            base64ish(&mut self.rng, 24).replace(['+', '/'], "x")
        );
        let (name, args, result) = match self.rng.below(10) {
            0..=3 => {
                let path = file_path(&mut self.rng);
                let lines = skewed_lines(&mut self.rng);
                let body = source_file(&mut self.rng, lines);
                ("read", json!({"path": path}), body)
            }
            4 | 5 => {
                let pattern = self.rng.pick(IDENTS);
                let hits = self.rng.range(3, 120);
                let out = grep_output(&mut self.rng, hits);
                (
                    "bash",
                    json!({"command": format!("rg -n '{pattern}' crates/")}),
                    out,
                )
            }
            6 | 7 => {
                let tests = self.rng.range(5, 200);
                let failing = self.rng.chance(30);
                let out = test_log(&mut self.rng, tests, failing);
                (
                    "bash",
                    json!({"command": "cargo test --workspace 2>&1 | tail -n 300"}),
                    out,
                )
            }
            8 => {
                let path = file_path(&mut self.rng);
                let (n_old, n_new) = (self.rng.range(1, 12), self.rng.range(1, 16));
                let old = lines_of_code(&mut self.rng, n_old);
                let new = lines_of_code(&mut self.rng, n_new);
                (
                    "edit",
                    json!({"path": path, "oldText": old, "newText": new}),
                    format!("Successfully replaced text in {path}."),
                )
            }
            _ => {
                let path = file_path(&mut self.rng);
                let lines = self.rng.range(20, 300);
                let content = source_file(&mut self.rng, lines);
                (
                    "write",
                    json!({"path": path, "content": content}),
                    format!("Successfully wrote {} bytes to {path}", content.len()),
                )
            }
        };
        let call = json!({"type": "toolCall", "id": call_id, "name": name, "arguments": args});
        (call, call_id, name, result)
    }

    fn assistant(&mut self, content: Vec<Value>, stop: &str, model: &str) -> std::io::Result<()> {
        let output = content
            .iter()
            .map(|b| b.to_string().len() as u64 / 4)
            .sum::<u64>();
        let usage = self.usage(output);
        let ts = self.clock_ms;
        self.entry(json!({
            "type": "message",
            "message": {"role": "assistant", "content": content, "api": "anthropic-messages",
                        "provider": "anthropic", "model": model, "usage": usage,
                        "stopReason": stop, "timestamp": ts}
        }))?;
        self.context_tokens += output;
        Ok(())
    }

    fn turn(&mut self, turn_no: usize, model: &str) -> std::io::Result<()> {
        let sentences = self.rng.range(1, 4);
        let mut prompt = paragraph(&mut self.rng, sentences);
        if self.rng.chance(15) {
            let lines = self.rng.range(5, 40);
            prompt.push_str("\n\n```rust\n");
            prompt.push_str(&source_file(&mut self.rng, lines));
            prompt.push_str("```\n");
        }
        self.context_tokens += prompt.len() as u64 / 4;
        let ts = self.clock_ms;
        self.entry(json!({
            "type": "message",
            "message": {"role": "user", "content": [{"type": "text", "text": prompt}], "timestamp": ts}
        }))?;
        let steps = self.rng.range(1, 6);
        for step in 0..steps {
            let mut content = Vec::new();
            let sentences = self.rng.range(1, 6);
            let thinking = paragraph(&mut self.rng, sentences);
            let sig_len = self.rng.range(200, 900);
            let signature = base64ish(&mut self.rng, sig_len);
            content.push(
                json!({"type": "thinking", "thinking": thinking, "thinkingSignature": signature}),
            );
            let sentences = self.rng.range(1, 3);
            let text = paragraph(&mut self.rng, sentences);
            content.push(json!({"type": "text", "text": text}));
            let calls = self.rng.range(1, 3);
            let mut results = Vec::new();
            for _ in 0..calls {
                let (call, call_id, name, result) = self.tool_call();
                content.push(call);
                results.push((call_id, name, result));
            }
            self.assistant(content, "toolUse", model)?;
            for (call_id, name, text) in results {
                let is_error = self.rng.chance(4);
                let text = if is_error {
                    let head = text.get(..text.len().min(400)).unwrap_or("");
                    format!("Error: command failed with exit code 1\n{head}")
                } else {
                    text
                };
                self.context_tokens += text.len() as u64 / 4;
                let ts = self.clock_ms;
                self.entry(json!({
                    "type": "message",
                    "message": {"role": "toolResult", "toolCallId": call_id, "toolName": name,
                                "content": [{"type": "text", "text": text}],
                                "isError": is_error, "timestamp": ts}
                }))?;
            }
            if step + 1 == steps {
                let text = format!("Turn {turn_no} done. {}", paragraph(&mut self.rng, 3));
                self.assistant(vec![json!({"type": "text", "text": text})], "stop", model)?;
            }
        }
        Ok(())
    }

    fn compaction(&mut self) -> std::io::Result<()> {
        let keep_from = self.recent_ids.len().saturating_sub(12);
        let first_kept = self.recent_ids.get(keep_from).cloned();
        let summary = format!(
            "## Goal\n{}\n\n## Progress\n{}\n\n## Files\n- {}\n- {}\n- {}\n",
            paragraph(&mut self.rng, 2),
            paragraph(&mut self.rng, 6),
            file_path(&mut self.rng),
            file_path(&mut self.rng),
            file_path(&mut self.rng)
        );
        let before = self.context_tokens;
        self.entry(json!({
            "type": "compaction", "summary": summary, "firstKeptEntryId": first_kept,
            "tokensBefore": before
        }))?;
        self.context_tokens = summary.len() as u64 / 4 + 8_000;
        Ok(())
    }

    fn custom_message(&mut self) -> std::io::Result<()> {
        let n = self.rng.range(2, 12);
        let status = (0..n)
            .map(|_| format!(" M {}", file_path(&mut self.rng)))
            .collect::<Vec<_>>()
            .join("\n");
        let content = format!("git status --short:\n{status}");
        self.context_tokens += content.len() as u64 / 4;
        self.entry(json!({
            "type": "custom_message", "customType": "git-status", "content": content,
            "display": false
        }))?;
        Ok(())
    }
}

/// Write a Pi v3 session of about `target_bytes` bytes to `out`; returns the bytes written.
pub fn pi_session<W: Write>(out: W, target_bytes: u64, seed: u64) -> std::io::Result<u64> {
    let mut g = Gen {
        out,
        rng: Rng::new(seed),
        bytes: 0,
        next_id: 0,
        parent: None,
        clock_ms: 1_763_683_200_000, // 2025-11-21T00:00:00Z
        context_tokens: 12_000,
        recent_ids: Vec::new(),
    };
    let header = json!({
        "type": "session", "version": 3,
        "id": format!("{:08x}-0000-4000-8000-{:012x}", seed as u32, seed & 0xffff_ffff_ffff),
        "timestamp": iso(g.clock_ms), "cwd": "/home/dev/projects/ctxd"
    });
    g.emit(&header)?;
    let model = "claude-sonnet-4-5";
    g.entry(json!({"type": "model_change", "provider": "anthropic", "modelId": model}))?;
    g.entry(json!({"type": "thinking_level_change", "thinkingLevel": "medium"}))?;
    let compact_every = (target_bytes / 5).max(200_000);
    let mut next_compaction = compact_every;
    let mut turn_no = 0;
    while g.bytes < target_bytes {
        turn_no += 1;
        if turn_no % 40 == 0 {
            g.custom_message()?;
        }
        g.turn(turn_no, model)?;
        if g.bytes >= next_compaction && g.bytes + compact_every / 2 < target_bytes {
            g.compaction()?;
            next_compaction += compact_every;
        }
    }
    g.out.flush()?;
    Ok(g.bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_bytes() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        let n = pi_session(&mut a, 300_000, 7).unwrap();
        pi_session(&mut b, 300_000, 7).unwrap();
        assert_eq!(a, b);
        assert_eq!(n, a.len() as u64);
        assert!(a.len() >= 300_000 && a.len() < 600_000, "{}", a.len());
    }

    #[test]
    fn every_line_is_json_with_the_pi_shape() {
        let mut out = Vec::new();
        pi_session(&mut out, 2_500_000, 1).unwrap();
        let text = String::from_utf8(out).unwrap();
        let mut types = std::collections::BTreeSet::new();
        let mut ids = std::collections::HashSet::new();
        for (i, line) in text.lines().enumerate() {
            let v: Value = serde_json::from_str(line).unwrap();
            let t = v["type"].as_str().unwrap().to_string();
            if i == 0 {
                assert_eq!(t, "session");
                assert_eq!(v["version"], 3);
            } else {
                assert!(ids.insert(v["id"].as_str().unwrap().to_string()));
            }
            types.insert(t);
        }
        for t in ["compaction", "custom_message", "message", "model_change"] {
            assert!(types.contains(t), "{t} missing: {types:?}");
        }
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_763_683_200_000), "2025-11-21T00:00:00.000Z");
        assert_eq!(iso(951_782_400_123), "2000-02-29T00:00:00.123Z");
    }
}
