//! The upstream body when the projection differs from the client's conversation: the client's
//! bytes with only the conversation array replaced. Every other field keeps its bytes and its
//! place, and untouched elements keep theirs, so the parts of the prompt a provider caches stay
//! byte-identical.

use crate::api::Api;
use crate::render;
use crate::request::ParsedRequest;
use crate::served::Insert;
use ctxd_engine::turn::Part;

/// `body` with its conversation array rebuilt from `parts` (`None`: kept) and `insert` (the
/// `tools` edit: ctxd's definitions, lazy tools' selection) applied.
pub fn splice(
    req: &ParsedRequest,
    body: &[u8],
    parts: Option<&[Part]>,
    insert: Option<&Insert>,
) -> Vec<u8> {
    let mut edits: Vec<(std::ops::Range<usize>, Vec<u8>)> = Vec::with_capacity(2);
    if let (Some(parts), Some(array)) = (parts, req.array.clone()) {
        edits.push((array, array_bytes(req, body, parts)));
    }
    if let Some(ins) = insert {
        edits.push((ins.at.clone(), ins.bytes.clone()));
    }
    edits.sort_by_key(|(r, _)| r.start);
    let extra: usize = edits.iter().map(|(_, b)| b.len()).sum();
    let mut out = Vec::with_capacity(body.len() + extra);
    let mut at = 0;
    for (range, bytes) in edits {
        if range.start < at {
            continue; // overlapping edits cannot come from one parse
        }
        out.extend_from_slice(&body[at..range.start]);
        out.extend_from_slice(&bytes);
        at = range.end;
    }
    out.extend_from_slice(&body[at..]);
    out
}

/// The conversation array of `parts`: the client's elements as their bytes, ctxd's rendered.
fn array_bytes(req: &ParsedRequest, body: &[u8], parts: &[Part]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 1024);
    out.push(b'[');
    let mut first = true;
    let mut push = |out: &mut Vec<u8>, bytes: &[u8]| {
        if !first {
            out.push(b',');
        }
        first = false;
        out.extend_from_slice(bytes);
    };
    for part in parts {
        match part {
            Part::Client(i) if req.input_is_string => {
                // A Responses `input` string becomes a user message item inside the array.
                let message = req.message(body, *i);
                for v in render::elements(Api::Responses, &message) {
                    push(&mut out, v.to_string().as_bytes());
                }
            }
            Part::Client(i) => push(&mut out, req.element_bytes(body, *i)),
            Part::Rendered(message) => {
                for v in render::elements(req.api, message) {
                    push(&mut out, v.to_string().as_bytes());
                }
            }
        }
    }
    out.push(b']');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ctxd_core::model::{Message, Role};

    #[test]
    fn only_the_array_changes_and_client_elements_keep_their_bytes() {
        let body = br#"{"model":"m", "messages" : [ {"role":"user","content":"old"},{"role":"assistant","content":"x"} , {"role":"user","content":"new  spacing"} ],"stream":true}"#;
        let req = ParsedRequest::parse(Api::Anthropic, body).unwrap();
        let parts = vec![
            Part::Rendered(Message::text(Role::User, "boot")),
            Part::Client(2),
        ];
        let out = splice(&req, body, Some(&parts), None);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            r#"{"model":"m", "messages" : [{"content":[{"text":"boot","type":"text"}],"role":"user"},{"role":"user","content":"new  spacing"}],"stream":true}"#
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["messages"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_responses_string_input_becomes_items() {
        let body = br#"{"model":"m","input":"hello"}"#;
        let req = ParsedRequest::parse(Api::Responses, body).unwrap();
        let parts = vec![
            Part::Rendered(Message::text(Role::User, "boot")),
            Part::Client(0),
        ];
        let out = splice(&req, body, Some(&parts), None);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["input"][1]["content"][0]["text"], "hello");
        assert_eq!(v["input"][0]["type"], "message");
    }
}
