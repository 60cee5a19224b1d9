//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// ctxd: a context engine for LLM coding agents.
#[derive(Debug, Parser)]
#[command(name = "ctxd", version, about)]
pub struct Cli {
    /// The store (SQLite file). Default: `ctxd/ctxd.db` in the user's data directory.
    #[arg(
        long,
        global = true,
        env = "CTXD_STORE",
        value_name = "PATH",
        num_args = 0..=1,
        default_missing_value = ""
    )]
    pub store: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway: point agents' base URL here (Anthropic Messages, OpenAI Chat
    /// Completions and Responses); conversations are kept in the store.
    Serve(crate::serve_cmd::ServeArgs),
    /// Where a session's context window goes: headline, composition, drift, compactions,
    /// largest messages, context per turn and billed totals.
    Report(ReportArgs),
    /// List the sessions under an agent's session directory, or with `--store`, in the store.
    Sessions(SessionsArgs),
    /// Import agent session files into the store.
    Import(crate::import_cmd::ImportArgs),
    /// Notes in five homes: write, append, read, list, search, rm, mv.
    #[command(subcommand)]
    Notes(crate::notes_cmd::NotesCommand),
    /// A stored session's history: windows, items, read, search.
    #[command(subcommand)]
    History(crate::history_cmd::HistoryCommand),
    /// An entry's raw content by id, whole, by --pattern or by lines (what `recall` returns).
    Recall(crate::recall_cmd::RecallArgs),
    /// Serve ctxd's tools (notes, history, recall, windows) over MCP on stdin/stdout.
    Mcp(crate::mcp_cmd::McpArgs),
    /// Measure import and report speed (MB/s, ms) and peak memory on session files.
    Bench(crate::bench_cmd::BenchArgs),
    /// Internal: one measured run in a child process, so each gets its own peak RSS.
    #[command(hide = true)]
    BenchOne(crate::bench_cmd::BenchOneArgs),
    /// The gateway's added latency: a fixed-rate load to the mock upstream directly and
    /// through `ctxd serve`, side by side (p50/p99, overhead, peak RSS).
    BenchGateway(crate::bench_cmd::gateway::GatewayBenchArgs),
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Session files (Pi, Claude Code, Codex, SWE-agent, mini-swe-agent, raw API bodies or
    /// captured requests; the format is detected from the content), or sessions in the store
    /// by key or id (e.g. the gateway's: see `ctxd sessions --store`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print JSON (schema `ctxd.report/1`, one object per file, one per line).
    #[arg(long, conflicts_with = "text")]
    pub json: bool,
    /// Print plain text even on a terminal (no interactive screen).
    #[arg(long)]
    pub text: bool,
    /// Report the context as it was sent for this turn (1-based).
    #[arg(long, value_name = "TURN")]
    pub at: Option<usize>,
    /// The model's context window in tokens, when the model name does not tell.
    #[arg(long, value_name = "TOKENS")]
    pub window: Option<u64>,
    /// How many of the largest messages to list.
    #[arg(long, default_value_t = 5)]
    pub largest: usize,
}

#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// A directory to scan (default: ~/.claude/projects, ~/.pi/agent/sessions, ~/.codex/sessions).
    pub dir: Option<PathBuf>,
    /// Print JSON (one object per session, one per line).
    #[arg(long)]
    pub json: bool,
    /// List at most this many sessions, newest first.
    #[arg(long, default_value_t = 200)]
    pub limit: usize,
}
