//! Request bodies: per session, a realistic Anthropic Messages conversation prefix of about the
//! target size (user text, assistant text + `tool_use`, user `tool_result`, ...), serialised
//! once; each request is that prefix plus one new, unique user message, spliced in as bytes so
//! building a 1 MB body costs one copy, not a serialisation.

use serde_json::{json, Value};

/// One session's fixed part of every request.
pub struct Session {
    pub key: String,
    /// `{"model":...,"messages":[<prefix messages>`: everything before the new message.
    head: Vec<u8>,
    /// The new message carries a prompt-cache breakpoint.
    marked: bool,
}

impl Session {
    /// The prefix alone as a request (it ends with a user `tool_result`): the warm-up.
    pub fn prefix_body(&self) -> Vec<u8> {
        let mut body = self.head.clone();
        body.extend_from_slice(b"]}");
        body
    }

    /// The prefix plus user message number `n`.
    pub fn body(&self, n: u64) -> Vec<u8> {
        let mut tail = json!({"role": "user", "content": [{"type": "text",
            "text": format!("Request {n} of session {}: what changed since the last run?", self.key)}]});
        if self.marked {
            tail["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        }
        let tail = tail.to_string();
        let mut body = Vec::with_capacity(self.head.len() + tail.len() + 3);
        body.extend_from_slice(&self.head);
        body.push(b',');
        body.extend_from_slice(tail.as_bytes());
        body.extend_from_slice(b"]}");
        body
    }
}

/// `count` sessions whose requests are about `size` bytes, streaming or not. `marked`: with
/// prompt-cache breakpoints where Claude Code puts them (the system prompt and the last two
/// user messages: the prefix's last tool result and the new message).
pub fn sessions(count: usize, size: usize, stream: bool, marked: bool, tag: &str) -> Vec<Session> {
    (0..count)
        .map(|k| {
            let key = format!("bench-{tag}-{k}");
            let mut rng = Lcg(0x5EED_0000 + k as u64);
            let mut top = json!({
                // A 1M-token window: a 1 MB conversation fits, so the gateway passes requests
                // through as a real long session would, instead of opening a window every turn.
                "model": "claude-sonnet-4-5[1m]",
                "max_tokens": 1024,
                "stream": stream,
                "system": [{"type": "text", "text": "You are a coding agent. Be brief."}],
                "tools": [{"name": "Bash", "description": "Run a shell command",
                    "input_schema": {"type": "object", "properties": {
                        "command": {"type": "string"}}, "required": ["command"]}}],
            });
            if marked {
                top["system"][0]["cache_control"] = json!({"type": "ephemeral"});
            }
            // `{...}` without its closing brace, then the messages array.
            let mut head = top.to_string().into_bytes();
            head.pop();
            head.extend_from_slice(b",\"messages\":[");
            let mut turn = 0;
            // The prefix's last message, and where its bytes start.
            let mut last: Option<(usize, Value)> = None;
            loop {
                let room = size.saturating_sub(head.len() + 200);
                if turn > 0 && room < 600 {
                    break;
                }
                for m in exchange(&mut rng, turn, room) {
                    if head.last() != Some(&b'[') {
                        head.push(b',');
                    }
                    let at = head.len();
                    head.extend_from_slice(m.to_string().as_bytes());
                    last = Some((at, m));
                }
                turn += 1;
            }
            if let Some((at, mut m)) = last.filter(|_| marked) {
                m["content"][0]["cache_control"] = json!({"type": "ephemeral"});
                head.truncate(at);
                head.extend_from_slice(m.to_string().as_bytes());
            }
            Session { key, head, marked }
        })
        .collect()
}

/// One tool-using exchange: user text, assistant text + tool_use, user tool_result; the texts
/// sized so the exchange is at most about `room` bytes (~2 KB at most per message).
fn exchange(rng: &mut Lcg, turn: usize, room: usize) -> [Value; 3] {
    let each = (room / 3).clamp(40, 2_000);
    let id = format!("toolu_bench_{turn:04}");
    [
        json!({"role": "user", "content": [{"type": "text", "text": rng.words(each)}]}),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": rng.words(each / 4)},
            {"type": "tool_use", "id": id, "name": "Bash",
             "input": {"command": format!("grep -rn item_{turn} src/")}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
            "content": rng.words(each)}]}),
    ]
}

/// A tiny deterministic generator: the same session always gets the same text.
pub(crate) struct Lcg(pub u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// About `len` bytes of code-ish words.
    pub(crate) fn words(&mut self, len: usize) -> String {
        const WORDS: [&str; 16] = [
            "fn", "let", "match", "self", "config", "request", "session", "store", "error",
            "value", "return", "async", "await", "impl", "struct", "test",
        ];
        let mut out = String::with_capacity(len + 8);
        while out.len() < len {
            out.push_str(WORDS[(self.next() % 16) as usize]);
            out.push(if self.next().is_multiple_of(11) {
                '\n'
            } else {
                ' '
            });
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_of_about_the_size() {
        for size in [2 * 1024, 100 * 1024, 1024 * 1024] {
            let s = &sessions(2, size, true, false, "t")[1];
            let body = s.body(7);
            let v: Value = serde_json::from_slice(&body).unwrap();
            let messages = v["messages"].as_array().unwrap();
            assert_eq!(messages.last().unwrap()["role"], "user");
            assert!(messages.last().unwrap()["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("Request 7"));
            assert_eq!(v["stream"], true);
            let ratio = body.len() as f64 / size as f64;
            assert!((0.8..1.1).contains(&ratio), "{size}: {}", body.len());
            let prefix: Value = serde_json::from_slice(&s.prefix_body()).unwrap();
            let last = prefix["messages"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .clone();
            assert_eq!(last["content"][0]["type"], "tool_result");
        }
    }

    #[test]
    fn sessions_differ_and_repeat() {
        let a = sessions(2, 4096, false, false, "x");
        let b = sessions(2, 4096, false, false, "x");
        assert_eq!(a[0].body(1), b[0].body(1));
        assert_ne!(a[0].body(1), a[1].body(1));
        assert_ne!(a[0].body(1), a[0].body(2));
    }

    #[test]
    fn marked_bodies_carry_claude_codes_three_breakpoints() {
        let s = &sessions(1, 100 * 1024, false, true, "m")[0];
        let v: Value = serde_json::from_slice(&s.body(3)).unwrap();
        let marked = |m: &Value| m["content"][0]["cache_control"]["type"] == "ephemeral";
        assert_eq!(v["system"][0]["cache_control"]["type"], "ephemeral");
        let messages = v["messages"].as_array().unwrap();
        let n = messages.len();
        assert!(marked(&messages[n - 1]) && marked(&messages[n - 2]));
        assert_eq!(messages.iter().filter(|m| marked(m)).count(), 2);
        assert_eq!(messages[n - 2]["content"][0]["type"], "tool_result");
        let unmarked = &sessions(1, 100 * 1024, false, false, "m")[0];
        assert!(!String::from_utf8_lossy(&unmarked.body(3)).contains("cache_control"));
    }
}
