//! `ctxd-bench` run apart from the user's environment; the `ctxd` it measures is the one cargo
//! built beside it.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

pub use ctxd_test_support::succeed;

/// `ctxd-bench` with an empty home of this test program's own.
pub fn bench() -> Command {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("home-ctxd-bench");
    std::fs::create_dir_all(&home).unwrap();
    ctxd_test_support::isolated(Command::new(env!("CARGO_BIN_EXE_ctxd-bench")), &home)
}
