//! Differential: splitting a body from where it differs from the previous request
//! (`ParsedRequest::parse_after`) must give what a fresh split gives, or fail as it fails.
//! The input is read as `[api, keep_lo, keep_hi, split_lo, split_hi, bytes...]`: the previous
//! body is `bytes[..split]`, the next one `prev[..keep] ++ bytes[split..]`, so the two share a
//! prefix as a resent conversation does.
#![no_main]

use ctxd_gateway::api::Api;
use ctxd_gateway::request::{ParsedRequest, PrevRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((head, bytes)) = data.split_first_chunk::<5>() else {
        return;
    };
    let api = [Api::Anthropic, Api::Chat, Api::Responses][usize::from(head[0]) % 3];
    let split = usize::from(u16::from_le_bytes([head[3], head[4]])) % (bytes.len() + 1);
    let prev_body = &bytes[..split];
    let keep = usize::from(u16::from_le_bytes([head[1], head[2]])) % (split + 1);
    let mut next_body = prev_body[..keep].to_vec();
    next_body.extend_from_slice(&bytes[split..]);
    let Ok(parsed) = ParsedRequest::parse(api, prev_body) else {
        return;
    };
    let prev = PrevRequest {
        body: bytes::Bytes::copy_from_slice(prev_body),
        parsed,
    };
    let fresh = ParsedRequest::parse_after(api, &next_body, None);
    let resumed = ParsedRequest::parse_after(api, &next_body, Some(&prev));
    match (fresh, resumed) {
        (Ok(f), Ok(r)) => assert_eq!(f, r),
        (Err(_), Err(_)) => {}
        (f, r) => panic!("fresh {f:?} vs resumed {r:?}"),
    }
});
