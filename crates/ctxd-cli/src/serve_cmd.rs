//! `ctxd serve`: the gateway, on the store, until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use ctxd_gateway::{shutdown_signal, Server, Settings};

use crate::store::StoreChoice;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; loopback unless told otherwise [default: 127.0.0.1:8787].
    #[arg(long, env = "CTXD_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// The Anthropic API origin requests to `/v1/messages` go to [default: https://api.anthropic.com].
    #[arg(long, env = "CTXD_UPSTREAM_ANTHROPIC", value_name = "URL")]
    pub upstream_anthropic: Option<String>,
    /// The OpenAI API origin Chat Completions and Responses requests go to [default: https://api.openai.com].
    #[arg(long, env = "CTXD_UPSTREAM_OPENAI", value_name = "URL")]
    pub upstream_openai: Option<String>,
    /// The Gemini API origin `/v1beta/models/...` requests go to [default: https://generativelanguage.googleapis.com].
    #[arg(long, env = "CTXD_UPSTREAM_GEMINI", value_name = "URL")]
    pub upstream_gemini: Option<String>,
    /// The requests of models matching MODEL (a name, or a prefix ending in `*`) go to URL
    /// instead, those of API only when given (`anthropic`, `chat`, `responses`, `openai`, `gemini`);
    /// the most specific match wins; the client's credentials go along (repeatable; config:
    /// `[[routes]]` tables of model, api, upstream, name). E.g.
    /// `--route 'anthropic:deepseek-*=https://api.deepseek.com/anthropic'`.
    #[arg(long = "route", value_name = "[API:]MODEL=URL", value_parser = ctxd_gateway::routes::Route::parse)]
    pub routes: Vec<ctxd_gateway::routes::Route>,
    /// A TOML settings file (keys: the long flags' names; the full help lists them, built by
    /// `cli::with_config_help`).
    #[arg(long, env = "CTXD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Largest request body accepted, in bytes (also after decompression) [default: 67108864].
    #[arg(long, env = "CTXD_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Seconds to wait for a connection to the provider [default: 10].
    #[arg(long, env = "CTXD_CONNECT_TIMEOUT", value_name = "SECS")]
    pub connect_timeout: Option<u64>,
    /// Seconds to wait for the provider's response headers, then between two chunks [default: 600].
    #[arg(long, env = "CTXD_READ_TIMEOUT", value_name = "SECS")]
    pub read_timeout: Option<u64>,
    /// Threads serving requests [default: 1] (the store writer has its own). One keeps tail
    /// latency lowest; raise it for many busy agents at once.
    #[arg(long, env = "CTXD_WORKERS", value_name = "N")]
    pub workers: Option<usize>,
    /// Record only: every request goes upstream as the client sent it; conversations are still
    /// stored and reported, nothing is injected, no window is reset.
    #[arg(long, env = "CTXD_RECORD_ONLY")]
    pub record_only: bool,
    /// Tokens kept free in a window: at this many left it resets [default: 16384, scaled down
    /// with the other two lines when they do not fit in half of a small model's window].
    #[arg(long, env = "CTXD_RESERVE", value_name = "TOKENS")]
    pub reserve: Option<u64>,
    /// The early reminder fires at reserve + this many tokens left [default: 24576].
    #[arg(long, env = "CTXD_REMINDER_MARGIN", value_name = "TOKENS")]
    pub reminder_margin: Option<u64>,
    /// The final warning fires at reserve + this many tokens left [default: 12288].
    #[arg(long, env = "CTXD_WARNING_RUNWAY", value_name = "TOKENS")]
    pub warning_runway: Option<u64>,
    /// No budget reminders for any agent (config: `reminders = false`, or per agent in
    /// `[agents.NAME]`).
    #[arg(long, env = "CTXD_NO_REMINDERS")]
    pub no_reminders: bool,
    /// No threshold resets or overflow recovery for any agent (config: `resets = false`, or per
    /// agent in `[agents.NAME]`).
    #[arg(long, env = "CTXD_NO_RESETS")]
    pub no_resets: bool,
    /// No distillation of tool outputs for any agent (config: `distill = false`, or per agent
    /// in `[agents.NAME]`). Distillation acts only where the model is offered `recall`.
    #[arg(long, env = "CTXD_NO_DISTILL")]
    pub no_distill: bool,
    /// Keep write calls' content in context (config: `write-facts = false`) [default: a write's
    /// content is stripped once its result is in, a one-line fact in its place].
    #[arg(long, env = "CTXD_NO_WRITE_FACTS")]
    pub no_write_facts: bool,
    /// Writes carrying fewer bytes of content than this keep it (config:
    /// `write-facts-min-bytes`; 1 to 10000000) [default: 400].
    #[arg(long, env = "CTXD_WRITE_FACTS_MIN_BYTES", value_name = "BYTES")]
    pub write_facts_min_bytes: Option<usize>,
    /// No shell-output digests for any agent (config: `digests = false`, or per agent in
    /// `[agents.NAME]`). On, a shell output above `--digest-min-tokens` reaches the model as a
    /// digest (head, tail, error and warning lines; a summary by the `--classifier-model` when
    /// the classifier is `openai`) naming the `recall` that shows it whole.
    #[arg(long, env = "CTXD_NO_DIGESTS")]
    pub no_digests: bool,
    /// Shell outputs of at least this many tokens are digested (1100 to 10000000; config:
    /// `digest-min-tokens`; the shell tools per agent: a `[digest-shell-tools]` table)
    /// [default: 2000].
    #[arg(long, env = "CTXD_DIGEST_MIN_TOKENS", value_name = "TOKENS",
          value_parser = parse_digest_min_tokens)]
    pub digest_min_tokens: Option<u64>,
    /// Meta-amnesia for every agent (config: `amnesia = true`, or per agent in
    /// `[agents.NAME]`) [default: off]. On, the results of read-like tools (Claude Code
    /// Read/Grep/Glob/LS, Pi read/grep/find/ls and read-only bash, Codex's read-only shell
    /// commands; a `[amnesia-read-tools.AGENT]` table with `tools` and `shell`) are judged by
    /// the classifier when they arrive, and a round whose every result is judged a drop is
    /// taken out of the request's tail for good.
    #[arg(long, env = "CTXD_AMNESIA", conflicts_with = "no_amnesia")]
    pub amnesia: bool,
    /// No meta-amnesia for any agent, whatever the settings file says (config:
    /// `amnesia = false`).
    #[arg(long, env = "CTXD_NO_AMNESIA")]
    pub no_amnesia: bool,
    /// Leave Anthropic `cache_control` breakpoints as the client sent them (config:
    /// `cache-plan = false`) [default: on a request whose conversation ctxd rewrites, the
    /// breakpoints are planned: the client's last one, the previous question, and after an
    /// edit a read point and a write anchor; at most 4].
    #[arg(long, env = "CTXD_NO_CACHE_PLAN")]
    pub no_cache_plan: bool,
    /// Read-like results under this many tokens are retained unjudged (0 to 10000000; config:
    /// `amnesia-min-tokens`) [default: 250].
    #[arg(long, env = "CTXD_AMNESIA_MIN_TOKENS", value_name = "TOKENS",
          value_parser = parse_amnesia_min_tokens)]
    pub amnesia_min_tokens: Option<u64>,
    /// Lazy tools for every agent (config: `lazy-tools = true`, or per agent in
    /// `[agents.NAME]`) [default: off]. On, only the agent's base set of the client's tools (a
    /// `[lazy-base-tools]` table: `AGENT = ["tool", ...]`) and `find_capability` go upstream;
    /// what the model finds is added until the user's next message. Each change of the set
    /// rewrites the provider's whole cached prompt.
    #[arg(long, env = "CTXD_LAZY_TOOLS", conflicts_with = "no_lazy_tools")]
    pub lazy_tools: bool,
    /// No lazy tools for any agent, whatever the settings file says (config:
    /// `lazy-tools = false`).
    #[arg(long, env = "CTXD_NO_LAZY_TOOLS")]
    pub no_lazy_tools: bool,
    /// ctxd's tools the gateway offers the model beside the client's own and answers itself:
    /// `all`, `none`, or a list of tools and groups (`reset`, `remaining`, `notes`, `history`,
    /// `recall`), e.g. `notes,recall` (config: `tools = ...`, or per agent in `[agents.NAME]`)
    /// [default: all].
    #[arg(long, env = "CTXD_TOOLS", value_name = "LIST", value_parser = parse_tools)]
    pub tools: Option<ctxd_gateway::config::ToolsSetting>,
    /// The context window of models whose name starts with MODEL, over ctxd's table
    /// (repeatable; config: a `[model-windows]` table).
    #[arg(long = "model-window", value_name = "MODEL=TOKENS", value_parser = parse_model_window)]
    pub model_windows: Vec<(String, u64)>,
    /// Seconds a response's end waits for the store to commit its turn; past it the client
    /// gets the API's error instead [default: 10].
    #[arg(long, env = "CTXD_COMMIT_TIMEOUT", value_name = "SECS")]
    pub commit_timeout: Option<u64>,
    /// While the store cannot be read (a database down): `refuse` answers HTTP 503 in the
    /// API's error shape; `pass` forwards requests unmanaged and unrecorded [default: refuse].
    #[arg(long, env = "CTXD_STORE_UNAVAILABLE", value_name = "MODE",
          value_parser = ctxd_gateway::config::parse_store_unavailable)]
    pub store_unavailable: Option<ctxd_gateway::config::StoreUnavailable>,
    /// `normal`: every commit survives a process crash, fsync at checkpoints; `full`: fsync
    /// every commit, survives power loss too (about 1 ms per commit) [default: normal].
    #[arg(long, env = "CTXD_STORE_SYNC", value_name = "MODE", value_parser = parse_store_sync)]
    pub store_sync: Option<ctxd_store::Durability>,
    /// After SIGTERM, seconds in-flight requests may run before the rest is closed (a second
    /// SIGTERM or Ctrl-C exits at once) [default: 30].
    #[arg(long, env = "CTXD_SHUTDOWN_TIMEOUT", value_name = "SECS")]
    pub shutdown_timeout: Option<u64>,
    /// Seconds a client may take to send a request's headers [default: 10].
    #[arg(long, env = "CTXD_HEADER_TIMEOUT", value_name = "SECS")]
    pub header_timeout: Option<u64>,
    /// Seconds a client may take to send a request's body [default: 60].
    #[arg(long, env = "CTXD_BODY_TIMEOUT", value_name = "SECS")]
    pub body_timeout: Option<u64>,
    /// Open client connections at most; more are answered 503 [default: 1024, lowered to fit
    /// the open-file limit].
    #[arg(long, env = "CTXD_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Serve clients that send no API key on a listener beyond loopback (they share one
    /// tenant) [default: refused there with 401].
    #[arg(long, env = "CTXD_ALLOW_KEYLESS")]
    pub allow_keyless: bool,
    /// How a request finds its tenant when it sends no ctxd key (`x-ctxd-key`, naming one of
    /// the config's `[tenants]`): `local` (one tenant whatever the credential: a token that
    /// rotates keeps its sessions and notes), `credential` (one tenant per API key), `named`
    /// (a ctxd key is required), `auto` (local on a loopback listener, credential beyond it)
    /// [default: auto].
    #[arg(long, env = "CTXD_TENANCY", value_name = "MODE", value_parser = ctxd_gateway::tenancy::TenancyMode::parse)]
    pub tenancy: Option<ctxd_gateway::tenancy::TenancyMode>,
    /// Export a span per request to this OpenTelemetry collector over OTLP/HTTP (JSON):
    /// `http://127.0.0.1:4318` (spans go to /v1/traces under it). GenAI attributes (models,
    /// tokens, finish reason), cost, ctxd's savings, session, project and agent; never content
    /// [default: none: nothing is exported, no connection made].
    #[arg(long, env = "CTXD_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// A spending limit, repeatable: `SCOPE/PERIOD=LIMIT[,warn=SHARE][,soft]` with SCOPE
    /// session, project, tenant or all, PERIOD day, month or total (UTC), LIMIT `$5` or tokens
    /// (`2m`). From the provider's reported usage and the model's price; past `warn` (0.8) the
    /// responses carry `x-ctxd-budget-warning`; at the limit requests are refused (400, the
    /// API's error) unless `soft`. Counted in the store, shared by every gateway on it.
    #[arg(long = "budget", env = "CTXD_BUDGET", value_name = "SPEC", value_delimiter = ';', value_parser = ctxd_core::spend::parse_budget)]
    pub budgets: Vec<ctxd_core::spend::Budget>,
    /// The environment variable holding the dashboard's operator token: a browser that sends
    /// it sees every tenant's sessions at `/ui` [default: none; beyond loopback each tenant
    /// sees only its own, by its API key].
    #[arg(long, env = "CTXD_ADMIN_TOKEN_ENV", value_name = "NAME")]
    pub admin_token_env: Option<String>,
    /// How stale the dashboard may show a session that keeps growing: its page and row are
    /// rebuilt at most once per interval, the copy served in between (0: at every change)
    /// [default: 2000].
    #[arg(long, env = "CTXD_UI_REFRESH_MS", value_name = "MS")]
    pub ui_refresh_ms: Option<u64>,
    /// Bytes of request bodies all requests may hold at once beyond each one's first MiB (a
    /// large body finding it spent waits 5 s, then gets 503) [default: 268435456].
    #[arg(long, env = "CTXD_MAX_BODIES_IN_FLIGHT_BYTES", value_name = "BYTES")]
    pub max_bodies_in_flight_bytes: Option<usize>,
    /// Bytes the cached sessions may hold in memory together, all in: their logs, the
    /// distillation's copies of their branches and their previous requests (at most a quarter
    /// of it); the least recently used beyond it are dropped and reloaded from the store when
    /// asked for again. The process's RSS stays within 1.4 × this + 192 MB [default:
    /// 536870912].
    #[arg(long, env = "CTXD_SESSION_CACHE_BYTES", value_name = "BYTES")]
    pub session_cache_bytes: Option<usize>,
    /// Sessions kept indexed in memory at most, whatever their bytes (the least recently used
    /// beyond it are dropped and reloaded when asked for again) [default: 256].
    #[arg(long, env = "CTXD_CACHED_SESSIONS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub cached_sessions: Option<u32>,
    #[command(flatten)]
    pub classifier: crate::classifier_args::ClassifierArgs,
    /// Longest a session's request waits for a distillation pass still running before going
    /// without its edits, which then land at the next request [default: 0].
    #[arg(long, env = "CTXD_DISTILL_WAIT_MS", value_name = "MS")]
    pub distill_wait_ms: Option<u64>,
    /// The share of one core distillation passes may use, in percent (1-100): passes queued
    /// by many sessions wait their turn instead of taking a core [default: 25].
    #[arg(long, env = "CTXD_DISTILL_CPU_PERCENT", value_name = "PERCENT",
          value_parser = parse_cpu_percent)]
    pub distill_cpu_percent: Option<u8>,
    /// Tools whose outputs distillation never edits, comma-separated, as the agent names them
    /// (`Read,Grep`; config: `distill-exclude-tools = ["Read"]`) [default: none].
    #[arg(
        long,
        env = "CTXD_DISTILL_EXCLUDE_TOOLS",
        value_name = "NAMES",
        value_delimiter = ','
    )]
    pub distill_exclude_tools: Option<Vec<String>>,
    /// An old exchange (a prompt and its run) is omitted whole, behind a stub naming its
    /// `recall`, when the classifier's P(relevant to the current work) is below this: 0 never
    /// omits one, keeping more of what later work comes back to at the cost of tokens
    /// (config: `exchange-omit`) [default: 0.2].
    #[arg(long, env = "CTXD_EXCHANGE_OMIT", value_name = "P",
          value_parser = parse_exchange_omit)]
    pub exchange_omit: Option<f32>,
    /// Log lines (stderr) as JSON objects instead of text. Which lines: `CTXD_LOG` (or
    /// `RUST_LOG`), a filter such as `debug` or `ctxd_gateway=debug`; default `info`.
    #[arg(long)]
    pub log_json: bool,
}

/// An `--exchange-omit` value (`ctxd serve`, `ctxd eval`).
pub(crate) fn parse_exchange_omit(s: &str) -> Result<f32, String> {
    let p: f32 = s.trim().parse().map_err(|e| format!("{s:?}: {e}"))?;
    ctxd_gateway::config::parse_exchange_omit(p)
}

fn parse_digest_min_tokens(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|e| format!("{s:?}: {e}"))?;
    ctxd_gateway::config::parse_digest_min_tokens(n)
}

fn parse_amnesia_min_tokens(s: &str) -> Result<u64, String> {
    let n: u64 = s
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|e| format!("{s:?}: {e}"))?;
    ctxd_gateway::config::parse_amnesia_min_tokens(n)
}

fn parse_cpu_percent(s: &str) -> Result<u8, String> {
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: expected a percent of one core, 1 to 100"))?;
    ctxd_gateway::config::parse_cpu_percent(n)
}

fn parse_store_sync(s: &str) -> Result<ctxd_store::Durability, String> {
    ctxd_gateway::config::parse_store_sync(s)
}

fn parse_tools(spec: &str) -> Result<ctxd_gateway::config::ToolsSetting, String> {
    ctxd_gateway::config::ToolsSetting::parse(spec)
}

fn parse_model_window(spec: &str) -> Result<(String, u64), String> {
    ctxd_gateway::config::parse_model_window(spec)
}

pub fn run(args: &ServeArgs, store: &StoreChoice) -> anyhow::Result<()> {
    let settings = settings(args, store)?;
    init_logging(args.log_json);

    let runtime = runtime(&settings)?;
    runtime.block_on(async {
        let server = Server::bind(settings.clone()).await?;
        let addr = server.local_addr()?;
        log_start(&settings, addr);
        // One line on stdout for people and scripts: where to point ANTHROPIC_BASE_URL.
        println!("ctxd serve: listening on http://{addr}");
        // The first signal stops the gateway gracefully, a second one at once.
        let (tx, signals) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                shutdown_signal().await;
                if tx.send(()).is_err() {
                    break;
                }
            }
        });
        server.run_signals(signals).await?;
        Ok::<(), anyhow::Error>(())
    })
}

/// The gateway's runtime: `workers` threads serving requests.
pub(crate) fn runtime(settings: &Settings) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.workers)
        .enable_all()
        .thread_name("ctxd-serve")
        .build()
        .context("cannot start the runtime")
}

/// The settings line a gateway logs when it starts.
pub(crate) fn log_start(settings: &Settings, addr: SocketAddr) {
    tracing::info!(
        %addr,
        store = %settings.store,
        anthropic = %settings.upstream_anthropic,
        openai = %settings.upstream_openai,
        gemini = %settings.upstream_gemini,
        record_only = settings.management.record_only,
        reminders = settings.management.mechanisms.reminders,
        resets = settings.management.mechanisms.resets,
        distill = settings.management.mechanisms.distill,
        digests = settings.management.mechanisms.digests,
        amnesia = settings.management.mechanisms.amnesia,
        lazy_tools = settings.management.mechanisms.lazy_tools,
        tools = ?settings.management.tools,
        "ctxd gateway listening"
    );
}

/// The gateway's settings: defaults, the config file, then flags and environment, validated.
pub(crate) fn settings(args: &ServeArgs, store: &StoreChoice) -> anyhow::Result<Settings> {
    let mut settings = Settings::new(store.location()?);
    if let Some(file) = &args.config {
        settings.apply_file(file).map_err(anyhow::Error::msg)?;
        // A store given on the command line or in CTXD_STORE wins over the file's.
        if store.given() {
            settings.store = store.location()?;
        }
    }
    server_flags(args, &mut settings);
    distill_flags(args, &mut settings);
    settings.classifier = args.classifier.over(&settings.classifier)?;
    crate::classifier_args::configured(&settings.classifier)?;
    management_flags(args, &mut settings.management);
    if args.no_cache_plan {
        settings.cache_plan = false;
    }
    settings.validate().map_err(anyhow::Error::msg)?;
    Ok(settings)
}

/// The flags of the server itself: listening, upstreams, limits, timeouts, tenancy, telemetry.
fn server_flags(args: &ServeArgs, settings: &mut Settings) {
    if let Some(listen) = args.listen {
        settings.listen = listen;
    }
    if let Some(u) = &args.upstream_anthropic {
        settings.upstream_anthropic.clone_from(u);
    }
    if let Some(u) = &args.upstream_openai {
        settings.upstream_openai.clone_from(u);
    }
    if let Some(u) = &args.upstream_gemini {
        settings.upstream_gemini.clone_from(u);
    }
    settings.routes.extend(args.routes.iter().cloned());
    if let Some(n) = args.max_body_bytes {
        settings.max_body_bytes = n;
    }
    if let Some(s) = args.connect_timeout {
        settings.connect_timeout = Duration::from_secs(s);
    }
    if let Some(s) = args.read_timeout {
        settings.read_timeout = Duration::from_secs(s);
    }
    if let Some(n) = args.workers {
        settings.workers = n;
    }
    if let Some(s) = args.commit_timeout {
        settings.commit_timeout = Duration::from_secs(s);
    }
    if let Some(d) = args.store_sync {
        settings.store_sync = d;
    }
    if let Some(u) = args.store_unavailable {
        settings.store_unavailable = u;
    }
    if let Some(s) = args.shutdown_timeout {
        settings.shutdown_timeout = Duration::from_secs(s);
    }
    if let Some(s) = args.header_timeout {
        settings.header_timeout = Duration::from_secs(s);
    }
    if let Some(s) = args.body_timeout {
        settings.body_timeout = Duration::from_secs(s);
    }
    if let Some(n) = args.max_connections {
        settings.max_connections = n;
    }
    settings.allow_keyless |= args.allow_keyless;
    if let Some(mode) = args.tenancy {
        settings.tenancy = mode;
    }
    settings.budgets.extend(args.budgets.iter().cloned());
    if let Some(url) = &args.otlp_endpoint {
        settings.otlp_endpoint = Some(url.clone());
    }
    if let Some(name) = &args.admin_token_env {
        settings.admin_token_env = Some(name.clone());
    }
    if let Some(ms) = args.ui_refresh_ms {
        settings.ui_refresh = Duration::from_millis(ms);
    }
    if let Some(n) = args.max_bodies_in_flight_bytes {
        settings.max_bodies_in_flight_bytes = n;
    }
    if let Some(n) = args.session_cache_bytes {
        settings.session_cache_bytes = n;
    }
    if let Some(n) = args.cached_sessions {
        settings.cached_sessions = n as usize;
    }
}

/// The flags of distillation, digests and meta-amnesia's thresholds.
fn distill_flags(args: &ServeArgs, settings: &mut Settings) {
    if let Some(p) = args.distill_cpu_percent {
        settings.distill_cpu_percent = p;
    }
    if let Some(tools) = &args.distill_exclude_tools {
        settings.distill_exclude_tools = tools
            .iter()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
    }
    if let Some(p) = args.exchange_omit {
        settings.exchange_omit = p;
    }
    if let Some(ms) = args.distill_wait_ms {
        settings.distill_wait = Duration::from_millis(ms);
    }
    if let Some(n) = args.digest_min_tokens {
        settings.digest.min_tokens = n;
    }
    if let Some(n) = args.amnesia_min_tokens {
        settings.amnesia.min_tokens = n;
    }
}

/// The flags of context management: thresholds, mechanisms on or off, ctxd's tools.
fn management_flags(args: &ServeArgs, m: &mut ctxd_gateway::config::Management) {
    m.record_only |= args.record_only;
    if let Some(n) = args.reserve {
        m.thresholds.reserve = n;
    }
    if let Some(n) = args.reminder_margin {
        m.thresholds.reminder_margin = n;
    }
    if let Some(n) = args.warning_runway {
        m.thresholds.warning_runway = n;
    }
    if args.no_reminders {
        m.mechanisms.reminders = false;
    }
    if args.no_resets {
        m.mechanisms.resets = false;
    }
    if args.no_distill {
        m.mechanisms.distill = false;
    }
    if args.no_write_facts {
        m.write_facts.enabled = false;
    }
    if let Some(n) = args.write_facts_min_bytes {
        m.write_facts.min_bytes = n;
    }
    if args.no_digests {
        m.mechanisms.digests = false;
    }
    if args.amnesia {
        m.mechanisms.amnesia = true;
    }
    if args.no_amnesia {
        m.mechanisms.amnesia = false;
    }
    if args.lazy_tools {
        m.mechanisms.lazy_tools = true;
    }
    if args.no_lazy_tools {
        m.mechanisms.lazy_tools = false;
    }
    if let Some(t) = &args.tools {
        m.tools = t.clone();
    }
    m.model_windows.extend(args.model_windows.iter().cloned());
}

/// Logs to stderr; `CTXD_LOG` (or `RUST_LOG`) sets the filter, `info` by default.
fn init_logging(json: bool) {
    init_logging_to(
        json,
        std::io::stderr,
        std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
}

/// Logs to `writer` (ANSI colours only where it is a terminal).
pub(crate) fn init_logging_to<W>(json: bool, writer: W, ansi: bool)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("CTXD_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
