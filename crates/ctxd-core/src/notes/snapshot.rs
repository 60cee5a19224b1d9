//! The notes snapshot: every home's notes, read once when a window boots.

use std::collections::BTreeMap;

use serde::Serialize;

/// A notes home, broadest last in declaration order is not implied: see the boot's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HomeScope {
    /// Bare `<vpath>`: this session.
    Session,
    /// `@project/<vpath>`.
    Project,
    /// `@human/<vpath>`: the human's cross-project home.
    Human,
    /// `@self/<vpath>` and `@agents/<name>/<vpath>`.
    Agent,
    /// `@model/<vpath>` and `@models/<name>/<vpath>`.
    Model,
}

/// One note as the boot's index sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NoteRow {
    pub scope: HomeScope,
    /// The resolved address shown to the model (`@agents/claude-code/plan.md`, `todo.md`).
    pub address: String,
    /// The path inside its home (`MAP.md`, `plan.md`).
    pub path: String,
    /// The body. The index shows bodies only for resident maps (`MAP.md`).
    pub body: String,
    pub bytes: usize,
    pub lines: usize,
    /// Milliseconds since the Unix epoch.
    pub updated_at_ms: i64,
    pub stale: bool,
}

/// The five homes' notes, most recently updated first within each home.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NotesSnapshot {
    pub homes: BTreeMap<HomeScope, Vec<NoteRow>>,
    /// Homes whose notes could not be read (their index rows are left out and the boot says so).
    pub unavailable: Vec<HomeScope>,
    /// When the snapshot was taken (ms since the epoch): relative times are computed from it.
    pub opened_at_ms: i64,
}
