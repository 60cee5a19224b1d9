//! OpenAI Chat Completions: `data: {chunk}` lines of choice 0's deltas, then `data: [DONE]`.
//! The element is the assistant message as SDK clients echo it: `content` (null when empty),
//! `reasoning_content` when there was some, and `tool_calls` in index order with their
//! arguments as the streamed string.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::{element, event_json, text, Assembled, Problem, SseEvent, StreamError};
use crate::wire::openai_chat;

#[derive(Serialize)]
struct Wire<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireCall<'a>>,
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// Choice 0's message, as built from deltas or read from a whole body.
#[derive(Debug, Default)]
struct Draft {
    content: String,
    reasoning: String,
    refusal: String,
    calls: BTreeMap<u64, Call>,
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

impl Draft {
    /// One delta, or with `whole` a complete message: strings append; a call's id and name
    /// replace, its arguments append, as the OpenAI SDKs accumulate them.
    fn apply(&mut self, d: &Value, whole: bool) {
        let field = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or_default();
        match d.get("content") {
            Some(Value::String(s)) => self.content.push_str(s),
            // Some servers send content parts even here.
            Some(parts @ Value::Array(_)) => {
                let blocks = openai_chat::parts(parts);
                self.content.push_str(&openai_chat::text_of(&blocks));
            }
            _ => {}
        }
        self.reasoning.push_str(field("reasoning_content"));
        self.refusal.push_str(field("refusal"));
        let calls = d.get("tool_calls").and_then(Value::as_array);
        for (position, call) in calls.into_iter().flatten().enumerate() {
            let index = if whole {
                position as u64
            } else {
                match call.get("index").and_then(Value::as_u64) {
                    Some(i) => i,
                    None => self.unindexed(text(call, "id").as_deref()),
                }
            };
            self.apply_call(index, call);
        }
    }

    /// Where a fragment without an `index` goes (some compatible servers omit it): to the call
    /// with its id, to a new call for a new id, else to the last call.
    fn unindexed(&self, id: Option<&str>) -> u64 {
        let last = self.calls.keys().next_back().copied();
        match id {
            Some(id) => self
                .calls
                .iter()
                .find(|(_, c)| c.id == id)
                .map(|(i, _)| *i)
                .unwrap_or_else(|| last.map_or(0, |l| l + 1)),
            None => last.unwrap_or(0),
        }
    }

    fn apply_call(&mut self, index: u64, c: &Value) {
        let id = text(c, "id");
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id {
            call.id = id;
        }
        let f = c.get("function").unwrap_or(&Value::Null);
        if let Some(name) = text(f, "name") {
            call.name = name;
        }
        match f.get("arguments") {
            Some(Value::String(s)) => call.arguments.push_str(s),
            Some(v @ Value::Object(_)) => call.arguments.push_str(&v.to_string()),
            _ => {}
        }
    }

    fn wire(&self) -> Wire<'_> {
        Wire {
            role: "assistant",
            content: non_empty(&self.content),
            reasoning_content: non_empty(&self.reasoning),
            refusal: non_empty(&self.refusal),
            tool_calls: self
                .calls
                .values()
                .map(|c| WireCall {
                    id: &c.id,
                    kind: "function",
                    function: WireFunction {
                        name: &c.name,
                        arguments: &c.arguments,
                    },
                })
                .collect(),
        }
    }
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

#[derive(Debug, Default)]
pub(super) struct Stream {
    id: Option<String>,
    model: Option<String>,
    usage: Option<ctxd_core::model::Usage>,
    finish_reason: Option<String>,
    draft: Draft,
    pub(super) done: bool,
    problem: Problem,
}

impl Stream {
    pub(super) fn push(&mut self, ev: &SseEvent) {
        if self.done {
            return;
        }
        if ev.data.trim() == "[DONE]" {
            self.done = true;
            return;
        }
        let Some(v) = event_json(ev, &mut self.problem, true) else {
            return;
        };
        if v.get("error").is_some_and(|e| !e.is_null()) || ev.event.as_deref() == Some("error") {
            return self.problem.provider(&v);
        }
        if self.id.is_none() {
            self.id = text(&v, "id");
        }
        if self.model.is_none() {
            self.model = text(&v, "model");
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(openai_chat::usage(u));
        }
        if let Some(choice) = choice_zero(&v) {
            if let Some(delta) = choice.get("delta") {
                self.draft.apply(delta, false);
            }
            if let Some(reason) = text(choice, "finish_reason") {
                self.finish_reason = Some(reason);
            }
        }
    }

    pub(super) fn finish(self) -> Result<Assembled, StreamError> {
        self.problem.check(self.done)?;
        let el = element(&self.draft.wire(), openai_chat::message)?;
        Ok(Assembled::new(
            vec![el],
            self.usage,
            self.model,
            self.id,
            self.finish_reason,
        ))
    }
}

/// The choice with index 0 (or without an index); other choices (`n > 1`) are not the
/// conversation the client continues.
fn choice_zero(v: &Value) -> Option<&Value> {
    v.get("choices")?
        .as_array()?
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
}

/// A whole `chat.completion` body.
pub(super) fn json(v: &Value) -> Result<Assembled, StreamError> {
    let choice = choice_zero(v).ok_or_else(|| StreamError::Malformed("no choice 0".into()))?;
    let mut draft = Draft::default();
    draft.apply(choice.get("message").unwrap_or(&Value::Null), true);
    let el = element(&draft.wire(), openai_chat::message)?;
    Ok(Assembled::new(
        vec![el],
        v.get("usage")
            .filter(|u| u.is_object())
            .map(openai_chat::usage),
        text(v, "model"),
        text(v, "id"),
        text(choice, "finish_reason"),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(super) mod tests {
    use expect_test::expect;
    use serde_json::{json, Value};

    use super::super::tests::{assemble, check, check_json};
    use crate::wire::stream::{Api, StreamError};

    fn data(chunks: &[Value]) -> String {
        let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        s.push_str("data: [DONE]\n\n");
        s
    }

    fn chunk(delta: Value, finish: Value) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    /// Reasoning, text, then two parallel calls whose fragments interleave by index.
    pub(crate) fn parallel_calls() -> String {
        data(&[
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"reasoning_content": "Two "}), Value::Null),
            chunk(json!({"reasoning_content": "calls."}), Value::Null),
            chunk(json!({"content": "Checking \u{e9}"}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                "function": {"name": "bash", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                "function": {"name": "read", "arguments": "{\"pa"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"command\":"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"arguments": "th\":\"a\"}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"ls\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o", "choices": [],
                "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                "prompt_tokens_details": {"cached_tokens": 64}}}),
        ])
    }

    #[test]
    fn reasoning_text_and_parallel_tool_calls() {
        check(
            Api::OpenAiChat,
            &parallel_calls(),
            expect![[r#"
                model=gpt-4o id=chatcmpl-1 stop=tool_calls usage=in 36 out 7 cache_read 64 cache_write 0
                assistant: thinking(Two calls.) | text(Checking é) | call call_a bash {"command":"ls"} | call call_b read {"path":"a"}
                  {"role":"assistant","content":"Checking é","reasoning_content":"Two calls.","tool_calls":[{"id":"call_a","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}},{"id":"call_b","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}}]}
            "#]],
        );
    }

    #[test]
    fn json_body_gives_the_same_element_as_the_stream() {
        let body = json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
                "content": "Checking \u{e9}", "reasoning_content": "Two calls.", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                "prompt_tokens_details": {"cached_tokens": 64}}});
        assert_eq!(
            check_json(Api::OpenAiChat, &body),
            assemble(Api::OpenAiChat, &parallel_calls()).unwrap()
        );
    }

    #[test]
    fn only_choice_zero_and_calls_without_index() {
        let stream = data(&[
            json!({"id": "c", "model": "m", "choices": [
                {"index": 1, "delta": {"content": "other"}},
                {"index": 0, "delta": {"content": "mine"}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"id": "x1", "function": {"name": "f", "arguments": "{\"b\""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"id": "x2", "function": {"name": "g", "arguments": "{\"a\""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"id": "x1", "function": {"arguments": ":2}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": ":1}"}}]}, "finish_reason": "tool_calls"}]}),
        ]);
        check(
            Api::OpenAiChat,
            &stream,
            expect![[r#"
                model=m id=c stop=tool_calls usage=none
                assistant: text(mine) | call x1 f {"b":2} | call x2 g {"a":1}
                  {"role":"assistant","content":"mine","tool_calls":[{"id":"x1","type":"function","function":{"name":"f","arguments":"{\"b\":2}"}},{"id":"x2","type":"function","function":{"name":"g","arguments":"{\"a\":1}"}}]}
            "#]],
        );
    }

    #[test]
    fn json_calls_are_told_apart_by_position() {
        let body = json!({"choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"function": {"name": "f", "arguments": "{}"}},
                {"function": {"name": "g", "arguments": {"a": 1}}}]}}]});
        let a = check_json(Api::OpenAiChat, &body);
        let names: Vec<_> = a.elements[0]
            .message
            .content
            .iter()
            .map(|b| match b {
                ctxd_core::model::ContentBlock::ToolCall {
                    name, arguments, ..
                } => {
                    format!("{name} {arguments}")
                }
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(names, ["f {}", "g {\"a\":1}"]);
    }

    #[test]
    fn truncated_and_error_chunks() {
        let full = parallel_calls();
        let cut = full.trim_end_matches("data: [DONE]\n\n");
        assert_eq!(assemble(Api::OpenAiChat, cut), Err(StreamError::Truncated));
        let head: String = full.split_inclusive("\n\n").take(3).collect();
        let failed = format!(
            "{head}data: {}\n\n",
            json!({"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}})
        );
        assert_eq!(
            assemble(Api::OpenAiChat, &failed),
            Err(StreamError::Provider {
                kind: "rate_limit_error".into(),
                message: "Rate limit reached".into()
            })
        );
        assert!(matches!(
            assemble(Api::OpenAiChat, "data: {not json\n\ndata: [DONE]\n\n"),
            Err(StreamError::Malformed(_))
        ));
    }
}
