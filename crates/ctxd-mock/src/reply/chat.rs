//! OpenAI Chat Completions: a chat.completion JSON, or chunks (role, content deltas, one
//! header and one arguments chunk per tool call, finish_reason), a usage chunk when
//! `stream_options.include_usage`, then `data: [DONE]`. With `logprobs: true`, the choice's
//! `logprobs.content` lists each token (streamed: one content chunk per token, carrying its
//! own).

use bytes::Bytes;
use serde_json::{json, Value};

use super::{deltas, sse, Piece, Plan};

fn usage(plan: &Plan) -> Value {
    let out = plan.output_tokens();
    if !plan.usage {
        return Value::Null;
    }
    json!({
        "prompt_tokens": plan.input_tokens,
        "completion_tokens": out,
        "total_tokens": plan.input_tokens + out,
    })
}

fn finish_reason(plan: &Plan) -> &'static str {
    if plan.has_calls() {
        "tool_calls"
    } else {
        "stop"
    }
}

/// All text pieces joined (a chat message has one content string).
fn text(plan: &Plan) -> Option<String> {
    let texts: Vec<&str> = plan
        .pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Text { text, .. } => Some(text.as_str()),
            Piece::Call { .. } | Piece::Thinking { .. } => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

/// (id, name, arguments JSON) of each call.
fn calls(plan: &Plan) -> Vec<(&str, &str, String)> {
    plan.pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Call { id, call, .. } => {
                Some((id.as_str(), call.name.as_str(), call.args.to_string()))
            }
            Piece::Text { .. } | Piece::Thinking { .. } => None,
        })
        .collect()
}

/// A choice's `logprobs` object for these tokens.
fn logprobs(plan: &Plan, tokens: &[super::logprobs::TokenLogprob]) -> Value {
    let content: Vec<Value> = tokens
        .iter()
        .map(|t| t.to_json(plan.top_logprobs))
        .collect();
    json!({"content": content, "refusal": null})
}

pub(super) fn json(plan: &Plan) -> Vec<u8> {
    let mut message = json!({"role": "assistant", "content": text(plan), "refusal": null});
    let calls = calls(plan);
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
            .collect();
    }
    json!({
        "id": plan.id,
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": [{"index": 0, "message": message,
            "logprobs": plan.logprobs.as_deref().map_or(Value::Null, |t| logprobs(plan, t)),
            "finish_reason": finish_reason(plan)}],
        "usage": usage(plan),
    })
    .to_string()
    .into_bytes()
}

fn chunk(plan: &Plan, delta: Value, finish: Option<&str>) -> Value {
    let mut data = json!({
        "id": plan.id,
        "object": "chat.completion.chunk",
        "created": plan.created,
        "model": plan.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    });
    if plan.include_usage {
        data["usage"] = Value::Null;
    }
    data
}

pub(super) fn events(plan: &Plan) -> Vec<Bytes> {
    let mut out = vec![sse(
        None,
        &chunk(plan, json!({"role": "assistant", "content": ""}), None),
    )];
    match (text(plan), plan.logprobs.as_deref()) {
        (Some(_), Some(tokens)) => {
            for t in tokens {
                let mut c = chunk(plan, json!({"content": t.token}), None);
                c["choices"][0]["logprobs"] = logprobs(plan, std::slice::from_ref(t));
                out.push(sse(None, &c));
            }
        }
        (Some(text), None) => {
            for d in deltas(&text) {
                out.push(sse(None, &chunk(plan, json!({"content": d}), None)));
            }
        }
        (None, _) => {}
    }
    for (index, (id, name, args)) in calls(plan).into_iter().enumerate() {
        let head = json!({"tool_calls": [{"index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]});
        out.push(sse(None, &chunk(plan, head, None)));
        let body = json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]});
        out.push(sse(None, &chunk(plan, body, None)));
    }
    out.push(sse(
        None,
        &chunk(plan, json!({}), Some(finish_reason(plan))),
    ));
    if plan.include_usage {
        let data = json!({
            "id": plan.id,
            "object": "chat.completion.chunk",
            "created": plan.created,
            "model": plan.model,
            "choices": [],
            "usage": usage(plan),
        });
        out.push(sse(None, &data));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

/// The role chunk, then an `error` object in place of a chunk (what OpenAI-compatible servers
/// send when generation fails mid-stream), no `[DONE]`.
pub(super) fn failure(plan: &Plan, message: &str) -> Vec<Bytes> {
    let error =
        json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}});
    vec![
        sse(
            None,
            &chunk(plan, json!({"role": "assistant", "content": ""}), None),
        ),
        sse(None, &error),
    ]
}
