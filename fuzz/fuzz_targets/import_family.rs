//! Reach each importer quickly: the first byte picks a format family whose typical first line
//! is put before the fuzzed bytes, so detection sends the rest to that importer.
#![no_main]

use libfuzzer_sys::fuzz_target;

const HEADS: &[&str] = &[
    // Pi v3 (tree) and v1 (linear).
    r#"{"type":"session","version":3,"id":"0b3f","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}"#,
    r#"{"type":"session","id":"0b3f","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w","provider":"anthropic","modelId":"claude-sonnet-4-5"}"#,
    // Claude Code 2.x / 1.0.x.
    r#"{"parentUuid":null,"isSidechain":false,"userType":"external","cwd":"/w","sessionId":"s","version":"2.0.1","type":"user","message":{"role":"user","content":"hi"},"uuid":"u1","timestamp":"2025-01-01T00:00:00Z"}"#,
    r#"{"type":"summary","summary":"t","leafUuid":"u1"}"#,
    // Codex (current and legacy).
    r#"{"timestamp":"2025-01-01T00:00:00Z","type":"session_meta","payload":{"id":"x","timestamp":"2025-01-01T00:00:00Z","cwd":"/w","originator":"codex_cli_rs","cli_version":"0.5"}}"#,
    r#"{"id":"x","timestamp":"2025-01-01T00:00:00Z","instructions":null}"#,
    // Gemini CLI JSONL (0.39+).
    r#"{"sessionId":"s","projectHash":"h","startTime":"2026-01-01T00:00:00.000Z","lastUpdated":"2026-01-01T00:00:00.000Z","kind":"main"}"#,
    // Captured requests.
    r#"{"method":"POST","path":"/v1/messages","headers":{},"body":{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[]}}"#,
    r#"{"method":"POST","path":"/v1/chat/completions","headers":{},"body":{"model":"gpt-4o","messages":[]}}"#,
    r#"{"method":"POST","path":"/v1/responses","headers":{},"body":{"model":"gpt-5","input":[]}}"#,
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let head = HEADS[usize::from(pick) % HEADS.len()];
    let mut input = Vec::with_capacity(head.len() + 1 + rest.len());
    input.extend_from_slice(head.as_bytes());
    input.push(b'\n');
    input.extend_from_slice(rest);
    let _ = ctxd_formats::import_reader(std::io::Cursor::new(input));
});
