//! `ctxd-bench`: ctxd's benchmark harness, a binary of its own so that the shipped `ctxd`
//! carries neither the mock upstream nor the load generator.
//!
//! Each command prints a table (or `--json` rows) and exits 0 when it measured, a missed target
//! included: a benchmark reports, it does not judge. Errors are one line on stderr, exit code 2.

mod files;
mod gateway;
mod generate;
mod soak;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// The gateway benches put a 1 MB body through the in-process mock hundreds of times a second:
/// the allocator `ctxd` itself ships with, so the mock's side costs what it did inside `ctxd`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "ctxd-bench",
    version,
    about = "Measure ctxd: import and report speed, the gateway's added latency, a soak of many sessions."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Import and report speed (MB/s, ms) and peak memory on session files.
    Files(files::FilesArgs),
    /// Internal: one measured run in a child process, so each gets its own peak RSS.
    #[command(hide = true)]
    One(files::OneArgs),
    /// The gateway's added latency: a fixed-rate load to the mock upstream directly and
    /// through `ctxd serve` (and other proxies, `--peer`), side by side (p50/p99, overhead,
    /// peak RSS).
    Gateway(gateway::GatewayBenchArgs),
    /// Thousands of sessions with growing history through `ctxd serve`: its RSS against the
    /// session cache budget and its WAL against the database, over time and at rest.
    Soak(soak::SoakArgs),
}

fn main() -> ExitCode {
    // A kernel in THP mode `always` would give the mock's 1 MB buffers 2 MB pages to zero first.
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Files(args) => files::run(&args),
        Command::One(args) => files::run_one(&args),
        Command::Gateway(args) => gateway::run(&args),
        Command::Soak(args) => soak::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctxd-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The `ctxd` whose `serve` is measured: the one given, else the one installed or built beside
/// this binary (`target/release/ctxd` next to `target/release/ctxd-bench`).
fn ctxd_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(bin) = given {
        return Ok(bin.to_path_buf());
    }
    let this = std::env::current_exe().context("finding this ctxd-bench binary")?;
    let beside = this.with_file_name(format!("ctxd{}", std::env::consts::EXE_SUFFIX));
    if beside.is_file() {
        Ok(beside)
    } else {
        anyhow::bail!(
            "no ctxd beside {} (build it: cargo build --release -p ctxd-cli), or name one with --gateway-bin",
            this.display()
        )
    }
}
