//! One JSON response out of a hidden exchange's response bodies (pure): the client's content of
//! every round in order, ctxd's tool calls left out, the last round's ending (unless the rounds'
//! limit cut the exchange: then an ordinary end of turn with [`super::cut_notice`]), usage summed
//! over the rounds.

use serde_json::Value;

use super::splice::add_usage;
use super::Offer;
use crate::api::Api;

/// The body the client gets for `bodies` (every round's response, oldest first). `cut`: the
/// last one called ctxd's tools only and the exchange stops there.
pub fn merge(api: Api, offer: &Offer, bodies: &[Value], cut: bool) -> Value {
    let Some(last) = bodies.last() else {
        return Value::Null;
    };
    let mut out = last.clone();
    let usage_field = if api == Api::Gemini {
        "usageMetadata"
    } else {
        "usage"
    };
    let mut usage = Value::Object(Default::default());
    for b in bodies {
        if let Some(u) = b.get(usage_field) {
            add_usage(&mut usage, u);
        }
    }
    match api {
        Api::Anthropic => {
            let content: Vec<Value> = bodies
                .iter()
                .flat_map(|b| b.get("content").and_then(Value::as_array).cloned())
                .flatten()
                .filter(|block| !is_ours(offer, block, "tool_use", "name"))
                .collect();
            out["content"] = Value::Array(content);
            if cut {
                out["stop_reason"] = Value::from("end_turn");
                if let Some(c) = out["content"].as_array_mut() {
                    c.push(serde_json::json!({"type": "text", "text": super::cut_notice()}));
                }
            }
            if let Some(id) = bodies[0].get("id") {
                out["id"] = id.clone();
            }
        }
        Api::Chat => {
            let messages: Vec<&Value> = bodies
                .iter()
                .filter_map(|b| b.pointer("/choices/0/message"))
                .collect();
            let text: Vec<&str> = messages
                .iter()
                .filter_map(|m| m.get("content").and_then(Value::as_str))
                .collect();
            let calls: Vec<Value> = messages
                .iter()
                .flat_map(|m| m.get("tool_calls").and_then(Value::as_array).cloned())
                .flatten()
                .filter(|c| {
                    !c.pointer("/function/name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| offer.has(n))
                })
                .collect();
            let mut text = text.concat();
            if cut {
                if !text.is_empty() {
                    text.push_str("\n\n");
                }
                text.push_str(&super::cut_notice());
            }
            if let Some(m) = out.pointer_mut("/choices/0/message") {
                m["content"] = if text.is_empty() {
                    Value::Null
                } else {
                    Value::from(text)
                };
                if calls.is_empty() {
                    if let Some(o) = m.as_object_mut() {
                        o.remove("tool_calls");
                    }
                } else {
                    m["tool_calls"] = Value::Array(calls);
                }
            }
            if cut {
                if let Some(c) = out.pointer_mut("/choices/0") {
                    c["finish_reason"] = Value::from("stop");
                }
            }
            if let Some(id) = bodies[0].get("id") {
                out["id"] = id.clone();
            }
        }
        Api::Responses => {
            let output: Vec<Value> = bodies
                .iter()
                .flat_map(|b| b.get("output").and_then(Value::as_array).cloned())
                .flatten()
                .filter(|item| !is_ours(offer, item, "function_call", "name"))
                .chain(cut.then(|| responses_message(NOTICE_ITEM_ID, &super::cut_notice())))
                .collect();
            out["output"] = Value::Array(output);
        }
        Api::Gemini => {
            let parts: Vec<Value> = bodies
                .iter()
                .flat_map(|b| {
                    b.pointer("/candidates/0/content/parts")
                        .and_then(Value::as_array)
                        .cloned()
                })
                .flatten()
                .filter(|p| !gemini_call_is_ours(offer, p))
                .chain(cut.then(|| serde_json::json!({"text": super::cut_notice()})))
                .collect();
            if let Some(c) = out.pointer_mut("/candidates/0") {
                c["content"] = serde_json::json!({"role": "model", "parts": parts});
                if cut {
                    c["finishReason"] = Value::from("STOP");
                }
            }
            if let Some(id) = bodies[0].get("responseId") {
                out["responseId"] = id.clone();
            }
        }
    }
    if bodies.len() > 1 && out.get(usage_field).is_some_and(Value::is_object) {
        out[usage_field] = usage;
    }
    out
}

/// The id of the Responses message item carrying [`super::cut_notice`].
pub const NOTICE_ITEM_ID: &str = "msg_ctxd_notice";

/// A completed Responses assistant message item of `text`.
pub fn responses_message(id: &str, text: &str) -> Value {
    serde_json::json!({"type": "message", "id": id, "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

/// A Gemini part calling one of ctxd's tools (its signature goes with it).
pub fn gemini_call_is_ours(offer: &Offer, part: &Value) -> bool {
    part.pointer("/functionCall/name")
        .and_then(Value::as_str)
        .is_some_and(|n| offer.has(n))
}

/// A block/item of type `kind` naming one of ctxd's tools in `field`.
fn is_ours(offer: &Offer, v: &Value, kind: &str, field: &str) -> bool {
    v.get("type").and_then(Value::as_str) == Some(kind)
        && v.get(field)
            .and_then(Value::as_str)
            .is_some_and(|n| offer.has(n))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rounds_merge_into_one_answer_without_ctxds_calls() {
        let offer = Offer::of(&["notes_write"]);
        let first = json!({"id": "msg_1", "type": "message", "role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "text", "text": "saving"},
            {"type": "tool_use", "id": "c1", "name": "notes_write", "input": {}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}});
        let second = json!({"id": "msg_2", "type": "message", "role": "assistant", "content": [
            {"type": "text", "text": "done"},
            {"type": "tool_use", "id": "c2", "name": "Bash", "input": {"cmd": "ls"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 30, "output_tokens": 7}});
        let m = merge(Api::Anthropic, &offer, &[first, second], false);
        let types: Vec<&str> = m["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["thinking", "text", "text", "tool_use"]);
        assert_eq!(m["content"][3]["name"], "Bash");
        assert_eq!(m["usage"], json!({"input_tokens": 40, "output_tokens": 12}));
        assert_eq!(m["id"], "msg_1");

        let first = json!({"id": "c-1", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "saving. ", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "notes_write", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}});
        let second = json!({"id": "c-2", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "done"}}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}});
        let m = merge(Api::Chat, &offer, &[first.clone(), second], false);
        assert_eq!(m["choices"][0]["message"]["content"], "saving. done");
        assert!(m["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(m["choices"][0]["finish_reason"], "stop");
        assert_eq!(m["usage"]["total_tokens"], 10);
        let cut = merge(Api::Chat, &offer, &[first], true);
        assert_eq!(cut["choices"][0]["finish_reason"], "stop");
        assert!(cut["choices"][0]["message"].get("tool_calls").is_none());
        assert_eq!(
            cut["choices"][0]["message"]["content"],
            format!("saving. \n\n{}", crate::served::cut_notice())
        );

        let first = json!({"id": "r1", "output": [
            {"type": "reasoning", "id": "rs", "encrypted_content": "E", "summary": []},
            {"type": "function_call", "id": "fc", "call_id": "c1", "name": "notes_write", "arguments": "{}"}],
            "usage": {"input_tokens": 5, "output_tokens": 1, "input_tokens_details": {"cached_tokens": 2}}});
        let second = json!({"id": "r2", "output": [
            {"type": "message", "id": "m", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
            "usage": {"input_tokens": 6, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 4}}});
        let m = merge(Api::Responses, &offer, &[first, second], false);
        let types: Vec<&str> = m["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["reasoning", "message"]);
        assert_eq!(m["usage"]["input_tokens_details"]["cached_tokens"], 6);
    }
}
