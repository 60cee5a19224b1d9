//! What counts as the work using a tool output's line: the eval's own term scanner, kept apart
//! from the local classifier's so that tuning the classifier never changes the measurement.
//!
//! A *term* is a path (`src/a.rs`, `a.b`), an identifier with an underscore, a digit or inner
//! capitals (`render_badge`, `v2`, `parseArgs`) of 4+ characters, or a number of 3+ digits. A
//! line of a tool output is *used* when a term of it that no earlier content had reappears in
//! a later answer (its text or its tool calls' arguments), and the term identifies the line:
//! a word is held by at most 3 lines of that output, a number by exactly one (a short number
//! such as a count or a line number is in many outputs by chance; it names a line only where
//! nothing else in the output shares it).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use ctxd_core::model::ContentBlock;

/// A word in more lines than this of one output is not attributable to a line.
const MAX_TERM_LINES: usize = 3;
/// A number, in more lines than this.
const MAX_NUMBER_LINES: usize = 1;

/// The terms of `text`, in order (repeats included).
pub fn used_terms(text: &str, mut f: impl FnMut(&str)) {
    for raw in
        text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')))
    {
        let t = raw.trim_matches(['.', '/', '-']);
        if t.len() < 3 {
            continue;
        }
        if is_term(t) {
            f(t);
        }
    }
}

fn is_term(t: &str) -> bool {
    let b = t.as_bytes();
    let alpha = b.iter().any(u8::is_ascii_alphabetic);
    let digits = b.iter().filter(|c| c.is_ascii_digit()).count();
    if !alpha {
        digits >= 3
    } else if t.contains('/') || t.contains('.') {
        t.len() >= 4
    } else {
        t.len() >= 4
            && (t.contains('_')
                || digits > 0
                || (b[1..].iter().any(u8::is_ascii_uppercase)
                    && b.iter().any(u8::is_ascii_lowercase)))
    }
}

fn is_number(t: &str) -> bool {
    !t.bytes().any(|c| c.is_ascii_alphabetic())
}

/// The text of content blocks as the scanner reads them: texts, tool calls (name and
/// arguments) and tool results.
pub fn text_of(blocks: &[ContentBlock], out: &mut String) {
    for b in blocks {
        match b {
            ContentBlock::Text { text } => {
                out.push_str(text);
                out.push('\n');
            }
            ContentBlock::ToolCall {
                name, arguments, ..
            } => {
                out.push_str(name);
                out.push(' ');
                match arguments {
                    serde_json::Value::String(s) => out.push_str(s),
                    other => out.push_str(&other.to_string()),
                }
                out.push('\n');
            }
            ContentBlock::ToolResult { content, .. } => text_of(content, out),
            _ => {}
        }
    }
}

/// Tool outputs' novel terms, waiting for an answer to use them.
#[derive(Default)]
pub struct Scanner {
    /// Every term any content had so far.
    seen: HashSet<String>,
    /// A novel term → the (output, line) pairs it identifies.
    pending: HashMap<String, Vec<(usize, usize)>>,
}

impl Scanner {
    /// Output `o`'s lines: its novel terms that identify a line.
    pub fn output(&mut self, o: usize, lines: &[String]) {
        let mut by_term: HashMap<String, Vec<usize>> = HashMap::default();
        for (l, line) in lines.iter().enumerate() {
            if line.trim().len() < 4 {
                continue;
            }
            used_terms(line, |t| {
                if !self.seen.contains(t) {
                    let v = by_term.entry(t.to_owned()).or_default();
                    if v.last() != Some(&l) {
                        v.push(l);
                    }
                }
            });
        }
        for (t, ls) in by_term {
            let max = if is_number(&t) {
                MAX_NUMBER_LINES
            } else {
                MAX_TERM_LINES
            };
            if ls.len() <= max {
                self.pending
                    .entry(t)
                    .or_default()
                    .extend(ls.into_iter().map(|l| (o, l)));
            }
        }
    }

    /// Content now seen (its terms are no longer novel to later outputs).
    pub fn seen(&mut self, blocks: &[ContentBlock]) {
        let mut all = String::new();
        text_of(blocks, &mut all);
        used_terms(&all, |t| {
            if !self.seen.contains(t) {
                self.seen.insert(t.to_owned());
            }
        });
    }

    /// The (term, output, line) an answer's text uses, each line once, in order.
    pub fn used(&self, text: &str) -> Vec<(String, usize, usize)> {
        let mut used: Vec<(String, usize, usize)> = Vec::new();
        used_terms(text, |t| {
            if let Some(ls) = self.pending.get(t) {
                used.extend(ls.iter().map(|&(o, l)| (t.to_owned(), o, l)));
            }
        });
        used.sort_by_key(|u| (u.1, u.2));
        used.dedup_by_key(|u| (u.1, u.2));
        used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_identifies_a_line_only_where_it_is_alone() {
        let mut s = Scanner::default();
        let lines: Vec<String> = [
            "src/alpha.rs:120: fn alpha_one()",
            "src/bravo.rs:120: fn bravo_two()",
            "total 4521 bytes",
        ]
        .iter()
        .map(|l| (*l).to_owned())
        .collect();
        s.output(0, &lines);
        // 120 is in two lines: it names neither; 4521 names the third.
        assert!(s.used("see line 120").is_empty());
        assert_eq!(s.used("it was 4521")[0].2, 2);
        assert_eq!(s.used("call bravo_two")[0].2, 1);
    }

    #[test]
    fn terms_already_seen_are_not_novel() {
        let mut s = Scanner::default();
        s.seen(&[ContentBlock::text("look at render_badge")]);
        s.output(0, &["fn render_badge() {}".to_owned()]);
        assert!(s.used("render_badge").is_empty());
    }
}
