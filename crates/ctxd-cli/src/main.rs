//! `ctxd`: the context engine's command line.
//!
//! Errors are one line on stderr and exit code 2; a report or listing goes to stdout.

mod classifier_args;
mod cli;
mod eval_cmd;
mod history_cmd;
mod import_cmd;
mod load;
mod mcp_cmd;
mod notes_cmd;
mod recall_cmd;
mod report_cmd;
mod run_cmd;
mod serve_cmd;
mod sessions_cmd;
mod stats_cmd;
mod store;
mod store_cmd;
mod tenant_cmd;
mod tui;

use std::process::ExitCode;

use clap::FromArgMatches;

/// See the dependency's note in Cargo.toml: large per-request buffers without page faults.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    no_transparent_huge_pages();
    let names = cli::command_names();
    let command = cli::command();
    let args = std::env::args_os();
    let parsed = command
        .try_get_matches_from(args)
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
    let Some(command) = cli.command else {
        eprintln!(
            "ctxd: no command given: one of {} (see `ctxd --help`)",
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    // The agent's exit code is `ctxd run`'s own.
    if let cli::Command::Run(args) = &command {
        return run_cmd::main(args, &store);
    }
    let result = match command {
        cli::Command::Run(_) => unreachable!("handled above"),
        cli::Command::Serve(args) => serve_cmd::run(&args, &store),
        cli::Command::Report(args) => report_cmd::run(&args, &store),
        cli::Command::Sessions(args) => sessions_cmd::run(&args, &store),
        cli::Command::Stats(args) => stats_cmd::run(&args, &store),
        cli::Command::Import(args) => import_cmd::run(&args, &store),
        cli::Command::Notes(cmd) => notes_cmd::run(&cmd, &store),
        cli::Command::History(cmd) => history_cmd::run(&cmd, &store),
        cli::Command::Store(cmd) => store_cmd::run(&cmd, &store),
        cli::Command::Recall(args) => recall_cmd::run(&args, &store),
        cli::Command::Mcp(args) => mcp_cmd::run(&args, &store),
        cli::Command::Eval(args) => eval_cmd::run(&args),
        cli::Command::TenantKey(args) => tenant_cmd::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // `ctxd ... | head`: the reader left; nothing is wrong.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctxd: {}", one_line(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes in one line, each said once: a cause whose text its parent's
/// message already ends with (`cannot listen on ADDR: Address in use` over `Address in use`) is
/// left out.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.ends_with(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line.replace('\n', " ")
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        // serde_json keeps the I/O error inside its own (its `source` skips it).
        let kind = cause
            .downcast_ref::<std::io::Error>()
            .map(std::io::Error::kind)
            .or_else(|| {
                cause
                    .downcast_ref::<serde_json::Error>()
                    .and_then(serde_json::Error::io_error_kind)
            });
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}

/// Opt this process out of transparent huge
/// pages. With the kernel's mode at `always`, a request's fresh 1 MB buffers faulted in 2 MB
/// pages the kernel had to zero first (`clear_page_erms`): 2-3 s stalls at 1 MiB in
/// `ctxd-bench gateway`, 2.5x the peak memory. A refusal (an old kernel) changes nothing else.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}
