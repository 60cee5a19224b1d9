use ctxd_store::StoreError;

/// Why an engine call failed. Tool errors are returned to the model as error results; these are
/// failures of the call itself.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Bad arguments or a refused operation: the message is for the caller (or the model).
    #[error("{0}")]
    Invalid(String),
    #[error("no such tool: {0}")]
    UnknownTool(String),
    #[error("{0} needs a session")]
    NoSession(&'static str),
}

impl EngineError {
    pub fn invalid(message: impl Into<String>) -> Self {
        EngineError::Invalid(message.into())
    }
}
