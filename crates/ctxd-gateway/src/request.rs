//! A client's request body, split without copying: where the conversation array and each of its
//! elements sit in the client's bytes, and the few top-level fields the gateway reads. Untouched
//! elements are later sent upstream as these very bytes.

use std::ops::Range;

use ctxd_core::model::{Message, ToolDef};
use ctxd_formats::wire::{anthropic, openai_chat, openai_responses};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::api::Api;
use crate::hash::{self, Hash};

/// Why a body is not a request of its API.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("request body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("request body must be a JSON object")]
    NotObject,
    #[error("`{0}` must be an array")]
    NotArray(&'static str),
}

/// One element of the conversation array.
#[derive(Debug)]
pub struct Element {
    /// Byte range in the (decoded) body.
    pub range: Range<usize>,
    /// Hash of the element's bytes: a cheap first key (clients resend old elements unchanged).
    pub raw_hash: Hash,
}

/// The parts of a request body the gateway needs.
#[derive(Debug)]
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
    /// Where the system prompt is (Anthropic `system`, Responses `instructions`; Chat keeps its
    /// system messages in the array), and a hash of its bytes. Parsed only when the session
    /// has not seen these bytes: clients resend the same system prompt and tools every turn.
    pub system_raw: Option<(Range<usize>, Hash)>,
    /// Where the tool definitions are, and a hash of their bytes.
    pub tools_raw: Option<(Range<usize>, Hash)>,
    /// Session hints in the body: Anthropic `metadata.user_id`, Responses `prompt_cache_key`.
    pub metadata_user_id: Option<String>,
    pub prompt_cache_key: Option<String>,
}

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
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

impl ParsedRequest {
    /// Split `body` (already decompressed) as a request of `api`.
    pub fn parse(api: Api, body: &[u8]) -> Result<Self, RequestError> {
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            // Let serde name the syntax error when there is one; otherwise it is valid JSON
            // that is not an object.
            serde_json::from_slice::<&RawValue>(body)?;
            return Err(RequestError::NotObject);
        }
        let top: Top<'_> = serde_json::from_slice(body)?;
        let array_raw = match api {
            Api::Anthropic | Api::Chat => top.messages,
            Api::Responses => top.input,
        };
        let mut input_is_string = false;
        let (array, elements) = match array_raw {
            None => (None, Vec::new()),
            Some(raw) if raw.get().starts_with('"') && api == Api::Responses => {
                input_is_string = true;
                let range = range_of(body, raw);
                let element = Element {
                    raw_hash: hash::bytes(raw.get().as_bytes()),
                    range: range.clone(),
                };
                (Some(range), vec![element])
            }
            Some(raw) => {
                let items: Vec<&RawValue> = serde_json::from_str(raw.get())
                    .map_err(|_| RequestError::NotArray(api.array_field()))?;
                // `items` borrow from `raw`, which borrows from `body`: offsets are exact.
                let elements = items
                    .iter()
                    .map(|item| Element {
                        range: range_of(body, item),
                        raw_hash: hash::bytes(item.get().as_bytes()),
                    })
                    .collect();
                (Some(range_of(body, raw)), elements)
            }
        };
        let located = |raw: Option<&RawValue>| {
            raw.filter(|r| r.get() != "null")
                .map(|r| (range_of(body, r), hash::bytes(r.get().as_bytes())))
        };
        let system_raw = match api {
            Api::Anthropic => located(top.system),
            Api::Responses => located(top.instructions),
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
            system_raw,
            tools_raw,
            metadata_user_id: top.metadata.and_then(|m| m.user_id),
            prompt_cache_key: top.prompt_cache_key,
        })
    }

    /// The system prompt's text, when the request has one.
    pub fn system(&self, body: &[u8]) -> Option<String> {
        let (range, _) = self.system_raw.as_ref()?;
        let v: Value = serde_json::from_slice(body.get(range.clone())?).ok()?;
        match self.api {
            Api::Anthropic => anthropic::system(&v),
            Api::Responses => v.as_str().map(str::to_owned),
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
}
