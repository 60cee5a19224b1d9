//! Pure text operations on a note's body: size limit, line counting, append, line ranges,
//! literal search.
//!
//! Lines are counted as an editor does: `"a\nb"` and `"a\nb\n"` both have 2 lines, `""` has 0.

use super::error::thousands;
use super::{NoteError, MAX_NOTE_BYTES};

/// The most characters of a matching line a search hit shows.
pub const HIT_LINE_CHARS: usize = 240;

/// Refuse a body over [`MAX_NOTE_BYTES`] (checked before anything is written).
pub fn check_size(address: &str, body: &str) -> Result<(), NoteError> {
    if body.len() > MAX_NOTE_BYTES {
        return Err(NoteError::TooLarge {
            address: address.to_owned(),
            bytes: body.len(),
        });
    }
    Ok(())
}

/// How many lines `body` has (editor style: a final newline does not start a line).
pub fn line_count(body: &str) -> usize {
    if body.is_empty() {
        return 0;
    }
    let newlines = memchr_count(body);
    if body.ends_with('\n') {
        newlines
    } else {
        newlines + 1
    }
}

fn memchr_count(s: &str) -> usize {
    s.bytes().filter(|&b| b == b'\n').count()
}

/// What an append adds to `existing`: `text`, preceded by a newline when `existing` is not empty
/// and does not end with one (so appended lines never glue onto the last line).
pub fn append_delta(existing: &str, text: &str) -> String {
    if !existing.is_empty() && !existing.ends_with('\n') && !text.is_empty() {
        format!("\n{text}")
    } else {
        text.to_owned()
    }
}

/// The body after appending `text` to `existing`, and the bytes actually added; refused when the
/// result would exceed the limit.
pub fn append(address: &str, existing: &str, text: &str) -> Result<(String, String), NoteError> {
    let delta = append_delta(existing, text);
    let total = existing.len() + delta.len();
    if total > MAX_NOTE_BYTES {
        return Err(NoteError::TooLarge {
            address: address.to_owned(),
            bytes: total,
        });
    }
    let mut body = String::with_capacity(total);
    body.push_str(existing);
    body.push_str(&delta);
    Ok((body, delta))
}

/// A slice of a note's lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineSlice<'a> {
    /// First line shown (1-based); 0 when the note is empty.
    pub start: usize,
    /// Last line shown (1-based, inclusive); 0 when the note is empty.
    pub stop: usize,
    /// Lines in the whole note.
    pub total: usize,
    /// The text of lines `start..=stop`, exactly as stored (with their newlines).
    pub text: &'a str,
}

/// Lines `start..=stop` of `body` (1-based, inclusive; `None` = first / last line; a negative
/// number counts from the end, `-1` being the last line).
///
/// Out of range: line `0` is an error (lines start at 1); a start past the last line is an
/// error naming the line count; a stop past the end is clamped to the last line; a negative
/// number reaching before the first line is clamped to line 1; a start after the stop is an
/// error. An empty note reads as empty whatever the range.
pub fn read_lines<'a>(
    address: &str,
    body: &'a str,
    start: Option<i64>,
    stop: Option<i64>,
) -> Result<LineSlice<'a>, NoteError> {
    let range_err = |reason: String| NoteError::Range {
        address: address.to_owned(),
        reason,
    };
    for (name, v) in [("start_line", start), ("stop_line", stop)] {
        if v == Some(0) {
            return Err(range_err(format!(
                "{name} 0 is not a line: lines start at 1 (negative numbers count from the end)"
            )));
        }
    }
    let total = line_count(body);
    if total == 0 {
        return Ok(LineSlice {
            start: 0,
            stop: 0,
            total: 0,
            text: "",
        });
    }
    let to_line = |v: i64| -> i64 {
        if v < 0 {
            (total as i64 + 1 + v).max(1)
        } else {
            v
        }
    };
    let first = to_line(start.unwrap_or(1));
    let last = to_line(stop.unwrap_or(-1)).min(total as i64);
    if first > total as i64 {
        return Err(range_err(format!(
            "start_line {} is past the end: the note has {total} line{}",
            start.unwrap_or(1),
            if total == 1 { "" } else { "s" }
        )));
    }
    if first > last {
        return Err(range_err(format!(
            "start_line {} (line {first}) comes after stop_line {} (line {last})",
            start.unwrap_or(1),
            stop.unwrap_or(-1)
        )));
    }
    let (first, last) = (first as usize, last as usize);
    let begin = line_offset(body, first);
    let end = line_offset(body, last + 1);
    Ok(LineSlice {
        start: first,
        stop: last,
        total,
        text: body.get(begin..end).unwrap_or(""),
    })
}

/// The byte offset where 1-based line `n` starts (the body's length past the last line).
fn line_offset(body: &str, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    body.match_indices('\n')
        .nth(n - 2)
        .map_or(body.len(), |(i, _)| i + 1)
}

/// One matching line.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LineHit {
    /// 1-based.
    pub line: usize,
    /// The line, cut to [`HIT_LINE_CHARS`] characters (with `…` when cut).
    pub text: String,
}

/// Lines of `body` containing `query` (literal, case-sensitive), at most `max` of them.
pub fn search_lines(body: &str, query: &str, max: usize) -> Vec<LineHit> {
    if query.is_empty() || !body.contains(query) {
        return Vec::new();
    }
    body.split('\n')
        .enumerate()
        .filter(|(_, line)| line.contains(query))
        .take(max)
        .map(|(i, line)| LineHit {
            line: i + 1,
            text: clip_line(line),
        })
        .collect()
}

/// A search query must be non-empty and may not span lines.
pub fn check_query(query: &str) -> Result<(), NoteError> {
    if query.is_empty() {
        return Err(NoteError::Argument("query is empty".to_owned()));
    }
    if query.contains('\n') {
        return Err(NoteError::Argument(
            "query spans lines: notes search matches within one line".to_owned(),
        ));
    }
    Ok(())
}

fn clip_line(line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.char_indices().nth(HIT_LINE_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// `N bytes` with thousands separators (for results).
pub fn bytes_label(n: usize) -> String {
    format!("{} byte{}", thousands(n), if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_counts() {
        assert_eq!(line_count(""), 0);
        assert_eq!(line_count("a"), 1);
        assert_eq!(line_count("a\n"), 1);
        assert_eq!(line_count("a\nb"), 2);
        assert_eq!(line_count("a\nb\n"), 2);
        assert_eq!(line_count("\n"), 1);
        assert_eq!(line_count("\n\n"), 2);
    }

    #[test]
    fn size_limit_is_exact() {
        let at = "a".repeat(MAX_NOTE_BYTES);
        assert!(check_size("x", &at).is_ok());
        let over = "a".repeat(MAX_NOTE_BYTES + 1);
        let e = check_size("x", &over).unwrap_err().to_string();
        assert!(e.contains("1,000,001") && e.contains("1,000,000"), "{e}");
        // Bytes, not characters: 333,334 three-byte characters are over.
        assert!(check_size("x", &"€".repeat(333_334)).is_err());
        assert!(check_size("x", &"€".repeat(333_333)).is_ok());
    }

    #[test]
    fn append_joins_on_a_line_boundary() {
        assert_eq!(append("x", "", "a").unwrap().0, "a");
        assert_eq!(append("x", "a\n", "b").unwrap().0, "a\nb");
        assert_eq!(
            append("x", "a", "b").unwrap(),
            ("a\nb".into(), "\nb".into())
        );
        assert_eq!(append("x", "a", "").unwrap().0, "a");
        let near = "a".repeat(MAX_NOTE_BYTES - 1);
        // One byte fits only without the joining newline.
        assert!(append("x", &format!("{near}\n")[1..], "b").is_ok());
        assert!(append("x", &near, "b").is_err());
    }

    #[test]
    fn read_ranges() {
        let body = "one\ntwo\nthree\nfour\n";
        let r = |s, e| read_lines("n", body, s, e).map(|x| (x.start, x.stop, x.text.to_owned()));
        assert_eq!(r(None, None).unwrap(), (1, 4, body.to_owned()));
        assert_eq!(r(Some(2), Some(3)).unwrap(), (2, 3, "two\nthree\n".into()));
        assert_eq!(r(Some(-2), None).unwrap(), (3, 4, "three\nfour\n".into()));
        assert_eq!(r(Some(-1), Some(-1)).unwrap(), (4, 4, "four\n".into()));
        assert_eq!(r(Some(1), Some(-3)).unwrap(), (1, 2, "one\ntwo\n".into()));
        assert_eq!(
            r(Some(3), Some(99)).unwrap(),
            (3, 4, "three\nfour\n".into())
        );
        assert_eq!(r(Some(-99), Some(1)).unwrap(), (1, 1, "one\n".into()));
        assert!(r(Some(0), None)
            .unwrap_err()
            .to_string()
            .contains("lines start at 1"));
        assert!(r(None, Some(0)).is_err());
        let past = r(Some(5), None).unwrap_err().to_string();
        assert!(
            past.contains("past the end") && past.contains("4 lines"),
            "{past}"
        );
        assert!(r(Some(3), Some(2))
            .unwrap_err()
            .to_string()
            .contains("comes after"));
        // No final newline: the last line is still whole.
        let x = read_lines("n", "a\nb", Some(2), None).unwrap();
        assert_eq!((x.text, x.total), ("b", 2));
        // Empty note: empty whatever the range.
        let e = read_lines("n", "", Some(3), Some(9)).unwrap();
        assert_eq!((e.total, e.text), (0, ""));
    }

    #[test]
    fn search_is_literal_and_numbered() {
        let body = "alpha\nBeta beta\n(a+b)*\nbeta";
        let hits = search_lines(body, "beta", 10);
        assert_eq!(hits.iter().map(|h| h.line).collect::<Vec<_>>(), [2, 4]);
        assert_eq!(hits[0].text, "Beta beta");
        assert_eq!(search_lines(body, "(a+b)*", 10)[0].line, 3);
        assert!(search_lines(body, "BETA", 10).is_empty());
        assert_eq!(search_lines(body, "beta", 1).len(), 1);
        let long = format!("x{}", "y".repeat(1000));
        let clipped = &search_lines(&long, "x", 1)[0].text;
        assert_eq!(clipped.chars().count(), HIT_LINE_CHARS + 1);
        assert!(clipped.ends_with('…'));
        assert!(check_query("").is_err());
        assert!(check_query("a\nb").is_err());
    }
}
