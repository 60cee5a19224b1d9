//! Padding a reply to an exact body size: the first text grows (one is added at the front if
//! the reply has none); SSE bodies take the last few bytes as a comment line (`:...`), which
//! SSE readers skip.

use bytes::Bytes;

use super::{Piece, Plan, Rendered};

/// Filler text: plain ASCII that needs no JSON escaping, so one byte of text is one byte of body.
const FILLER: &[u8] = b"lorem ipsum dolor sit amet consectetur adipiscing elit ";

/// The smallest SSE comment: `:\n\n`.
const MIN_COMMENT: usize = 3;

/// `plan` rendered with a body of `target` bytes; as rendered when that is already larger.
pub(crate) fn pad_to(plan: &Plan, stream: bool, target: usize) -> Rendered {
    let mut plan = plan.clone();
    let index = match plan
        .pieces
        .iter()
        .position(|p| matches!(p, Piece::Text { .. }))
    {
        Some(i) => i,
        None => {
            plan.pieces.insert(
                0,
                Piece::Text {
                    id: format!("{}_pad", plan.id),
                    text: String::new(),
                },
            );
            0
        }
    };
    let render = |n: usize| {
        let mut padded = plan.clone();
        if let Some(Piece::Text { text, .. }) = padded.pieces.get_mut(index) {
            text.push_str(&filler(n));
        }
        padded.render(stream)
    };
    let base = render(0);
    let base_len = base.len();
    if base_len >= target {
        return base;
    }
    // Bytes of body per byte of text (a Responses stream repeats the text in several events).
    let per_byte = render(1).len().saturating_sub(base_len).max(1);
    let gap = if stream { MIN_COMMENT } else { 0 };
    let mut n = (target - base_len) / per_byte;
    let mut rendered = render(n);
    // Each round removes the overshoot (delta overhead grows with the text); a few suffice.
    for _ in 0..32 {
        let len = rendered.len();
        if len == target || len + gap <= target || n == 0 {
            break;
        }
        n = n.saturating_sub((len + gap - target).div_ceil(per_byte));
        rendered = render(n);
    }
    match rendered {
        Rendered::Sse(mut frames) if rendered_len(&frames) + MIN_COMMENT <= target => {
            let missing = target - rendered_len(&frames);
            let mut first = Vec::with_capacity(missing + frames.first().map_or(0, Bytes::len));
            first.push(b':');
            first.extend_from_slice(filler(missing - MIN_COMMENT).as_bytes());
            first.extend_from_slice(b"\n\n");
            if let Some(head) = frames.first() {
                first.extend_from_slice(head);
                frames[0] = Bytes::from(first);
            } else {
                frames.push(Bytes::from(first));
            }
            Rendered::Sse(frames)
        }
        other => other,
    }
}

fn rendered_len(frames: &[Bytes]) -> usize {
    frames.iter().map(Bytes::len).sum()
}

fn filler(n: usize) -> String {
    FILLER
        .iter()
        .cycle()
        .take(n)
        .map(|&b| char::from(b))
        .collect()
}
