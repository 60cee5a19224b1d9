#![allow(clippy::unwrap_used, clippy::expect_used)]

//! ctxd-mock over real sockets: each API streaming and not, scripted replies, errors,
//! truncation, the record's exactness, real client captures, lifecycle.

mod anthropic;
mod captured;
mod chat;
mod gemini;
mod lifecycle;
mod record;
mod responses;
mod script;
mod strict;
mod support;
