#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Properties of the gateway's pure pipeline over generated conversations and arbitrary bytes.

use ctxd_gateway::api::Api;
use ctxd_gateway::log::SessionLog;
use ctxd_gateway::plan::{plan_request, upstream_parts, Part};
use ctxd_gateway::request::ParsedRequest;
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
    }
}

fn body(api: Api, texts: &[String], cache_at: Option<usize>) -> Vec<u8> {
    let els: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| element(api, i, t, cache_at == Some(i)))
        .collect();
    let key = if api == Api::Responses {
        "input"
    } else {
        "messages"
    };
    serde_json::to_vec(&json!({"model": "m", key: els, "stream": false})).unwrap()
}

fn api() -> impl Strategy<Value = Api> {
    prop_oneof![Just(Api::Anthropic), Just(Api::Chat), Just(Api::Responses)]
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
            let plan = plan_request(&mut log, &req, &b, "t");
            prop_assert!(plan.appended.len() <= 1, "turn {n}: {}", plan.appended.len());
            prop_assert!(upstream_parts(&log, &plan).unwrap().is_none());
        }
        let messages = log.branch().len();
        prop_assert_eq!(messages, texts.len());
        prop_assert_eq!(log.len(), texts.len());
    }

    /// Splicing the client's own elements back gives the same elements, byte for byte.
    #[test]
    fn splicing_client_elements_keeps_their_bytes(
        api in api(),
        texts in prop::collection::vec("[a-z \"\\\\]{0,12}", 1..8),
        keep in prop::collection::vec(any::<bool>(), 8),
    ) {
        let b = body(api, &texts, None);
        let req = ParsedRequest::parse(api, &b).unwrap();
        let parts: Vec<Part> = (0..texts.len()).filter(|&i| keep[i]).map(Part::Client).collect();
        let out = splice(&req, &b, &parts);
        let again = ParsedRequest::parse(api, &out).unwrap();
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
