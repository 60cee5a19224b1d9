//! A turn's lifecycle over the session view the gateway hands the engine ([`SessionView`]: the
//! session's record and its indexed log, including writes still queued for the store).
//! [`prepare_turn`] runs a request's steps 1 to 4 in their one order (the gateway and
//! `ctxd eval` both call it), under a [`TurnPolicy`] that says which mechanisms act.
//!
//! 1. [`plan_request`]: the client's request ([`ClientRequest`]) mapped onto the log; what is
//!    new appended ([`RequestPlan`]).
//! 2. [`strip_writes`]: the results of write calls in the last assistant message strip their
//!    content at the tail, a fact in its place ([`ctxd_core::mechanisms::writes`]).
//! 3. [`completes_batch`] / [`end_turn`]: a request carrying the last results of a tool batch
//!    ends the turn that called the tools (reminder, due reset) before it is projected; so does
//!    an answer without tool calls, and an overflow.
//! 4. [`upstream_parts`]: the projection of the branch as parts of the conversation array
//!    ([`Part`]); `None` when it is exactly the client's elements.
//! 5. ctxd's tool calls run through [`Engine::call_tool`](crate::Engine::call_tool); the
//!    response and the results are recorded ([`record_response`], [`record_results`]), and
//!    what the client was shown in place of a hidden exchange is recorded as view events
//!    ([`record_view`], [`client_view`]).
//!
//! Everything here but [`end_turn`] (which reads the notes for a new window's boot) is a pure
//! function over the log. The gateway keeps the HTTP side: the request's split, the splice and
//! rendering of the parts, streaming, the writer.

pub mod client_view;
mod end;
pub mod hash;
pub mod log;
mod plan;
mod prepare;
mod project;
mod record;
mod writes;

use ctxd_store::SessionRecord;

pub use end::{completes_batch, end_turn};
pub use log::SessionLog;
pub use plan::{plan_request, ClientRequest, RequestPlan};
pub use prepare::{
    end, prepare_turn, Mechanisms, PreparedTurn, Services, TurnPolicy, TurnSettings,
};
pub use project::{breakpoints, upstream, upstream_parts, Part, Upstream};
pub use record::{
    branch_ids_after, record_events, record_response, record_results, record_view, ResponseElement,
};
pub use writes::strip_writes;

/// One session as a turn sees it: its record in the store and its indexed log.
#[derive(Debug)]
pub struct SessionView {
    pub record: SessionRecord,
    pub log: SessionLog,
    /// Sizes of the log's entries for the requests' savings accounting (new entries only are
    /// sized at each request); rebuilt with the log.
    pub savings: ctxd_core::savings::EntryTokens,
}
