//! Window-manager mechanisms that act on a tool output before the model first sees it (the
//! seed's "mechanisms" of the pi context-window manager, issue 15).
//!
//! - [`digest`]: shell outputs above a threshold replaced by a digest (head and tail, error and
//!   warning lines, or a model's summary) with a `recall` pointer to the raw output.

pub mod digest;
