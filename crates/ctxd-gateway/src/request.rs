//! A client's request body, split without copying: where the conversation array and each of its
//! elements sit in the client's bytes, and the few top-level fields the gateway reads. Untouched
//! elements are later sent upstream as these very bytes.

use std::ops::Range;

use ctxd_core::model::{Message, ToolDef};
use ctxd_engine::turn::hash::{self, Hash};
use ctxd_engine::turn::ClientRequest;
use ctxd_formats::wire::{anthropic, gemini, openai_chat, openai_responses};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::api::Api;

/// Why a body is not a request of its API.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("request body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("request body must be a JSON object")]
    NotObject,
    #[error("`{0}` must be an array")]
    NotArray(&'static str),
    #[error("request body is not valid JSON: invalid UTF-8 at byte {0}")]
    Utf8(usize),
}

/// Fail on invalid UTF-8 in `bytes` (at `offset` in the body).
fn check_utf8(bytes: &[u8], offset: usize) -> Result<(), RequestError> {
    std::str::from_utf8(bytes)
        .map(|_| ())
        .map_err(|e| RequestError::Utf8(offset + e.valid_up_to()))
}

/// One element of the conversation array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    /// Byte range in the (decoded) body.
    pub range: Range<usize>,
    /// Hash of the element's bytes: a cheap first key (clients resend old elements unchanged).
    pub raw_hash: Hash,
}

impl Element {
    /// The element `raw` (a slice of `body`).
    fn of(body: &[u8], raw: &RawValue) -> Self {
        Element {
            range: range_of(body, raw),
            raw_hash: hash::raw(raw.get().as_bytes()),
        }
    }
}

/// The parts of a request body the gateway needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedRequest {
    pub api: Api,
    /// Range of the conversation array (`messages` / `input`) including its brackets; for a
    /// Responses `input` string, the string.
    pub array: Option<Range<usize>>,
    /// `input` was a plain string (Responses): one user element.
    pub input_is_string: bool,
    pub elements: Vec<Element>,
    pub model: Option<String>,
    pub stream: bool,
    /// Gemini `streamGenerateContent` without `alt=sse`: the response streams as one JSON
    /// array, not as events.
    pub json_array_stream: bool,
    /// Where the system prompt is (Anthropic `system`, Responses `instructions`; Chat keeps its
    /// system messages in the array), and a hash of its bytes. Parsed only when the session
    /// has not seen these bytes: clients resend the same system prompt and tools every turn.
    pub system_raw: Option<(Range<usize>, Hash)>,
    /// Where the tool definitions are, and a hash of their bytes.
    pub tools_raw: Option<(Range<usize>, Hash)>,
    /// Session hints in the body: Anthropic `metadata.user_id`, Responses `prompt_cache_key`.
    pub metadata_user_id: Option<String>,
    pub prompt_cache_key: Option<String>,
    /// Responses: the conversation continues one the provider keeps (`previous_response_id`):
    /// ctxd sees only the new input and cannot manage what goes upstream.
    pub previous_response_id: Option<String>,
}

/// The general split: the conversation as one raw value, its elements parsed from it after.
#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    contents: Option<&'a RawValue>,
}

/// The one-pass split: the conversation's elements collected while the body is scanned.
#[derive(Deserialize)]
struct FastTop<'a> {
    #[serde(borrow, default)]
    messages: Option<Conversation<'a>>,
    #[serde(borrow, default)]
    input: Option<Conversation<'a>>,
    #[serde(borrow, default)]
    contents: Option<Conversation<'a>>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "systemInstruction")]
    system_instruction: Option<&'a RawValue>,
    #[serde(borrow, default)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    prompt_cache_key: Option<String>,
    #[serde(default)]
    previous_response_id: Option<String>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    user_id: Option<String>,
}

/// Where `inner` (a slice of `body`) starts in `body`.
fn offset_in(body: &[u8], inner: &str) -> usize {
    (inner.as_ptr() as usize).saturating_sub(body.as_ptr() as usize)
}

fn range_of(body: &[u8], raw: &RawValue) -> Range<usize> {
    let start = offset_in(body, raw.get());
    start..start + raw.get().len()
}

/// The conversation field as the one-pass split reads it.
enum Conversation<'a> {
    /// An array: its elements' raw values, in order.
    Elements(Vec<&'a RawValue>),
    /// Anything else (a string, an object, ...): left to the general split.
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for Conversation<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Conversation<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a conversation array")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(item) = seq.next_element::<&'de RawValue>()? {
                    items.push(item);
                }
                Ok(Conversation::Elements(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Conversation::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(Conversation::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Conversation::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Conversation::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Conversation::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Conversation::Other)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Conversation::Other)
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

type Split = (Option<Range<usize>>, bool, Vec<Element>);

/// Where the conversation is (`None`: absent), whether it is a Responses `input` string, and its
/// elements: the general split, in two passes (the conversation as one raw value, then its
/// elements).
fn general_split(api: Api, body: &[u8]) -> Result<Split, RequestError> {
    let general: Top<'_> = serde_json::from_slice(body)?;
    let array_raw = match api {
        Api::Anthropic | Api::Chat => general.messages,
        Api::Responses => general.input,
        Api::Gemini => general.contents,
    };
    Ok(match array_raw {
        None => (None, false, Vec::new()),
        Some(raw) if raw.get().starts_with('"') && api == Api::Responses => {
            let element = Element::of(body, raw);
            (Some(element.range.clone()), true, vec![element])
        }
        Some(raw) => {
            let items: Vec<&RawValue> = serde_json::from_str(raw.get())
                .map_err(|_| RequestError::NotArray(api.array_field()))?;
            // `items` borrow from `raw`, which borrows from `body`: offsets are exact.
            let elements = items.iter().map(|item| Element::of(body, item)).collect();
            (Some(range_of(body, raw)), false, elements)
        }
    })
}

/// The range of the array holding `items` (non-empty, consecutive elements of one array in
/// `body`): from the `[` before the first to the `]` after the last, across JSON whitespace.
fn array_around(body: &[u8], items: &[&RawValue]) -> Option<Range<usize>> {
    let is_ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let first = range_of(body, items.first()?).start;
    let last = range_of(body, items.last()?).end;
    let open = first - body[..first].iter().rev().take_while(|b| is_ws(b)).count();
    let close = last + body[last..].iter().take_while(|b| is_ws(b)).count();
    (open > 0 && body[open - 1] == b'[' && body.get(close) == Some(&b']'))
        .then(|| open - 1..close + 1)
}

/// A session's previous request, kept so the next one (the same conversation, resent whole,
/// plus what is new) is split without scanning what did not change.
#[derive(Debug)]
pub struct PrevRequest {
    pub body: bytes::Bytes,
    pub parsed: ParsedRequest,
}

impl PrevRequest {
    /// Bytes it holds in memory: the body and its elements' index (what the session cache's
    /// budget charges for it; `tests/memory.rs` checks it against the heap).
    pub fn weight(&self) -> usize {
        self.body.len()
            + self.parsed.elements.capacity() * std::mem::size_of::<Element>()
            + self.parsed.model.as_ref().map_or(0, String::len)
            // The structs themselves and the slot's handle on them.
            + 256
    }
}

/// Length of the longest common prefix of `a` and `b` (compared a block at a time: memcmp).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

impl ParsedRequest {
    /// Split `body` as [`ParsedRequest::parse`] does, reusing `prev` (the same session's previous
    /// request) for the elements both bodies share byte for byte at the same offsets: only the
    /// bytes after them are scanned (the new elements, then the fields after the array, and
    /// the fields before it again). The result is always the one `parse` gives; anything the
    /// shortcut cannot settle falls back to `parse`.
    pub fn parse_after(
        api: Api,
        body: &[u8],
        prev: Option<&PrevRequest>,
    ) -> Result<Self, RequestError> {
        let parsed = match prev.and_then(|p| Self::resume(api, body, p)) {
            Some(resumed) => resumed,
            None => Self::parse(api, body)?,
        };
        parsed.check_skipped_fields(body)?;
        Ok(parsed)
    }

    /// serde checks the strings it reads or keeps raw (the conversation's elements, the system
    /// prompt, the tools), but not those of fields it skips (a top-level field the gateway does
    /// not know), and JSON is UTF-8: a body with invalid bytes there is malformed, answered 400
    /// rather than passed on. Only the bytes around the conversation array are read again.
    pub fn check_skipped_fields(&self, body: &[u8]) -> Result<(), RequestError> {
        match &self.array {
            Some(a) => {
                check_utf8(&body[..a.start], 0)?;
                check_utf8(&body[a.end..], a.end)
            }
            None => check_utf8(body, 0),
        }
    }

    fn resume(api: Api, body: &[u8], prev: &PrevRequest) -> Option<Self> {
        let before = &prev.parsed;
        if before.api != api || before.input_is_string {
            return None;
        }
        let array = before.array.clone()?;
        let common = common_prefix(body, &prev.body);
        // The leading elements whose bytes (and so the parse up to their end) are unchanged.
        let kept = before.elements.partition_point(|e| e.range.end <= common);
        if kept == 0 {
            return None;
        }
        let resume_at = before.elements[kept - 1].range.end;
        // Only a value that closes itself ends where its bytes end (`1` may go on as `1.5`).
        if !matches!(body[resume_at - 1], b'}' | b']' | b'"') {
            return None;
        }

        // The rest of the array, read as `[[]` + the bytes after the last kept element: the
        // placeholder `[]` closes itself too, so what follows must be `,` or `]` as in the body.
        const OPEN: &[u8] = b"[[]";
        let mut rest = Vec::with_capacity(OPEN.len() + body.len() - resume_at);
        rest.extend_from_slice(OPEN);
        rest.extend_from_slice(&body[resume_at..]);
        let mut stream = serde_json::Deserializer::from_slice(&rest).into_iter::<Vec<&RawValue>>();
        let items = stream.next()?.ok()?;
        let array_end = resume_at + stream.byte_offset() - OPEN.len();
        let at = |raw: &RawValue| offset_in(&rest, raw.get()) - OPEN.len() + resume_at;
        let mut elements = Vec::with_capacity(kept + items.len().saturating_sub(1));
        elements.extend_from_slice(&before.elements[..kept]);
        for item in items.iter().skip(1) {
            let start = at(item);
            elements.push(Element {
                range: start..start + item.get().len(),
                raw_hash: hash::raw(item.get().as_bytes()),
            });
        }

        // The object without the array's contents: the fields before and after it, checked
        // and read as in a full parse (duplicates, trailing bytes and all).
        let head = &body[..array.start];
        let tail = body.get(array_end..)?;
        let mut outline = Vec::with_capacity(head.len() + 2 + tail.len());
        outline.extend_from_slice(head);
        outline.extend_from_slice(b"[]");
        outline.extend_from_slice(tail);
        let top: FastTop<'_> = serde_json::from_slice(&outline).ok()?;
        let conversation = match api {
            Api::Anthropic | Api::Chat => &top.messages,
            Api::Responses => &top.input,
            Api::Gemini => &top.contents,
        };
        if !matches!(conversation, Some(Conversation::Elements(e)) if e.is_empty()) {
            return None;
        }
        let gap = head.len() + 2;
        let to_body = |r: Range<usize>| -> Option<Range<usize>> {
            if r.end <= head.len() {
                Some(r)
            } else if r.start >= gap {
                Some(r.start - gap + array_end..r.end - gap + array_end)
            } else {
                None
            }
        };
        let located = |raw: Option<&RawValue>| -> Option<Option<(Range<usize>, Hash)>> {
            match raw.filter(|r| r.get() != "null") {
                None => Some(None),
                Some(r) => Some(Some((
                    to_body(range_of(&outline, r))?,
                    hash::raw(r.get().as_bytes()),
                ))),
            }
        };
        let system_raw = match api {
            Api::Anthropic => located(top.system)?,
            Api::Responses => located(top.instructions)?,
            Api::Gemini => located(top.system_instruction)?,
            Api::Chat => None,
        };
        let tools_raw = located(top.tools)?;
        Some(ParsedRequest {
            api,
            array: Some(array.start..array_end),
            input_is_string: false,
            elements,
            model: top.model,
            stream: top.stream.unwrap_or(false),
            json_array_stream: false,
            system_raw,
            tools_raw,
            metadata_user_id: top.metadata.and_then(|m| m.user_id),
            prompt_cache_key: top.prompt_cache_key,
            previous_response_id: top.previous_response_id,
        })
    }

    /// Split `body` (already decompressed) as a request of `api`.
    pub fn parse(api: Api, body: &[u8]) -> Result<Self, RequestError> {
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            // Let serde name the syntax error when there is one; otherwise it is valid JSON
            // that is not an object.
            serde_json::from_slice::<&RawValue>(body)?;
            return Err(RequestError::NotObject);
        }
        // One pass over the body: the conversation's elements are collected as they are
        // scanned. Only a conversation that is not a non-empty array (a Responses `input`
        // string, an empty or malformed array) takes the second, general pass.
        let mut top: FastTop<'_> = serde_json::from_slice(body)?;
        let conversation = match api {
            Api::Anthropic | Api::Chat => top.messages.take(),
            Api::Responses => top.input.take(),
            Api::Gemini => top.contents.take(),
        };
        let fast_split = match conversation {
            None => Some((None, false, Vec::new())),
            Some(Conversation::Elements(items)) => array_around(body, &items).map(|array| {
                let elements = items.iter().map(|item| Element::of(body, item)).collect();
                (Some(array), false, elements)
            }),
            Some(Conversation::Other) => None,
        };
        let (array, input_is_string, elements) = match fast_split {
            Some(split) => split,
            None => general_split(api, body)?,
        };
        let located = |raw: Option<&RawValue>| {
            raw.filter(|r| r.get() != "null")
                .map(|r| (range_of(body, r), hash::raw(r.get().as_bytes())))
        };
        let system_raw = match api {
            Api::Anthropic => located(top.system),
            Api::Responses => located(top.instructions),
            Api::Gemini => located(top.system_instruction),
            Api::Chat => None,
        };
        let tools_raw = located(top.tools);
        Ok(ParsedRequest {
            api,
            array,
            input_is_string,
            elements,
            model: top.model,
            stream: top.stream.unwrap_or(false),
            json_array_stream: false,
            system_raw,
            tools_raw,
            metadata_user_id: top.metadata.and_then(|m| m.user_id),
            prompt_cache_key: top.prompt_cache_key,
            previous_response_id: top.previous_response_id,
        })
    }

    /// Gemini names the model and whether to stream in the URL
    /// (`/v1beta/models/{model}:streamGenerateContent`), not the body.
    pub fn at_path(mut self, path: &str) -> Self {
        if self.api == Api::Gemini {
            if let Some(target) = crate::api::GeminiTarget::of_path(path) {
                self.model = Some(target.model.to_owned());
                self.stream = target.action == "streamGenerateContent";
                self.json_array_stream = crate::api::gemini_streams_json_array(path);
            }
        }
        self
    }

    /// The system prompt's raw JSON bytes (Anthropic `system`, Responses `instructions`).
    pub fn system_bytes<'a>(&self, body: &'a [u8]) -> Option<&'a [u8]> {
        body.get(self.system_raw.as_ref()?.0.clone())
    }

    /// The system prompt's text, when the request has one.
    pub fn system(&self, body: &[u8]) -> Option<String> {
        let (range, _) = self.system_raw.as_ref()?;
        let v: Value = serde_json::from_slice(body.get(range.clone())?).ok()?;
        match self.api {
            Api::Anthropic => anthropic::system(&v),
            Api::Responses => v.as_str().map(str::to_owned),
            Api::Gemini => gemini::system(&v),
            Api::Chat => None,
        }
    }

    /// The tool definitions as the session model holds them.
    pub fn tools(&self, body: &[u8]) -> Vec<ToolDef> {
        let Some((range, _)) = &self.tools_raw else {
            return Vec::new();
        };
        let Some(v) = body
            .get(range.clone())
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        else {
            return Vec::new();
        };
        match self.api {
            Api::Anthropic => anthropic::tools(&v),
            Api::Chat => openai_chat::tools(&v),
            Api::Responses => openai_responses::tools(&v),
            Api::Gemini => gemini::tools(&v),
        }
    }

    /// Element `i` as a message of the session model (parsed on demand: most elements are
    /// recognised by their bytes alone).
    pub fn message(&self, body: &[u8], i: usize) -> Message {
        let Some(element) = self.elements.get(i) else {
            return Message::text(ctxd_core::model::Role::User, "");
        };
        let bytes = body.get(element.range.clone()).unwrap_or_default();
        if self.input_is_string {
            let text: String = serde_json::from_slice(bytes).unwrap_or_default();
            return Message::text(ctxd_core::model::Role::User, text);
        }
        if self.api == Api::Gemini {
            // A function response takes its id from the call in the content before it.
            let previous = i
                .checked_sub(1)
                .and_then(|p| serde_json::from_slice::<Value>(self.element_bytes(body, p)).ok());
            if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
                return gemini::content_after(previous.as_ref(), &v);
            }
        }
        match serde_json::from_slice::<Value>(bytes) {
            Ok(v) => self.api.parse_element(&v),
            Err(_) => Message::text(
                ctxd_core::model::Role::User,
                String::from_utf8_lossy(bytes).into_owned(),
            ),
        }
    }

    /// The client's bytes of element `i`.
    pub fn element_bytes<'b>(&self, body: &'b [u8], i: usize) -> &'b [u8] {
        self.elements
            .get(i)
            .and_then(|e| body.get(e.range.clone()))
            .unwrap_or_default()
    }
}

/// A split request with its body: what the engine plans a turn from
/// ([`ctxd_engine::turn::plan_request`]).
#[derive(Clone, Copy, Debug)]
pub struct WithBody<'a> {
    pub req: &'a ParsedRequest,
    pub body: &'a [u8],
}

impl ParsedRequest {
    /// This request over `body`, the bytes it was split from.
    pub fn with_body<'a>(&'a self, body: &'a [u8]) -> WithBody<'a> {
        WithBody { req: self, body }
    }
}

impl ClientRequest for WithBody<'_> {
    fn element_count(&self) -> usize {
        self.req.elements.len()
    }

    fn element_key(&self, i: usize) -> Hash {
        self.req
            .elements
            .get(i)
            .map(|e| e.raw_hash)
            .unwrap_or_default()
    }

    fn element_bytes(&self, i: usize) -> &[u8] {
        self.req.element_bytes(self.body, i)
    }

    fn message(&self, i: usize) -> Message {
        self.req.message(self.body, i)
    }

    fn system_key(&self) -> Option<Hash> {
        self.req.system_raw.as_ref().map(|(_, h)| *h)
    }

    fn system(&self) -> Option<String> {
        self.req.system(self.body)
    }

    fn tools_key(&self) -> Option<Hash> {
        self.req.tools_raw.as_ref().map(|(_, h)| *h)
    }

    fn tools(&self) -> Vec<ToolDef> {
        self.req.tools(self.body)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::model::Role;

    #[test]
    fn elements_are_exact_slices_of_the_body() {
        let body = br#"{"model":"m","messages":[ {"role":"user","content":"a \"q\""} ,{"role":"assistant","content":[{"type":"text","text":"b"}]}],"stream":true,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}]}"#;
        let r = ParsedRequest::parse(Api::Anthropic, body).unwrap();
        assert_eq!(r.elements.len(), 2);
        assert_eq!(
            r.element_bytes(body, 0),
            br#"{"role":"user","content":"a \"q\""}"#
        );
        assert_eq!(r.message(body, 1).role, Role::Assistant);
        assert!(r.stream);
        assert_eq!(r.system(body).as_deref(), Some("sys"));
        let array = r.array.unwrap();
        assert!(body[array.clone()].starts_with(b"[ {"));
        assert!(body[array].ends_with(b"}]"));
    }

    #[test]
    fn the_one_pass_split_equals_the_general_one() {
        let bodies: [&[u8]; 6] = [
            br#"{"messages":[{"role":"user","content":"a"}],"model":"m"}"#,
            b"{\"messages\" : [\n\t {\"role\":\"user\",\"content\":\"]\"} ,\r\n {\"role\":\"assistant\",\"content\":\"[\"}\n ] }",
            br#"{"model":"m","messages":[]}"#,
            br#"{"messages":null}"#,
            br#"{"system":"s","tools":[{"name":"t"}],"messages":[1,"two",[3],{"4":4}]}"#,
            br#"{"input":"hello"}"#,
        ];
        for body in bodies {
            for api in [Api::Anthropic, Api::Responses] {
                let r = ParsedRequest::parse(api, body).unwrap();
                let (array, is_string, elements) = general_split(api, body).unwrap();
                assert_eq!(r.array, array, "{}", String::from_utf8_lossy(body));
                assert_eq!(r.input_is_string, is_string);
                let ranges = |els: &[Element]| {
                    els.iter()
                        .map(|e| (e.range.clone(), e.raw_hash))
                        .collect::<Vec<_>>()
                };
                assert_eq!(ranges(&r.elements), ranges(&elements));
            }
        }
    }

    #[test]
    fn a_resent_conversation_is_split_from_where_it_changed() {
        let prev_body = br#"{"model":"m","messages":[{"role":"user","content":"a"}, {"role":"assistant","content":"b"}],"system":"s","tools":[{"name":"t"}]}"#;
        let next_body = br#"{"model":"m","messages":[{"role":"user","content":"a"}, {"role":"assistant","content":"b"},{"role":"user","content":"c"}],"system":"s2","stream":true,"tools":[{"name":"t"}]}"#;
        let prev = PrevRequest {
            body: bytes::Bytes::from_static(prev_body),
            parsed: ParsedRequest::parse(Api::Anthropic, prev_body).unwrap(),
        };
        let resumed = ParsedRequest::resume(Api::Anthropic, next_body, &prev).expect("resumed");
        assert_eq!(
            resumed,
            ParsedRequest::parse(Api::Anthropic, next_body).unwrap()
        );
        assert_eq!(resumed.elements.len(), 3);
        assert_eq!(resumed.system(next_body).as_deref(), Some("s2"));
        // A changed first element leaves nothing to reuse; a number may go on past its bytes.
        let edited = br#"{"model":"m","messages":[{"role":"user","content":"A"}]}"#;
        assert!(ParsedRequest::resume(Api::Anthropic, edited, &prev).is_none());
        let numbers = PrevRequest {
            body: bytes::Bytes::from_static(br#"{"messages":[1]}"#),
            parsed: ParsedRequest::parse(Api::Anthropic, br#"{"messages":[1]}"#).unwrap(),
        };
        assert!(
            ParsedRequest::resume(Api::Anthropic, br#"{"messages":[1.5]}"#, &numbers).is_none()
        );
    }

    #[test]
    fn responses_input_string_is_one_user_element() {
        let body = br#"{"model":"m","input":"hello","instructions":"be brief"}"#;
        let r = ParsedRequest::parse(Api::Responses, body).unwrap();
        assert!(r.input_is_string);
        assert_eq!(r.elements.len(), 1);
        assert_eq!(r.message(body, 0), Message::text(Role::User, "hello"));
        assert_eq!(r.system(body).as_deref(), Some("be brief"));
    }

    #[test]
    fn bad_bodies_are_named() {
        assert!(matches!(
            ParsedRequest::parse(Api::Chat, b"{\"messages\": [").unwrap_err(),
            RequestError::Json(_)
        ));
        assert!(matches!(
            ParsedRequest::parse(Api::Chat, b"[1]").unwrap_err(),
            RequestError::NotObject
        ));
        assert!(matches!(
            ParsedRequest::parse(Api::Chat, b"{\"messages\": 3}").unwrap_err(),
            RequestError::NotArray("messages")
        ));
        assert!(ParsedRequest::parse(Api::Chat, b"").is_err());
    }

    /// Found by the `gateway_request` fuzz target: invalid UTF-8 in a field serde skips.
    #[test]
    fn invalid_utf8_anywhere_is_malformed_json() {
        let prev_body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"x":"ok"}"#;
        let mut bad = prev_body.to_vec();
        let at = bad.len() - 3;
        bad[at] = 0xd9; // in "x"'s value, a field the gateway skips
        for api in [Api::Anthropic, Api::Chat] {
            assert!(matches!(
                ParsedRequest::parse_after(api, &bad, None).unwrap_err(),
                RequestError::Utf8(n) if n == at
            ));
            // Resumed from a previous request, the same error.
            let prev = PrevRequest {
                body: bytes::Bytes::from_static(prev_body),
                parsed: ParsedRequest::parse(api, prev_body).unwrap(),
            };
            assert!(matches!(
                ParsedRequest::parse_after(api, &bad, Some(&prev)).unwrap_err(),
                RequestError::Utf8(_)
            ));
            // Before the conversation array too.
            let mut before = br#"{"x":"ok","messages":[]}"#.to_vec();
            before[6] = 0xff;
            assert!(matches!(
                ParsedRequest::parse_after(api, &before, None).unwrap_err(),
                RequestError::Utf8(6)
            ));
        }
        // A Responses `input` string: no array, the whole body checked.
        let mut s = br#"{"input":"hi","x":"ok"}"#.to_vec();
        let at = s.len() - 3;
        s[at] = 0xc3;
        assert!(ParsedRequest::parse_after(Api::Responses, &s, None).is_err());
    }

    #[test]
    fn volatile_fields_do_not_change_the_hash() {
        use ctxd_formats::wire::anthropic;
        use serde_json::json;
        let a = anthropic::message(&json!({"role": "user", "content": [
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}));
        let b = anthropic::message(
            &json!({"role": "user", "content": [{"type": "text", "text": "hi"}]}),
        );
        assert_eq!(hash::message(&a), hash::message(&b));
    }
}
