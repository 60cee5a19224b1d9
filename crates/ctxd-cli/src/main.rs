//! `ctxd`: the context engine's command line.
//!
//! Errors are one line on stderr and exit code 2; a report or listing goes to stdout.

mod bench_cmd;
mod cli;
mod history_cmd;
mod import_cmd;
mod load;
mod mcp_cmd;
mod notes_cmd;
mod recall_cmd;
mod report_cmd;
mod serve_cmd;
mod sessions_cmd;
mod store;
mod tui;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

/// See the dependency's note in Cargo.toml: large per-request buffers without page faults.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let parsed = cli::Cli::command()
        .try_get_matches()
        .and_then(|m| cli::Cli::from_arg_matches(&m).map(|c| (c, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let store = store::StoreChoice::new(cli.store.clone(), &matches);
    let result = match cli.command {
        cli::Command::Serve(args) => serve_cmd::run(&args, &store),
        cli::Command::Report(args) => report_cmd::run(&args, &store),
        cli::Command::Sessions(args) => sessions_cmd::run(&args, &store),
        cli::Command::Import(args) => import_cmd::run(&args, &store),
        cli::Command::Notes(cmd) => notes_cmd::run(&cmd, &store),
        cli::Command::History(cmd) => history_cmd::run(&cmd, &store),
        cli::Command::Recall(args) => recall_cmd::run(&args, &store),
        cli::Command::Mcp(args) => mcp_cmd::run(&args, &store),
        cli::Command::Bench(args) => bench_cmd::run(&args),
        cli::Command::BenchOne(args) => bench_cmd::run_one(&args),
        cli::Command::BenchGateway(args) => bench_cmd::gateway::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `ctxd ... | head`: the reader left; nothing is wrong.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctxd: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
