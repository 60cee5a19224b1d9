//! Server-sent events, split incrementally as the WHATWG spec reads them: lines end with `\n`,
//! `\r\n` or `\r` (even split across chunks), `:` lines are comments, `data` lines join with
//! `\n`, a blank line dispatches. Only complete lines are decoded, so a UTF-8 character split
//! across chunks stays whole.

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` when absent or empty.
    pub event: Option<String>,
    pub data: String,
}

/// Incremental SSE splitter: bytes in (any chunk boundaries), events out. Holds only the current
/// line and event; bounding them ([`SseParser::pending_len`]) is the caller's job.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The last chunk ended with `\r`: a `\n` starting the next one ends no second line.
    after_cr: bool,
    /// No line was read yet (a byte-order mark may open the stream).
    started: bool,
    event: Option<String>,
    /// Each `data` value followed by `\n`, as the spec builds it.
    data: String,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// The events that `chunk` completes.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', rest) {
            let (head, tail) = rest.split_at(pos);
            if self.line.is_empty() {
                self.line_done(head, &mut out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.line_done(&line, &mut out);
                line.clear();
                self.line = line;
            }
            rest = match tail {
                [b'\r', b'\n', more @ ..] => more,
                [b'\r'] => {
                    self.after_cr = true;
                    &[]
                }
                [_, more @ ..] => more,
                [] => &[],
            };
        }
        self.line.extend_from_slice(rest);
        out
    }

    /// The end of the stream: an unterminated last line and event count (servers that omit
    /// the final blank line are common).
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, &mut out);
        }
        self.line_done(b"", &mut out);
        *self = Self::default();
        out.pop()
    }

    /// Bytes held for the event being read (its unfinished line and data so far).
    pub fn pending_len(&self) -> usize {
        self.line.len() + self.data.len()
    }

    fn line_done(&mut self, mut line: &[u8], out: &mut Vec<SseEvent>) {
        if !self.started {
            self.started = true;
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                self.data.push_str(&String::from_utf8_lossy(value));
                self.data.push('\n');
            }
            b"event" => {
                self.event =
                    Some(String::from_utf8_lossy(value).into_owned()).filter(|e| !e.is_empty());
            }
            // `id` and `retry` matter to reconnecting browsers, not to one response.
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if self.data.is_empty() {
            return;
        }
        // A copy of exact size; the buffer stays for the next event, grown once.
        let data = self
            .data
            .strip_suffix('\n')
            .unwrap_or(&self.data)
            .to_owned();
        self.data.clear();
        out.push(SseEvent { event, data });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out: Vec<SseEvent> = chunks.iter().flat_map(|c| p.feed(c)).collect();
        out.extend(p.finish());
        out
    }

    #[test]
    fn line_endings_comments_and_multi_line_data() {
        let text = b"\xEF\xBB\xBF: keep-alive\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\n\
            event: b\rdata:  spaced\r\rdata\n\n\n\ndata: last";
        assert_eq!(
            all(&[text]),
            vec![
                ev(Some("a"), "one\ntwo"),
                ev(Some("b"), " spaced"),
                ev(None, ""),
                ev(None, "last"),
            ]
        );
    }

    #[test]
    fn blank_lines_without_data_dispatch_nothing_and_reset_the_name() {
        assert_eq!(all(&[b"event: ping\n\n\ndata: x\n\n"]), vec![ev(None, "x")]);
        assert_eq!(all(&[b"id: 7\nretry: 10\n\n"]), vec![]);
    }

    #[test]
    fn cr_at_the_end_of_a_chunk_then_lf_is_one_line_end() {
        // Read as two line ends, the event would split into "a" and "b".
        assert_eq!(
            all(&[b"data: a\r", b"\ndata: b\r\n\r\n"]),
            vec![ev(None, "a\nb")]
        );
        assert_eq!(all(&[b"data: a\r", b"", b"\n\r\n"]), vec![ev(None, "a")]);
    }

    #[test]
    fn same_events_at_every_split_and_byte_by_byte() {
        let text =
            "event: x\r\ndata: h\u{e9}llo \u{1F600}\r\n\r\n: c\rdata: {\"a\":1}\rdata: b\r\r\
            event: y\ndata: z\n\n"
                .as_bytes();
        let whole = all(&[text]);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[0].data, "h\u{e9}llo \u{1F600}");
        for i in 0..=text.len() {
            assert_eq!(all(&[&text[..i], &text[i..]]), whole, "split at {i}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(all(&bytes), whole);
    }

    #[test]
    fn pending_is_the_unfinished_event() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: abc\ndata: de").is_empty());
        assert_eq!(p.pending_len(), "abc\n".len() + "data: de".len());
        assert_eq!(p.feed(b"\n\n"), vec![ev(None, "abc\nde")]);
        assert_eq!(p.pending_len(), 0);
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(all(&[b"data: a\xFFb\n\n"]), vec![ev(None, "a\u{FFFD}b")]);
    }
}
