//! The sentence encoder: a BERT model (candle-transformers' `BertModel`, CPU, f32) read from a
//! model directory's `config.json` and `model.safetensors`, its WordPiece tokenizer from
//! `tokenizer.json`, and sentence-transformers' head: the mean of the token states under the
//! attention mask ([`mean_pool`]), scaled to unit length ([`normalize`]). Cosine similarity of
//! two embeddings is then their dot product ([`cosine`]).
//!
//! Texts are cut at [`MAX_TOKENS`] tokens (the length all-MiniLM-L6-v2 was trained at; the
//! tokenizer file's own 128 and its fixed padding are replaced), and a batch is encoded in
//! groups of similar length ([`GROUP`] texts, padded to the group's longest), so a short text
//! does not pay for a long one's padding.

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Tokens a text is cut at (special tokens included).
pub const MAX_TOKENS: usize = 256;
/// Characters of a text tokenized at the most: past [`MAX_TOKENS`] tokens nothing is read,
/// and a WordPiece token is at least one character (plus the spaces between words).
pub const MAX_CHARS: usize = MAX_TOKENS * 12;
/// Texts encoded together (one forward pass).
pub const GROUP: usize = 16;

/// Why the model could not be loaded or run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EncoderError(pub String);

fn err(what: &str) -> impl Fn(&dyn std::fmt::Display) -> EncoderError + '_ {
    move |e| EncoderError(format!("{what}: {e}"))
}

/// The loaded model and tokenizer. Immutable once loaded: shared by every pass (`Arc`).
pub struct Encoder {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
    /// The embedding's length (the model's hidden size).
    pub dim: usize,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder").field("dim", &self.dim).finish()
    }
}

/// Embeddings of a batch of texts, and the tokens read.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedded {
    pub vectors: Vec<Vec<f32>>,
    pub tokens: u64,
}

impl Encoder {
    /// Read the model in `dir` (which holds `config.json`, `tokenizer.json` and
    /// `model.safetensors`). The weights are read into memory (about 90 MB), not mapped.
    pub fn load(dir: &Path) -> Result<Self, EncoderError> {
        let device = Device::Cpu;
        let config_path = dir.join("config.json");
        let config = std::fs::read_to_string(&config_path)
            .map_err(|e| EncoderError(format!("cannot read {}: {e}", config_path.display())))?;
        let config: Config = serde_json::from_str(&config).map_err(|e| {
            EncoderError(format!(
                "{} is not a BERT config: {e}",
                config_path.display()
            ))
        })?;
        let weights_path = dir.join("model.safetensors");
        let weights = candle_core::safetensors::load(&weights_path, &device)
            .map_err(|e| EncoderError(format!("cannot read {}: {e}", weights_path.display())))?;
        let vb = VarBuilder::from_tensors(weights, DType::F32, &device);
        let model = BertModel::load(vb, &config).map_err(|e| {
            EncoderError(format!(
                "{} does not hold a BERT model: {e}",
                weights_path.display()
            ))
        })?;
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| EncoderError(format!("cannot read {}: {e}", tokenizer_path.display())))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| err("the tokenizer's truncation")(&e))?;
        let pad_id = tokenizer
            .token_to_id("[PAD]")
            .unwrap_or(config.pad_token_id as u32);
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id,
            pad_token: "[PAD]".to_owned(),
            ..PaddingParams::default()
        }));
        Ok(Self {
            model,
            tokenizer,
            device,
            dim: config.hidden_size,
        })
    }

    /// Unit-length embeddings of `texts`, in order (blocking: seconds for a large batch).
    pub fn embed(&self, texts: &[&str]) -> Result<Embedded, EncoderError> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        // Similar lengths together: less padding.
        order.sort_by_key(|&i| texts[i].len());
        let mut vectors: Vec<Vec<f32>> = vec![Vec::new(); texts.len()];
        let mut tokens = 0u64;
        for group in order.chunks(GROUP) {
            let batch: Vec<&str> = group.iter().map(|&i| clip(texts[i])).collect();
            let (out, n) = self.embed_group(&batch)?;
            tokens += n;
            for (&i, v) in group.iter().zip(out) {
                vectors[i] = v;
            }
        }
        Ok(Embedded { vectors, tokens })
    }

    /// One forward pass over `texts` (at most [`GROUP`]): their embeddings and real tokens.
    fn embed_group(&self, texts: &[&str]) -> Result<(Vec<Vec<f32>>, u64), EncoderError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| err("tokenizing")(&e))?;
        let rows = encodings.len();
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids: Vec<u32> = Vec::with_capacity(rows * len);
        let mut types: Vec<u32> = Vec::with_capacity(rows * len);
        let mut mask: Vec<u32> = Vec::with_capacity(rows * len);
        for e in &encodings {
            if e.get_ids().len() != len {
                return Err(EncoderError("the tokenizer did not pad the batch".into()));
            }
            ids.extend_from_slice(e.get_ids());
            types.extend_from_slice(e.get_type_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let real: u64 = mask.iter().map(|&m| u64::from(m)).sum();
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = Tensor::from_vec(ids, (rows, len), &self.device)?;
            let types = Tensor::from_vec(types, (rows, len), &self.device)?;
            let mask = Tensor::from_vec(mask, (rows, len), &self.device)?;
            let states = self.model.forward(&ids, &types, Some(&mask))?;
            normalize(&mean_pool(&states, &mask)?)?.to_vec2::<f32>()
        };
        let vectors = run().map_err(|e| err("the model")(&e))?;
        Ok((vectors, real))
    }
}

/// `text` cut at [`MAX_CHARS`] (on a character boundary).
fn clip(text: &str) -> &str {
    if text.len() <= MAX_CHARS {
        return text;
    }
    let mut end = MAX_CHARS;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The mean of `states` (batch × tokens × dim) over the tokens `mask` (batch × tokens, 1 for a
/// real token, 0 for padding) marks: batch × dim. A row without a real token is all zeros.
pub fn mean_pool(states: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let mask = mask.to_dtype(states.dtype())?.unsqueeze(D::Minus1)?;
    let summed = states.broadcast_mul(&mask)?.sum(1)?;
    let counts = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
    summed.broadcast_div(&counts)
}

/// Each row of `x` (batch × dim) scaled to unit length (a zero row stays zero).
pub fn normalize(x: &Tensor) -> candle_core::Result<Tensor> {
    let norms = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12f32, f32::MAX)?;
    x.broadcast_div(&norms)
}

/// The cosine similarity of two unit-length embeddings.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn mean_pool_averages_the_real_tokens_only() {
        let dev = Device::Cpu;
        // Two texts of up to three tokens, dim 2; the second has one padding token.
        let states = Tensor::from_vec(
            vec![
                1f32, 2., 3., 4., 5., 6., /* */ 10., 0., 20., 2., 99., 99.,
            ],
            (2, 3, 2),
            &dev,
        )
        .unwrap();
        let mask = Tensor::from_vec(vec![1u32, 1, 1, 1, 1, 0], (2, 3), &dev).unwrap();
        let pooled = mean_pool(&states, &mask).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(pooled, vec![vec![3., 4.], vec![15., 1.]]);
        // No real token: zeros, not NaN.
        let mask = Tensor::from_vec(vec![0u32; 6], (2, 3), &dev).unwrap();
        let pooled = mean_pool(&states, &mask).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(pooled, vec![vec![0., 0.], vec![0., 0.]]);
    }

    #[test]
    fn normalize_gives_unit_rows_and_keeps_zero_rows() {
        let dev = Device::Cpu;
        let x = Tensor::from_vec(vec![3f32, 4., 0., 0., -1., 0.], (3, 2), &dev).unwrap();
        let n = normalize(&x).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(n, vec![vec![0.6, 0.8], vec![0., 0.], vec![-1., 0.]]);
        assert!((cosine(&n[0], &n[0]) - 1.0).abs() < 1e-6);
        assert!((cosine(&n[0], &n[2]) + 0.6).abs() < 1e-6);
    }

    #[test]
    fn clip_cuts_on_a_character_boundary() {
        let short = "abc";
        assert_eq!(clip(short), short);
        let long = "é".repeat(MAX_CHARS);
        let c = clip(&long);
        assert!(c.len() <= MAX_CHARS && c.len() >= MAX_CHARS - 1);
        assert!(long.starts_with(c));
    }
}
