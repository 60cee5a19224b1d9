//! ctxd-formats: importers for the session files agents write and for raw API request bodies.
//!
//! The format is chosen by content, never by file name ([`detect`]). JSONL formats are read
//! line by line (a corrupt line becomes a [`Warning`] naming it, the rest imports); whole-document
//! formats (SWE-agent trajectories, Gemini CLI's JSON, single request bodies) are parsed once.
//!
//! ```no_run
//! let import = ctxd_formats::import_path(std::path::Path::new("session.jsonl")).unwrap();
//! for w in &import.warnings { eprintln!("{w}"); }
//! println!("{} entries", import.session.entries.len());
//! ```

mod api_request;
mod builder;
mod claude_code;
mod codex;
mod detect;
mod error;
mod gemini_cli;
mod jsonl;
mod mini_swe_agent;
mod pi;
mod swe_agent;
pub mod util;
pub mod wire;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

pub use codex::injected_user as codex_injected_user;
pub use ctxd_core::model::Session;
pub use detect::{detect, Format};
pub use error::{ImportError, Warning};

/// A session read from a file, with what was skipped on the way.
#[derive(Debug)]
pub struct Import {
    pub session: Session,
    pub format: Format,
    pub warnings: Vec<Warning>,
}

/// Import the session file at `path`.
pub fn import_path(path: &Path) -> Result<Import, ImportError> {
    let file = std::fs::File::open(path).map_err(|error| ImportError::Io {
        path: path.display().to_string(),
        error,
    })?;
    import_reader(BufReader::with_capacity(1 << 16, file))
}

/// Import a session from any reader: the format is detected from its first bytes.
pub fn import_reader<R: BufRead>(mut reader: R) -> Result<Import, ImportError> {
    let head = detect::peek_head(&mut reader)?;
    let detected = detect::detect_head(&head.bytes)?;
    let multi_line = head
        .bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .nth(1)
        .is_some();
    let gemini_document =
        detected == Some(Format::GeminiCli) && gemini_cli::is_one_document(&head.bytes);
    let input = std::io::Cursor::new(head.bytes).chain(reader);
    let mut warnings = Vec::new();
    let (format, session) = match detected {
        // Bare request bodies, one a line, import like a capture.
        Some(Format::ApiRequest(_)) if multi_line => {
            let importer = api_request::CaptureImporter::default();
            (
                Format::CapturedRequests,
                jsonl::run(input, importer, &mut warnings)?,
            )
        }
        Some(format @ Format::Pi) => (
            format,
            jsonl::run(input, pi::Importer::default(), &mut warnings)?,
        ),
        Some(format @ Format::ClaudeCode) => (
            format,
            jsonl::run(input, claude_code::Importer::default(), &mut warnings)?,
        ),
        Some(format @ Format::Codex) => (
            format,
            jsonl::run(input, codex::Importer::default(), &mut warnings)?,
        ),
        // Gemini CLI's JSONL; its JSON layout is one document (below).
        Some(format @ Format::GeminiCli) if !gemini_document => (
            format,
            jsonl::run(input, gemini_cli::Importer::default(), &mut warnings)?,
        ),
        Some(format @ Format::CapturedRequests) => {
            let importer = api_request::CaptureImporter::default();
            (format, jsonl::run(input, importer, &mut warnings)?)
        }
        Some(format) => {
            let doc = read_document(input, format.name())?;
            (format, import_document(format, &doc, &mut warnings)?)
        }
        None => {
            let doc = read_document(input, "JSON")?;
            let format = detect::detect_document(&doc)?;
            (format, import_document(format, &doc, &mut warnings)?)
        }
    };
    Ok(Import {
        session,
        format,
        warnings,
    })
}

fn read_document<R: Read>(
    mut input: R,
    what: &'static str,
) -> Result<serde_json::Value, ImportError> {
    let mut bytes = Vec::new();
    input
        .read_to_end(&mut bytes)
        .map_err(|error| ImportError::Io {
            path: String::from("<input>"),
            error,
        })?;
    serde_json::from_slice(&bytes).map_err(|e| ImportError::Malformed {
        format: what,
        message: e.to_string(),
    })
}

fn import_document(
    format: Format,
    doc: &serde_json::Value,
    warnings: &mut Vec<Warning>,
) -> Result<Session, ImportError> {
    match format {
        Format::SweAgent => swe_agent::import(doc, warnings),
        Format::MiniSweAgent => mini_swe_agent::import(doc, warnings),
        Format::GeminiCli => gemini_cli::import(doc, warnings),
        Format::ApiRequest(api) => api_request::import_body(api, doc, warnings),
        other => Err(ImportError::Malformed {
            format: other.name(),
            message: "expected JSON lines, found one document".into(),
        }),
    }
}
