//! `ctxd run [OPTIONS] AGENT [ARGS...]`: an agent through ctxd for its lifetime.
//!
//! The gateway already serving the store (found through its lock, `ServeLock::serving`) is
//! used; otherwise one is started in this process on a free loopback port, with `ctxd serve`'s
//! settings, and stopped when the agent exits (its log goes to a file: the agent owns the
//! terminal). The agent is pointed at it without editing its config (`agents.rs`), inherits
//! the terminal, gets the signals ctxd receives (Ctrl-C on a terminal reaches it directly),
//! and its exit code is ctxd's. On exit one line sums up what the run's sessions did.

mod agents;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use ctxd_gateway::{ServeLock, Server, Settings};
use ctxd_store::Location;

use crate::store::StoreChoice;
use agents::{Agent, Inputs, Plan};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Print no summary when the agent exits.
    #[arg(long)]
    pub no_summary: bool,
    /// The gateway this run starts when none serves the store (`ctxd serve`'s options; it
    /// listens on a free loopback port unless --listen says otherwise, and logs to
    /// `<store>.run.log`).
    #[command(flatten)]
    pub serve: crate::serve_cmd::ServeArgs,
    /// The agent and its arguments: `claude`, `codex`, `pi`, `gemini`, or any command (which
    /// gets ANTHROPIC_BASE_URL, OPENAI_BASE_URL and GOOGLE_GEMINI_BASE_URL). Put `--` before it
    /// when its arguments could be taken for ctxd's.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "AGENT"
    )]
    pub command: Vec<OsString>,
}

/// The gateway a run talks to.
struct Gateway {
    url: String,
    /// Started by this run: stopped when the agent exits.
    own: Option<OwnGateway>,
}

struct OwnGateway {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Run the agent; the exit code is the agent's (2 when ctxd itself fails first, 127 when the
/// command cannot be started).
pub fn main(args: &RunArgs, store: &StoreChoice) -> ExitCode {
    match run(args, store) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ctxd run: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &RunArgs, store: &StoreChoice) -> anyhow::Result<ExitCode> {
    let started = rfc3339_ago(0);
    let (program, user_args) = args
        .command
        .split_first()
        .context("no agent given: `ctxd run claude`")?;
    let agent = Agent::of(program);
    let plan = plan(agent, user_args);
    let location = store.location()?;
    let serving = match &location {
        Location::Sqlite(path) => ServeLock::serving(path),
        Location::Postgres(_) => None,
    };
    let settings = match serving {
        Some(_) => None,
        None => Some(own_settings(args, store, &plan, &location)?),
    };
    let runtime = match &settings {
        Some(s) => crate::serve_cmd::runtime(s)?,
        None => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the runtime")?,
    };
    let outcome = runtime.block_on(async {
        let gateway = match (serving, settings) {
            (Some(url), _) => Gateway { url, own: None },
            (None, Some(settings)) => start(settings).await?,
            (None, None) => unreachable!("settings are made when nothing serves the store"),
        };
        let status = launch(agent, &plan, program, user_args, &gateway.url).await;
        if let Some(own) = gateway.own {
            let _ = own.stop.send(());
            match own.task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("ctxd run: the gateway stopped with an error: {e}"),
                Err(e) => eprintln!("ctxd run: the gateway failed: {e}"),
            }
            return Ok::<_, anyhow::Error>((status, gateway.url, false));
        }
        Ok((status, gateway.url, true))
    })?;
    let (status, url, still_serving) = outcome;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ctxd run: cannot start {}: {e}", program.to_string_lossy());
            return Ok(ExitCode::from(127));
        }
    };
    if !args.no_summary {
        match summary(store, &started, agent) {
            Ok(s) => eprintln!("{}", describe(agent, &s, &url, still_serving)),
            Err(e) => eprintln!("ctxd run: no summary: {e:#}"),
        }
    }
    Ok(exit_code(status))
}

/// What the agent uses now, from its environment and config files (read, never written).
fn plan(agent: Agent, args: &[OsString]) -> Plan {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let home = dirs::home_dir().unwrap_or_default();
    let read = |path: PathBuf| std::fs::read_to_string(path).ok();
    let codex_home = var("CODEX_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".codex"));
    let pi_dir = var("PI_CODING_AGENT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".pi").join("agent"));
    let (anthropic, openai) = (var("ANTHROPIC_BASE_URL"), var("OPENAI_BASE_URL"));
    let gemini = var("GOOGLE_GEMINI_BASE_URL");
    let gemini_user = var("GEMINI_CLI_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.clone())
        .join(".gemini");
    let gemini_user_settings = gemini_user.join("settings.json");
    let gemini_settings: Vec<(String, String)> = match agent {
        Agent::GeminiCli => gemini_settings_paths(&var, &gemini_user)
            .into_iter()
            .filter_map(|p| Some((p.display().to_string(), read(p)?)))
            .collect(),
        _ => Vec::new(),
    };
    let (codex, pi_models, pi_settings) = match agent {
        Agent::Codex => (read(codex_home.join("config.toml")), None, None),
        Agent::Pi => (
            None,
            read(pi_dir.join("models.json")),
            read(pi_dir.join("settings.json")),
        ),
        _ => (None, None, None),
    };
    Plan::new(
        agent,
        args,
        &Inputs {
            anthropic_base_url: anthropic.as_deref(),
            openai_base_url: openai.as_deref(),
            gemini_base_url: gemini.as_deref(),
            codex_config: codex.as_deref(),
            pi_models: pi_models.as_deref(),
            pi_settings: pi_settings.as_deref(),
            gemini_settings: &gemini_settings,
            gemini_user_settings: &gemini_user_settings.display().to_string(),
        },
    )
}

/// Gemini CLI's settings files, the one that wins first: system settings, the workspace's
/// (none when the working directory is the home Gemini CLI uses), the user's, system defaults.
fn gemini_settings_paths(var: &dyn Fn(&str) -> Option<String>, user_dir: &Path) -> Vec<PathBuf> {
    let system = var("GEMINI_CLI_SYSTEM_SETTINGS_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(if cfg!(target_os = "macos") {
                "/Library/Application Support/GeminiCli/settings.json"
            } else if cfg!(windows) {
                "C:\\ProgramData\\gemini-cli\\settings.json"
            } else {
                "/etc/gemini-cli/settings.json"
            })
        });
    let defaults = var("GEMINI_CLI_SYSTEM_DEFAULTS_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| system.with_file_name("system-defaults.json"));
    let mut paths = vec![system];
    if let Ok(cwd) = std::env::current_dir() {
        if Some(cwd.as_path()) != user_dir.parent() {
            paths.push(cwd.join(".gemini").join("settings.json"));
        }
    }
    paths.push(user_dir.join("settings.json"));
    paths.push(defaults);
    paths
}

/// The settings of the gateway this run starts: `ctxd serve`'s, on a free loopback port unless
/// told otherwise, forwarding to what the agent used before when ctxd's upstream is the
/// default; its log in a file beside the store.
fn own_settings(
    args: &RunArgs,
    store: &StoreChoice,
    plan: &Plan,
    location: &Location,
) -> anyhow::Result<Settings> {
    let mut settings = crate::serve_cmd::settings(&args.serve, store)?;
    if args.serve.listen.is_none() {
        settings.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    }
    let defaults = Settings::new(location.clone());
    for (prior, upstream, default) in [
        (
            &plan.priors.anthropic,
            &mut settings.upstream_anthropic,
            &defaults.upstream_anthropic,
        ),
        (
            &plan.priors.openai,
            &mut settings.upstream_openai,
            &defaults.upstream_openai,
        ),
    ] {
        if let Some(prior) = prior.as_deref().filter(|_| upstream == default) {
            *upstream = agents::upstream_of(prior);
        }
    }
    // A Gemini base URL has no version in it: the client's path adds `/v1beta`.
    if let Some(prior) = plan.priors.gemini.as_deref() {
        if settings.upstream_gemini == defaults.upstream_gemini {
            settings.upstream_gemini = prior.trim().trim_end_matches('/').to_owned();
        }
    }
    settings.validate().map_err(anyhow::Error::msg)?;
    let log = log_path(location);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("cannot open the gateway's log {}", log.display()))?;
    crate::serve_cmd::init_logging_to(args.serve.log_json, std::sync::Mutex::new(file), false);
    Ok(settings)
}

/// `<store>.run.log` beside a SQLite store; in the temporary directory for a server's.
fn log_path(location: &Location) -> PathBuf {
    match location {
        Location::Sqlite(path) => {
            let mut p = path.as_os_str().to_owned();
            p.push(".run.log");
            PathBuf::from(p)
        }
        Location::Postgres(_) => std::env::temp_dir().join("ctxd-run.log"),
    }
}

async fn start(settings: Settings) -> anyhow::Result<Gateway> {
    let server = Server::bind(settings.clone()).await?;
    let addr = server.local_addr()?;
    crate::serve_cmd::log_start(&settings, addr);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = stopped.await;
    }));
    Ok(Gateway {
        url: format!("http://{addr}"),
        own: Some(OwnGateway { stop, task }),
    })
}

/// Start the agent against `url` and wait for it, passing signals on.
async fn launch(
    agent: Agent,
    plan: &Plan,
    program: &OsString,
    user_args: &[OsString],
    url: &str,
) -> std::io::Result<std::process::ExitStatus> {
    let scratch = Scratch::new()?;
    let extension = scratch.path().join("ctxd-route.js");
    let launch = plan.launch(agent, url, extension.as_os_str());
    if let Some(text) = &launch.pi_extension {
        std::fs::write(&extension, text)?;
    }
    for note in &plan.notes {
        eprintln!("{note}");
    }
    let listening = signals::listen();
    let mut child = std::process::Command::new(program)
        .args(&launch.leading_args)
        .args(user_args)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .spawn()?;
    let forwarding = signals::forward(listening, child.id());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .map_err(std::io::Error::other)?;
    for task in forwarding {
        task.abort();
    }
    drop(scratch);
    status
}

/// A directory of this run's own, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!("ctxd-run-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir)?;
        Ok(Scratch(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

mod signals {
    /// The signals ctxd passes on to the agent: SIGTERM, SIGHUP and SIGQUIT, and SIGINT unless
    /// a terminal sent it (then the agent, in the terminal's foreground group, got it
    /// already). Listened for before the agent starts, so none is missed (nor kills ctxd,
    /// which stays up to stop its gateway and print the summary once the agent is gone).
    #[cfg(target_os = "linux")]
    pub struct Listening(Vec<(tokio::signal::unix::Signal, rustix::process::Signal)>);

    #[cfg(target_os = "linux")]
    pub fn listen() -> Listening {
        use rustix::process::Signal;
        use tokio::signal::unix::{signal, SignalKind};
        let kinds = [
            (SignalKind::interrupt(), Signal::INT),
            (SignalKind::terminate(), Signal::TERM),
            (SignalKind::hangup(), Signal::HUP),
            (SignalKind::quit(), Signal::QUIT),
        ];
        Listening(
            kinds
                .into_iter()
                .filter_map(|(kind, sig)| Some((signal(kind).ok()?, sig)))
                .collect(),
        )
    }

    /// Forward what arrives to `pid` until the returned tasks are aborted.
    #[cfg(target_os = "linux")]
    pub fn forward(listening: Listening, pid: u32) -> Vec<tokio::task::JoinHandle<()>> {
        use rustix::process::{kill_process, Pid, Signal};
        use std::io::IsTerminal;
        let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            return Vec::new();
        };
        let from_terminal = std::io::stdin().is_terminal();
        listening
            .0
            .into_iter()
            .map(|(mut stream, sig)| {
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        if !(sig == Signal::INT && from_terminal) {
                            let _ = kill_process(pid, sig);
                        }
                    }
                })
            })
            .collect()
    }

    #[cfg(not(target_os = "linux"))]
    pub struct Listening;

    #[cfg(not(target_os = "linux"))]
    pub fn listen() -> Listening {
        Listening
    }

    #[cfg(not(target_os = "linux"))]
    pub fn forward(_: Listening, _pid: u32) -> Vec<tokio::task::JoinHandle<()>> {
        Vec::new()
    }
}

/// `ago_ms` before now, as the gateway stamps entries (RFC 3339 UTC, milliseconds).
fn rfc3339_ago(ago_ms: i64) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    ctxd_formats::util::iso_from_unix_millis(ms - ago_ms).unwrap_or_default()
}

/// How much earlier than the run's start a session's `updated_at` (the database server's
/// clock, which may be another machine's) may be for it to be read at all; the run's requests
/// are then told by their entries' stamps, which the gateway's clock (this machine's) wrote.
const STORE_CLOCK_SLACK_MS: i64 = 10 * 60 * 1000;

/// The run's sessions: updated since it started, of its agent (any, for another command), in
/// this directory when the session recorded one.
fn summary(
    store: &StoreChoice,
    started: &str,
    agent: Agent,
) -> anyhow::Result<ctxd_gateway::stats::RunSummary> {
    let engine = store.open_existing()?;
    let store = engine.store();
    let cwd = std::env::current_dir()
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    let maybe_recent = rfc3339_ago(STORE_CLOCK_SLACK_MS);
    let mut loaded = Vec::new();
    for tenant in store.tenants()? {
        for record in store.list_sessions(&tenant)? {
            let recent = record.updated_at.as_str() >= maybe_recent.as_str();
            let same_agent = agent
                .recorded()
                .is_none_or(|a| record.meta.agent == Some(a));
            let same_place = match (&record.meta.cwd, &cwd) {
                (Some(session), Some(here)) => session == here,
                _ => true,
            };
            if recent && same_agent && same_place {
                let session = store.load(record.id)?;
                loaded.push((record, session));
            }
        }
    }
    Ok(ctxd_gateway::stats::run_summary(
        started,
        loaded.iter().map(|(r, s)| (r, s)),
    ))
}

/// The closing line.
fn describe(
    agent: Agent,
    s: &ctxd_gateway::stats::RunSummary,
    url: &str,
    still_serving: bool,
) -> String {
    let t = &s.totals;
    if s.sessions.is_empty() {
        return format!(
            "ctxd run: {}: no request went through ctxd ({url}); is the agent pointed elsewhere \
             by its own settings?",
            agent.name()
        );
    }
    let share = |n: i64| {
        if t.whole > 0 {
            100.0 * n as f64 / t.whole as f64
        } else {
            0.0
        }
    };
    // Short conversations cost more than they save: ctxd's tool definitions ride along.
    let effect = if t.saved >= 0 {
        format!("{:.0}% saved", share(t.saved))
    } else {
        format!(
            "{:.0}% added by ctxd's tools and reminders",
            share(-t.saved)
        )
    };
    let cost = if t.cost_saved_usd > 0.0 {
        format!(", ${:.2} at list price", t.cost_saved_usd)
    } else {
        String::new()
    };
    let (first, _) = &s.sessions[0];
    let dashboard = if still_serving {
        format!("{url}/ui/session/{first}")
    } else {
        format!("`ctxd serve`, then http://127.0.0.1:8787/ui/session/{first}")
    };
    format!(
        "ctxd run: {agent}: {sessions} session{ss}, {turns} turn{ts}, {requests} request{rs}; \
         sent {sent} tokens \
         of {whole} in the whole conversation ({effect}{cost}); {windows} \
         window{ws} opened; dashboard: {dashboard}",
        agent = agent.name(),
        sessions = s.sessions.len(),
        ss = plural(s.sessions.len() as u64),
        turns = s.turns,
        ts = plural(s.turns),
        requests = t.requests,
        rs = plural(t.requests),
        sent = ctxd_core::text::thousands(t.sent),
        whole = ctxd_core::text::thousands(t.whole),
        windows = s.windows_opened,
        ws = plural(s.windows_opened),
    )
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The agent's exit code as a shell reports it: its own, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return ExitCode::from(u8::try_from(128 + sig).unwrap_or(1));
        }
    }
    ExitCode::from(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_what_the_run_did() {
        let mut s = ctxd_gateway::stats::RunSummary::default();
        let none = describe(Agent::ClaudeCode, &s, "http://127.0.0.1:1", false);
        assert!(none.contains("no request went through ctxd"), "{none}");
        s.sessions.push((7, "k".into()));
        s.turns = 1;
        s.totals.requests = 3;
        s.totals.sent = 60_000;
        s.totals.whole = 100_000;
        s.totals.saved = 40_000;
        s.totals.cost_saved_usd = 0.12;
        s.windows_opened = 1;
        let line = describe(Agent::Codex, &s, "http://127.0.0.1:8787", true);
        assert_eq!(
            line,
            "ctxd run: codex: 1 session, 1 turn, 3 requests; sent 60,000 tokens of 100,000 in \
             the whole conversation (40% saved, $0.12 at list price); 1 window opened; \
             dashboard: http://127.0.0.1:8787/ui/session/7"
        );
        assert!(describe(Agent::Codex, &s, "u", false).contains("`ctxd serve`, then"));
    }
}
