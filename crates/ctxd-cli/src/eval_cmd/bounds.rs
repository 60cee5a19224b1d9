//! The bounds a saving is read against: two policies with perfect foresight over the same
//! client requests, each keeping in every tool output and every tool call's arguments over
//! [`MIN_ITEM_CHARS`] exactly the lines the work uses again (the used lines of
//! [`super::terms`]: 100% retention by construction), and nothing else.
//!
//! - **(a) decided once**: an item is cut when it arrives and never changes again, so the
//!   cached prefix stays stable (what a policy deciding at arrival could at best do);
//! - **(b) dropped after last use**: at each request an item shows only the lines some answer
//!   from this request on uses; every drop rewrites the cache from that item on.
//!
//! Both are priced as the replay prices every variant (tokens of each element, the prefix
//! shared with the previous request a cache read).

use rustc_hash::FxHashMap as HashMap;

use ctxd_core::model::{ContentBlock, Message, Role};
use ctxd_core::tokens::TokenCounter;

use super::replay::{price, Sent};
use super::terms::{self, Scanner};

/// Items shorter than this are kept whole by both bounds (as the issue defines them).
pub const MIN_ITEM_CHARS: usize = 400;

/// An output or a call's arguments long enough to cut.
struct Item {
    lines: Vec<String>,
    /// Per line, the requests (0-based) whose answer uses it.
    uses: Vec<Vec<usize>>,
    /// The element's tokens minus its text's: what a cut keeps whatever it keeps.
    overhead: u64,
}

/// The bounds of one replay, gathered request by request.
#[derive(Default)]
pub struct Bounds {
    scan: Scanner,
    items: Vec<Item>,
    /// Element key → its item.
    item_of: HashMap<u128, usize>,
    /// Per request: the keys and tokens of its system prompt and tools, then its elements.
    requests: Vec<Vec<(u128, u64)>>,
}

/// What [`Bounds::finish`] measured.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Measured {
    /// (a) decided once, when the item arrives.
    pub decided_once: Sent,
    /// (b) dropped after its last use as well.
    pub after_last_use: Sent,
}

impl Measured {
    pub fn add(&mut self, o: &Measured) {
        self.decided_once.add(&o.decided_once);
        self.after_last_use.add(&o.after_last_use);
    }
}

/// The text a cut works on: an output's printed lines, or a call's arguments.
fn item_text(m: &Message) -> String {
    let mut out = String::new();
    for b in &m.content {
        match b {
            ContentBlock::ToolResult { content, .. } => {
                out.push_str(&ctxd_core::distill::result_text(content));
                out.push('\n');
            }
            ContentBlock::ToolCall { arguments, .. } if m.role == Role::Assistant => {
                match arguments {
                    serde_json::Value::String(s) => out.push_str(s),
                    other => {
                        // A call's string arguments, their escapes undone: the lines a write
                        // or an edit carries.
                        for v in other.as_object().into_iter().flat_map(|o| o.values()) {
                            match v {
                                serde_json::Value::String(s) => out.push_str(s),
                                other => out.push_str(&other.to_string()),
                            }
                            out.push('\n');
                        }
                    }
                }
                out.push('\n');
            }
            _ => {}
        }
    }
    out
}

impl Bounds {
    /// A request of the client's: `head` (system prompt and tools), then its elements' keys and
    /// tokens; `new` are the elements this request brings (key and message), in order.
    pub fn request(
        &mut self,
        head: &[(u128, u64)],
        elements: &[(u128, u64)],
        new: &[(u128, u64, &Message)],
        counter: &dyn TokenCounter,
    ) {
        for &(key, tokens, m) in new {
            if self.item_of.contains_key(&key) {
                continue;
            }
            let text = item_text(m);
            if text.len() >= MIN_ITEM_CHARS {
                let lines: Vec<String> = text.lines().map(str::to_owned).collect();
                let o = self.items.len();
                self.scan.output(o, &lines);
                self.items.push(Item {
                    uses: vec![Vec::new(); lines.len()],
                    overhead: tokens.saturating_sub(counter.count(&text)),
                    lines,
                });
                self.item_of.insert(key, o);
            }
            self.scan.seen(&m.content);
        }
        let mut keys = head.to_vec();
        keys.extend_from_slice(elements);
        self.requests.push(keys);
    }

    /// The answer to the last request: the lines it uses.
    pub fn answer(&mut self, reply: &[Message]) {
        let k = self.requests.len().saturating_sub(1);
        let mut text = String::new();
        for m in reply {
            terms::text_of(&m.content, &mut text);
        }
        for (_, o, l) in self.scan.used(&text) {
            self.items[o].uses[l].push(k);
        }
        for m in reply {
            self.scan.seen(&m.content);
        }
    }

    /// Both bounds priced over every request.
    pub fn finish(self, counter: &dyn TokenCounter) -> Measured {
        let mut out = Measured::default();
        let (mut prev_a, mut prev_b) = (Vec::new(), Vec::new());
        // (item, lines kept) → tokens; the count of kept lines names the cut (lines only go).
        let mut memo: HashMap<(usize, usize), u64> = HashMap::default();
        let mut cut = |o: usize, from: usize, items: &[Item]| -> (usize, u64) {
            let item = &items[o];
            let kept: Vec<&str> = item
                .lines
                .iter()
                .zip(&item.uses)
                .filter(|(_, u)| u.iter().any(|&r| r >= from))
                .map(|(l, _)| l.as_str())
                .collect();
            let n = kept.len();
            let t = *memo
                .entry((o, n))
                .or_insert_with(|| item.overhead + counter.count(&kept.join("\n")));
            (n, t)
        };
        for (k, keys) in self.requests.iter().enumerate() {
            let mut a = Vec::with_capacity(keys.len());
            let mut b = Vec::with_capacity(keys.len());
            for &(key, tokens) in keys {
                match self.item_of.get(&key) {
                    Some(&o) => {
                        let (_, ta) = cut(o, 0, &self.items);
                        a.push((key ^ 1, ta));
                        let (n, tb) = cut(o, k, &self.items);
                        b.push((key ^ ((n as u128 + 2) << 64), tb));
                    }
                    None => {
                        a.push((key, tokens));
                        b.push((key, tokens));
                    }
                }
            }
            out.decided_once.add(&price(&a, &mut prev_a));
            out.after_last_use.add(&price(&b, &mut prev_b));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxd_core::tokens::CharEstimate;

    fn output(lines: &[&str]) -> Message {
        Message {
            content: vec![ContentBlock::ToolResult {
                call_id: "c".into(),
                tool_name: Some("bash".into()),
                content: vec![ContentBlock::text(lines.join("\n"))],
                is_error: false,
            }],
            ..Message::text(Role::User, "")
        }
    }

    #[test]
    fn a_line_used_once_goes_after_its_use_and_unused_lines_never_show() {
        let counter = CharEstimate;
        let mut lines: Vec<String> = (0..40)
            .map(|i| format!("filler line number {i} here"))
            .collect();
        lines[3] = "src/used_once.rs: fn used_once_here()".into();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let out = output(&refs);
        let mut b = Bounds::default();
        let whole = 1000;
        b.request(&[(1, 10)], &[(7, whole)], &[(7, whole, &out)], &counter);
        b.answer(&[Message::text(Role::Assistant, "look at used_once_here")]);
        b.request(&[(1, 10)], &[(7, whole), (8, 5)], &[], &counter);
        b.answer(&[Message::text(Role::Assistant, "done")]);
        let m = b.finish(&counter);
        // (a) keeps the used line in both requests; (b) drops it from the second.
        assert!(m.decided_once.input_tokens < 2 * whole);
        assert!(m.after_last_use.input_tokens < m.decided_once.input_tokens);
        // (a)'s prefix is stable: the second request reads the first from the cache.
        assert!(m.decided_once.cached_tokens > 0);
    }
}
