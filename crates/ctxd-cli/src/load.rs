//! Reading a session file and choosing its tokenizer.

use std::path::Path;

use ctxd_core::model::Session;
use ctxd_formats::Import;
use ctxd_tokens::CachingCounter;

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

/// The counter for a session's model, memoising piece counts for the session's repeated words
/// (the one choice the dashboard shares: [`ctxd_tokens::for_session`]).
pub fn tokenizer(session: &Session) -> CachingCounter {
    ctxd_tokens::for_session(session)
}
