//! Anthropic Messages: a message JSON, or message_start, content_block_start/delta/stop per
//! block (ping after the first start), message_delta with usage, message_stop.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{deltas, halves, sse, Piece, Plan};

fn usage(plan: &Plan, output_tokens: u64) -> Value {
    if !plan.usage {
        return Value::Null;
    }
    json!({
        "input_tokens": plan.input_tokens,
        "cache_creation_input_tokens": plan.cache.creation,
        "cache_read_input_tokens": plan.cache.read,
        "output_tokens": output_tokens,
    })
}

fn stop_reason(plan: &Plan) -> &'static str {
    if plan.has_calls() {
        "tool_use"
    } else {
        "end_turn"
    }
}

/// The content blocks, thinking first.
fn blocks(plan: &Plan) -> Vec<Value> {
    let thinking = plan
        .reasoning
        .iter()
        .map(|r| json!({"type": "thinking", "thinking": r.text, "signature": r.opaque}));
    let rest = plan.pieces.iter().map(|p| match p {
        Piece::Text { text, .. } => json!({"type": "text", "text": text}),
        Piece::Call { id, call, .. } => {
            json!({"type": "tool_use", "id": id, "name": call.name, "input": call.args})
        }
        Piece::Thinking {
            signature,
            redacted: true,
            ..
        } => json!({"type": "redacted_thinking", "data": signature.as_deref().unwrap_or("")}),
        Piece::Thinking {
            text, signature, ..
        } => {
            let mut block = json!({"type": "thinking", "thinking": text});
            if let Some(signature) = signature {
                block["signature"] = json!(signature);
            }
            block
        }
    });
    thinking.chain(rest).collect()
}

fn message(plan: &Plan, content: Vec<Value>, stop: Option<&str>, usage: Value) -> Value {
    json!({
        "id": plan.id,
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": usage,
    })
}

pub(super) fn json(plan: &Plan) -> Vec<u8> {
    let msg = message(
        plan,
        blocks(plan),
        Some(stop_reason(plan)),
        usage(plan, plan.output_tokens()),
    );
    msg.to_string().into_bytes()
}

fn start(plan: &Plan) -> Bytes {
    let msg = message(plan, Vec::new(), None, usage(plan, 1));
    sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": msg}),
    )
}

fn block_event(kind: &str, index: usize, key: &str, value: Value) -> Bytes {
    sse(
        Some(kind),
        &json!({"type": kind, "index": index, key: value}),
    )
}

pub(super) fn events(plan: &Plan) -> Vec<Bytes> {
    let mut out = vec![start(plan)];
    let delta = |index, d: Value| block_event("content_block_delta", index, "delta", d);
    for (index, block) in blocks(plan).into_iter().enumerate() {
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let empty = match kind.as_str() {
            "thinking" => json!({"type": "thinking", "thinking": "", "signature": ""}),
            "text" => json!({"type": "text", "text": ""}),
            // Whole in its start event, as Anthropic sends it.
            "redacted_thinking" => block.clone(),
            _ => {
                let mut b = block.clone();
                b["input"] = json!({});
                b
            }
        };
        out.push(block_event(
            "content_block_start",
            index,
            "content_block",
            empty,
        ));
        if index == 0 {
            out.push(sse(Some("ping"), &json!({"type": "ping"})));
        }
        let text = |key: &str| {
            block
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match kind.as_str() {
            "thinking" => {
                for d in deltas(&text("thinking")) {
                    out.push(delta(
                        index,
                        json!({"type": "thinking_delta", "thinking": d}),
                    ));
                }
                if block.get("signature").is_some() {
                    let sig = json!({"type": "signature_delta", "signature": text("signature")});
                    out.push(delta(index, sig));
                }
            }
            "redacted_thinking" => {}
            "text" => {
                for d in deltas(&text("text")) {
                    out.push(delta(index, json!({"type": "text_delta", "text": d})));
                }
            }
            _ => {
                let args = block.get("input").map(Value::to_string).unwrap_or_default();
                for part in halves(&args) {
                    out.push(delta(
                        index,
                        json!({"type": "input_json_delta", "partial_json": part}),
                    ));
                }
            }
        }
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    let end = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(plan), "stop_sequence": null},
        "usage": usage(plan, plan.output_tokens()),
    });
    out.push(sse(Some("message_delta"), &end));
    out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}

/// message_start, a ping, then an `error` event (what Anthropic sends when it overloads
/// mid-stream).
pub(super) fn failure(plan: &Plan, message: &str) -> Vec<Bytes> {
    let error = json!({"type": "error", "error": {"type": "overloaded_error", "message": message}});
    vec![
        start(plan),
        sse(Some("ping"), &json!({"type": "ping"})),
        sse(Some("error"), &error),
    ]
}
