//! OpenAI Responses: a response JSON, or response.created, response.in_progress, per output
//! item output_item.added, its deltas and dones, output_item.done, then response.completed
//! with usage; every event numbered by `sequence_number`.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{deltas, sse, Piece, Plan};
use crate::turn::ToolKind;

fn usage(plan: &Plan) -> Value {
    let out = plan.output_tokens();
    if !plan.usage {
        return Value::Null;
    }
    json!({
        "input_tokens": plan.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": plan.reasoning_tokens()},
        "total_tokens": plan.input_tokens + out,
    })
}

fn response(plan: &Plan, status: &str, output: Vec<Value>, usage: Value) -> Value {
    json!({
        "id": plan.id,
        "object": "response",
        "created_at": plan.created,
        "status": status,
        "model": plan.model,
        "output": output,
        "usage": usage,
        "error": null,
        "incomplete_details": null,
        "parallel_tool_calls": false,
        "tool_choice": plan.tool_choice,
        "tools": [],
        "previous_response_id": plan.previous_response_id,
    })
}

/// A `local_shell` action from the arguments: an argv array as is, a string through bash.
fn shell_action(args: &Value) -> Value {
    let command = match args.get("command").or_else(|| args.get("cmd")) {
        Some(Value::Array(argv)) => Value::Array(argv.clone()),
        Some(Value::String(s)) => json!(["bash", "-lc", s]),
        _ => json!(["bash", "-lc", "ls"]),
    };
    json!({"type": "exec", "command": command})
}

/// A custom tool's free-form input: the arguments if a string, else their command, else JSON.
fn custom_input(args: &Value) -> String {
    match args {
        Value::String(s) => s.clone(),
        _ => match args.get("command").or_else(|| args.get("input")) {
            Some(Value::String(s)) => s.clone(),
            _ => args.to_string(),
        },
    }
}

/// The output items, reasoning first, each in its final (`completed`) form.
fn items(plan: &Plan) -> Vec<Value> {
    let reasoning = plan.reasoning.iter().map(
        |r| json!({"type": "reasoning", "id": r.id, "summary": [], "encrypted_content": r.opaque}),
    );
    let rest = plan.pieces.iter().map(|p| match p {
        Piece::Thinking {
            id,
            text,
            signature,
            ..
        } => {
            let summary = if text.is_empty() {
                json!([])
            } else {
                json!([{"type": "summary_text", "text": text}])
            };
            let mut item = json!({"type": "reasoning", "id": id, "summary": summary});
            if let Some(signature) = signature {
                item["encrypted_content"] = json!(signature);
            }
            item
        }
        Piece::Text { id, text } => json!({
            "type": "message", "id": id, "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
        Piece::Call { id, call_id, call } => match call.kind {
            ToolKind::LocalShell => json!({
                "type": "local_shell_call", "id": id, "call_id": call_id, "status": "completed",
                "action": shell_action(&call.args),
            }),
            ToolKind::Custom => json!({
                "type": "custom_tool_call", "id": id, "call_id": call_id, "status": "completed",
                "name": call.name, "input": custom_input(&call.args),
            }),
            ToolKind::Function | ToolKind::Other => json!({
                "type": "function_call", "id": id, "call_id": call_id, "status": "completed",
                "name": call.name, "arguments": call.args.to_string(),
            }),
        },
    });
    reasoning.chain(rest).collect()
}

pub(super) fn json(plan: &Plan) -> Vec<u8> {
    response(plan, "completed", items(plan), usage(plan))
        .to_string()
        .into_bytes()
}

/// Numbers events as they are added.
struct Seq {
    out: Vec<Bytes>,
}

impl Seq {
    fn ev(&mut self, name: &str, fields: Value) {
        let mut data = json!({"type": name, "sequence_number": self.out.len()});
        if let (Some(data), Value::Object(fields)) = (data.as_object_mut(), fields) {
            data.extend(fields);
        }
        self.out.push(sse(Some(name), &data));
    }

    fn start(plan: &Plan) -> Self {
        let mut seq = Seq { out: Vec::new() };
        let pending = response(plan, "in_progress", Vec::new(), Value::Null);
        seq.ev("response.created", json!({"response": pending}));
        seq.ev("response.in_progress", json!({"response": pending}));
        seq
    }
}

fn str_of<'a>(item: &'a Value, key: &str) -> &'a str {
    item.get(key).and_then(Value::as_str).unwrap_or_default()
}

pub(super) fn events(plan: &Plan) -> Vec<Bytes> {
    let mut seq = Seq::start(plan);
    let items = items(plan);
    for (i, item) in items.iter().enumerate() {
        let id = str_of(item, "id");
        let at = |extra: Value| {
            let mut v = json!({"item_id": id, "output_index": i});
            if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
                v.extend(extra);
            }
            v
        };
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        match str_of(item, "type") {
            "message" => {
                added["content"] = json!([]);
                seq.ev(
                    "response.output_item.added",
                    json!({"output_index": i, "item": added}),
                );
                let text = item["content"][0]["text"].as_str().unwrap_or_default();
                let part = json!({"type": "output_text", "text": "", "annotations": []});
                seq.ev(
                    "response.content_part.added",
                    at(json!({"content_index": 0, "part": part})),
                );
                for d in deltas(text) {
                    let delta = json!({"content_index": 0, "delta": d, "logprobs": []});
                    seq.ev("response.output_text.delta", at(delta));
                }
                let done = json!({"content_index": 0, "text": text, "logprobs": []});
                seq.ev("response.output_text.done", at(done));
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                seq.ev(
                    "response.content_part.done",
                    at(json!({"content_index": 0, "part": part})),
                );
            }
            "function_call" => {
                added["arguments"] = json!("");
                seq.ev(
                    "response.output_item.added",
                    json!({"output_index": i, "item": added}),
                );
                let args = str_of(item, "arguments");
                seq.ev(
                    "response.function_call_arguments.delta",
                    at(json!({"delta": args})),
                );
                seq.ev(
                    "response.function_call_arguments.done",
                    at(json!({"arguments": args})),
                );
            }
            "custom_tool_call" => {
                added["input"] = json!("");
                seq.ev(
                    "response.output_item.added",
                    json!({"output_index": i, "item": added}),
                );
                let input = str_of(item, "input");
                seq.ev(
                    "response.custom_tool_call_input.delta",
                    at(json!({"delta": input})),
                );
                seq.ev(
                    "response.custom_tool_call_input.done",
                    at(json!({"input": input})),
                );
            }
            _ => {
                if str_of(item, "type") == "reasoning" {
                    added = item.clone(); // reasoning items carry no status
                }
                seq.ev(
                    "response.output_item.added",
                    json!({"output_index": i, "item": added}),
                );
            }
        }
        seq.ev(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        );
    }
    let done = response(plan, "completed", items, usage(plan));
    seq.ev("response.completed", json!({"response": done}));
    seq.out
}

/// response.created, response.in_progress, then response.failed.
pub(super) fn failure(plan: &Plan, message: &str) -> Vec<Bytes> {
    let mut seq = Seq::start(plan);
    let mut failed = response(plan, "failed", Vec::new(), Value::Null);
    failed["error"] = json!({"code": "server_error", "message": message});
    seq.ev("response.failed", json!({"response": failed}));
    seq.out
}
