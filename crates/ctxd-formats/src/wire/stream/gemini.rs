//! Gemini `streamGenerateContent`: each event (SSE with `alt=sse`, or each element of the
//! streamed JSON array without it) is a whole `GenerateContentResponse` holding candidate 0's
//! next parts. There is no terminal event: the response is complete once a chunk carries a
//! `finishReason`.
//!
//! The element is the model content as the SDKs accumulate it: the parts in order, adjacent
//! text parts of one kind (thought or not) joined into one, a `thoughtSignature` kept on the
//! part it came with (or, when it came on a later text delta, on the joined part when that has
//! none yet), calls whole.

use serde_json::{Map, Value};

use super::{element, event_json, text, Assembled, Problem, SseEvent, StreamError};
use crate::wire::gemini;

#[derive(Debug, Default)]
pub(super) struct Stream {
    pub(super) done: bool,
    problem: Problem,
    parts: Vec<Map<String, Value>>,
    usage: Option<Value>,
    model: Option<String>,
    id: Option<String>,
    finish_reason: Option<String>,
}

impl Stream {
    pub(super) fn push(&mut self, ev: &SseEvent) {
        if let Some(v) = event_json(ev, &mut self.problem, true) {
            self.push_chunk(&v);
        }
    }

    /// One `GenerateContentResponse` chunk.
    pub(super) fn push_chunk(&mut self, v: &Value) {
        if self.done {
            return;
        }
        if v.get("error").is_some_and(Value::is_object) {
            self.problem.provider(v);
            return;
        }
        if let Some(u) = v.get("usageMetadata").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        self.model = text(v, "modelVersion").or(self.model.take());
        self.id = text(v, "responseId").or(self.id.take());
        if let Some(reason) = blocked(v) {
            self.finish_reason = Some(reason);
            self.done = true;
            return;
        }
        let Some(candidate) = candidate_zero(v) else {
            return;
        };
        let parts = candidate
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if let Value::Object(part) = part {
                self.add(part.clone());
            }
        }
        if let Some(reason) = text(candidate, "finishReason") {
            self.finish_reason = Some(reason);
            self.done = true;
        }
    }

    /// Appends a part, joining a text delta onto the text part before it.
    fn add(&mut self, mut part: Map<String, Value>) {
        if let Some(last) = self.parts.last_mut() {
            if joinable(last, &part) {
                let more = part
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if let Some(Value::String(t)) = last.get_mut("text") {
                    t.push_str(&more);
                }
                if let Some(sig) = part.remove("thoughtSignature") {
                    last.entry("thoughtSignature").or_insert(sig);
                }
                return;
            }
        }
        self.parts.push(part);
    }

    pub(super) fn finish(self) -> Result<Assembled, StreamError> {
        self.problem.check(self.done)?;
        assembled(
            self.parts,
            self.usage,
            self.model,
            self.id,
            self.finish_reason,
        )
    }
}

/// Two text parts of the same kind, the later one carrying nothing but text (and maybe a
/// signature the joined part does not have yet).
fn joinable(last: &Map<String, Value>, next: &Map<String, Value>) -> bool {
    let is_text = |p: &Map<String, Value>| {
        p.get("text").is_some_and(Value::is_string)
            && p.keys()
                .all(|k| matches!(k.as_str(), "text" | "thought" | "thoughtSignature"))
    };
    let thought = |p: &Map<String, Value>| p.get("thought").and_then(Value::as_bool) == Some(true);
    is_text(last)
        && is_text(next)
        && thought(last) == thought(next)
        && !(last.contains_key("thoughtSignature") && next.contains_key("thoughtSignature"))
}

/// A prompt the API refused to answer (`promptFeedback.blockReason`, no candidates).
fn blocked(v: &Value) -> Option<String> {
    let reason = v.get("promptFeedback")?.get("blockReason")?.as_str()?;
    candidate_zero(v).is_none().then(|| reason.to_owned())
}

fn candidate_zero(v: &Value) -> Option<&Value> {
    v.get("candidates")?
        .as_array()?
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
}

fn assembled(
    parts: Vec<Map<String, Value>>,
    usage: Option<Value>,
    model: Option<String>,
    id: Option<String>,
    finish_reason: Option<String>,
) -> Result<Assembled, StreamError> {
    let wire = serde_json::json!({"role": "model", "parts": parts});
    let el = element(&wire, gemini::content)?;
    Ok(Assembled::new(
        vec![el],
        usage.as_ref().map(gemini::usage),
        model,
        id,
        finish_reason,
    ))
}

/// A whole `generateContent` body.
pub(super) fn json(v: &Value) -> Result<Assembled, StreamError> {
    let mut s = Stream::default();
    s.push_chunk(v);
    if !s.done && candidate_zero(v).is_some() {
        // A whole body is complete even when the candidate names no finish reason.
        s.done = true;
    }
    s.finish()
}

/// Splits the streamed JSON array (`streamGenerateContent` without `alt=sse`) into its
/// elements as bytes arrive: `[{..},\r\n{..}]`. Only the nesting and strings are tracked; each
/// element is handed over whole, to be parsed like an SSE event's data.
#[derive(Debug, Default)]
pub struct JsonArraySplitter {
    buf: Vec<u8>,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Where the element being read starts in `buf`.
    start: Option<usize>,
    scanned: usize,
}

impl JsonArraySplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the elements completed by them.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            if self.in_string {
                match (self.escaped, b) {
                    (true, _) => self.escaped = false,
                    (false, b'\\') => self.escaped = true,
                    (false, b'"') => self.in_string = false,
                    _ => {}
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => {
                        // The outer array's bracket is depth 0 → 1; elements sit at depth 1.
                        if self.depth == 1 && self.start.is_none() {
                            self.start = Some(i);
                        }
                        self.depth += 1;
                    }
                    b'}' | b']' => {
                        self.depth = self.depth.saturating_sub(1);
                        if self.depth == 1 {
                            if let Some(start) = self.start.take() {
                                out.push(self.buf[start..=i].to_vec());
                            }
                        }
                    }
                    _ => {}
                }
            }
            i += 1;
        }
        // Keep only the element being read.
        let keep_from = self.start.unwrap_or(i);
        self.buf.drain(..keep_from);
        if let Some(start) = self.start.as_mut() {
            *start = 0;
        }
        self.scanned = self.buf.len();
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::stream::{Api, Assembler, SseParser};

    fn sse(chunks: &[Value]) -> String {
        chunks
            .iter()
            .map(|c| format!("data: {c}\r\n\r\n"))
            .collect()
    }

    fn assemble(body: &str) -> Result<Assembled, StreamError> {
        let mut p = SseParser::new();
        let mut a = Assembler::new(Api::Gemini);
        for ev in p.feed(body.as_bytes()) {
            a.push(&ev);
        }
        a.finish()
    }

    #[test]
    fn joins_text_deltas_and_keeps_calls_and_signatures() {
        let body = sse(&[
            json!({"candidates": [{"content": {"role": "model", "parts": [
                {"text": "thinking", "thought": true}]}, "index": 0}], "modelVersion": "gemini-3-pro", "responseId": "r1"}),
            json!({"candidates": [{"content": {"role": "model", "parts": [
                {"text": " more", "thought": true, "thoughtSignature": "sigA"}]}, "index": 0}]}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}]}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}, "index": 0}]}),
            json!({"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "ls", "args": {"dir": "."}}, "thoughtSignature": "sigB"}]},
                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 4, "totalTokenCount": 14}}),
        ]);
        let done = assemble(&body).unwrap();
        let wire: Value = serde_json::from_slice(&done.elements[0].wire).unwrap();
        assert_eq!(
            wire,
            json!({"role": "model", "parts": [
                {"text": "thinking more", "thought": true, "thoughtSignature": "sigA"},
                {"text": "Hello"},
                {"functionCall": {"name": "ls", "args": {"dir": "."}}, "thoughtSignature": "sigB"}
            ]})
        );
        assert_eq!(done.stop_reason.as_deref(), Some("STOP"));
        assert_eq!(done.model.as_deref(), Some("gemini-3-pro"));
        assert_eq!(done.usage.unwrap().input, 10);
    }

    #[test]
    fn without_a_finish_reason_the_stream_is_truncated() {
        let body = sse(&[json!({"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]})]);
        assert_eq!(assemble(&body), Err(StreamError::Truncated));
    }

    #[test]
    fn an_error_chunk_is_the_providers() {
        let body = sse(&[
            json!({"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}),
        ]);
        assert!(matches!(assemble(&body),
            Err(StreamError::Provider { kind, message }) if kind == "RESOURCE_EXHAUSTED" && message == "slow down"));
    }

    #[test]
    fn the_json_array_stream_splits_across_any_boundary() {
        let a = json!({"candidates": [{"content": {"parts": [{"text": "a]}\"["}]}}]});
        let b = json!({"candidates": [{"content": {"parts": [{"text": "b"}]}, "finishReason": "STOP"}]});
        let whole = format!("[{a}\r\n,{b}\r\n]");
        for cut in 0..whole.len() {
            let mut s = JsonArraySplitter::new();
            let mut got = s.feed(&whole.as_bytes()[..cut]);
            got.extend(s.feed(&whole.as_bytes()[cut..]));
            let got: Vec<Value> = got
                .iter()
                .map(|e| serde_json::from_slice(e).unwrap())
                .collect();
            assert_eq!(got, vec![a.clone(), b.clone()], "cut at {cut}");
        }
    }
}
