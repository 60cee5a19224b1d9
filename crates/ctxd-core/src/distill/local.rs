//! The local classifier's rules: no network, no model files. A chunk (or a whole output, or an
//! old exchange) is needed when what the work cites later appears in it.
//!
//! **Terms** are what a text can cite: paths (and their file names), identifiers (with `_`, a
//! digit, inner capitals, or dots: `snake_case`, `camelCase`, `mod.attr`), numbers of three
//! digits or more, and longer plain words. Strong terms weigh 1, numbers 0.5, plain words 0.25.
//! **Cited** means present in what the agent wrote or called *after* the output (its later text
//! and tool-call arguments), in the question (prompt and steering), or in the earlier
//! conversation. The signals then move the probability: a superseded output is out of date
//! (×0.55); an error output not superseded stays likely needed; the run's last output gets a
//! little recency; an output the question asks for (`read theme.md in full`) is needed whole,
//! unless a later call rewrote the file or ran the command again.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::{Answer, Ask, Batch, Item, ItemKind, Missing, Plan, Target};

pub const NAME: &str = "local";

/// Weights of the kinds of term.
const STRONG: f32 = 1.0;
const NUMBER: f32 = 0.5;
const WORD: f32 = 0.25;
/// Plain words at least this long count.
const MIN_WORD: usize = 7;
const SUPERSEDED_FACTOR: f32 = 0.55;
/// A read that a later edit changed only in part. Tried at 0.85 (cited chunks stay, since the
/// rest is still the file) while exchanges holding ctxd's edits were not eligible: fewer
/// edited outputs left more old exchanges eligible for omission, and retention on the shared
/// sessions fell from 87% to 79%; so the same as a whole rewrite, except for an output the
/// question asks for.
const PARTLY_FACTOR: f32 = SUPERSEDED_FACTOR;

const STOP: &[&str] = &[
    "because",
    "between",
    "through",
    "without",
    "however",
    "already",
    "another",
    "example",
    "function",
    "returns",
    "return",
    "something",
    "anything",
    "everything",
    "nothing",
    "should",
    "would",
    "could",
    "different",
    "following",
    "available",
    "actually",
    "current",
    "default",
    "message",
    "messages",
    "version",
    "including",
    "instead",
    "whether",
    "results",
    "warning",
    "running",
    "changes",
    "changed",
    "command",
    "commands",
    "success",
    "successfully",
    "undefined",
    "contains",
    "current",
    "content",
    "expected",
    "program",
    "project",
    "problem",
    "therefore",
    "implementation",
    "information",
    "directory",
    "settings",
    "options",
];

/// Call `f` with each term of `text` and its weight. In a text that is JSON (it opens with
/// `{`, `[` or `"`), an escape (`\n`, `\t`, `\r`, `\\`) separates terms as the character
/// it stands for would: outputs that are JSON-encoded text (Codex's shell outputs) would
/// otherwise glue an `n` to the first word of every line. (Elsewhere a backslash is only a
/// separator, so a Windows path `src\tests` keeps its `tests`.)
pub fn terms(text: &str, mut f: impl FnMut(&str, f32)) {
    let bytes = text.as_bytes();
    let json = text.trim_start().starts_with(['{', '[', '"']);
    let mut i = 0;
    while i < bytes.len() {
        let is_tok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-');
        if json && bytes[i] == b'\\' && matches!(bytes.get(i + 1), Some(b'n' | b't' | b'r' | b'\\'))
        {
            i += 2;
            continue;
        }
        if !is_tok(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_tok(bytes[i]) {
            i += 1;
        }
        let tok = text[start..i].trim_matches(['.', '/', '-']);
        if tok.len() < 3 {
            continue;
        }
        classify(tok, &mut f);
    }
}

fn classify(tok: &str, f: &mut impl FnMut(&str, f32)) {
    let b = tok.as_bytes();
    let alpha = b.iter().any(u8::is_ascii_alphabetic);
    let digit = b.iter().any(u8::is_ascii_digit);
    if !alpha {
        if digit && b.iter().filter(|c| c.is_ascii_digit()).count() >= 3 {
            f(tok, NUMBER);
        }
        return;
    }
    if tok.contains('/') {
        f(tok, STRONG);
        if let Some(base) = tok.rsplit('/').next().filter(|s| s.len() >= 3) {
            classify(base, f);
        }
        return;
    }
    if tok.contains('.') {
        f(tok, STRONG);
        // `name.ext` also cites `name`; `a.b.c` its parts.
        for part in tok.split('.').filter(|p| p.len() >= 4) {
            classify(part, f);
        }
        return;
    }
    let inner_upper =
        b[1..].iter().any(u8::is_ascii_uppercase) && b.iter().any(u8::is_ascii_lowercase);
    if tok.len() >= 4 && (tok.contains('_') || digit || inner_upper) {
        f(tok, STRONG);
        return;
    }
    if tok.contains('-') {
        if tok.len() >= 6 {
            f(tok, STRONG);
        }
        return;
    }
    if tok.len() >= MIN_WORD {
        let lower = tok.to_ascii_lowercase();
        if !STOP.contains(&lower.as_str()) {
            f(tok, WORD);
        }
    }
}

/// What the work cites, and from which step on.
pub struct Index {
    /// Term → the last step (index into the run's steps) that cites it; `usize::MAX` for the
    /// question and the earlier conversation. Its keys are the terms of the current work
    /// (question, steps, the last exchanges before the run), which old exchanges are weighed
    /// against.
    cited: HashMap<String, usize>,
    /// Terms in more than [`COMMON_SHARE`] of the plan's exchanges: the project's
    /// everyday names, which say nothing about one exchange.
    common: HashSet<String>,
}

/// See [`Index::common`]; applies from [`COMMON_MIN_EXCHANGES`] exchanges on.
const COMMON_SHARE: f32 = 0.5;
const COMMON_MIN_EXCHANGES: usize = 4;

impl Index {
    pub fn new(plan: &Plan) -> Self {
        let mut cited: HashMap<String, usize> = HashMap::default();
        // A term is looked up before it is copied: most occurrences repeat a known term.
        let mut add = |text: &str, step: usize| {
            terms(text, |t, _| match cited.get_mut(t) {
                Some(e) => *e = (*e).max(step),
                None => {
                    cited.insert(t.to_owned(), step);
                }
            });
        };
        add(&plan.run.question, usize::MAX);
        add(&plan.run.earlier, usize::MAX);
        for (i, s) in plan.run.steps.iter().enumerate() {
            add(&s.text, i);
        }
        let strong = |text: &str, into: &mut HashSet<String>| {
            terms(text, |t, _| {
                if !into.contains(t) {
                    into.insert(t.to_owned());
                }
            });
        };
        let mut df: HashMap<String, usize> = HashMap::default();
        let mut n = 0usize;
        for item in plan.items.iter().filter(|i| i.kind == ItemKind::Exchange) {
            n += 1;
            let mut own = HashSet::default();
            strong(&item.text, &mut own);
            for t in own {
                *df.entry(t).or_default() += 1;
            }
        }
        let common = if n >= COMMON_MIN_EXCHANGES {
            df.into_iter()
                .filter(|(_, c)| *c as f32 > COMMON_SHARE * n as f32)
                .map(|(t, _)| t)
                .collect()
        } else {
            HashSet::default()
        };
        Index { cited, common }
    }

    /// The weight of an old exchange's distinct terms the current run also names (the
    /// project's common names aside).
    pub fn exchange_overlap(&self, text: &str) -> f32 {
        let mut seen: HashSet<&str> = HashSet::default();
        let mut s = 0.0;
        terms(text, |t, w| {
            if !self.common.contains(t) {
                if let Some((k, _)) = self.cited.get_key_value(t) {
                    if seen.insert(k.as_str()) {
                        s += w;
                    }
                }
            }
        });
        s
    }

    /// The weight of the distinct terms of `text` cited from step `from` on.
    pub fn score(&self, text: &str, from: usize) -> f32 {
        let mut seen: HashSet<&str> = HashSet::default();
        let mut s = 0.0;
        terms(text, |t, w| {
            if let Some((k, &step)) = self.cited.get_key_value(t) {
                if step >= from && seen.insert(k.as_str()) {
                    s += w;
                }
            }
        });
        s
    }
}

fn p_from(s: f32, high: f32, mid: f32, low: f32, none: f32) -> f32 {
    if s >= 1.0 {
        high
    } else if s >= 0.5 {
        mid
    } else if s > 0.0 {
        low
    } else {
        none
    }
}

fn adjust(p: f32, item: &Item) -> f32 {
    let mut p = p;
    if item.signals.partly && item.signals.requested {
        // The rest of a file the user asked for is still the file.
    } else if item.signals.partly {
        p *= PARTLY_FACTOR;
    } else if item.signals.superseded.is_some() {
        p *= SUPERSEDED_FACTOR;
    } else if item.signals.is_error {
        p = p.max(0.65);
    }
    p
}

/// Answers to a batch's questions.
pub fn answer_batch(plan: &Plan, index: &Index, batch: &Batch) -> Vec<Answer> {
    let mut chunk_scores: HashMap<(usize, usize), f32> = HashMap::default();
    let mut chunk_score = |item: usize, k: usize| -> f32 {
        *chunk_scores.entry((item, k)).or_insert_with(|| {
            let it = &plan.items[item];
            index.score(it.chunks[k].text(&it.text), it.later_from)
        })
    };
    let mut out = Vec::with_capacity(batch.questions.len());
    for &q in &batch.questions {
        let question = &plan.questions[q];
        let item = &plan.items[question.item];
        let answer = match (item.kind, question.target, &question.ask) {
            (ItemKind::Large, Target::Chunk(k), _) => {
                let s = chunk_score(question.item, k);
                Answer::Yes(adjust(p_from(s, 0.85, 0.65, 0.45, 0.15), item))
            }
            (ItemKind::Large, Target::Whole, _) => {
                let n = item.chunks.len().max(1);
                let cited = (0..item.chunks.len())
                    .filter(|&k| chunk_score(question.item, k) >= 0.5)
                    .count();
                let share = cited as f32 / n as f32;
                let p = if share >= 0.9 || item.signals.requested {
                    0.8
                } else {
                    0.1
                };
                Answer::Yes(adjust(p, item))
            }
            (ItemKind::Large, Target::Focus { first, count }, Ask::Choice(_)) => {
                let scores: Vec<f32> = (first..first + count)
                    .map(|k| chunk_score(question.item, k))
                    .collect();
                let best = scores
                    .iter()
                    .copied()
                    .enumerate()
                    .fold((0, 0.0f32), |a, (i, s)| if s > a.1 { (i, s) } else { a });
                let mut ps = vec![0.0f32; count + 2];
                if best.1 <= 0.0 || (item.signals.superseded.is_some() && !item.signals.partly) {
                    ps[count + 1] = 0.7; // none
                    ps[count] = 0.05;
                    if count > 0 {
                        ps[best.0] = 0.25;
                    }
                } else {
                    ps[best.0] = 0.6;
                    ps[count] = 0.1;
                    ps[count + 1] = 0.3;
                }
                Answer::Choice(ps)
            }
            (ItemKind::Small, _, _) => {
                let s = index.score(&item.text, item.later_from);
                let mut p = p_from(s, 0.8, 0.6, 0.4, 0.15);
                if item.signals.age_turns == 0 && plan.phase == super::Phase::RunEnd {
                    p += 0.1;
                }
                if item.signals.requested {
                    p = p.max(0.8);
                }
                Answer::Yes(adjust(p, item).min(1.0))
            }
            (ItemKind::Exchange, _, _) => {
                let s = index.exchange_overlap(&item.text);
                Answer::Yes(p_from(s, 0.8, 0.5, 0.3, 0.08))
            }
            _ => Answer::Yes(1.0),
        };
        out.push(answer);
    }
    out
}

/// Every question of `plan` answered (the whole plan at once, as the eval and tests use it).
pub fn answer_all(plan: &Plan) -> Vec<Result<Answer, Missing>> {
    let index = Index::new(plan);
    let mut out: Vec<Result<Answer, Missing>> = vec![Err(Missing::NoAnswer); plan.questions.len()];
    for batch in &plan.batches {
        for (q, a) in batch
            .questions
            .iter()
            .zip(answer_batch(plan, &index, batch))
        {
            out[*q] = Ok(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str) -> Vec<(String, f32)> {
        let mut v = Vec::new();
        terms(text, |t, w| v.push((t.to_owned(), w)));
        v
    }

    #[test]
    fn terms_are_paths_identifiers_numbers_and_long_words() {
        let t = all(
            "src/view.rs:120: fn project_checked(x) calls fooBar and 42 and 12345 the structure",
        );
        let names: Vec<&str> = t.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"src/view.rs"));
        assert!(names.contains(&"view.rs"));
        assert!(names.contains(&"project_checked"));
        assert!(names.contains(&"fooBar"));
        assert!(names.contains(&"12345"));
        assert!(names.contains(&"structure"));
        assert!(!names.contains(&"42"));
        assert!(!names.contains(&"the"));
    }

    #[test]
    fn json_escapes_separate_terms() {
        let t = all(
            r#"{"output":"import x\nexport const availableLocalModels = []\n\tfetchModels()"}"#,
        );
        let names: Vec<&str> = t.iter().map(|(n, _)| n.as_str()).collect();
        assert!(names.contains(&"availableLocalModels"), "{names:?}");
        assert!(names.contains(&"fetchModels"), "{names:?}");
        assert!(!names
            .iter()
            .any(|n| n.starts_with("nexport") || n.starts_with("tfetch")));
        // Not JSON: a backslash only separates.
        let t = all(r"see src\tests\fixtures_main.rs");
        assert!(t.iter().any(|(n, _)| n == "fixtures_main.rs"));
        let t = all(r#"{"path":"src\\tests_main\\a.rs"}"#);
        assert!(t.iter().any(|(n, _)| n == "tests_main"), "{t:?}");
    }
}
