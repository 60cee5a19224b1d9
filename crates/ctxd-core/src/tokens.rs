//! Token accounting: a counter for text, and the rules for everything that is not plain text.
//!
//! The counter is injected ([`TokenCounter`]) so this crate stays free of tokenizer tables; the
//! `ctxd-tokens` crate supplies real BPE counts. The non-text rules are fixed here:
//! - a tool call costs its name plus its JSON arguments;
//! - a thinking block costs its text plus half of its signature (an opaque base64 blob the
//!   provider stores compactly);
//! - an image costs `width × height / 750` tokens (Anthropic's published rule), at most
//!   [`IMAGE_TOKENS_MAX`] (providers downscale larger images), or [`IMAGE_TOKENS_UNKNOWN`] when
//!   its size is unknown.

use crate::model::{ContentBlock, Image, ToolDef};

/// Counts the tokens of a text.
pub trait TokenCounter {
    fn count(&self, text: &str) -> u64;
    /// A short name for reports (`o200k_base`, `claude-estimate`, `chars/4`).
    fn name(&self) -> &str;
}

/// Characters / 4, rounded up: the estimate agents such as Pi use. Fast, needs no tables.
#[derive(Clone, Copy, Debug, Default)]
pub struct CharEstimate;

impl TokenCounter for CharEstimate {
    fn count(&self, text: &str) -> u64 {
        (text.chars().count() as u64).div_ceil(4)
    }
    fn name(&self) -> &str {
        "chars/4"
    }
}

/// Tokens of an image whose size is not known.
pub const IMAGE_TOKENS_UNKNOWN: u64 = 1_600;
/// The most one image costs: providers downscale larger images to about 1.15 megapixels.
pub const IMAGE_TOKENS_MAX: u64 = 1_600;

pub fn image_tokens(image: &Image) -> u64 {
    match (image.width, image.height) {
        (Some(w), Some(h)) => (u64::from(w) * u64::from(h))
            .div_ceil(750)
            .clamp(1, IMAGE_TOKENS_MAX),
        _ => IMAGE_TOKENS_UNKNOWN,
    }
}

/// Where a block's tokens go in the report's composition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Part {
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    Image,
}

/// Call `sink` with each part of a block and its tokens. A tool result's text goes to
/// [`Part::ToolResult`], its images to [`Part::Image`].
pub fn for_each_part(
    counter: &dyn TokenCounter,
    block: &ContentBlock,
    sink: &mut dyn FnMut(Part, u64),
) {
    match block {
        ContentBlock::Text { text } => sink(Part::Text, counter.count(text)),
        ContentBlock::Thinking {
            thinking,
            signature,
            ..
        } => {
            let sig = signature.as_deref().map_or(0, signature_tokens);
            sink(Part::Thinking, counter.count(thinking) + sig);
        }
        ContentBlock::Image(image) => sink(Part::Image, image_tokens(image)),
        ContentBlock::ToolCall {
            name, arguments, ..
        } => {
            let args = match arguments {
                serde_json::Value::String(s) => counter.count(s),
                other => counter.count(&other.to_string()),
            };
            sink(Part::ToolCall, counter.count(name) + args);
        }
        ContentBlock::ToolResult { content, .. } => {
            for inner in content {
                for_each_part(counter, inner, &mut |part, tokens| {
                    let part = if part == Part::Image {
                        Part::Image
                    } else {
                        Part::ToolResult
                    };
                    sink(part, tokens);
                });
            }
        }
    }
}

/// Signatures are base64 blobs: a BPE count of them is meaningless and slow. Half their
/// characters / 4, as the context guard seed sizes them.
fn signature_tokens(signature: &str) -> u64 {
    (signature.len() as u64 / 2).div_ceil(4)
}

/// All tokens of a list of blocks.
pub fn blocks_tokens(counter: &dyn TokenCounter, blocks: &[ContentBlock]) -> u64 {
    let mut total = 0;
    for b in blocks {
        for_each_part(counter, b, &mut |_, t| total += t);
    }
    total
}

/// Tokens of one tool definition: its name, description and JSON schema.
pub fn tool_def_tokens(counter: &dyn TokenCounter, tool: &ToolDef) -> u64 {
    counter.count(&tool.name)
        + counter.count(&tool.description)
        + if tool.schema.is_null() {
            0
        } else {
            counter.count(&tool.schema.to_string())
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_by_pixels_with_a_cap_and_a_default() {
        let img = |w, h| Image {
            width: Some(w),
            height: Some(h),
            ..Image::default()
        };
        assert_eq!(image_tokens(&img(750, 1)), 1);
        assert_eq!(image_tokens(&img(200, 200)), 54);
        assert_eq!(image_tokens(&img(4000, 3000)), IMAGE_TOKENS_MAX);
        assert_eq!(image_tokens(&Image::default()), IMAGE_TOKENS_UNKNOWN);
    }

    #[test]
    fn tool_results_split_text_and_images() {
        let block = ContentBlock::ToolResult {
            call_id: "c".into(),
            tool_name: None,
            content: vec![
                ContentBlock::text("abcdefgh"),
                ContentBlock::Image(Image::default()),
            ],
            is_error: false,
        };
        let mut parts = Vec::new();
        for_each_part(&CharEstimate, &block, &mut |p, t| parts.push((p, t)));
        assert_eq!(
            parts,
            vec![(Part::ToolResult, 2), (Part::Image, IMAGE_TOKENS_UNKNOWN)]
        );
    }
}
