use std::fmt;

/// Why a file could not be imported at all. Each variant renders as one line for the CLI.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not `#[source]`: the message already says it, and error chains would repeat it.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("the file is empty")]
    Empty,
    #[error("the file is binary, not a session (a NUL byte or invalid UTF-8 near byte {offset})")]
    Binary { offset: usize },
    #[error("not a session file ctxd knows: {0}")]
    UnknownFormat(String),
    #[error("not a valid {format} file: {message}")]
    Malformed {
        format: &'static str,
        message: String,
    },
    #[error("no line could be imported as {format} ({skipped} skipped)")]
    NothingImported {
        format: &'static str,
        skipped: usize,
    },
}

/// Something skipped or guessed during an import; the rest of the file imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// 1-based line number in the file, when the warning is about one line.
    pub line: Option<usize>,
    pub message: String,
}

impl Warning {
    pub fn at_line(line: usize, message: impl Into<String>) -> Self {
        Self {
            line: Some(line),
            message: message.into(),
        }
    }

    pub fn general(message: impl Into<String>) -> Self {
        Self {
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}
