//! ctxd-mock: a mock upstream model server for ctxd's tests and benchmarks.
//!
//! The gateway forwards to a provider; tests point it at this server instead. It speaks the
//! three wire APIs agents use (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses),
//! streaming (each API's real SSE event sequence) and not, and records every request exactly as
//! received (raw body bytes, no decoding) so a test can assert what reached "the provider".
//!
//! - [`MockServer`] binds 127.0.0.1 and serves on the current tokio runtime
//!   ([`MockServer::start`]) or on a thread of its own ([`MockServer::start_blocking`]).
//! - [`Config`] sets the final text, reasoning items, recording, a default [`Shape`].
//! - [`Reply`] / [`Script`]: queued replies that override the built-in turn logic: text, tool
//!   calls, HTTP errors, errors mid-stream, delays, truncated streams, padding.
//! - [`Recorded`]: one request as received.
//!
//! Built-in turn logic (the same as `shared/clients/mock_llm.py`): when tools are offered and the
//! last non-system message is user text, call the shell-like tool (`Bash`, `bash`, `shell`,
//! `exec_command`, ...) with `ls`, arguments shaped after its schema; when a tool result follows
//! the last user text, answer with the final text (`"done"`).
//!
//! ```
//! use ctxd_mock::{Config, MockServer, Reply};
//!
//! let mock = MockServer::start_blocking(Config::default()).unwrap();
//! mock.script().push(Reply::text("hello"));
//! // point the client or the gateway at mock.base_url(), send requests, then:
//! assert!(mock.requests().is_empty());
//! mock.stop();
//! ```

mod body;
mod config;
mod error;
mod handlers;
mod ids;
mod record;
mod reply;
mod request;
mod router;
mod script;
mod server;
mod signature;
mod sse;
mod turn;
mod validate;

pub use body::DecodeError;
pub use config::{Config, Reasoning, Recording};
pub use error::MockError;
pub use record::Recorded;
pub use script::{Action, Part, Reply, ReplySpecError, Script, Shape, Truncate};
pub use server::MockServer;
pub use validate::REFUSED_HEADER;

/// The wire API a request speaks (chosen by its route).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    OpenAiChat,
    OpenAiResponses,
}
