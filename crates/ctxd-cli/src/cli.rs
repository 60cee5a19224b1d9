//! Command-line arguments.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand};

/// ctxd: a context engine for LLM coding agents. Reports on agents' session files, keeps
/// sessions in a store with notes and history, and runs the gateway (`ctxd serve`).
#[derive(Debug, Parser)]
#[command(name = "ctxd", version)]
pub struct Cli {
    /// The store: a SQLite file's PATH or a PostgreSQL URL (`postgres://user@host/db`), else
    /// `CTXD_STORE`, else `ctxd/ctxd.db` in the user's data directory (the default store).
    /// Always takes a value, so that it cannot swallow a session's name (`ctxd stats 4`).
    #[arg(
        long,
        global = true,
        env = "CTXD_STORE",
        value_name = "PATH|URL",
        value_parser = clap::builder::OsStringValueParser::new().try_map(store_value)
    )]
    pub store: Option<OsString>,
    /// `None` when no command is given: `main` says which there are, in one line.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The `ctxd serve` settings file's keys: the long flags' names (and the global `store`). One
/// source: the flags themselves.
pub fn config_keys(serve: &clap::Command) -> Vec<String> {
    let mut keys: Vec<String> = serve
        .get_arguments()
        .filter_map(|a| a.get_long())
        // The file says these as `reminders = false`, `resets = false`, `distill = false`,
        // `digests = false`, `write-facts = false`, `amnesia = false`, `lazy-tools = false`, a
        // `[model-windows]` table, a `[classifier]` table, `[[budgets]]` and `[[routes]]` (see the
        // help below).
        .filter(|l| {
            !matches!(
                *l,
                "config"
                    | "log-json"
                    | "help"
                    | "no-reminders"
                    | "no-resets"
                    | "no-distill"
                    | "no-digests"
                    | "no-write-facts"
                    | "no-amnesia"
                    | "no-lazy-tools"
                    | "no-cache-plan"
                    | "model-window"
                    | "budget"
                    | "route"
            ) && !l.starts_with("classifier")
        })
        .map(str::to_owned)
        .collect();
    keys.insert(1.min(keys.len()), "store".to_owned());
    keys
}

/// `serve --config`'s help, listing every key of the file (from [`config_keys`]).
pub fn with_config_help(cli: clap::Command) -> clap::Command {
    cli.mut_subcommand("serve", |serve| {
        let keys = config_keys(&serve);
        let flags = keys.join(", ");
        let help = format!(
            "A TOML settings file. Its keys are the long flags' names with the flags' values \
             ({flags}; e.g. `read-timeout = 60`). `reminders = false`, `resets = false` and \
             `distill = false` do what --no-reminders, --no-resets and --no-distill do, \
             `cache-plan = false` does what --no-cache-plan does, `[agents.NAME]` tables set `reminders`, `resets`, `distill`, `digests`, `amnesia`, `lazy-tools` and `tools` for one agent (claude-code, codex, pi, sdk); `[amnesia-read-tools.AGENT]` tables (`tools`, `shell`) name the read-like tools meta-amnesia judges; a `[lazy-base-tools]` table (`AGENT = [\"tool\", ...]`) names each agent's base tools for lazy tools; a `[model-windows]` table maps model \
             names to windows (\"claude-sonnet-4-5\" = 1000000) as --model-window does; a \
             `[classifier]` table (kind, base_url, model, api_key_env, timeout_ms, concurrency, \
             price_per_mtok) does what the --classifier flags do; `[[budgets]]` tables (scope, \
             period, usd or tokens, warn-at, hard) do what --budget does; `[[routes]]` tables \
             (model, api, upstream, name) do what --route does; a `[prices]` table maps \
             model-name prefixes to `{{ input, output, cache-read, cache-write }}` dollars per \
             million tokens, before the built-in list prices; a `[tenants]` table names tenants \
             (NAME = \"b3:...\", from `ctxd tenant-key NAME`). Flags and environment variables \
             win over the file"
        );
        serve.mut_arg("config", |a| a.help(help))
    })
}

/// The command line's definition, as `main` parses it: the settings file's help filled in, and
/// no environment variable's value in any help text (`CTXD_STORE` may be a PostgreSQL URL with
/// its password; `--help` output gets pasted into issues).
pub fn command() -> clap::Command {
    hide_env_values(with_config_help(<Cli as clap::CommandFactory>::command()))
}

fn hide_env_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| a.hide_env_values(true))
        .mut_subcommands(hide_env_values)
}

/// The commands' names (`ctxd sessions`, ...), hidden ones left out.
pub fn command_names() -> Vec<String> {
    <Cli as clap::CommandFactory>::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_owned())
        .collect()
}

/// `--store`'s value, refused when it is plainly not a store: a command's name (`ctxd --store
/// sessions`, the old spelling of "the default store") or a number (`ctxd stats --store 4`,
/// meaning session 4), unless a file of that name exists. Without this both became a new empty
/// SQLite file in the working directory.
fn store_value(value: OsString) -> Result<OsString, String> {
    let Some(text) = value.to_str() else {
        return Ok(value);
    };
    // Empty (an exported but empty `CTXD_STORE`): no store given, as before.
    if text.is_empty() || std::path::Path::new(text).exists() {
        return Ok(value);
    }
    if command_names().iter().any(|c| c == text) {
        return Err(format!(
            "`{text}` is a command, not a store: --store takes the store's PATH or URL (the \
             stored sessions: `ctxd sessions --stored`; the default store needs no flag)"
        ));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{text}` is no store file: --store takes the store's PATH or URL; a session is \
             named without it (e.g. `ctxd stats {text}`)"
        ));
    }
    Ok(value)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run an agent through ctxd: `ctxd run claude` (or codex, pi, any command). Uses the
    /// gateway serving the store, else starts one for the agent's lifetime; points the agent at
    /// it without editing its config; its exit code is ctxd's; one summary line at the end.
    Run(Box<crate::run_cmd::RunArgs>),
    /// Run the gateway: point agents' base URL here (Anthropic Messages, OpenAI Chat
    /// Completions and Responses); conversations are kept in the store.
    Serve(Box<crate::serve_cmd::ServeArgs>),
    /// Where a session's context window goes: headline, composition, drift, compactions,
    /// largest messages, context per turn and billed totals.
    Report(ReportArgs),
    /// List the sessions under an agent's session directory, or with `--stored` (or
    /// `--store PATH`), in the store.
    Sessions(SessionsArgs),
    /// Tokens ctxd's mechanisms saved per managed request, from the store's records: every
    /// session with a sum, or one session request by request.
    Stats(crate::stats_cmd::StatsArgs),
    /// Import agent session files into the store.
    Import(crate::import_cmd::ImportArgs),
    /// Notes in five homes (this session, the project, the human, an agent, a model): write,
    /// append, read, list, search, rm, mv, stale.
    #[command(subcommand, after_help = crate::notes_cmd::EXAMPLES)]
    Notes(crate::notes_cmd::NotesCommand),
    /// A stored session's history: windows, items, read, search.
    #[command(subcommand)]
    History(crate::history_cmd::HistoryCommand),
    /// The store itself: `check` it (integrity, sizes), `vacuum` a SQLite store, `copy` every
    /// session, note and setting from one store to another (SQLite to PostgreSQL and back).
    #[command(subcommand)]
    Store(crate::store_cmd::StoreCommand),
    /// An entry's raw content by id, whole, by --pattern or by lines (what `recall` returns).
    Recall(crate::recall_cmd::RecallArgs),
    /// Serve ctxd's tools (notes, history, recall, get_context_remaining) over MCP on
    /// stdin/stdout; resets only through the gateway (`ctxd serve`).
    #[command(after_help = crate::mcp_cmd::served_tools())]
    Mcp(crate::mcp_cmd::McpArgs),
    /// Replay recorded sessions through distillation, as if live: tokens and cache-adjusted
    /// cost with and without ctxd, retention of what the agent used afterwards, beside a
    /// keep-the-last-N-outputs baseline.
    Eval(crate::eval_cmd::EvalArgs),
    /// A fresh ctxd key for a tenant named by the operator (a person or a team on a shared
    /// gateway), and the config line that names it: the key printed once, only its hash kept.
    TenantKey(crate::tenant_cmd::TenantKeyArgs),
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Session files (Pi, Claude Code, Codex, SWE-agent, mini-swe-agent, raw API bodies or
    /// captured requests; the format is detected from the content), or sessions in the store
    /// by key or id (e.g. the gateway's: see `ctxd sessions --stored`).
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
    #[arg(conflicts_with = "stored")]
    pub dir: Option<PathBuf>,
    /// List the sessions in the store (`--store`, else `CTXD_STORE`, else the default store)
    /// instead of an agent's directory; `--store PATH` implies it.
    #[arg(long)]
    pub stored: bool,
    /// Print JSON (one object per session, one per line).
    #[arg(long)]
    pub json: bool,
    /// List at most this many sessions, newest first.
    #[arg(long, default_value_t = 200)]
    pub limit: usize,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::CommandFactory;
    use ctxd_gateway::Settings;

    /// Every option of every command says what it does, and `serve --listen` its default
    /// (the gateway's own, so the help cannot drift from it).
    #[test]
    fn every_option_is_described_and_listen_shows_its_default() {
        fn check(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("`{path}` {id}"));
                }
            }
            for sub in cmd.get_subcommands().filter(|c| !c.is_hide_set()) {
                check(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut cli = super::command();
        cli.build();
        let mut missing = Vec::new();
        check(&cli, "ctxd", &mut missing);
        assert!(missing.is_empty(), "no description: {missing:#?}");
        let listen = ctxd_gateway::Settings::new("x.db").listen.to_string();
        let serve = cli.find_subcommand("serve").unwrap();
        let help = serve
            .get_arguments()
            .find(|a| a.get_id() == "listen")
            .and_then(|a| a.get_help())
            .unwrap()
            .to_string();
        assert!(help.contains(&format!("[default: {listen}]")), "{help}");
    }

    /// Each key the help names is read by the settings file and changes a setting.
    #[test]
    fn every_config_key_is_documented_and_read() {
        let cli = super::with_config_help(super::Cli::command());
        let serve = cli.find_subcommand("serve").unwrap();
        let help = serve
            .get_arguments()
            .find(|a| a.get_id() == "config")
            .and_then(|a| a.get_help())
            .unwrap()
            .to_string();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctxd.toml");
        let keys = super::config_keys(serve);
        assert!(keys.len() >= 9, "{keys:?}");
        for key in keys {
            let named = help
                .split(|c: char| !(c.is_ascii_lowercase() || c == '-'))
                .any(|word| word == key);
            assert!(named, "{key} is not in the help: {help}");
            let value_name = serve
                .get_arguments()
                .find(|a| a.get_long() == Some(key.as_str()))
                .and_then(|a| a.get_value_names())
                .map(|v| v[0].to_string());
            let is_switch = serve
                .get_arguments()
                .find(|a| a.get_long() == Some(key.as_str()))
                .is_some_and(|a| matches!(a.get_action(), clap::ArgAction::SetTrue));
            let value = match value_name.as_deref() {
                _ if is_switch => "true",
                Some("MODE") if key == "store-unavailable" => "\"pass\"",
                Some("MODE") if key == "tenancy" => "\"credential\"",
                Some("MODE") => "\"full\"",
                Some("LIST") => "\"none\"",
                Some("ADDR") => "\"127.0.0.1:1\"",
                Some("URL") => "\"http://127.0.0.1:1\"",
                Some("NAME") => "\"CTXD_ADMIN_TOKEN\"",
                Some("TOKENS") => "2500",
                Some("NAMES") => "[\"Read\"]",
                Some("P") => "0.5",
                _ if key == "store" => "\"elsewhere.db\"",
                _ => "7",
            };
            std::fs::write(&path, format!("{key} = {value}\n")).unwrap();
            let mut settings = Settings::new("x.db");
            let before = format!("{settings:?}");
            settings
                .apply_file(&path)
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_ne!(before, format!("{settings:?}"), "{key} changed nothing");
        }
    }
}
