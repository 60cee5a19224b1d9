//! OpenAI Responses: one element per output item, taken whole from
//! `response.output_item.done` (the item complete, as clients keep it), in `output_index`
//! order. Deltas only preview what `.done` repeats, so they are not rebuilt here; a server that
//! sends no `.done` items still has them in `response.completed`'s `output`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{element, event_json, text, Assembled, Problem, SseEvent, StreamError};
use crate::wire::openai_responses;

/// The events assembly reads; a stream without event names is read by each data's `type`.
const USED: &[&str] = &[
    "response.created",
    "response.in_progress",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

#[derive(Debug, Default)]
pub(super) struct Stream {
    id: Option<String>,
    model: Option<String>,
    usage: Option<ctxd_core::model::Usage>,
    stop_reason: Option<String>,
    items: BTreeMap<u64, Value>,
    /// `response.completed`'s `output`, used only when no `.done` item came.
    output: Vec<Value>,
    pub(super) done: bool,
    problem: Problem,
}

impl Stream {
    pub(super) fn push(&mut self, ev: &SseEvent) {
        if self.done {
            return;
        }
        let name = ev.event.as_deref().unwrap_or_default();
        // Deltas (most of a stream) only preview the `.done` items: not even parsed.
        if !name.is_empty() && !USED.contains(&name) {
            return;
        }
        let Some(mut v) = event_json(ev, &mut self.problem, true) else {
            return;
        };
        let ty = v.get("type").and_then(Value::as_str).unwrap_or(name);
        match ty {
            "response.created" | "response.in_progress" => {
                self.facts(v.get("response").unwrap_or(&Value::Null));
            }
            "response.output_item.done" => {
                let index = v.get("output_index").and_then(Value::as_u64);
                let index = index
                    .unwrap_or_else(|| self.items.keys().next_back().map_or(0, |last| last + 1));
                match v.get_mut("item").map(Value::take) {
                    Some(item @ Value::Object(_)) => {
                        self.items.insert(index, item);
                    }
                    _ => self
                        .problem
                        .malformed("response.output_item.done without an item"),
                }
            }
            "response.completed" | "response.incomplete" => {
                let mut r = v.get_mut("response").map(Value::take).unwrap_or_default();
                self.facts(&r);
                self.usage = r
                    .get("usage")
                    .filter(|u| u.is_object())
                    .map(openai_responses::usage);
                self.stop_reason = stop_reason(&r);
                if let Some(Value::Array(output)) = r.get_mut("output").map(Value::take) {
                    self.output = output;
                }
                self.done = true;
            }
            "response.failed" => {
                let r = v.get("response").unwrap_or(&Value::Null);
                match r.get("error").filter(|e| e.is_object()) {
                    Some(_) => self.problem.provider(r),
                    None => self.problem.provider(&serde_json::json!({
                        "code": "response_failed", "message": "the response failed"})),
                }
            }
            "error" => self.problem.provider(&v),
            _ => {}
        }
    }

    fn facts(&mut self, r: &Value) {
        self.id = text(r, "id").or(self.id.take());
        self.model = text(r, "model").or(self.model.take());
    }

    pub(super) fn finish(self) -> Result<Assembled, StreamError> {
        self.problem.check(self.done)?;
        let items = if self.items.is_empty() {
            self.output
        } else {
            self.items.into_values().collect()
        };
        assembled(items, self.usage, self.model, self.id, self.stop_reason)
    }
}

/// `completed`, or why the response stopped short (`max_output_tokens`, `content_filter`).
fn stop_reason(r: &Value) -> Option<String> {
    match r.get("status").and_then(Value::as_str) {
        Some("incomplete") => r
            .get("incomplete_details")
            .and_then(|d| text(d, "reason"))
            .or_else(|| Some("incomplete".into())),
        _ => text(r, "status"),
    }
}

/// A whole `response` body.
pub(super) fn json(v: &Value) -> Result<Assembled, StreamError> {
    if v.get("status").and_then(Value::as_str) == Some("failed") {
        return Err(super::provider_error(&serde_json::json!({
            "code": "response_failed", "message": "the response failed"})));
    }
    let Some(Value::Array(output)) = v.get("output") else {
        return Err(StreamError::Malformed("response without output".into()));
    };
    assembled(
        output.clone(),
        v.get("usage")
            .filter(|u| u.is_object())
            .map(openai_responses::usage),
        text(v, "model"),
        text(v, "id"),
        stop_reason(v),
    )
}

fn assembled(
    items: Vec<Value>,
    usage: Option<ctxd_core::model::Usage>,
    model: Option<String>,
    id: Option<String>,
    stop_reason: Option<String>,
) -> Result<Assembled, StreamError> {
    let elements = items
        .iter()
        .map(|it| element(it, openai_responses::item))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Assembled::new(elements, usage, model, id, stop_reason))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(super) mod tests {
    use expect_test::expect;
    use serde_json::{json, Value};

    use super::super::tests::{assemble, check, check_json, sse};
    use crate::wire::stream::{Api, StreamError};

    fn response(status: &str, output: Value, usage: Value) -> Value {
        json!({"id": "resp_1", "object": "response", "created_at": 1, "status": status,
            "model": "gpt-5", "output": output, "usage": usage, "error": null,
            "incomplete_details": null})
    }

    fn items() -> Value {
        json!([
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Look first."}],
                "encrypted_content": "gAAAAB"},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": "Listing \u{e9}", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "exec_command",
                "arguments": "{\"cmd\":\"ls\"}", "status": "completed"},
            {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "apply_patch",
                "input": "*** Begin Patch\n*** End Patch", "status": "completed"},
            {"type": "web_search_call", "id": "ws_1", "status": "completed",
                "action": {"type": "search", "query": "rust"}}
        ])
    }

    fn usage() -> Value {
        json!({"input_tokens": 500, "input_tokens_details": {"cached_tokens": 384},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 8}, "total_tokens": 520})
    }

    /// Reasoning, a message, a function call, a custom tool call and a web search, with their
    /// deltas; the `.done` events arrive out of `output_index` order.
    pub(crate) fn five_items() -> String {
        let items = items();
        let mut events = vec![
            (
                "response.created",
                json!({"type": "response.created", "sequence_number": 0,
                "response": response("in_progress", json!([]), Value::Null)}),
            ),
            (
                "response.in_progress",
                json!({"type": "response.in_progress",
                "response": response("in_progress", json!([]), Value::Null)}),
            ),
            (
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
            ),
            (
                "response.reasoning_summary_text.delta",
                json!({"type": "response.reasoning_summary_text.delta",
                "item_id": "rs_1", "output_index": 0, "summary_index": 0, "delta": "Look first."}),
            ),
            (
                "response.output_item.done",
                json!({"type": "response.output_item.done", "output_index": 0,
                "item": items[0]}),
            ),
            (
                "response.output_item.added",
                json!({"type": "response.output_item.added", "output_index": 1,
                "item": {"type": "message", "id": "msg_1", "status": "in_progress", "role": "assistant", "content": []}}),
            ),
            (
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "item_id": "msg_1",
                "output_index": 1, "content_index": 0, "delta": "Listing \u{e9}"}),
            ),
        ];
        for (i, item) in items.as_array().unwrap().iter().enumerate().skip(2).rev() {
            events.push((
                "response.function_call_arguments.delta",
                json!({"type":
                "response.function_call_arguments.delta", "output_index": i, "delta": "{"}),
            ));
            events.push((
                "response.output_item.done",
                json!({"type": "response.output_item.done",
                "output_index": i, "item": item}),
            ));
        }
        events.extend([
            (
                "response.output_item.done",
                json!({"type": "response.output_item.done", "output_index": 1,
                "item": items[1]}),
            ),
            (
                "response.completed",
                json!({"type": "response.completed",
                "response": response("completed", items.clone(), usage())}),
            ),
        ]);
        sse(&events)
    }

    #[test]
    fn one_element_per_output_item_in_output_order() {
        check(
            Api::OpenAiResponses,
            &five_items(),
            expect![[r#"
                model=gpt-5 id=resp_1 stop=completed usage=in 116 out 20 cache_read 384 cache_write 0
                assistant: redacted(Look first., sig gAAAAB)
                  {"encrypted_content":"gAAAAB","id":"rs_1","summary":[{"text":"Look first.","type":"summary_text"}],"type":"reasoning"}
                assistant: text(Listing é)
                  {"content":[{"annotations":[],"text":"Listing é","type":"output_text"}],"id":"msg_1","role":"assistant","status":"completed","type":"message"}
                assistant: call call_1 exec_command {"cmd":"ls"}
                  {"arguments":"{\"cmd\":\"ls\"}","call_id":"call_1","id":"fc_1","name":"exec_command","status":"completed","type":"function_call"}
                assistant: call call_2 apply_patch "*** Begin Patch\n*** End Patch"
                  {"call_id":"call_2","id":"ctc_1","input":"*** Begin Patch\n*** End Patch","name":"apply_patch","status":"completed","type":"custom_tool_call"}
                assistant: text({"action":{"query":"rust","type":"search"},"id":"ws_1","status":"completed","type":"web_search_call"})
                  {"action":{"query":"rust","type":"search"},"id":"ws_1","status":"completed","type":"web_search_call"}
            "#]],
        );
    }

    #[test]
    fn json_body_and_completed_output_give_the_same_elements() {
        let streamed = assemble(Api::OpenAiResponses, &five_items()).unwrap();
        let body = response("completed", items(), usage());
        assert_eq!(check_json(Api::OpenAiResponses, &body), streamed);
        // No `.done` events at all: `response.completed` carries the items.
        let bare = sse(&[
            (
                "response.created",
                json!({"type": "response.created",
                "response": response("in_progress", json!([]), Value::Null)}),
            ),
            (
                "response.completed",
                json!({"type": "response.completed",
                "response": response("completed", items(), usage())}),
            ),
        ]);
        assert_eq!(assemble(Api::OpenAiResponses, &bare).unwrap(), streamed);
    }

    #[test]
    fn incomplete_is_a_response_that_stopped_short() {
        let mut r = response("incomplete", json!([items()[1]]), usage());
        r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        let stream = sse(&[
            (
                "response.output_item.done",
                json!({"type": "response.output_item.done",
                "output_index": 0, "item": items()[1]}),
            ),
            (
                "response.incomplete",
                json!({"type": "response.incomplete", "response": r}),
            ),
        ]);
        let a = assemble(Api::OpenAiResponses, &stream).unwrap();
        assert_eq!(a.stop_reason.as_deref(), Some("max_output_tokens"));
        assert_eq!(a.elements.len(), 1);
        assert_eq!(
            a.elements[0].message.stop_reason.as_deref(),
            Some("max_output_tokens")
        );
    }

    #[test]
    fn failed_error_and_truncated() {
        let full = five_items();
        let cut = &full[..full.find("event: response.completed").unwrap()];
        assert_eq!(
            assemble(Api::OpenAiResponses, cut),
            Err(StreamError::Truncated)
        );
        let mut r = response("failed", json!([]), Value::Null);
        r["error"] = json!({"code": "server_error", "message": "The model failed"});
        let failed = format!(
            "{cut}event: response.failed\ndata: {}\n\n",
            json!({"type": "response.failed", "response": r})
        );
        assert_eq!(
            assemble(Api::OpenAiResponses, &failed),
            Err(StreamError::Provider {
                kind: "server_error".into(),
                message: "The model failed".into()
            })
        );
        let error = format!(
            "{cut}event: error\ndata: {}\n\n",
            json!({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": null})
        );
        assert_eq!(
            assemble(Api::OpenAiResponses, &error),
            Err(StreamError::Provider {
                kind: "rate_limit_exceeded".into(),
                message: "Slow down".into()
            })
        );
    }
}
