//! Reading an answer from the log-probabilities of a reply's first token.
//!
//! A server lists the first token's most likely alternatives (`top_logprobs`). The same word
//! comes as several tokens (`Yes`, ` Yes`, `yes`, `YES`, `▁Yes`, `Yes.`): their probabilities
//! add up. A yes/no answer is P(yes) / (P(yes) + P(no)). When one side is not listed, its
//! probability is at most the least listed one, and at most what the list leaves of 1; the
//! reading takes that upper bound (so a missing "no" gives the lowest P(yes) the list allows,
//! a missing "yes" the highest). When neither is listed, the model did not answer the question:
//! an error, and the item is kept.
//!
//! A choice's options are lettered `A`, `B`, …; each letter's probability is read the same way
//! and the letters listed are normalised to sum to 1 (a letter not listed gets 0). Up to 26
//! options, `a` counts as `A`; beyond 26 the lower-case letters label options 27 to 52.

/// The most options a choice can letter.
pub const MAX_OPTIONS: usize = 52;

/// Why a reply's first token gives no answer.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unreadable {
    #[error("the reply has no log-probabilities for its first token (does the server support `logprobs`?)")]
    NoLogprobs,
    #[error(
        "neither Yes nor No is among the first token's top alternatives (the model answered {0:?})"
    )]
    NotYesNo(String),
    #[error(
        "no option letter is among the first token's top alternatives (the model answered {0:?})"
    )]
    NoLetter(String),
    #[error("a choice of {0} options: at most {MAX_OPTIONS} can be lettered")]
    TooManyOptions(usize),
}

/// One alternative for the first token: its text and natural-log probability.
#[derive(Clone, Debug, PartialEq)]
pub struct Alternative {
    pub token: String,
    pub logprob: f64,
}

impl Alternative {
    pub fn new(token: impl Into<String>, logprob: f64) -> Self {
        Self {
            token: token.into(),
            logprob,
        }
    }
}

/// The label of option `i` of `n` (`A`…`Z`, then `a`…`z` past 26).
pub fn label(i: usize) -> char {
    const UPPER: &[u8; 26] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const LOWER: &[u8; 26] = b"abcdefghijklmnopqrstuvwxyz";
    match i {
        0..26 => char::from(UPPER[i]),
        26..52 => char::from(LOWER[i - 26]),
        _ => '?',
    }
}

/// The word a token spells: whitespace and the tokenizers' space markers (`▁`, `Ġ`, `Ċ`)
/// trimmed, then the punctuation around it.
fn word(token: &str) -> &str {
    token
        .trim_matches(|c: char| c.is_whitespace() || matches!(c, '▁' | 'Ġ' | 'Ċ'))
        .trim_matches(|c: char| c.is_ascii_punctuation() && c != '_')
}

/// Each distinct token once (a server may list the sampled token twice), as probabilities.
fn distinct(alternatives: &[Alternative]) -> Vec<(&str, f64)> {
    let mut out: Vec<(&str, f64)> = Vec::with_capacity(alternatives.len());
    for a in alternatives {
        if !a.logprob.is_nan() && !out.iter().any(|(t, _)| *t == a.token) {
            out.push((a.token.as_str(), a.logprob.exp().clamp(0.0, 1.0)));
        }
    }
    out
}

/// The most an unlisted token can have: no more than the least listed one, nor than what the
/// listed ones leave of 1.
fn unlisted_bound(probs: &[(&str, f64)]) -> f64 {
    let least = probs.iter().map(|p| p.1).fold(1.0, f64::min);
    let rest = (1.0 - probs.iter().map(|p| p.1).sum::<f64>()).max(0.0);
    least.min(rest)
}

/// The most likely listed token, for error messages.
fn top(probs: &[(&str, f64)]) -> String {
    probs
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|p| p.0.to_owned())
        .unwrap_or_default()
}

/// P(yes) from the first token's alternatives.
pub fn yes_probability(alternatives: &[Alternative]) -> Result<f32, Unreadable> {
    let probs = distinct(alternatives);
    if probs.is_empty() {
        return Err(Unreadable::NoLogprobs);
    }
    let (mut yes, mut no) = (None::<f64>, None::<f64>);
    for (token, p) in &probs {
        let w = word(token);
        if w.eq_ignore_ascii_case("yes") {
            *yes.get_or_insert(0.0) += p;
        } else if w.eq_ignore_ascii_case("no") {
            *no.get_or_insert(0.0) += p;
        }
    }
    let bound = unlisted_bound(&probs);
    let (yes, no) = match (yes, no) {
        (None, None) => return Err(Unreadable::NotYesNo(top(&probs))),
        (Some(y), Some(n)) => (y, n),
        (Some(y), None) => (y, bound),
        (None, Some(n)) => (bound, n),
    };
    if yes + no <= 0.0 {
        return Err(Unreadable::NotYesNo(top(&probs)));
    }
    Ok((yes / (yes + no)) as f32)
}

/// The probability of each of `n` lettered options.
pub fn choice_probabilities(
    alternatives: &[Alternative],
    n: usize,
) -> Result<Vec<f32>, Unreadable> {
    if n > MAX_OPTIONS {
        return Err(Unreadable::TooManyOptions(n));
    }
    let probs = distinct(alternatives);
    if probs.is_empty() {
        return Err(Unreadable::NoLogprobs);
    }
    let fold = n <= 26;
    let mut by_option = vec![0.0f64; n];
    let mut any = false;
    for (token, p) in &probs {
        let mut chars = word(token).chars();
        let (Some(c), None) = (chars.next(), chars.next()) else {
            continue;
        };
        let c = if fold { c.to_ascii_uppercase() } else { c };
        if let Some(i) = (0..n).find(|&i| label(i) == c) {
            by_option[i] += p;
            any = true;
        }
    }
    let total: f64 = by_option.iter().sum();
    if !any || total <= 0.0 {
        return Err(Unreadable::NoLetter(top(&probs)));
    }
    Ok(by_option.iter().map(|p| (p / total) as f32).collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn alts(list: &[(&str, f64)]) -> Vec<Alternative> {
        list.iter()
            .map(|(t, p)| Alternative::new(*t, p.ln()))
            .collect()
    }

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() < 1e-4
    }

    #[test]
    fn yes_and_no_variants_add_up() {
        let p = yes_probability(&alts(&[
            ("Yes", 0.5),
            (" yes", 0.1),
            ("YES", 0.05),
            ("▁Yes", 0.05),
            ("No", 0.15),
            (" no.", 0.05),
            ("The", 0.1),
        ]))
        .unwrap();
        assert!(close(p, 0.7 / 0.9), "{p}");
        // Words that merely start like the answer are not the answer.
        let p = yes_probability(&alts(&[
            ("Yes", 0.6),
            ("Nope", 0.2),
            ("Now", 0.1),
            ("No", 0.1),
        ]))
        .unwrap();
        assert!(close(p, 0.6 / 0.7), "{p}");
    }

    #[test]
    fn a_missing_side_gets_the_most_it_could_have() {
        // No "No" listed: it had at most the least listed probability (0.02).
        let p = yes_probability(&alts(&[("Yes", 0.9), ("yes", 0.05), ("The", 0.02)])).unwrap();
        assert!(close(p, 0.95 / 0.97), "{p}");
        // No "Yes" listed: it had at most what the list leaves (1 - 0.97 = 0.03 < 0.9).
        let p = yes_probability(&alts(&[("No", 0.9), ("no", 0.04), ("I", 0.03)])).unwrap();
        assert!(close(p, 0.03 / 0.97), "{p}");
        // A list that is the whole distribution leaves nothing for the other side.
        let p = yes_probability(&alts(&[("No", 1.0)])).unwrap();
        assert!(close(p, 0.0), "{p}");
    }

    #[test]
    fn no_yes_no_or_no_logprobs_is_an_error() {
        assert_eq!(
            yes_probability(&alts(&[("The", 0.7), ("I", 0.2)])),
            Err(Unreadable::NotYesNo("The".into()))
        );
        assert_eq!(yes_probability(&[]), Err(Unreadable::NoLogprobs));
    }

    #[test]
    fn a_repeated_token_counts_once() {
        let mut a = alts(&[("Yes", 0.6), ("No", 0.3)]);
        a.push(Alternative::new("Yes", 0.6f64.ln()));
        assert!(close(yes_probability(&a).unwrap(), 0.6 / 0.9));
    }

    #[test]
    fn choices_read_letters_and_normalise() {
        let ps = choice_probabilities(
            &alts(&[
                ("B", 0.5),
                (" B", 0.1),
                ("A", 0.2),
                ("c", 0.1),
                ("The", 0.05),
            ]),
            4,
        )
        .unwrap();
        assert_eq!(ps.len(), 4);
        for (p, want) in ps.iter().zip([0.2 / 0.9, 0.6 / 0.9, 0.1 / 0.9, 0.0]) {
            assert!(close(*p, want), "{ps:?}");
        }
        // A letter past the options is not an answer.
        assert!(matches!(
            choice_probabilities(&alts(&[("E", 0.9)]), 4),
            Err(Unreadable::NoLetter(_))
        ));
        assert_eq!(
            choice_probabilities(&alts(&[("A", 0.9)]), 53),
            Err(Unreadable::TooManyOptions(53))
        );
    }

    #[test]
    fn past_26_options_lower_case_letters_are_their_own() {
        assert_eq!(label(0), 'A');
        assert_eq!(label(25), 'Z');
        assert_eq!(label(26), 'a');
        assert_eq!(label(41), 'p');
        let ps = choice_probabilities(&alts(&[("a", 0.6), ("A", 0.2), ("p", 0.2)]), 42).unwrap();
        assert!(
            close(ps[26], 0.6) && close(ps[0], 0.2) && close(ps[41], 0.2),
            "{ps:?}"
        );
        // Up to 26 options, "a" is "A".
        let ps = choice_probabilities(&alts(&[("a", 0.6), ("A", 0.2)]), 3).unwrap();
        assert!(close(ps[0], 1.0), "{ps:?}");
    }
}
