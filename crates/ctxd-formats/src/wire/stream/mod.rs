//! Response assembly: the upstream's reply (SSE or a whole JSON body) turned into the elements
//! the client will echo back in its next request.
//!
//! The gateway relays each upstream chunk to the client as it arrives and feeds the same bytes to
//! an [`SseParser`] and an [`Assembler`]; nothing here buffers the stream, only the response being
//! assembled. Each element's `message` is the request parser's reading of its `wire` JSON (the
//! bytes are serialized, read back and parsed), so an element and the client's echo of it hash
//! alike whenever the client echoes what it received.
//!
//! ```
//! use ctxd_formats::wire::stream::{Api, Assembler, SseParser};
//! let mut sse = SseParser::new();
//! let mut asm = Assembler::new(Api::OpenAiChat);
//! for ev in sse.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n") {
//!     asm.push(&ev);
//! }
//! let done = asm.finish().unwrap();
//! assert_eq!(done.elements[0].wire, br#"{"role":"assistant","content":"hi"}"#);
//! ```

mod anthropic;
mod chat;
mod gemini;
mod responses;
mod sse;
#[cfg(test)]
mod tests;

use serde::Serialize;
use serde_json::Value;

use ctxd_core::model::{Message, Usage, WireApi};

pub use gemini::JsonArraySplitter;
pub use sse::{SseEvent, SseParser};

/// The wire API a response was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    Anthropic,
    OpenAiChat,
    OpenAiResponses,
    /// Google's Gemini API (`generateContent` / `streamGenerateContent`).
    Gemini,
}

impl From<WireApi> for Api {
    fn from(api: WireApi) -> Self {
        match api {
            WireApi::AnthropicMessages => Api::Anthropic,
            WireApi::OpenaiChat => Api::OpenAiChat,
            WireApi::OpenaiResponses => Api::OpenAiResponses,
            WireApi::GeminiGenerateContent => Api::Gemini,
        }
    }
}

/// Why a response could not be assembled. Nothing of such a response belongs in the log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The stream ended before its terminal event (`message_stop`, `[DONE]`,
    /// `response.completed`).
    #[error("the response stream ended before it completed")]
    Truncated,
    /// The provider reported an error (an `error` event, an error body, `response.failed`).
    #[error("the provider reported {kind}: {message}")]
    Provider { kind: String, message: String },
    #[error("malformed response: {0}")]
    Malformed(String),
}

/// One completed response.
#[derive(Clone, Debug, PartialEq)]
pub struct Assembled {
    /// What the client will send back next time, one element per array element: Anthropic and
    /// Chat: one assistant message; Responses: one per output item.
    pub elements: Vec<AssembledElement>,
    /// Normalised by the wire parsers' `usage()`: `input` excludes cached tokens.
    pub usage: Option<Usage>,
    pub model: Option<String>,
    pub response_id: Option<String>,
    /// Anthropic `stop_reason`, Chat `finish_reason`; Responses: `completed`, or why the
    /// response is incomplete (`max_output_tokens`, ...).
    pub stop_reason: Option<String>,
}

/// One element of the client's next `messages` / `input` array.
#[derive(Clone, Debug, PartialEq)]
pub struct AssembledElement {
    /// The request parser's reading of `wire`; every element carries the response's model and
    /// id, the last one also its usage and stop reason (as importers record a response).
    pub message: Message,
    pub wire: Vec<u8>,
}

/// Assembles one response from its SSE events.
#[derive(Debug)]
pub struct Assembler {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Anthropic(anthropic::Stream),
    Chat(chat::Stream),
    Responses(responses::Stream),
    Gemini(gemini::Stream),
}

impl Assembler {
    pub fn new(api: Api) -> Self {
        let inner = match api {
            Api::Anthropic => Inner::Anthropic(anthropic::Stream::default()),
            Api::OpenAiChat => Inner::Chat(chat::Stream::default()),
            Api::OpenAiResponses => Inner::Responses(responses::Stream::default()),
            Api::Gemini => Inner::Gemini(gemini::Stream::default()),
        };
        Self { inner }
    }

    /// Takes one event. Unknown events and events after the terminal one are ignored; a
    /// provider error or a malformed known event is kept for [`Assembler::finish`].
    pub fn push(&mut self, ev: &SseEvent) {
        match &mut self.inner {
            Inner::Anthropic(s) => s.push(ev),
            Inner::Chat(s) => s.push(ev),
            Inner::Responses(s) => s.push(ev),
            Inner::Gemini(s) => s.push(ev),
        }
    }

    /// True once the terminal event arrived (the response may still hold an error).
    pub fn is_complete(&self) -> bool {
        match &self.inner {
            Inner::Anthropic(s) => s.done,
            Inner::Chat(s) => s.done,
            Inner::Responses(s) => s.done,
            Inner::Gemini(s) => s.done,
        }
    }

    pub fn finish(self) -> Result<Assembled, StreamError> {
        match self.inner {
            Inner::Anthropic(s) => s.finish(),
            Inner::Chat(s) => s.finish(),
            Inner::Responses(s) => s.finish(),
            Inner::Gemini(s) => s.finish(),
        }
    }
}

/// Assembles a whole (non-streaming) JSON response body.
pub fn assemble_json(api: Api, body: &[u8]) -> Result<Assembled, StreamError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| StreamError::Malformed(format!("response body: {e}")))?;
    if let Some(err) = error_in_body(&v) {
        return Err(err);
    }
    match api {
        Api::Anthropic => anthropic::json(&v),
        Api::OpenAiChat => chat::json(&v),
        Api::OpenAiResponses => responses::json(&v),
        Api::Gemini => gemini::json(&v),
    }
}

/// An error body (`{"type":"error","error":{..}}`, `{"error":{..}}`); `"error": null` is none.
fn error_in_body(v: &Value) -> Option<StreamError> {
    match v.get("error") {
        Some(Value::Object(_)) => Some(provider_error(v)),
        _ if v.get("type").and_then(Value::as_str) == Some("error") => Some(provider_error(v)),
        _ => None,
    }
}

/// The provider's error from an error event or body: `kind` is the error's `type` (Anthropic,
/// Chat), `code` (Responses) or `status` (Gemini).
fn provider_error(v: &Value) -> StreamError {
    let e = v.get("error").filter(|e| e.is_object()).unwrap_or(v);
    let field = |k: &str| e.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    StreamError::Provider {
        kind: field("type")
            .filter(|t| *t != "error")
            .or_else(|| field("code"))
            .or_else(|| field("status"))
            .unwrap_or("error")
            .to_owned(),
        message: field("message").map_or_else(|| e.to_string(), str::to_owned),
    }
}

/// The first problem a stream met: a provider error outranks a malformed event.
#[derive(Debug, Default)]
struct Problem(Option<StreamError>);

impl Problem {
    fn provider(&mut self, v: &Value) {
        if !matches!(self.0, Some(StreamError::Provider { .. })) {
            self.0 = Some(provider_error(v));
        }
    }

    fn malformed(&mut self, what: impl Into<String>) {
        if self.0.is_none() {
            self.0 = Some(StreamError::Malformed(what.into()));
        }
    }

    /// The outcome of a finished stream: its problem, else `Truncated` without the terminal
    /// event.
    fn check(self, done: bool) -> Result<(), StreamError> {
        match self.0 {
            Some(e) => Err(e),
            None if !done => Err(StreamError::Truncated),
            None => Ok(()),
        }
    }
}

/// Parses an event's data. Data that is not JSON is malformed when the API defines the event
/// (`known`), and ignored like any unknown event otherwise.
fn event_json(ev: &SseEvent, problem: &mut Problem, known: bool) -> Option<Value> {
    match serde_json::from_str(&ev.data) {
        Ok(v) => Some(v),
        Err(e) => {
            if known {
                let name = ev.event.as_deref().unwrap_or("data");
                problem.malformed(format!("{name} event: {e}"));
            }
            None
        }
    }
}

/// An element from its wire JSON: serialized, read back, parsed by the request parser.
fn element(
    wire: &impl Serialize,
    parse: fn(&Value) -> Message,
) -> Result<AssembledElement, StreamError> {
    let bytes = serde_json::to_vec(wire).map_err(|e| StreamError::Malformed(e.to_string()))?;
    let echoed: Value =
        serde_json::from_slice(&bytes).map_err(|e| StreamError::Malformed(e.to_string()))?;
    Ok(AssembledElement {
        message: parse(&echoed),
        wire: bytes,
    })
}

impl Assembled {
    /// Stamps the response's facts on its elements' messages.
    fn new(
        mut elements: Vec<AssembledElement>,
        usage: Option<Usage>,
        model: Option<String>,
        response_id: Option<String>,
        stop_reason: Option<String>,
    ) -> Self {
        for e in &mut elements {
            e.message.model.clone_from(&model);
            e.message.response_id.clone_from(&response_id);
        }
        if let Some(last) = elements.last_mut() {
            last.message.usage = usage;
            last.message.stop_reason.clone_from(&stop_reason);
        }
        Self {
            elements,
            usage,
            model,
            response_id,
            stop_reason,
        }
    }
}

/// A string field, owned, when present and not empty.
fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}
