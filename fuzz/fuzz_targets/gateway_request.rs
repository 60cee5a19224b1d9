//! Any bytes as a request body of each API, through the gateway's pure pipeline: split, plan
//! against a log that already holds a conversation, project, splice. An `Err` is fine; a panic
//! is a bug, and so is a splice that is not valid JSON.
#![no_main]

use ctxd_engine::turn::{plan_request, upstream_parts, Part, SessionLog};
use ctxd_gateway::api::Api;
use ctxd_gateway::request::ParsedRequest;
use ctxd_gateway::rewrite::splice;
use libfuzzer_sys::fuzz_target;

const SEED: &[u8] = br#"{"model":"m","system":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"bash","input":{}}]}]}"#;

fuzz_target!(|data: &[u8]| {
    for api in [Api::Anthropic, Api::Chat, Api::Responses] {
        let mut log = SessionLog::default();
        if let Ok(seed) = ParsedRequest::parse(api, SEED) {
            plan_request(&mut log, &seed.with_body(SEED), "t");
        }
        let Ok(req) = ParsedRequest::parse_after(api, data, None) else {
            continue;
        };
        let plan = plan_request(&mut log, &req.with_body(data), "t");
        if let Ok(parts) = upstream_parts(&log, &plan.element_entries) {
            let parts = parts.unwrap_or_else(|| (0..req.elements.len()).map(Part::Client).collect());
            let out = splice(&req, data, Some(&parts), None);
            // Valid JSON text (UTF-8, syntax): a raw value checks both without a number's range
            // (`8e478` is JSON, and passes through, though no f64 holds it).
            assert!(serde_json::from_slice::<&serde_json::value::RawValue>(&out).is_ok());
        }
    }
});
