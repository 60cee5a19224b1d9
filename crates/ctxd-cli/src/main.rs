//! `ctxd`: the context engine's command line.
//!
//! Errors are one line on stderr and exit code 2; a report or listing goes to stdout.

mod bench_cmd;
mod cli;
mod load;
mod report_cmd;
mod sessions_cmd;
mod tui;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        cli::Command::Report(args) => report_cmd::run(&args),
        cli::Command::Sessions(args) => sessions_cmd::run(&args),
        cli::Command::Bench(args) => bench_cmd::run(&args),
        cli::Command::BenchOne(args) => bench_cmd::run_one(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctxd: {e:#}");
            ExitCode::from(2)
        }
    }
}
