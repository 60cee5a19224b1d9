//! Window-manager mechanisms of issue 15 that rewrite what the model sees of its own tool
//! traffic, each a pure policy over the log:
//!
//! - [`digest`]: shell outputs above a threshold replaced by a digest (head and tail, error and
//!   warning lines, or a model's summary) with a `recall` pointer to the raw output.
//! - [`writes`]: a write's content stripped at the tail, a "what I've done" fact in its place.

pub mod digest;
pub mod writes;
