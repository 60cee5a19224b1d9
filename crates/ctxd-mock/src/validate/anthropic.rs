//! Anthropic Messages: the conversation structure the real API checks.
//!
//! - `messages` is a non-empty array; roles are `user` and `assistant` (and `system` when the
//!   `anthropic-beta` header carries a `mid-conversation-system` token, as Claude Code sends;
//!   such entries are skipped by the turn rules); the first turn is the user's.
//! - Consecutive messages of one role form one turn (the real API combines them); content given
//!   as a string is one text block.
//! - No empty content (string or array) except in a final assistant message; no empty text
//!   block.
//! - Every `tool_use` of an assistant turn is answered by a `tool_result` with its id among the
//!   `tool_result` blocks that start the next turn, a user turn; every `tool_result` answers a
//!   `tool_use` of the turn right before it. A trailing assistant turn (prefill) with a
//!   `tool_use` is refused.
//! - With `thinking.type: enabled`, when the last user turn starts with `tool_result` blocks (a
//!   tool loop is under way) the assistant turn before it starts with a `thinking` or
//!   `redacted_thinking` block. Not with `adaptive`: there the model may skip thinking at any
//!   step, so an assistant turn without a thinking block is a normal thing to send back. And
//!   only when the mock itself gives thinking blocks ([`crate::Reasoning`] not `Off`): a mock
//!   that answered without one cannot demand it back.
//! - A `thinking` block carrying a mock-issued signature ([`crate::signature`]) must carry the
//!   text it was issued for; foreign signatures (real ones, in captured requests) pass.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use axum::http::HeaderMap;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{beta_tokens, Refusal};
use crate::request::{lenient, BlockHead, Head};
use crate::signature::{self, Verdict};

const THINKING_HELP: &str = "When `thinking` is enabled, a final `assistant` message must start \
with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We \
recommend you include thinking blocks from previous turns. To avoid this requirement, disable \
`thinking`. Please consult our documentation at \
https://docs.claude.com/en/docs/build-with-claude/extended-thinking";

#[derive(Debug, Deserialize)]
struct Msg<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Content<'a>,
}

/// A message's content: only what the rules read.
#[derive(Debug, Default)]
enum Content<'a> {
    #[default]
    Absent,
    Text {
        empty: bool,
    },
    Blocks(Vec<Block<'a>>),
}

#[derive(Debug, Deserialize)]
struct Block<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    /// `tool_use`.
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    /// `tool_result`.
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
    /// `text`: kept raw (only its emptiness matters).
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    /// `thinking`: kept raw, decoded only to check a mock-issued signature.
    #[serde(borrow, default)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of content blocks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Content::Text {
                    empty: v.is_empty(),
                })
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Content::Absent)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut blocks = Vec::new();
                while let Some(b) = seq.next_element::<Block<'de>>()? {
                    blocks.push(b);
                }
                Ok(Content::Blocks(blocks))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// One turn: consecutive messages of one role.
struct Turn<'m, 'a> {
    user: bool,
    /// Index in `messages` of the turn's first message.
    first: usize,
    /// (message index, block index in that message, block); a string content is one text block.
    blocks: Vec<(usize, usize, Option<&'m Block<'a>>)>,
}

impl Turn<'_, '_> {
    fn kind(&self, i: usize) -> Option<&str> {
        match self.blocks.get(i)? {
            (_, _, Some(b)) => b.kind.as_deref(),
            (_, _, None) => Some("text"),
        }
    }

    fn leading_results(&self) -> impl Iterator<Item = &str> {
        self.blocks
            .iter()
            .map_while(|(_, _, b)| b.filter(|b| b.kind.as_deref() == Some("tool_result")))
            .filter_map(|b| b.tool_use_id.as_deref())
    }

    fn tool_uses(&self) -> impl Iterator<Item = &str> {
        self.blocks
            .iter()
            .filter_map(|(_, _, b)| *b)
            .filter(|b| b.kind.as_deref() == Some("tool_use"))
            .filter_map(|b| b.id.as_deref())
    }
}

/// `thinking_replies`: the mock gives thinking blocks (the thinking-loop rule applies).
pub(super) fn check(
    head: &Head,
    headers: &HeaderMap,
    thinking_replies: bool,
) -> Result<(), Refusal> {
    let Some(raw) = head.messages.as_deref() else {
        return Err(Refusal::new(
            "anthropic.messages",
            "messages: Field required",
        ));
    };
    if raw.is_empty() {
        return Err(Refusal::new(
            "anthropic.messages",
            "messages: at least one message is required",
        ));
    }
    let mut msgs = Vec::with_capacity(raw.len());
    for r in raw {
        match serde_json::from_str::<Msg>(r.get()) {
            Ok(m) => msgs.push(m),
            // A shape the rules cannot read: not theirs to judge.
            Err(_) => return Ok(()),
        }
    }
    let system_ok = beta_tokens(headers).any(|t| t.starts_with("mid-conversation-system"));
    let last = msgs.len() - 1;
    let mut turns: Vec<Turn> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let user = match m.role.as_deref() {
            Some("user") => true,
            Some("assistant") => false,
            Some("system") if system_ok => continue,
            _ => {
                return Err(Refusal::new(
                    "anthropic.role",
                    format!("messages.{i}.role: Input should be 'user' or 'assistant'"),
                ))
            }
        };
        let blocks: Vec<_> = match &m.content {
            Content::Absent => {
                return Err(Refusal::new(
                    "anthropic.empty_content",
                    format!("messages.{i}.content: Field required"),
                ))
            }
            Content::Text { empty: false } => vec![(i, 0, None)],
            Content::Text { empty: true } => Vec::new(),
            Content::Blocks(b) => b.iter().enumerate().map(|(j, b)| (i, j, Some(b))).collect(),
        };
        let final_assistant = i == last && !user;
        if blocks.is_empty() && !final_assistant {
            return Err(Refusal::new(
                "anthropic.empty_content",
                format!(
                    "messages.{i}: all messages must have non-empty content except for the \
                     optional final assistant message"
                ),
            ));
        }
        for (_, j, b) in &blocks {
            let Some(b) = b else { continue };
            match b.kind.as_deref() {
                Some("text") if b.text.is_some_and(|t| t.get() == "\"\"") => {
                    return Err(Refusal::new(
                        "anthropic.empty_text",
                        "messages: text content blocks must be non-empty",
                    ))
                }
                Some("thinking") if !user => check_signature(b, i, *j)?,
                _ => {}
            }
        }
        match turns.last_mut() {
            Some(t) if t.user == user => t.blocks.extend(blocks),
            _ => turns.push(Turn {
                user,
                first: i,
                blocks,
            }),
        }
    }
    if turns.first().is_some_and(|t| !t.user) {
        return Err(Refusal::new(
            "anthropic.first_role",
            "messages: first message must use the \"user\" role",
        ));
    }
    for (k, turn) in turns.iter().enumerate() {
        let prev = k.checked_sub(1).map(|p| &turns[p]);
        if turn.user {
            let asked: HashSet<&str> = prev.map(|p| p.tool_uses().collect()).unwrap_or_default();
            for (i, j, b) in &turn.blocks {
                let Some(b) = b.filter(|b| b.kind.as_deref() == Some("tool_result")) else {
                    continue;
                };
                let id = b.tool_use_id.as_deref().unwrap_or_default();
                if !asked.contains(id) {
                    return Err(Refusal::new(
                        "anthropic.tool_result_unexpected",
                        format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in \
                             `tool_result` blocks: {id}. Each `tool_result` block must have a \
                             corresponding `tool_use` block in the previous message."
                        ),
                    ));
                }
            }
            continue;
        }
        let answered: HashSet<&str> = turns
            .get(k + 1)
            .map(|n| n.leading_results().collect())
            .unwrap_or_default();
        let missing: Vec<&str> = turn
            .tool_uses()
            .filter(|id| !answered.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(Refusal::new(
                "anthropic.tool_use_unanswered",
                format!(
                    "messages.{}: `tool_use` ids were found without `tool_result` blocks \
                     immediately after: {}. Each `tool_use` block must have a corresponding \
                     `tool_result` block in the next message.",
                    turn.first,
                    missing.join(", ")
                ),
            ));
        }
    }
    if thinking_replies && thinking_enabled(head) {
        check_thinking_loop(&turns)?;
    }
    Ok(())
}

/// `thinking.type` is `enabled` (see the module doc for `adaptive`).
fn thinking_enabled(head: &Head) -> bool {
    let t: BlockHead = lenient(head.thinking);
    t.kind.as_deref() == Some("enabled")
}

/// The last user turn starts with tool results: the assistant turn before it starts with a
/// thinking block.
fn check_thinking_loop(turns: &[Turn]) -> Result<(), Refusal> {
    let Some(u) = turns.iter().rposition(|t| t.user) else {
        return Ok(());
    };
    if turns[u].kind(0) != Some("tool_result") || u == 0 {
        return Ok(());
    }
    let asst = &turns[u - 1];
    match asst.kind(0) {
        Some("thinking" | "redacted_thinking") => Ok(()),
        found => Err(Refusal::new(
            "anthropic.thinking_missing",
            format!(
                "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but \
                 found `{}`. {THINKING_HELP}",
                asst.first,
                found.unwrap_or("none")
            ),
        )),
    }
}

/// A mock-issued signature must match its thinking text; foreign ones are not checked.
fn check_signature(b: &Block, i: usize, j: usize) -> Result<(), Refusal> {
    let Some(sig) = b.signature.as_deref() else {
        return Ok(());
    };
    let text: Cow<str> = b
        .thinking
        .and_then(|t| serde_json::from_str(t.get()).ok())
        .unwrap_or_default();
    match signature::verify(sig, &text) {
        Verdict::Invalid => Err(Refusal::new(
            "anthropic.thinking_signature",
            format!("messages.{i}.content.{j}: Invalid `signature` in `thinking` block"),
        )),
        Verdict::Valid | Verdict::Foreign => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::{json, Value};

    fn run_with(body: Value, headers: &HeaderMap) -> Result<(), Refusal> {
        let text = body.to_string();
        let head: Head = serde_json::from_str(&text).unwrap();
        check(&head, headers, true)
    }

    fn run(messages: Value) -> Result<(), Refusal> {
        run_with(
            json!({"model": "claude", "messages": messages}),
            &HeaderMap::new(),
        )
    }

    fn rule(messages: Value) -> &'static str {
        run(messages).unwrap_err().rule
    }

    fn tool_use(id: &str) -> Value {
        json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}})
    }

    fn result(id: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": "a"})
    }

    #[test]
    fn messages_and_roles() {
        assert_eq!(
            run_with(json!({"model": "m"}), &HeaderMap::new())
                .unwrap_err()
                .message,
            "messages: Field required"
        );
        assert_eq!(rule(json!([])), "anthropic.messages");
        assert!(run(json!([{"role": "user", "content": "hi"}])).is_ok());
        assert_eq!(
            rule(json!([{"role": "assistant", "content": "hi"}])),
            "anthropic.first_role"
        );
        let sys = json!([{"role": "user", "content": "hi"}, {"role": "system", "content": "s"}]);
        assert_eq!(
            run(sys.clone()).unwrap_err().message,
            "messages.1.role: Input should be 'user' or 'assistant'"
        );
        let mut h = HeaderMap::new();
        h.insert(
            "anthropic-beta",
            HeaderValue::from_static("x,mid-conversation-system-2026-04-07"),
        );
        assert!(run_with(json!({"messages": sys}), &h).is_ok());
        // Consecutive user messages are one turn.
        assert!(run(
            json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
            {"role": "assistant", "content": "c"}])
        )
        .is_ok());
    }

    #[test]
    fn empty_content_and_text() {
        assert_eq!(
            run(json!([{"role": "user", "content": ""}]))
                .unwrap_err()
                .message,
            "messages.0: all messages must have non-empty content except for the optional final \
             assistant message"
        );
        assert_eq!(
            rule(json!([{"role": "user", "content": []}])),
            "anthropic.empty_content"
        );
        assert_eq!(rule(json!([{"role": "user"}])), "anthropic.empty_content");
        assert!(run(
            json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": []}])
        )
        .is_ok());
        assert_eq!(
            run(json!([{"role": "user", "content": [{"type": "text", "text": ""}]}]))
                .unwrap_err()
                .message,
            "messages: text content blocks must be non-empty"
        );
    }

    #[test]
    fn tool_use_needs_results_first_in_the_next_turn() {
        let ask = json!({"role": "user", "content": "list"});
        let call = json!({"role": "assistant", "content": [{"type": "text", "text": "ok"},
            tool_use("toolu_1"), tool_use("toolu_2")]});
        let ok = json!([ask, call, {"role": "user", "content": [result("toolu_2"),
            result("toolu_1"), {"type": "text", "text": "more"}]}]);
        assert!(run(ok).is_ok());
        // Results split over two user messages: one turn.
        let split = json!([ask, call, {"role": "user", "content": [result("toolu_1")]},
            {"role": "user", "content": [result("toolu_2")]}]);
        assert!(run(split).is_ok());
        let missing = json!([ask, call, {"role": "user", "content": [result("toolu_1")]}]);
        assert_eq!(
            run(missing).unwrap_err().message,
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately \
             after: toolu_2. Each `tool_use` block must have a corresponding `tool_result` block \
             in the next message."
        );
        let text_first = json!([ask, call, {"role": "user", "content": [
            {"type": "text", "text": "x"}, result("toolu_1"), result("toolu_2")]}]);
        assert_eq!(rule(text_first), "anthropic.tool_use_unanswered");
        let prefill = json!([ask, call]);
        assert_eq!(rule(prefill), "anthropic.tool_use_unanswered");
        let stray = json!([ask, {"role": "assistant", "content": "hi"},
            {"role": "user", "content": [result("toolu_9")]}]);
        assert_eq!(
            run(stray).unwrap_err().message,
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: \
             toolu_9. Each `tool_result` block must have a corresponding `tool_use` block in the \
             previous message."
        );
    }

    #[test]
    fn thinking_loops_need_a_thinking_block() {
        let sig = signature::sign("rs_1", "hmm");
        let call = |first: Value| {
            json!([{"role": "user", "content": "list"},
                {"role": "assistant", "content": [first, tool_use("t")]},
                {"role": "user", "content": [result("t")]}])
        };
        let thinking = json!({"type": "thinking", "thinking": "hmm", "signature": sig});
        let text = json!({"type": "text", "text": "ok"});
        let enabled = |m: Value| {
            run_with(
                json!({"thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": m}),
                &HeaderMap::new(),
            )
        };
        assert!(enabled(call(thinking.clone())).is_ok());
        assert!(enabled(call(json!({"type": "redacted_thinking", "data": "x"}))).is_ok());
        let err = enabled(call(text.clone())).unwrap_err();
        assert_eq!(err.rule, "anthropic.thinking_missing");
        assert!(err.message.starts_with(
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found \
             `text`. When `thinking` is enabled, a final `assistant` message must start with a \
             thinking block"
        ));
        // A mock that gives no thinking blocks cannot demand them.
        let text_body = json!({"thinking": {"type": "enabled"}, "messages": call(text.clone())});
        let text_body = text_body.to_string();
        let head: Head = serde_json::from_str(&text_body).unwrap();
        assert!(check(&head, &HeaderMap::new(), false).is_ok());
        // Without thinking, or adaptive (the model may skip thinking), the same is fine.
        assert!(run(call(text.clone())).is_ok());
        let adaptive = json!({"thinking": {"type": "adaptive"}, "messages": call(text.clone())});
        assert!(run_with(adaptive, &HeaderMap::new()).is_ok());
        // A new user text ends the loop: no requirement.
        let mut done = call(text);
        done.as_array_mut()
            .unwrap()
            .push(json!({"role": "assistant", "content": "done"}));
        done.as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": "next"}));
        assert!(enabled(done).is_ok());
    }

    #[test]
    fn mock_signatures_must_match_their_text() {
        let sig = signature::sign("rs_1", "hmm \"quoted\"");
        let msgs = |text: &str, sig: &str| {
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
                {"type": "thinking", "thinking": text, "signature": sig},
                {"type": "text", "text": "ok"}]}, {"role": "user", "content": "more"}])
        };
        assert!(run(msgs("hmm \"quoted\"", &sig)).is_ok());
        assert_eq!(
            run(msgs("hmm", &sig)).unwrap_err().message,
            "messages.1.content.0: Invalid `signature` in `thinking` block"
        );
        assert!(run(msgs("anything", "EqQBCkgIARAB-real-signature")).is_ok());
    }
}
