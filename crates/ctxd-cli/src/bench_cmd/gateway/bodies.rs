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
        let tail = json!({"role": "user", "content": [{"type": "text",
            "text": format!("Request {n} of session {}: what changed since the last run?", self.key)}]});
        let tail = tail.to_string();
        let mut body = Vec::with_capacity(self.head.len() + tail.len() + 3);
        body.extend_from_slice(&self.head);
        body.push(b',');
        body.extend_from_slice(tail.as_bytes());
        body.extend_from_slice(b"]}");
        body
    }
}

/// `count` sessions whose requests are about `size` bytes, streaming or not.
pub fn sessions(count: usize, size: usize, stream: bool, tag: &str) -> Vec<Session> {
    (0..count)
        .map(|k| {
            let key = format!("bench-{tag}-{k}");
            let mut rng = Lcg(0x5EED_0000 + k as u64);
            let top = json!({
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
            // `{...}` without its closing brace, then the messages array.
            let mut head = top.to_string().into_bytes();
            head.pop();
            head.extend_from_slice(b",\"messages\":[");
            let mut turn = 0;
            loop {
                let room = size.saturating_sub(head.len() + 200);
                if turn > 0 && room < 600 {
                    break;
                }
                let messages = exchange(&mut rng, turn, room);
                for (i, m) in messages.iter().enumerate() {
                    if turn > 0 || i > 0 {
                        head.push(b',');
                    }
                    head.extend_from_slice(m.to_string().as_bytes());
                }
                turn += 1;
            }
            Session { key, head }
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
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// About `len` bytes of code-ish words.
    fn words(&mut self, len: usize) -> String {
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
            let s = &sessions(2, size, true, "t")[1];
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
        let a = sessions(2, 4096, false, "x");
        let b = sessions(2, 4096, false, "x");
        assert_eq!(a[0].body(1), b[0].body(1));
        assert_ne!(a[0].body(1), a[1].body(1));
        assert_ne!(a[0].body(1), a[0].body(2));
    }
}
