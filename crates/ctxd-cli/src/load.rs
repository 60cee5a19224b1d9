//! Reading a session file and choosing its tokenizer.

use std::path::Path;

use ctxd_core::model::{EntryKind, Role, Session};
use ctxd_formats::Import;
use ctxd_tokens::{CachingCounter, Tokenizer};

/// Import a file; the error names the file.
pub fn import(path: &Path) -> anyhow::Result<Import> {
    if path.is_dir() {
        anyhow::bail!("{}: is a directory, not a session file", path.display());
    }
    ctxd_formats::import_path(path).map_err(|e| match e {
        // An I/O error already names the file.
        ctxd_formats::ImportError::Io { .. } => anyhow::Error::new(e),
        other => anyhow::Error::new(other).context(path.display().to_string()),
    })
}

/// The model a session ended on: the last assistant response's model, a later model change, or
/// the header's model.
pub fn last_model(session: &Session) -> Option<&str> {
    session
        .entries
        .iter()
        .rev()
        .filter(|e| !e.sidechain)
        .find_map(|e| match &e.kind {
            EntryKind::Message(m) if m.role == Role::Assistant => m.model.as_deref(),
            EntryKind::ModelChange { model, .. } => Some(model.as_str()),
            _ => None,
        })
        .or(session.meta.model.as_deref())
}

/// The counter for a session's model, memoising piece counts for the session's repeated words.
pub fn tokenizer(session: &Session) -> CachingCounter {
    CachingCounter::new(Tokenizer::for_model(last_model(session)))
}
