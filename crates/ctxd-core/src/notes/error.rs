//! Why a notes operation was refused. Every message is one line, written for the model (or the
//! person at the CLI) to correct the call; nothing is written when one is returned.

use std::fmt;

use super::MAX_NOTE_BYTES;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoteError {
    /// The address breaks the grammar (`@` home, traversal, empty segment, control character...).
    Address { address: String, reason: String },
    /// `@self`, `@model`, `@project` or a bare path, but the caller's agent, model, project or
    /// session is unknown here.
    UnknownCaller {
        home: &'static str,
        what: &'static str,
    },
    /// The note would exceed [`MAX_NOTE_BYTES`].
    TooLarge { address: String, bytes: usize },
    /// No note at this address.
    NotFound { address: String },
    /// A rename's target already exists.
    Exists { address: String },
    /// A line range outside the note, or inverted.
    Range { address: String, reason: String },
    /// A search query or other argument that cannot be used.
    Argument(String),
}

impl NoteError {
    pub(crate) fn address(address: &str, reason: impl Into<String>) -> Self {
        NoteError::Address {
            address: address.to_owned(),
            reason: reason.into(),
        }
    }
}

/// `1000000` → `1,000,000`.
pub(crate) fn thousands(n: usize) -> String {
    crate::text::thousands(n as u64)
}

impl fmt::Display for NoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoteError::Address { address, reason } => {
                write!(f, "invalid note address {address:?}: {reason}")
            }
            NoteError::UnknownCaller { home, what } => write!(
                f,
                "{home} is unavailable: the {what} is unknown here (name it explicitly instead)"
            ),
            NoteError::TooLarge { address, bytes } => write!(
                f,
                "note {address} would be {} UTF-8 bytes; the limit is {} per note: put the rest in another note",
                thousands(*bytes),
                thousands(MAX_NOTE_BYTES)
            ),
            NoteError::NotFound { address } => write!(f, "no note {address}"),
            NoteError::Exists { address } => {
                write!(f, "note {address} already exists: delete it first or pick another name")
            }
            NoteError::Range { address, reason } => write!(f, "note {address}: {reason}"),
            NoteError::Argument(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for NoteError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(12_345_678), "12,345,678");
    }
}
