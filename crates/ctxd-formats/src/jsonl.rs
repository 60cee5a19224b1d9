//! Line-by-line driver shared by the JSONL importers.

use std::io::BufRead;

use ctxd_core::model::Session;

use crate::error::{ImportError, Warning};

/// A JSONL format's importer: fed one line at a time, then asked for the session.
pub(crate) trait LineImporter {
    const FORMAT: &'static str;
    /// Take one non-empty line. An `Err` skips the line with a warning naming it; the importer
    /// must leave its state as if the line had not been there.
    fn line(&mut self, line_no: usize, line: &str) -> Result<(), String>;
    /// Non-fatal notes collected while reading (unknown entry types and the like).
    fn finish(self, warnings: &mut Vec<Warning>) -> Result<Session, ImportError>;
}

/// Feed every line of `reader` to `importer`. Lines are read as bytes so that invalid UTF-8 on
/// one line is reported for that line instead of failing the file.
pub(crate) fn run<R: BufRead, I: LineImporter>(
    mut reader: R,
    mut importer: I,
    warnings: &mut Vec<Warning>,
) -> Result<Session, ImportError> {
    let mut buf = Vec::with_capacity(1 << 16);
    let mut line_no = 0usize;
    let mut accepted = 0usize;
    let mut skipped = 0usize;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|error| ImportError::Io {
                path: String::from("<input>"),
                error,
            })?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let bytes = trim_ascii(&buf);
        if bytes.is_empty() {
            continue;
        }
        let result = match std::str::from_utf8(bytes) {
            Ok(line) => importer.line(line_no, line),
            Err(e) => Err(format!("invalid UTF-8 at byte {}", e.valid_up_to())),
        };
        match result {
            Ok(()) => accepted += 1,
            Err(message) => {
                skipped += 1;
                warnings.push(Warning::at_line(line_no, format!("skipped: {message}")));
            }
        }
    }
    if accepted == 0 {
        return Err(ImportError::NothingImported {
            format: I::FORMAT,
            skipped,
        });
    }
    importer.finish(warnings)
}

fn trim_ascii(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |p| p + 1);
    &bytes[start..end]
}
