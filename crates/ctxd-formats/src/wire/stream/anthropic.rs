//! Anthropic Messages: `message_start`, content blocks built from their deltas,
//! `message_delta` (stop reason, usage), `message_stop`. The element is the assistant message
//! `{"role":"assistant","content":[...]}` with the blocks as the API returned them.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{element, event_json, text, Assembled, Problem, SseEvent, StreamError};
use crate::wire::anthropic;

/// The assistant message as the client echoes it: role first, blocks as received.
#[derive(Serialize)]
struct Wire<'a> {
    role: &'static str,
    content: &'a [Value],
}

/// The events that build a message (`ping` carries nothing).
const EVENTS: &[&str] = &[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "error",
];

#[derive(Debug, Default)]
pub(super) struct Stream {
    id: Option<String>,
    model: Option<String>,
    /// `message_start`'s usage, overlaid by `message_delta`'s (cumulative output, and the
    /// input counts when the API repeats them).
    usage: Map<String, Value>,
    stop_reason: Option<String>,
    blocks: BTreeMap<u64, Block>,
    pub(super) done: bool,
    problem: Problem,
}

#[derive(Debug)]
struct Block {
    value: Map<String, Value>,
    /// `input_json_delta` fragments, parsed into `input` when the block stops.
    json: Option<String>,
}

impl Stream {
    pub(super) fn push(&mut self, ev: &SseEvent) {
        if self.done {
            return;
        }
        let name = ev.event.as_deref().unwrap_or_default();
        if name == "ping" {
            return;
        }
        let known = ev.event.is_none() || EVENTS.contains(&name);
        let Some(mut v) = event_json(ev, &mut self.problem, known) else {
            return;
        };
        let ty = v.get("type").and_then(Value::as_str).unwrap_or(name);
        match ty {
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                self.id = text(m, "id").or(self.id.take());
                self.model = text(m, "model").or(self.model.take());
                self.merge_usage(m.get("usage"));
            }
            "content_block_start" => {
                let block = v.get_mut("content_block").map(Value::take);
                let (Some(index), Some(Value::Object(value))) = (index(&v), block) else {
                    return self
                        .problem
                        .malformed("content_block_start without a block");
                };
                self.blocks.insert(index, Block { value, json: None });
            }
            "content_block_delta" => {
                let block = index(&v).and_then(|i| self.blocks.get_mut(&i));
                if let (Some(block), Some(delta)) = (block, v.get("delta")) {
                    block.apply(delta);
                }
            }
            "content_block_stop" => {
                if let Some(block) = index(&v).and_then(|i| self.blocks.get_mut(&i)) {
                    block.close(&mut self.problem);
                }
            }
            "message_delta" => {
                if let Some(reason) = v.get("delta").and_then(|d| text(d, "stop_reason")) {
                    self.stop_reason = Some(reason);
                }
                self.merge_usage(v.get("usage"));
            }
            "message_stop" => self.done = true,
            "error" => self.problem.provider(&v),
            _ => {}
        }
    }

    fn merge_usage(&mut self, usage: Option<&Value>) {
        if let Some(Value::Object(u)) = usage {
            for (k, val) in u {
                if !val.is_null() {
                    self.usage.insert(k.clone(), val.clone());
                }
            }
        }
    }

    pub(super) fn finish(mut self) -> Result<Assembled, StreamError> {
        for block in self.blocks.values_mut() {
            block.close(&mut self.problem);
        }
        self.problem.check(self.done)?;
        let blocks = self.blocks.into_values().map(|b| Value::Object(b.value));
        let usage = (!self.usage.is_empty()).then(|| anthropic::usage(&Value::Object(self.usage)));
        assembled(
            blocks.collect(),
            usage,
            self.model,
            self.id,
            self.stop_reason,
        )
    }
}

fn index(v: &Value) -> Option<u64> {
    v.get("index").and_then(Value::as_u64)
}

impl Block {
    fn apply(&mut self, delta: &Value) {
        let field = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default();
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => self.append("text", field("text")),
            Some("thinking_delta") => self.append("thinking", field("thinking")),
            Some("signature_delta") => self.append("signature", field("signature")),
            Some("input_json_delta") => self
                .json
                .get_or_insert_with(String::new)
                .push_str(field("partial_json")),
            Some("citations_delta") => {
                if let Some(c) = delta.get("citation") {
                    let list = self.value.entry("citations").or_insert(Value::Null);
                    if !list.is_array() {
                        *list = Value::Array(Vec::new());
                    }
                    if let Value::Array(list) = list {
                        list.push(c.clone());
                    }
                }
            }
            _ => {}
        }
    }

    fn append(&mut self, key: &str, s: &str) {
        match self.value.get_mut(key) {
            Some(Value::String(have)) => have.push_str(s),
            _ => {
                self.value
                    .insert(key.to_owned(), Value::String(s.to_owned()));
            }
        }
    }

    /// Parses the streamed tool input; an empty one is `{}`, as the API sends for no arguments.
    fn close(&mut self, problem: &mut Problem) {
        let Some(json) = self.json.take() else {
            return;
        };
        let input = if json.trim().is_empty() {
            Value::Object(Map::new())
        } else {
            match serde_json::from_str(&json) {
                Ok(v) => v,
                Err(e) => {
                    problem.malformed(format!("tool input is not JSON: {e}"));
                    return;
                }
            }
        };
        self.value.insert("input".into(), input);
    }
}

/// A whole `message` body.
pub(super) fn json(v: &Value) -> Result<Assembled, StreamError> {
    let Some(Value::Array(blocks)) = v.get("content") else {
        return Err(StreamError::Malformed("message without content".into()));
    };
    assembled(
        blocks.clone(),
        v.get("usage").map(anthropic::usage),
        text(v, "model"),
        text(v, "id"),
        text(v, "stop_reason"),
    )
}

fn assembled(
    mut blocks: Vec<Value>,
    usage: Option<ctxd_core::model::Usage>,
    model: Option<String>,
    id: Option<String>,
    stop_reason: Option<String>,
) -> Result<Assembled, StreamError> {
    // The API refuses empty text blocks in requests, so clients never echo them.
    blocks.retain(|b| {
        !(b.get("type").and_then(Value::as_str) == Some("text")
            && b.get("text")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty))
    });
    let wire = Wire {
        role: "assistant",
        content: &blocks,
    };
    let el = element(&wire, anthropic::message)?;
    Ok(Assembled::new(vec![el], usage, model, id, stop_reason))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(super) mod tests {
    use expect_test::expect;
    use serde_json::json;

    use super::super::tests::{check, check_json, sse};
    use crate::wire::stream::{Api, StreamError};

    /// Thinking with its signature, text, then a tool call whose input streams in pieces.
    pub(crate) fn thinking_text_tool() -> String {
        sse(&[
            (
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1",
                "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
                "stop_reason": null, "usage": {"input_tokens": 12, "output_tokens": 1,
                "cache_creation_input_tokens": 300, "cache_read_input_tokens": 4000}}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ),
            ("ping", json!({"type": "ping"})),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "List the "}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "files \u{e9}"}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "signature_delta", "signature": "EqQBCkYIBxgCKkB"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "text_delta", "text": "I'll look."}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 2,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"l"}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": "s\"}"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 2}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use",
                "stop_sequence": null}, "usage": {"output_tokens": 42}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ])
    }

    #[test]
    fn thinking_text_and_tool_call() {
        check(
            Api::Anthropic,
            &thinking_text_tool(),
            expect![[r#"
                model=claude-sonnet-4-5 id=msg_1 stop=tool_use usage=in 12 out 42 cache_read 4000 cache_write 300
                assistant: thinking(List the files é, sig EqQBCkYIBxgCKkB) | text(I'll look.) | call toolu_1 Bash {"command":"ls"}
                  {"role":"assistant","content":[{"signature":"EqQBCkYIBxgCKkB","thinking":"List the files é","type":"thinking"},{"text":"I'll look.","type":"text"},{"id":"toolu_1","input":{"command":"ls"},"name":"Bash","type":"tool_use"}]}
            "#]],
        );
    }

    #[test]
    fn json_body_gives_the_same_element_as_the_stream() {
        let body = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "stop_reason": "tool_use", "stop_sequence": null,
            "content": [
                {"type": "thinking", "thinking": "List the files \u{e9}", "signature": "EqQBCkYIBxgCKkB"},
                {"type": "text", "text": "I'll look."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}],
            "usage": {"input_tokens": 12, "output_tokens": 42, "cache_creation_input_tokens": 300,
                "cache_read_input_tokens": 4000}});
        let from_json = check_json(Api::Anthropic, &body);
        let streamed =
            super::super::tests::assemble(Api::Anthropic, &thinking_text_tool()).unwrap();
        assert_eq!(from_json, streamed);
    }

    #[test]
    fn empty_tool_input_is_an_object_and_server_blocks_are_kept() {
        let stream = sse(&[
            (
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_2",
                "model": "m", "usage": {"input_tokens": 5, "output_tokens": 1}}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{\"query\":\"rust\"}"}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 2,
                "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                "content": [{"type": "web_search_result", "url": "https://r", "title": "R"}]}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 2}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 3,
                "content_block": {"type": "text", "text": ""}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 3}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 4,
                "content_block": {"type": "tool_use", "id": "toolu_2", "name": "Now", "input": {}}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 4,
                "delta": {"type": "input_json_delta", "partial_json": ""}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 4}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 9}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]);
        check(
            Api::Anthropic,
            &stream,
            expect![[r#"
                model=m id=msg_2 stop=tool_use usage=in 5 out 9 cache_read 0 cache_write 0
                assistant: redacted(sig EmwKAhgB) | call srvtoolu_1 web_search {"query":"rust"} | result srvtoolu_1 | call toolu_2 Now {}
                  {"role":"assistant","content":[{"data":"EmwKAhgB","type":"redacted_thinking"},{"id":"srvtoolu_1","input":{"query":"rust"},"name":"web_search","type":"server_tool_use"},{"content":[{"title":"R","type":"web_search_result","url":"https://r"}],"tool_use_id":"srvtoolu_1","type":"web_search_tool_result"},{"id":"toolu_2","input":{},"name":"Now","type":"tool_use"}]}
            "#]],
        );
    }

    #[test]
    fn citations_accumulate_on_their_text_block() {
        let stream = sse(&[
            (
                "message_start",
                json!({"type": "message_start", "message": {"id": "m", "model": "m"}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": "", "citations": null}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "a"}}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "A."}}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]);
        let a = super::super::tests::assemble(Api::Anthropic, &stream).unwrap();
        let wire: serde_json::Value = serde_json::from_slice(&a.elements[0].wire).unwrap();
        assert_eq!(wire["content"][0]["citations"][0]["cited_text"], "a");
        assert_eq!(wire["content"][0]["text"], "A.");
        assert_eq!(a.usage, None);
    }

    #[test]
    fn truncated_error_and_broken_input() {
        let full = thinking_text_tool();
        let cut = &full[..full.find("event: message_stop").unwrap()];
        assert_eq!(
            super::super::tests::assemble(Api::Anthropic, cut),
            Err(StreamError::Truncated)
        );
        let failed = format!(
            "{cut}event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        );
        assert_eq!(
            super::super::tests::assemble(Api::Anthropic, &failed),
            Err(StreamError::Provider {
                kind: "overloaded_error".into(),
                message: "Overloaded".into()
            })
        );
        let broken = full.replace("s\\\"}", "s");
        assert!(matches!(
            super::super::tests::assemble(Api::Anthropic, &broken),
            Err(StreamError::Malformed(m)) if m.contains("tool input")
        ));
        let error_body =
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}});
        assert_eq!(
            crate::wire::stream::assemble_json(Api::Anthropic, error_body.to_string().as_bytes()),
            Err(StreamError::Provider {
                kind: "invalid_request_error".into(),
                message: "bad".into()
            })
        );
    }
}
