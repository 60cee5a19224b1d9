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
    if req.api == Api::Gemini {
        return gemini_array(req, body, parts);
    }
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

/// Gemini's contents alternate `user` and `model`: where ctxd's elements (a boot, a
/// reminder) or a dropped run of the client's leave two of one role side by side, they go as
/// one content, their parts in order. Every other element keeps its bytes.
fn gemini_array(req: &ParsedRequest, body: &[u8], parts: &[Part]) -> Vec<u8> {
    let mut elements: Vec<std::borrow::Cow<'_, [u8]>> = Vec::with_capacity(parts.len());
    for part in parts {
        match part {
            Part::Client(i) => elements.push(req.element_bytes(body, *i).into()),
            Part::Rendered(message) => elements.extend(
                render::elements(Api::Gemini, message)
                    .into_iter()
                    .map(|v| v.to_string().into_bytes().into()),
            ),
        }
    }
    let mut contents: Vec<(String, std::borrow::Cow<'_, [u8]>)> =
        Vec::with_capacity(elements.len());
    let mut k = 0;
    while k < elements.len() {
        let role = gemini_role(&elements[k]);
        let mut end = k + 1;
        while end < elements.len() && gemini_role(&elements[end]) == role {
            end += 1;
        }
        if end - k == 1 {
            contents.push((role, std::mem::take(&mut elements[k])));
        } else {
            let merged: Vec<serde_json::Value> = elements[k..end]
                .iter()
                .filter_map(|e| serde_json::from_slice::<serde_json::Value>(e).ok())
                .flat_map(|c| match c.get("parts") {
                    Some(serde_json::Value::Array(p)) => p.clone(),
                    _ => Vec::new(),
                })
                .collect();
            let content = serde_json::json!({"role": role, "parts": merged});
            contents.push((role, content.to_string().into_bytes().into()));
        }
        k = end;
    }
    for k in 1..contents.len() {
        if contents[k - 1].0 == "model" && contents[k].0 == "user" {
            if let Some((calls, answers)) = gemini_ids(&contents[k - 1].1, &contents[k].1) {
                contents[k - 1].1 = calls.into();
                contents[k].1 = answers.into();
            }
        }
    }
    let mut out = Vec::with_capacity(body.len() + 1024);
    out.push(b'[');
    for (i, (_, bytes)) in contents.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(bytes);
    }
    out.push(b']');
    out
}

/// A call and its response with one `id` where the client gave one side its own (Gemini CLI
/// puts one on both) and ctxd wrote the other back without it (an edited call or result): the
/// response takes the call's, or the call the response's, matched by name in order. `None`:
/// nothing to change; else both contents' bytes.
fn gemini_ids(calls: &[u8], answers: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    use memchr::memmem::find;
    use serde_json::Value;
    find(calls, b"\"functionCall\"")?;
    find(answers, b"\"functionResponse\"")?;
    let mut calls: Value = serde_json::from_slice(calls).ok()?;
    let mut answers: Value = serde_json::from_slice(answers).ok()?;
    let mut pending: Vec<(&mut serde_json::Map<String, Value>, bool)> = calls
        .get_mut("parts")?
        .as_array_mut()?
        .iter_mut()
        .filter_map(|p| p.get_mut("functionCall").and_then(Value::as_object_mut))
        .map(|c| (c, false))
        .collect();
    let mut changed = false;
    for part in answers.get_mut("parts")?.as_array_mut()? {
        let Some(response) = part
            .get_mut("functionResponse")
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let name = response.get("name").cloned();
        let Some((call, used)) = pending
            .iter_mut()
            .find(|(c, used)| !*used && c.get("name") == name.as_ref())
        else {
            continue;
        };
        *used = true;
        match (call.get("id").cloned(), response.get("id").cloned()) {
            (Some(id), other) if other.as_ref() != Some(&id) => {
                response.insert("id".into(), id);
                changed = true;
            }
            (None, Some(id)) => {
                call.insert("id".into(), id);
                changed = true;
            }
            _ => {}
        }
    }
    drop(pending);
    changed.then(|| {
        (
            calls.to_string().into_bytes(),
            answers.to_string().into_bytes(),
        )
    })
}

/// A content's role as the API reads it (`user` when absent).
fn gemini_role(element: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Role {
        #[serde(default)]
        role: Option<String>,
    }
    serde_json::from_slice::<Role>(element)
        .ok()
        .and_then(|r| r.role)
        .unwrap_or_else(|| "user".to_owned())
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
