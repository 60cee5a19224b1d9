#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Properties of the gateway's pure pipeline over generated conversations and arbitrary bytes.

use ctxd_engine::turn::{plan_request, upstream_parts, Part, SessionLog};
use ctxd_gateway::api::Api;
use ctxd_gateway::request::{ParsedRequest, PrevRequest};
use ctxd_gateway::rewrite::splice;
use proptest::prelude::*;
use serde_json::{json, Value};

fn element(api: Api, i: usize, text: &str, cache: bool) -> Value {
    let role = if i.is_multiple_of(2) {
        "user"
    } else {
        "assistant"
    };
    match api {
        Api::Anthropic => {
            let mut block = json!({"type": "text", "text": text});
            if cache {
                block["cache_control"] = json!({"type": "ephemeral"});
            }
            json!({"role": role, "content": [block]})
        }
        Api::Chat => json!({"role": role, "content": text}),
        Api::Responses => {
            let kind = if role == "user" {
                "input_text"
            } else {
                "output_text"
            };
            json!({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})
        }
        Api::Gemini => {
            let role = if role == "user" { "user" } else { "model" };
            json!({"role": role, "parts": [{"text": text}]})
        }
    }
}

fn body(api: Api, texts: &[String], cache_at: Option<usize>) -> Vec<u8> {
    let els: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| element(api, i, t, cache_at == Some(i)))
        .collect();
    let key = api.array_field();
    serde_json::to_vec(&json!({"model": "m", key: els, "stream": false})).unwrap()
}

fn api() -> impl Strategy<Value = Api> {
    prop_oneof![
        Just(Api::Anthropic),
        Just(Api::Chat),
        Just(Api::Responses),
        Just(Api::Gemini)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A conversation sent turn by turn (each request resending the whole history, with
    /// `cache_control` moving to the last message): every message is stored once, nothing
    /// is rewritten, and the log's branch is the conversation.
    #[test]
    fn growing_conversations_append_each_message_once(
        api in api(),
        texts in prop::collection::vec("[a-z ]{0,12}", 1..12),
    ) {
        let mut log = SessionLog::default();
        for n in 1..=texts.len() {
            let b = body(api, &texts[..n], Some(n - 1));
            let req = ParsedRequest::parse(api, &b).unwrap();
            let plan = plan_request(&mut log, &req.with_body(&b), "t");
            prop_assert!(plan.appended.len() <= 1, "turn {n}: {}", plan.appended.len());
            prop_assert!(upstream_parts(&log, &plan.element_entries).unwrap().is_none());
        }
        let messages = log.branch().len();
        prop_assert_eq!(messages, texts.len());
        prop_assert_eq!(log.len(), texts.len());
    }

    /// Splicing the client's own elements back gives the same elements, byte for byte; on
    /// Gemini, two left side by side with one role go as one content, their parts in order.
    #[test]
    fn splicing_client_elements_keeps_their_bytes(
        api in api(),
        texts in prop::collection::vec("[a-z \"\\\\]{0,12}", 1..8),
        keep in prop::collection::vec(any::<bool>(), 8),
    ) {
        let b = body(api, &texts, None);
        let req = ParsedRequest::parse(api, &b).unwrap();
        let parts: Vec<Part> = (0..texts.len()).filter(|&i| keep[i]).map(Part::Client).collect();
        let out = splice(&req, &b, Some(&parts), None);
        let again = ParsedRequest::parse(api, &out).unwrap();
        if api == Api::Gemini {
            let kept: Vec<Value> = parts
                .iter()
                .map(|p| {
                    let Part::Client(i) = p else { unreachable!() };
                    serde_json::from_slice(req.element_bytes(&b, *i)).unwrap()
                })
                .collect();
            let sent: Vec<Value> = (0..again.elements.len())
                .map(|k| serde_json::from_slice(again.element_bytes(&out, k)).unwrap())
                .collect();
            let parts_of = |cs: &[Value]| -> Vec<Value> {
                cs.iter().flat_map(|c| c["parts"].as_array().unwrap().clone()).collect()
            };
            prop_assert_eq!(parts_of(&sent), parts_of(&kept));
            prop_assert!(sent.windows(2).all(|w| w[0]["role"] != w[1]["role"]));
            return Ok(());
        }
        prop_assert_eq!(again.elements.len(), parts.len());
        for (k, part) in parts.iter().enumerate() {
            let Part::Client(i) = part else { unreachable!() };
            prop_assert_eq!(again.element_bytes(&out, k), req.element_bytes(&b, *i));
        }
    }

    /// Arbitrary bytes never panic the parser, and element ranges always lie in the body.
    #[test]
    fn any_bytes_parse_or_fail_cleanly(api in api(), data in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(req) = ParsedRequest::parse(api, &data) {
            for e in &req.elements {
                prop_assert!(e.range.end <= data.len());
            }
        }
    }
}

/// A body with `fields` around the conversation: those before it, then it, then the rest, in
/// the order given (clients differ: Claude Code sends `system` and `tools` after `messages`).
fn body_with(
    api: Api,
    texts: &[String],
    before: &[(&str, Value)],
    after: &[(&str, Value)],
) -> Vec<u8> {
    let key = if api == Api::Responses {
        "input"
    } else {
        "messages"
    };
    let els: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| element(api, i, t, false))
        .collect();
    let field = |(k, v): &(&str, Value)| format!("{}:{}", Value::from(*k), v);
    let mut parts: Vec<String> = before.iter().map(field).collect();
    parts.push(format!(
        "\"{key}\" : {}",
        serde_json::to_string_pretty(&els).unwrap()
    ));
    parts.extend(after.iter().map(field));
    format!("{{{}}}", parts.join(",")).into_bytes()
}

fn fields() -> impl Strategy<Value = Vec<(&'static str, Value)>> {
    prop::collection::vec(
        prop_oneof![
            Just(("model", json!("m"))),
            Just(("stream", json!(true))),
            Just(("stream", json!(false))),
            Just(("system", json!("be brief"))),
            Just(("system", json!([{"type": "text", "text": "sys"}]))),
            Just(("instructions", json!("be brief"))),
            Just((
                "tools",
                json!([{"name": "Bash", "input_schema": {"type": "object"}}])
            )),
            Just(("metadata", json!({"user_id": "u1"}))),
            Just(("prompt_cache_key", json!("pck"))),
            Just(("max_tokens", json!(100))),
        ],
        0..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Splitting a body after the session's previous one gives exactly what a fresh split
    /// gives (or fails as it does): for growing, rewound, edited and re-ordered conversations,
    /// changed fields around the array, and bodies broken at a random byte.
    #[test]
    fn splitting_after_the_previous_request_equals_a_fresh_split(
        api in api(),
        texts in prop::collection::vec("[a-z \"\\\\]{0,8}", 1..8),
        prev_len in 1usize..8,
        next_len in 1usize..9,
        edit in prop::option::of((0usize..8, "[a-z]{1,4}")),
        (before_a, after_a, before_b, after_b) in (fields(), fields(), fields(), fields()),
        same_fields in any::<bool>(),
        damage in prop::option::of((any::<prop::sample::Index>(), any::<u8>())),
    ) {
        let prev_texts = &texts[..prev_len.min(texts.len())];
        let mut next_texts: Vec<String> = texts.clone();
        next_texts.push("new".into());
        next_texts.truncate(next_len);
        if let Some((at, text)) = &edit {
            if let Some(t) = next_texts.get_mut(*at) {
                *t = text.clone();
            }
        }
        let (before_b, after_b) = if same_fields {
            (before_a.clone(), after_a.clone())
        } else {
            (before_b, after_b)
        };
        let prev_body = body_with(api, prev_texts, &before_a, &after_a);
        let mut next_body = body_with(api, &next_texts, &before_b, &after_b);
        if let Some((at, byte)) = damage {
            let i = at.index(next_body.len());
            next_body[i] = byte;
        }
        let Ok(prev) = ParsedRequest::parse(api, &prev_body) else {
            return Ok(()); // duplicate fields in the generated prefix: not a previous request
        };
        let prev = PrevRequest { body: prev_body.clone().into(), parsed: prev };
        let fresh = ParsedRequest::parse_after(api, &next_body, None);
        let resumed = ParsedRequest::parse_after(api, &next_body, Some(&prev));
        match (fresh, resumed) {
            (Ok(f), Ok(r)) => prop_assert_eq!(f, r),
            (Err(_), Err(_)) => {}
            (f, r) => prop_assert!(false, "fresh {f:?} vs resumed {r:?}\n{}", String::from_utf8_lossy(&next_body)),
        }
    }
}
