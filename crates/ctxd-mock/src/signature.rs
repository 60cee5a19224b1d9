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
    let b64 = base64::engine::general_purpose::STANDARD;
    let Ok(plain) = b64.decode(signature.trim()) else {
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

fn fnv1a64(bytes: &[u8]) -> u64 {
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
    }
}
