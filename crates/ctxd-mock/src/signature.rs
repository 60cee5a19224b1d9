//! The mock's own thinking signatures, verifiable against their text.
//!
//! A real signature is opaque base64 the provider checks against the thinking text. The mock's
//! are base64 of `ctxd-mock thinking signature <id> fnv1a64:<hash of the text>`: recognisable
//! by that prefix once decoded, so a block sent back with its text changed (or its signature
//! edited) is refused, while a signature the mock did not issue (a request captured from the
//! real provider) is *foreign* and accepted as is. FNV-1a is a checksum, not a MAC: it catches
//! accidental edits (a gateway rewriting a thinking block), not forgery.

use base64::Engine as _;

/// What every mock-issued signature decodes to first.
const PREFIX: &str = "ctxd-mock thinking signature ";

/// The hash's tag inside a signature.
const HASH_TAG: &str = "fnv1a64:";

/// What a signature says about a thinking text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Issued by the mock for this text.
    Valid,
    /// Issued by the mock, but for another text (or edited).
    Invalid,
    /// Not the mock's (a real provider's, or anything else): not checked.
    Foreign,
}

/// The signature of a thinking block with this id and text.
pub(crate) fn sign(id: &str, text: &str) -> String {
    let plain = format!("{PREFIX}{id} {HASH_TAG}{:016x}", fnv1a64(text.as_bytes()));
    base64::engine::general_purpose::STANDARD.encode(plain)
}

/// Checks `signature` against `text`.
pub(crate) fn verify(signature: &str, text: &str) -> Verdict {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    // A client may re-encode the bytes it was given (Gemini SDKs hold signatures as bytes).
    let sig = signature.trim();
    let decoded = [STANDARD, URL_SAFE, STANDARD_NO_PAD, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(sig).ok());
    let Some(plain) = decoded else {
        return Verdict::Foreign;
    };
    let Some(rest) = plain.strip_prefix(PREFIX.as_bytes()) else {
        return Verdict::Foreign;
    };
    let expected = format!("{HASH_TAG}{:016x}", fnv1a64(text.as_bytes()));
    let tail = rest.rsplit(|b| *b == b' ').next().unwrap_or_default();
    if tail == expected.as_bytes() {
        Verdict::Valid
    } else {
        Verdict::Invalid
    }
}

/// What a Gemini `functionCall` part's `thoughtSignature` is bound to: its name and its
/// arguments in canonical JSON (keys sorted at every depth), so a client re-serialising the
/// arguments keeps the signature valid while another call's signature does not fit.
pub(crate) fn function_call_content(name: &str, args: Option<&serde_json::Value>) -> String {
    let mut out = format!("functionCall {name} ");
    match args {
        Some(v) if !v.is_null() => canonical(v, &mut out),
        _ => out.push_str("{}"),
    }
    out
}

/// `v` as JSON with object keys sorted (whatever map order serde_json was built with).
fn canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                canonical(&map[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_tamper_and_foreign() {
        let sig = sign("rs_1", "I think.");
        assert_eq!(verify(&sig, "I think."), Verdict::Valid);
        assert_eq!(verify(&sig, "I think!"), Verdict::Invalid);
        let b64 = base64::engine::general_purpose::STANDARD;
        let edited = b64.encode(format!("{PREFIX}rs_1 {HASH_TAG}0000000000000000"));
        assert_eq!(verify(&edited, "I think."), Verdict::Invalid);
        let truncated = b64.encode(format!("{PREFIX}rs_1"));
        assert_eq!(verify(&truncated, "I think."), Verdict::Invalid);
        // Real signatures and arbitrary strings are not the mock's to judge.
        assert_eq!(verify("EqQBCkgIARABGAIiQ...", "x"), Verdict::Foreign);
        assert_eq!(verify(&b64.encode("something else"), "x"), Verdict::Foreign);
        assert_eq!(verify("", "x"), Verdict::Foreign);
        // Re-encoded URL-safe or without padding: still the mock's.
        let plain = b64.decode(&sig).unwrap();
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&plain);
        assert_eq!(verify(&url, "I think."), Verdict::Valid);
        assert_eq!(verify(&url, "I think!"), Verdict::Invalid);
    }

    #[test]
    fn call_content_ignores_key_order() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"a":{"y":[1,{"q":2,"p":3}],"x":"s"}}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":{"x":"s","y":[1,{"p":3,"q":2}]},"b":1}"#).unwrap();
        assert_eq!(
            function_call_content("f", Some(&a)),
            function_call_content("f", Some(&b))
        );
        assert_eq!(
            function_call_content("f", None),
            function_call_content("f", Some(&serde_json::Value::Null))
        );
        assert_ne!(
            function_call_content("f", Some(&a)),
            function_call_content("g", Some(&a))
        );
    }
}
