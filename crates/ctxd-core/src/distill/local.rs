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

use std::sync::Arc;

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
pub fn terms(text: &str, f: impl FnMut(&str, f32)) {
    terms_as(text, reads_as_json(text), f);
}

/// [`terms`], reading `text` as JSON or not as `json` says.
fn terms_as(text: &str, json: bool, mut f: impl FnMut(&str, f32)) {
    let bytes = text.as_bytes();
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
    if tok.len() >= MIN_WORD && !is_stop_word(tok) {
        f(tok, WORD);
    }
}

/// The longest word in [`STOP`].
const STOP_MAX: usize = 14;

/// `tok` is one of [`STOP`], in any case: lowercased on the stack and looked up in a set. This
/// runs for every long word of every text a pass reads (a scan of the list with an allocated
/// lowercase copy was a tenth of a pass).
fn is_stop_word(tok: &str) -> bool {
    static SET: std::sync::LazyLock<HashSet<&'static str>> =
        std::sync::LazyLock::new(|| STOP.iter().copied().collect());
    if tok.len() > STOP_MAX {
        return false;
    }
    let mut buf = [0u8; STOP_MAX];
    let lower = &mut buf[..tok.len()];
    lower.copy_from_slice(tok.as_bytes());
    lower.make_ascii_lowercase();
    std::str::from_utf8(lower).is_ok_and(|w| SET.contains(w))
}

/// A text's distinct terms, each as (hash of the term, weight), in order of first appearance.
pub type TermList = Arc<[(u64, f32)]>;

/// Term lists of the texts a pass has read, by the text's hash: the passes of a long run read
/// the same outputs, steps and steering messages again at every turn end (a pass of a
/// 230-step run over 1 MB re-read all of it, ~80 instructions a byte), so a classifier that
/// keeps one across passes reads each text once. Bounded by two generations: when the current
/// one holds [`MEMO_BYTES`] / 2, it becomes the old one and the old one is dropped; a list
/// found in the old generation moves to the current one. What every pass reads stays; what
/// no pass read for a generation goes (a whole-memo reset made every session's next pass cold
/// at once).
#[derive(Debug)]
pub struct TermMemo {
    current: HashMap<(u64, usize, bool), TermList>,
    old: HashMap<(u64, usize, bool), TermList>,
    /// The current generation's size, by [`list_bytes`].
    bytes: usize,
    /// The memory both generations hold at the most, about.
    cap: usize,
}

impl Default for TermMemo {
    fn default() -> Self {
        Self::with_cap(MEMO_BYTES)
    }
}

/// The memory a [`TermMemo`] holds at the most, about.
const MEMO_BYTES: usize = 64 << 20;

/// A remembered list's memory: its key, its `Arc`'s header and its terms.
fn list_bytes(list: &[(u64, f32)]) -> usize {
    64 + std::mem::size_of_val(list)
}

fn hash_of(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(bytes)
}

/// Does [`terms`] read `text` as JSON (its escapes separate terms)?
fn reads_as_json(text: &str) -> bool {
    text.trim_start().starts_with(['{', '[', '"'])
}

impl TermMemo {
    /// A memo of about `cap` bytes at the most.
    pub fn with_cap(cap: usize) -> Self {
        TermMemo {
            current: HashMap::default(),
            old: HashMap::default(),
            bytes: 0,
            cap,
        }
    }

    /// The distinct terms of `text` ([`terms`] with its JSON reading given by `json`).
    pub fn terms(&mut self, text: &str, json: bool) -> TermList {
        let key = (hash_of(text.as_bytes()), text.len(), json);
        if let Some(list) = self.current.get(&key) {
            return list.clone();
        }
        let list = match self.old.remove(&key) {
            Some(list) => list,
            None => {
                let mut seen: HashSet<u64> = HashSet::default();
                let mut list = Vec::new();
                terms_as(text, json, |t, w| {
                    let h = hash_of(t.as_bytes());
                    if seen.insert(h) {
                        list.push((h, w));
                    }
                });
                list.into()
            }
        };
        if self.bytes >= self.cap / 2 {
            self.old = std::mem::take(&mut self.current);
            self.bytes = 0;
        }
        self.bytes += list_bytes(&list);
        self.current.insert(key, list.clone());
        list
    }

    /// [`TermMemo::terms`] of a text read line by line (a question or conversation built anew
    /// at every pass from the same messages): each line is remembered, so only new lines are
    /// read. The same terms as the whole text (no term spans a line break).
    fn each_line(&mut self, text: &str, mut f: impl FnMut(&[(u64, f32)])) {
        let json = reads_as_json(text);
        for line in text.split('\n').filter(|l| l.len() >= 3) {
            f(&self.terms(line, json));
        }
    }
}

/// What the work cites, and from which step on.
pub struct Index {
    /// Term (hash) → the last step (index into the run's steps) that cites it; `usize::MAX`
    /// for the question and the earlier conversation. Its keys are the terms of the current
    /// work (question, steps, the last exchanges before the run), which old exchanges are
    /// weighed against.
    cited: HashMap<u64, usize>,
    /// Terms in more than [`COMMON_SHARE`] of the plan's exchanges: the project's
    /// everyday names, which say nothing about one exchange.
    common: HashSet<u64>,
    /// Each item's terms: one list per chunk of a large output, else one of its text.
    items: Vec<Vec<TermList>>,
}

/// See [`Index::common`]; applies from [`COMMON_MIN_EXCHANGES`] exchanges on.
const COMMON_SHARE: f32 = 0.5;
const COMMON_MIN_EXCHANGES: usize = 4;

impl Index {
    /// The index of `plan`, reading every text afresh.
    pub fn new(plan: &Plan) -> Self {
        Self::with_memo(plan, &mut TermMemo::default())
    }

    /// The index of `plan`, reading only the texts `memo` has not seen.
    pub fn with_memo(plan: &Plan, memo: &mut TermMemo) -> Self {
        let mut cited: HashMap<u64, usize> = HashMap::default();
        let mut add = |list: &[(u64, f32)], step: usize| {
            for &(t, _) in list {
                let e = cited.entry(t).or_insert(step);
                *e = (*e).max(step);
            }
        };
        memo.each_line(&plan.run.question, |l| add(l, usize::MAX));
        memo.each_line(&plan.run.earlier, |l| add(l, usize::MAX));
        for (i, s) in plan.run.steps.iter().enumerate() {
            let json = reads_as_json(&s.text);
            add(&memo.terms(&s.text, json), i);
        }
        let items: Vec<Vec<TermList>> = plan
            .items
            .iter()
            .map(|item| {
                let json = reads_as_json(&item.text);
                if item.kind == ItemKind::Large {
                    item.chunks
                        .iter()
                        .map(|c| memo.terms(c.text(&item.text), json))
                        .collect()
                } else {
                    vec![memo.terms(&item.text, json)]
                }
            })
            .collect();
        let mut df: HashMap<u64, usize> = HashMap::default();
        let mut n = 0usize;
        for (item, lists) in plan.items.iter().zip(&items) {
            if item.kind != ItemKind::Exchange {
                continue;
            }
            n += 1;
            for &(t, _) in lists[0].iter() {
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
        Index {
            cited,
            common,
            items,
        }
    }

    /// The terms of item `item` of the plan: its chunk `chunk`, or (`None`) its whole text.
    fn terms_of(&self, item: usize, chunk: Option<usize>) -> &[(u64, f32)] {
        self.items
            .get(item)
            .and_then(|lists| lists.get(chunk.unwrap_or(0)))
            .map_or(&[], |l| l)
    }

    /// The weight of an old exchange's distinct terms the current run also names (the
    /// project's common names aside).
    fn exchange_overlap(&self, item: usize) -> f32 {
        self.terms_of(item, None)
            .iter()
            .filter(|(t, _)| !self.common.contains(t) && self.cited.contains_key(t))
            .map(|(_, w)| w)
            .sum()
    }

    /// The citation weight the rules read for `question`: an old exchange's terms the current
    /// work names, a chunk's or small output's terms the later work cites (0 for a large
    /// output's `keep whole` and focus questions, which are read from their chunks). A model
    /// classifier that builds on these rules (ctxd-engine's `minilm`) tells a verbatim
    /// citation (a strong term weighs 1) from a weak one by it.
    pub fn cited(&self, plan: &Plan, question: &super::Question) -> f32 {
        let Some(item) = plan.items.get(question.item) else {
            return 0.0;
        };
        match (item.kind, question.target) {
            (ItemKind::Exchange, _) => self.exchange_overlap(question.item),
            (ItemKind::Large, Target::Chunk(k)) => {
                self.score(question.item, Some(k), item.later_from)
            }
            (ItemKind::Small, _) => self.score(question.item, None, item.later_from),
            _ => 0.0,
        }
    }

    /// The weight of the distinct terms of item `item` (its chunk `chunk`) cited from step
    /// `from` on.
    fn score(&self, item: usize, chunk: Option<usize>, from: usize) -> f32 {
        self.terms_of(item, chunk)
            .iter()
            .filter(|(t, _)| self.cited.get(t).is_some_and(|&step| step >= from))
            .map(|(_, w)| w)
            .sum()
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
        *chunk_scores
            .entry((item, k))
            .or_insert_with(|| index.score(item, Some(k), plan.items[item].later_from))
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
                let s = index.score(question.item, None, item.later_from);
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
                let s = index.exchange_overlap(question.item);
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
    fn the_memo_gives_each_texts_distinct_terms_and_reads_a_text_once() {
        let text =
            "src/view.rs:12: fn project_checked(x)\nproject_checked again in src/view.rs 12345";
        let mut memo = TermMemo::default();
        let list = memo.terms(text, false);
        let mut distinct: Vec<(u64, f32)> = Vec::new();
        for (t, w) in all(text) {
            let h = hash_of(t.as_bytes());
            if !distinct.iter().any(|d| d.0 == h) {
                distinct.push((h, w));
            }
        }
        assert_eq!(&list[..], &distinct[..]);
        // The same text again is the same list, not a new reading.
        assert!(Arc::ptr_eq(&list, &memo.terms(text, false)));
        assert_eq!(memo.bytes, list_bytes(&list));
        // Line by line: the same terms as the whole text.
        let mut by_line: Vec<u64> = Vec::new();
        memo.each_line(text, |l| by_line.extend(l.iter().map(|t| t.0)));
        by_line.sort_unstable();
        by_line.dedup();
        let mut whole: Vec<u64> = list.iter().map(|t| t.0).collect();
        whole.sort_unstable();
        assert_eq!(by_line, whole);
    }

    #[test]
    fn the_memo_keeps_what_passes_read_and_drops_what_they_stopped_reading() {
        let cap = 64 * 1024;
        let mut memo = TermMemo::with_cap(cap);
        let kept_text = "kept_term in every pass";
        let kept = memo.terms(kept_text, false);
        let first_text = "other_text_0 with number_0";
        let first = (hash_of(first_text.as_bytes()), first_text.len(), false);
        let mut n = 0;
        // Other texts until the first of them is forgotten, `kept` read again now and then.
        while memo.current.contains_key(&first) || memo.old.contains_key(&first) || n == 0 {
            memo.terms(&format!("other_text_{n} with number_{n}"), false);
            if n % 100 == 0 {
                assert!(Arc::ptr_eq(&kept, &memo.terms(kept_text, false)));
            }
            n += 1;
            assert!(n < 100_000, "never forgotten");
        }
        assert!(n > 100, "forgotten after {n} texts");
        // Bounded, and what the passes kept reading is still the same list.
        let held = |m: &HashMap<(u64, usize, bool), TermList>| -> usize {
            m.values().map(|l| list_bytes(l)).sum()
        };
        assert!(held(&memo.current) + held(&memo.old) <= cap + 256);
        assert!(Arc::ptr_eq(&kept, &memo.terms(kept_text, false)));
    }

    #[test]
    fn stop_words_match_in_any_case_and_no_longer_word_does() {
        assert!(STOP.iter().all(|w| w.len() <= STOP_MAX && is_stop_word(w)));
        assert!(is_stop_word("Because") && is_stop_word("IMPLEMENTATION"));
        assert!(!is_stop_word("becausee") && !is_stop_word("structure"));
        let names: Vec<String> = all("Because the Structure")
            .into_iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(names, ["Structure"]);
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
