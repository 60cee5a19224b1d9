#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The gateway over real sockets, in front of the project's mock upstream: pass-through bytes,
//! conversations recorded in the store, windows rewriting what goes upstream, errors in each
//! API's shape, tenants kept apart.

mod amnesia;
mod budgets;
mod cache;
mod conversation;
mod digest;
mod distill;
mod durable;
mod errors;
mod fuzz;
mod gemini;
mod lazy;
mod limits;
mod loops;
mod passthrough;
mod prefix;
mod routes;
mod served;
mod shapes;
mod stats;
mod support;
mod tenancy;
mod ui;
mod usage;
mod window;
mod write_facts;
