//! Errors starting a server.

use std::path::PathBuf;

/// Why a [`crate::MockServer`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind { port: u16, source: std::io::Error },
    #[error("cannot start the server's runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot open the request log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
}
