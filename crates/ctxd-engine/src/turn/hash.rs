//! Content hashes. A message's hash covers what the model reads (role and content blocks as the
//! session model holds them), so fields clients move between requests (`cache_control`, ids of
//! Responses items, `citations: null`) never make an old message look new.

use ctxd_core::model::{ContentBlock, Message, ToolDef};

/// 128 bits of BLAKE3: collisions are not a practical concern at this scale.
pub type Hash = [u8; 16];

fn truncate(h: blake3::Hash) -> Hash {
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.as_bytes()[..16]);
    out
}

pub fn bytes(b: &[u8]) -> Hash {
    truncate(blake3::hash(b))
}

/// The key of a client's element bytes in the session's cache of bytes already seen (every
/// request resends the whole conversation, so this runs over every byte of every request).
/// XXH3-128 is not collision-resistant against a crafted input, but the cache is per session:
/// a client could only confuse its own conversation, never another tenant's.
pub fn raw(b: &[u8]) -> Hash {
    xxhash_rust::xxh3::xxh3_128(b).to_le_bytes()
}

/// The hash of a message as the model reads it. Empty text blocks are skipped: clients differ
/// in sending `content: ""` or `null` beside tool calls.
pub fn message(m: &Message) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(format!("{:?}", m.role).as_bytes());
    for block in &m.content {
        if matches!(block, ContentBlock::Text { text } if text.is_empty()) {
            continue;
        }
        h.update(b"\x1e");
        // The model's serialisation is deterministic (struct field order; argument objects in
        // serde_json's map order).
        if let Ok(json) = serde_json::to_vec(block) {
            h.update(&json);
        }
    }
    truncate(h.finalize())
}

pub fn text(t: &str) -> Hash {
    bytes(t.as_bytes())
}

pub fn tools(tools: &[ToolDef]) -> Hash {
    truncate(blake3::hash(&serde_json::to_vec(tools).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxd_core::model::Role;

    #[test]
    fn the_role_counts_and_empty_text_blocks_do_not() {
        let a = Message::text(Role::User, "hi");
        let c = Message::text(Role::Assistant, "hi");
        assert_ne!(message(&a), message(&c), "the role counts");
        let empty = Message::new(
            Role::Assistant,
            vec![ContentBlock::text(""), ContentBlock::text("hi")],
        );
        assert_eq!(message(&empty), message(&c));
    }
}
