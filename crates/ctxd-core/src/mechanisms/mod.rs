//! The window manager's mechanisms that rewrite what the model sees of its own tool
//! traffic, each a pure policy over the log:
//!
//! - [`amnesia`]: read-like tools' results judged retain/drop out of band; a round of drops
//!   taken out of the request while it is the request's tail.
//! - [`digest`]: shell outputs above a threshold replaced by a digest (head and tail, error and
//!   warning lines, or a model's summary) with a `recall` pointer to the raw output.
//! - [`writes`]: a write's content stripped at the tail, a "what I've done" fact in its place.
//! - [`lazy`]: only a base set of the client's tools goes upstream, the others when
//!   `find_capability` finds them, until the next user prompt.

pub mod amnesia;
pub mod digest;
pub mod lazy;
pub mod writes;
