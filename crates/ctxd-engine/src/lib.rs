//! ctxd-engine: the core's pure policies over the durable store.
//!
//! The engine is the one place where policies meet storage: it reads a session's log from the
//! [`Store`](ctxd_store::Store), asks the core for decisions (projection, windows, budget,
//! notes addresses, history, recall), and appends the resulting drafts atomically. The gateway,
//! the CLI and the MCP server are thin adapters over it. A turn's lifecycle (plan the request,
//! end the turn, project, record the response) runs in [`turn`] over the session view the
//! gateway hands it; model-facing tools are executed through one registry ([`tools`]) and one
//! entry, [`Engine::call_tool`].

pub mod amnesia;
pub mod background;
pub mod digest;
pub mod distill;
mod error;
pub mod history;
pub mod import;
pub mod lazy;
pub mod notes;
pub mod recall;
pub mod tools;
pub mod turn;
pub mod windows;

pub use error::EngineError;

/// Milliseconds since the Unix epoch, now: the clock every time-stamped draft reads.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

use ctxd_store::SessionId;

/// The engine over a store `S`: a concrete store in tests and one-shot commands, or
/// `dyn ctxd_store::Backend` where the store is chosen at run time (the gateway, the CLI).
pub struct Engine<S: ?Sized> {
    store: Box<S>,
}

impl<S> Engine<S> {
    pub fn new(store: S) -> Self {
        Self {
            store: Box::new(store),
        }
    }
}

impl<S: ?Sized> Engine<S> {
    /// The engine over a store already boxed (such as a `Box<dyn Backend>`).
    pub fn from_boxed(store: Box<S>) -> Self {
        Self { store }
    }

    pub fn store(&self) -> &S {
        &self.store
    }
}

/// Who is calling: a tenant (a keyed hash of the client's credential; `""` locally), the
/// session the call belongs to, and the agent and model names that notes homes resolve against.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub tenant: String,
    pub session: Option<SessionId>,
    /// The session's key (for `session:` notes), when there is a session.
    pub session_key: Option<String>,
    /// The calling agent's name (`claude-code`, `codex`, `pi`, or a subagent's name).
    pub agent: Option<String>,
    /// The model answering (for `@model/` notes).
    pub model: Option<String>,
    /// The project (working directory or repository) for `@project/` notes.
    pub project: Option<String>,
    /// The budget policy of the request the call came with (the gateway's: its window is the
    /// configured, learned or beta one), so `get_context_remaining` counts against the window
    /// the reminders and resets use; `None`: the model's table.
    pub policy: Option<crate::windows::WindowPolicy>,
}
