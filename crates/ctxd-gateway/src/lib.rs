//! ctxd-gateway: `ctxd serve`, the HTTP gateway in front of the providers.
//!
//! Clients change one base URL. Each conversation request (Anthropic Messages, OpenAI Chat
//! Completions, OpenAI Responses) is split ([`request`]) and handed to the engine, which owns
//! the turn over the session's log (`ctxd_engine::turn`: plan the request, end a turn, project,
//! record the response); the projection goes upstream (the client's own bytes when nothing
//! changes, [`rewrite`] and [`render`] otherwise), and the response is relayed as it arrives
//! while it is assembled and recorded ([`relay`]). The gateway is the adapter: HTTP, streaming,
//! the splice and the store's writer.

pub mod api;
mod budget;
mod cache;
pub mod config;
mod credentials;
mod disk;
mod distill;
mod error;
mod handler;
pub mod identity;
mod lazy;
mod learned;
mod mcp;
pub mod policy;
pub mod project;
mod relay;
pub mod render;
pub mod replay;
pub mod request;
mod request_id;
pub mod rewrite;
pub mod routes;
pub mod served;
mod server;
mod sessions;
pub mod spending;
pub mod stats;
pub mod telemetry;
pub mod tenancy;
pub mod turn;
pub mod ui;
mod upstream;
mod writer;

pub use config::Settings;
pub use ctxd_store::ServeLock;
pub use server::{shutdown_signal, Gateway, Server, StartError};
