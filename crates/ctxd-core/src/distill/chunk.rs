//! Chunking an output into the pieces a classifier judges, and grouping chunks into segments.
//!
//! - **Grep-aware**: when most lines look like search hits (`path:12:text`, `path-12-context`,
//!   or `rg`'s heading mode: a path line followed by `12:text` lines), a chunk is one file's
//!   hits (split when longer than [`CHUNK_MAX_CHARS`]), so a chunk is kept or dropped per file.
//! - **Otherwise**: consecutive lines up to about [`CHUNK_TARGET_CHARS`], ending at a blank
//!   line or a line that starts a new block (no indentation) when one comes, never over
//!   [`CHUNK_MAX_CHARS`] or [`CHUNK_MAX_LINES`] (a single longer line is a chunk of its own).
//!
//! Chunks cover the text exactly, in order, on line boundaries.

use std::ops::Range;

pub const CHUNK_TARGET_CHARS: usize = 1_000;
pub const CHUNK_MAX_CHARS: usize = 2_000;
pub const CHUNK_MAX_LINES: usize = 60;
/// The share of non-empty lines that must look like search hits for grep mode.
const GREP_SHARE: f32 = 0.6;

/// Lines `first_line ..= first_line + lines - 1` (1-based) of the text, bytes `range`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub first_line: usize,
    pub lines: usize,
    /// Bytes of the text, including the newline that ends the last line (when there is one).
    pub range: Range<usize>,
    /// Grep mode: the file whose hits this chunk holds.
    pub file: Option<String>,
}

impl Chunk {
    pub fn text<'a>(&self, output: &'a str) -> &'a str {
        &output[self.range.clone()]
    }
    pub fn chars(&self) -> usize {
        self.range.len()
    }
}

/// The file a search-hit line names (`path:12:…`, `path:12-…`, `path-12-…` for a known path).
pub fn hit_file(line: &str) -> Option<&str> {
    let bytes = line.as_bytes();
    // The path ends at the first ':' followed by digits and ':' or '-'.
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b' ' || b == b'\t' {
            return None;
        }
        if b == b':' || b == b'-' {
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            if digits > 0 && matches!(bytes.get(i + 1 + digits), Some(b':' | b'-')) && i > 0 {
                let path = &line[..i];
                if path.contains('/') || path.contains('.') {
                    return Some(path);
                }
            }
            if b == b':' {
                return None;
            }
        }
        i += 1;
    }
    None
}

/// A line of `rg --heading` hits: `12:text` or `12-text`.
fn numbered(line: &str) -> bool {
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    digits > 0 && matches!(line.as_bytes().get(digits), Some(b':' | b'-'))
}

/// A line that could be a heading path: no spaces, a '/' or a '.', not a hit itself.
fn heading_path(line: &str) -> bool {
    !line.is_empty()
        && !line.contains(char::is_whitespace)
        && (line.contains('/') || line.contains('.'))
        && !numbered(line)
}

/// Lines with their byte ranges (each including its newline).
fn lines(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b'\n' {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < text.len() {
        out.push(start..text.len());
    }
    out
}

fn line_str<'a>(text: &'a str, r: &Range<usize>) -> &'a str {
    text[r.clone()].trim_end_matches(['\n', '\r'])
}

/// Split an output into chunks.
pub fn chunk_output(text: &str) -> Vec<Chunk> {
    let ranges = lines(text);
    if ranges.is_empty() {
        return Vec::new();
    }
    let files = grep_files(text, &ranges);
    match files {
        Some(files) => by_file(text, &ranges, &files),
        None => by_size(text, &ranges, 0, ranges.len(), 1, None),
    }
}

/// Per line, the file it belongs to, when the output is search hits.
fn grep_files(text: &str, ranges: &[Range<usize>]) -> Option<Vec<Option<String>>> {
    let mut files: Vec<Option<String>> = Vec::with_capacity(ranges.len());
    let mut hits = 0usize;
    let mut nonempty = 0usize;
    let mut current: Option<String> = None;
    for (i, r) in ranges.iter().enumerate() {
        let line = line_str(text, r);
        if line.trim().is_empty() {
            files.push(current.clone());
            continue;
        }
        nonempty += 1;
        if let Some(f) = hit_file(line) {
            hits += 1;
            if current.as_deref() != Some(f) {
                current = Some(f.to_owned());
            }
        } else if heading_path(line)
            && ranges
                .get(i + 1)
                .is_some_and(|n| numbered(line_str(text, n)))
        {
            hits += 1;
            current = Some(line.to_owned());
        } else if numbered(line) && current.is_some() {
            hits += 1;
        }
        files.push(current.clone());
    }
    (nonempty > 0 && hits as f32 >= GREP_SHARE * nonempty as f32).then_some(files)
}

fn by_file(text: &str, ranges: &[Range<usize>], files: &[Option<String>]) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=ranges.len() {
        if i == ranges.len() || files[i] != files[start] {
            out.extend(by_size(
                text,
                ranges,
                start,
                i,
                start + 1,
                files[start].clone(),
            ));
            start = i;
        }
    }
    out
}

/// Lines `from..to` in chunks by size; `first_line` is line `from`'s number.
fn by_size(
    text: &str,
    ranges: &[Range<usize>],
    from: usize,
    to: usize,
    first_line: usize,
    file: Option<String>,
) -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut start = from;
    let mut chars = 0usize;
    let grep = file.is_some();
    for i in from..to {
        let r = &ranges[i];
        let len = r.len();
        let count = i - start;
        let line = line_str(text, r);
        let boundary = line.trim().is_empty() || !line.starts_with([' ', '\t', '}', ')', ']']);
        let over = count > 0
            && (chars + len > CHUNK_MAX_CHARS
                || count >= CHUNK_MAX_LINES
                || (!grep && chars >= CHUNK_TARGET_CHARS && boundary));
        if over {
            out.push(make(ranges, start, i, first_line + (start - from), &file));
            start = i;
            chars = 0;
        }
        chars += len;
    }
    if start < to {
        out.push(make(ranges, start, to, first_line + (start - from), &file));
    }
    out
}

fn make(
    ranges: &[Range<usize>],
    from: usize,
    to: usize,
    first_line: usize,
    file: &Option<String>,
) -> Chunk {
    Chunk {
        first_line,
        lines: to - from,
        range: ranges[from].start..ranges[to - 1].end,
        file: file.clone(),
    }
}

/// Group chunks, in order, into segments of at most `max_chars` characters and `max_chunks`
/// chunks (a chunk longer than `max_chars` is a segment of its own).
pub fn segments(chunks: &[Chunk], max_chars: usize, max_chunks: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = 0;
    for (i, c) in chunks.iter().enumerate() {
        let n = i - start;
        if n > 0 && (chars + c.chars() > max_chars || n >= max_chunks) {
            out.push(start..i);
            start = i;
            chars = 0;
        }
        chars += c.chars();
    }
    if start < chunks.len() {
        out.push(start..chunks.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_text_in_order() {
        let text: String = (0..500)
            .map(|i| format!("line number {i} of the log\n"))
            .collect();
        let chunks = chunk_output(&text);
        assert!(chunks.len() > 5);
        let mut at = 0;
        let mut line = 1;
        for c in &chunks {
            assert_eq!(c.range.start, at);
            assert_eq!(c.first_line, line);
            assert!(c.chars() <= CHUNK_MAX_CHARS);
            at = c.range.end;
            line += c.lines;
        }
        assert_eq!(at, text.len());
    }

    #[test]
    fn grep_hits_are_chunked_per_file() {
        let mut text = String::new();
        for f in ["src/a.rs", "src/b.rs", "src/c.rs"] {
            for n in 1..=4 {
                text.push_str(&format!("{f}:{n}:    let x = call_{n}();\n"));
            }
        }
        let chunks = chunk_output(&text);
        let files: Vec<_> = chunks.iter().map(|c| c.file.clone().unwrap()).collect();
        assert_eq!(files, ["src/a.rs", "src/b.rs", "src/c.rs"]);
        assert_eq!(chunks[1].first_line, 5);
        assert_eq!(chunks[1].lines, 4);
    }

    #[test]
    fn rg_heading_mode_is_grep() {
        let text = "src/a.rs\n1:fn a()\n2:fn b()\n\nsrc/b.rs\n7:fn c()\n";
        let chunks = chunk_output(text);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1].file.as_deref(), Some("src/b.rs"));
    }

    #[test]
    fn segments_respect_both_limits() {
        let chunks: Vec<Chunk> = (0..100)
            .map(|i| Chunk {
                first_line: i + 1,
                lines: 1,
                range: i * 1000..(i + 1) * 1000,
                file: None,
            })
            .collect();
        let segs = segments(&chunks, 32_000, 40);
        assert_eq!(segs[0], 0..32);
        assert!(segs.iter().all(|s| s.len() <= 40));
        let segs = segments(&chunks[..50], 100_000, 40);
        assert_eq!(segs, vec![0..40, 40..50]);
    }
}
