//! Google Gemini: a `GenerateContentResponse` JSON; streamed, the same split in chunks, as SSE
//! (`alt=sse`: `data: {chunk}\r\n\r\n`, no `[DONE]`) or as one JSON array sent piece by piece
//! (`[{chunk}\r\n,{chunk}\r\n]`). Every chunk names the model version and response id; the
//! last carries `finishReason` and the full `usageMetadata`.
//!
//! Parts: thoughts first (`{"text", "thought": true, "thoughtSignature"}`), then the texts and
//! calls in order; the first `functionCall` part carries a `thoughtSignature` (Gemini 3's
//! convention), bound to its name and arguments ([`crate::signature`]), so strict mode can
//! refuse it sent back on another part or dropped from the current tool loop.

use bytes::Bytes;
use serde_json::{json, Value};

use super::{deltas, halves, Piece, Plan};
use crate::signature;

/// Thought tokens (the reasoning and scripted thoughts) and candidate tokens: together the
/// plan's output tokens.
fn token_split(plan: &Plan) -> (u64, u64) {
    let thought_bytes: usize = plan
        .pieces
        .iter()
        .map(|p| match p {
            Piece::Thinking { text, .. } => text.len(),
            Piece::Text { .. } | Piece::Call { .. } => 0,
        })
        .sum();
    let thoughts = (thought_bytes / 4) as u64 + plan.reasoning_tokens();
    let out = plan.output_tokens();
    (thoughts.min(out), out - thoughts.min(out))
}

/// The prompt's tokens, cached ones included (Google counts them inside `promptTokenCount`).
fn prompt_tokens(plan: &Plan) -> u64 {
    plan.input_tokens + plan.cache.read
}

/// `usageMetadata` of the whole reply; zero counts left out, as Google leaves them out.
fn usage(plan: &Plan) -> Value {
    let prompt = prompt_tokens(plan);
    let (thoughts, candidates) = token_split(plan);
    let mut u = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    });
    if plan.cache.read > 0 {
        u["cachedContentTokenCount"] = json!(plan.cache.read);
        u["cacheTokensDetails"] = json!([{"modality": "TEXT", "tokenCount": plan.cache.read}]);
    }
    if thoughts > 0 {
        u["thoughtsTokenCount"] = json!(thoughts);
    }
    u
}

/// What a chunk before the last reports: the prompt only.
fn partial_usage(plan: &Plan) -> Value {
    let prompt = prompt_tokens(plan);
    json!({"promptTokenCount": prompt, "totalTokenCount": prompt})
}

/// The reply's parts in order, thoughts first.
pub(crate) fn parts(plan: &Plan) -> Vec<Value> {
    let mut out: Vec<Value> = plan
        .reasoning
        .iter()
        .map(|r| json!({"text": r.text, "thought": true, "thoughtSignature": r.opaque}))
        .collect();
    let mut signed_a_call = false;
    for p in &plan.pieces {
        out.push(match p {
            Piece::Text { text, .. } => json!({"text": text}),
            Piece::Thinking {
                id,
                text,
                signature,
                redacted,
            } => {
                let text = if *redacted { "" } else { text.as_str() };
                let sig = signature
                    .clone()
                    .unwrap_or_else(|| signature::sign(id, text));
                json!({"text": text, "thought": true, "thoughtSignature": sig})
            }
            Piece::Call { id, call, .. } => {
                let mut fc = json!({"name": call.name, "args": call.args});
                if !id.is_empty() {
                    fc["id"] = json!(id);
                }
                let mut part = json!({"functionCall": fc});
                // A call with a scripted id replays a recorded one, which carries no signature
                // of the mock's.
                if !signed_a_call && id.is_empty() {
                    signed_a_call = true;
                    part["thoughtSignature"] = json!(signature::sign(
                        &plan.id,
                        &call_content(&call.name, &call.args)
                    ));
                }
                part
            }
        });
    }
    out
}

fn call_content(name: &str, args: &Value) -> String {
    signature::function_call_content(name, Some(args))
}

/// The hash of the call content the reply signs (its first call), for the signed-call record
/// strict mode reads ([`crate::validate::gemini`]).
pub(crate) fn signed_call(plan: &Plan) -> Option<u64> {
    plan.pieces.iter().find_map(|p| match p {
        Piece::Call { id, call, .. } if id.is_empty() => {
            let content = call_content(&call.name, &call.args);
            Some(signature::fnv1a64(content.as_bytes()))
        }
        Piece::Call { .. } | Piece::Text { .. } | Piece::Thinking { .. } => None,
    })
}

fn response(plan: &Plan, parts: Vec<Value>, last: bool) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if last {
        candidate["finishReason"] = json!("STOP");
    }
    let mut r = json!({"candidates": [candidate]});
    if plan.usage {
        r["usageMetadata"] = if last {
            usage(plan)
        } else {
            partial_usage(plan)
        };
    }
    r["modelVersion"] = json!(plan.model);
    r["responseId"] = json!(plan.id);
    r
}

pub(super) fn json(plan: &Plan) -> Vec<u8> {
    response(plan, parts(plan), true).to_string().into_bytes()
}

/// The chunks of a streamed reply: each answer text cut in at least two pieces; each thought
/// and each call whole, with its signature (a client that keeps chunks as parts, unmerged,
/// sends back a signature on the very text it was issued for); the last chunk finishes.
fn chunks(plan: &Plan) -> Vec<Value> {
    let mut pieces: Vec<Value> = Vec::new();
    for part in parts(plan) {
        let text = part.get("text").and_then(Value::as_str);
        let Some(text) = text.filter(|_| part.get("thoughtSignature").is_none()) else {
            pieces.push(part);
            continue;
        };
        let cuts: Vec<&str> = if text.len() < 2 {
            vec![text]
        } else {
            halves(text).into_iter().flat_map(deltas).collect()
        };
        for cut in cuts {
            let mut piece = part.clone();
            piece["text"] = json!(cut);
            pieces.push(piece);
        }
    }
    let n = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(k, p)| response(plan, vec![p], k + 1 == n))
        .collect()
}

/// One SSE event as Google frames it.
fn sse(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\r\n\r\n"))
}

/// The JSON array's pieces: `[` before the first element, `,` before each next, `]` at the end.
fn array(elements: &[Value]) -> Vec<Bytes> {
    let mut out: Vec<Bytes> = elements
        .iter()
        .enumerate()
        .map(|(k, e)| Bytes::from(format!("{}{e}\r\n", if k == 0 { "[" } else { "," })))
        .collect();
    if out.is_empty() {
        out.push(Bytes::from_static(b"["));
    }
    out.push(Bytes::from_static(b"]"));
    out
}

pub(super) fn events(plan: &Plan) -> Vec<Bytes> {
    chunks(plan).iter().map(sse).collect()
}

pub(super) fn json_stream(plan: &Plan) -> Vec<Bytes> {
    array(&chunks(plan))
}

/// The first chunk, then Google's error object where the next chunk would be.
pub(super) fn failure(plan: &Plan, message: &str, sse_framing: bool) -> Vec<Bytes> {
    let first = chunks(plan).into_iter().next().into_iter();
    let mut elements: Vec<Value> = first
        .map(|mut c| {
            // Not the last chunk after all: no finish, partial usage.
            if let Some(cand) = c["candidates"][0].as_object_mut() {
                cand.remove("finishReason");
            }
            if plan.usage {
                c["usageMetadata"] = partial_usage(plan);
            }
            c
        })
        .collect();
    elements.push(super::errors::google(500, message));
    if sse_framing {
        elements.iter().map(sse).collect()
    } else {
        array(&elements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_framed_like_googles() {
        let frames = array(&[json!({"a": 1}), json!({"b": 2})]);
        let body: Vec<u8> = frames.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(body, b"[{\"a\":1}\r\n,{\"b\":2}\r\n]");
        assert_eq!(
            sse(&json!({"a": 1})),
            Bytes::from_static(b"data: {\"a\":1}\r\n\r\n")
        );
    }
}
