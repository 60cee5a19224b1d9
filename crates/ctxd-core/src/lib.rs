//! ctxd-core: the session model and the policies over it.
//!
//! This crate is the functional core of ctxd. It does no I/O, has no async, and knows nothing of
//! HTTP, SQL or MCP (a test in `tests/purity.rs` checks its dependency list). Everything here is
//! a pure function over a [`Session`]: the active branch ([`tree`]), what the model sees of it
//! ([`view`]), token accounting ([`tokens`]) and the context report ([`report`]).
//!
//! ```
//! use ctxd_core::model::{Session, Entry, EntryId, EntryKind, Message, Role};
//! use ctxd_core::{report, tokens::CharEstimate};
//!
//! let mut session = Session::default();
//! session.entries.push(Entry {
//!     id: EntryId::new("1"),
//!     parent: None,
//!     timestamp: None,
//!     sidechain: false,
//!     kind: EntryKind::Message(Message::text(Role::User, "hello there")),
//! });

//! ```

pub mod budget;
pub mod cache;
pub mod distill;
pub mod history;
pub mod mechanisms;
pub mod model;
pub mod model_limits;
pub mod notes;
pub mod offered;
pub mod pace;
pub mod recall;
pub mod report;
pub mod savings;
pub mod spend;
pub mod text;
pub mod tokens;
pub mod tree;
pub mod view;
pub mod windows;

pub use model::Session;
