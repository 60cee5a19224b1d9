//! Chat Completions log-probabilities (`logprobs: true`, `top_logprobs: N`): plausible and
//! deterministic (the same request gets the same numbers).
//!
//! - A reply's text is cut into tokens as the mock counts them (a word with the space before
//!   it, or one other character). Each token is sampled with a probability between 0.82 and
//!   0.999 (from a hash of the token); its alternatives are its spelling variants (`Yes`,
//!   ` yes`, `YES`), then common filler tokens, each less likely.
//! - A [`Part::Sampled`](crate::Part::Sampled) reply sets the first token's alternatives; the
//!   text is the most likely one (temperature 0).
//! - **Judging requests** (logprobs asked, no tools offered, nothing scripted) get a one-token
//!   answer from [`judge`]: the last user message lists lettered options (`A) …` lines) → a
//!   letter, else Yes/No. The message steers it: `mock:p=0.8` sets P(yes), `mock:pick=C`
//!   gives option C 0.8; without either, the probabilities come from a hash of the message
//!   (P(yes) between 0.05 and 0.95), so a run of different questions gets varied answers.

use serde_json::{json, Value};

/// One token of a reply: its text, log-probability and the top alternatives (itself first).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    pub top: Vec<(String, f64)>,
}

impl TokenLogprob {
    /// The wire form, with `top_logprobs` cut to `n`.
    pub(crate) fn to_json(&self, n: usize) -> Value {
        let entry = |t: &str, lp: f64| json!({"token": t, "logprob": lp, "bytes": t.as_bytes()});
        let mut v = entry(&self.token, self.logprob);
        v["top_logprobs"] = self
            .top
            .iter()
            .take(n)
            .map(|(t, lp)| entry(t, *lp))
            .collect();
        v
    }
}

/// Filler alternatives, after a token's own variants.
const FILLERS: [&str; 20] = [
    " the", ",", ".", " and", " to", " a", " of", " is", " in", "\n", " I", " it", " that", " for",
    " this", " on", " with", " be", " as", " not",
];

/// FNV-1a: a stable hash (the std hasher may change between Rust releases).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The mock's tokens: a word (letters, digits, `_`) with the whitespace before it, or one
/// other character with the whitespace before it.
pub(crate) fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_whitespace() {
            if chars.peek().is_none() {
                out.push(&text[start..]);
            }
            continue;
        }
        let word = c.is_alphanumeric() || c == '_';
        let mut end = i + c.len_utf8();
        while let Some(&(j, d)) = chars.peek() {
            if word && (d.is_alphanumeric() || d == '_') {
                end = j + d.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

/// Spelling variants of a token: with and without the leading space, lower, upper and
/// capitalised.
fn variants(token: &str) -> Vec<String> {
    let bare = token.trim_start();
    let lower = bare.to_lowercase();
    let upper = bare.to_uppercase();
    let mut cap = lower.clone();
    if let Some(f) = cap.get_mut(0..1) {
        f.make_ascii_uppercase();
    }
    let mut out: Vec<String> = Vec::new();
    for w in [bare.to_owned(), cap, lower, upper] {
        for v in [w.clone(), format!(" {w}")] {
            if v != token && !out.contains(&v) {
                out.push(v);
            }
        }
    }
    out
}

/// A token's default alternatives: itself (0.82–0.999), its variants, the fillers.
fn default_top(token: &str) -> Vec<(String, f64)> {
    let p: f64 = 0.999 - (fnv(token.as_bytes()) % 180) as f64 / 1000.0;
    let mut top = vec![(token.to_owned(), p.ln())];
    let mut lp = (1.0 - p).ln() - 1.0;
    for v in variants(token)
        .into_iter()
        .chain(FILLERS.iter().map(|f| (*f).to_owned()))
    {
        if top.iter().any(|(t, _)| *t == v) {
            continue;
        }
        top.push((v, lp));
        lp -= 0.6;
        if top.len() == 20 {
            break;
        }
    }
    top
}

/// The logprobs of `text`; `first` (probabilities) replaces the first token's alternatives.
pub(crate) fn for_text(text: &str, first: Option<&[(String, f64)]>) -> Vec<TokenLogprob> {
    tokens(text)
        .into_iter()
        .enumerate()
        .map(|(i, token)| {
            let top = match first {
                Some(alts) if i == 0 => sorted(alts),
                _ => default_top(token),
            };
            let logprob = top
                .iter()
                .find(|(t, _)| t == token)
                .map_or(-0.01, |(_, lp)| *lp);
            TokenLogprob {
                token: token.to_owned(),
                logprob,
                top,
            }
        })
        .collect()
}

/// Probabilities as log-probabilities, most likely first; zero-probability ones left out.
fn sorted(alts: &[(String, f64)]) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = alts
        .iter()
        .filter(|(_, p)| *p > 0.0)
        .map(|(t, p)| (t.clone(), p.min(1.0).ln()))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// The most likely of `alts` (what temperature 0 samples).
pub(crate) fn sampled(alts: &[(String, f64)]) -> String {
    alts.iter()
        .filter(|(_, p)| *p > 0.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(t, _)| t.clone())
        .unwrap_or_default()
}

/// The number after `key` in `text` (`mock:p=0.8`), if there is one.
fn directive<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let at = text.find(key)? + key.len();
    let rest = &text[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The option letters a message lists (`A) …` lines from `A` on, in order), if at least two.
fn options(text: &str) -> Vec<char> {
    let mut out: Vec<char> = Vec::new();
    for line in text.lines() {
        let mut cs = line.chars();
        if let (Some(c), Some(')')) = (cs.next(), cs.next()) {
            let next = match out.last() {
                None => 'A',
                Some(&'Z') => 'a',
                Some(&l) => char::from(l as u8 + 1),
            };
            if c == next {
                out.push(c);
            }
        }
    }
    if out.len() >= 2 {
        out
    } else {
        Vec::new()
    }
}

/// The first token's probabilities for a judging request whose last user message is `text`.
pub(crate) fn judge(text: &str) -> Vec<(String, f64)> {
    let h = fnv(text.as_bytes());
    let letters = options(text);
    let mut out: Vec<(String, f64)> = Vec::new();
    if letters.is_empty() {
        let p = directive(text, "mock:p=")
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|p| (0.0..=1.0).contains(p))
            .unwrap_or(0.05 + (h % 91) as f64 / 100.0);
        for (word, side) in [("Yes", p), ("No", 1.0 - p)] {
            for (v, share) in [(word.to_owned(), 0.92), (format!(" {word}"), 0.05)] {
                out.push((v, 0.97 * side * share));
            }
            out.push((word.to_lowercase(), 0.97 * side * 0.03));
        }
    } else {
        let pick = directive(text, "mock:pick=")
            .and_then(|v| v.chars().next())
            .filter(|c| letters.contains(c));
        let weights: Vec<f64> = letters
            .iter()
            .map(|&l| match pick {
                Some(p) if p == l => 0.8 * (letters.len() - 1) as f64,
                Some(_) => 0.2,
                None => 1.0 + (fnv(&[h.to_le_bytes().as_slice(), &[l as u8]].concat()) % 9) as f64,
            })
            .collect();
        let total: f64 = weights.iter().sum();
        for (l, w) in letters.iter().zip(weights) {
            out.push((l.to_string(), 0.97 * w / total));
        }
    }
    // Not an answer (and not a letter: an option may be lettered I).
    out.push(("The".to_owned(), 0.02));
    out.push(("Answer".to_owned(), 0.01));
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_words_with_their_space_or_single_characters() {
        assert_eq!(tokens("Yes"), vec!["Yes"]);
        assert_eq!(tokens("It is done."), vec!["It", " is", " done", "."]);
        assert_eq!(tokens(" a_b, 12\n"), vec![" a_b", ",", " 12", "\n"]);
        assert_eq!(tokens(""), Vec::<&str>::new());
        assert_eq!(tokens("é!").concat(), "é!");
    }

    #[test]
    fn default_alternatives_put_the_token_first_then_its_variants() {
        let lp = for_text("Yes", None);
        assert_eq!(lp.len(), 1);
        let top: Vec<&str> = lp[0].top.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(&top[..4], &["Yes", " Yes", "yes", " yes"]);
        assert_eq!(top.len(), 20);
        assert!(lp[0].logprob > -0.2 && lp[0].logprob < 0.0);
        assert!(lp[0].top.windows(2).all(|w| w[0].1 >= w[1].1));
        assert_eq!(for_text("Yes", None), lp, "deterministic");
    }

    #[test]
    fn judging_reads_its_directives_and_options() {
        let yes = |t: &str| -> f64 {
            let j = judge(t);
            let y: f64 = j
                .iter()
                .filter(|(t, _)| t.trim().eq_ignore_ascii_case("yes"))
                .map(|p| p.1)
                .sum();
            let n: f64 = j
                .iter()
                .filter(|(t, _)| t.trim().eq_ignore_ascii_case("no"))
                .map(|p| p.1)
                .sum();
            y / (y + n)
        };
        assert!((yes("keep it? mock:p=0.8\nAnswer Yes or No.") - 0.8).abs() < 1e-9);
        let free = yes("Does chunk_3 matter?");
        assert!((0.05..=0.95).contains(&free));
        assert_eq!(sampled(&judge("x mock:p=0.3")), "No");

        let j = judge("Which?\nA) chunk_1\nB) whole\nC) none\nmock:pick=C");
        assert_eq!(sampled(&j), "C");
        let letters: Vec<&str> = j.iter().map(|(t, _)| t.as_str()).take(3).collect();
        assert_eq!(letters, ["A", "B", "C"]);
        assert!((j.iter().map(|p| p.1).sum::<f64>() - 1.0).abs() < 1e-9);
        assert_eq!(
            options("A) x\nC) y"),
            Vec::<char>::new(),
            "letters in order from A"
        );
    }
}
