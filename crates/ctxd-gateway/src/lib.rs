//! ctxd-gateway: `ctxd serve`, the HTTP gateway in front of the providers.
//!
//! Clients change one base URL. Each conversation request (Anthropic Messages, OpenAI Chat
//! Completions, OpenAI Responses) is mapped onto its session's log in the store
//! ([`plan`]), the engine's projection of the branch goes upstream (the client's own bytes when
//! nothing changes, [`rewrite`] otherwise), and the response is relayed as it arrives while it
//! is assembled and appended ([`relay`]). Everything that decides is a pure function over the
//! log ([`log`], [`plan`], [`rewrite`], [`render`]); the rest is the adapter around it.

pub mod api;
mod budget;
mod checkpoints;
pub mod config;
mod distill;
mod handler;
pub mod hash;
pub mod identity;
pub mod log;
mod mcp;
pub mod plan;
pub mod policy;
pub mod project;
mod relay;
pub mod render;
pub mod request;
pub mod rewrite;
pub mod served;
mod server;
mod sessions;
pub mod stats;
mod turn;
pub mod ui;
mod upstream;
mod writer;

pub use config::Settings;
pub use server::{shutdown_signal, Gateway, Server, StartError};
