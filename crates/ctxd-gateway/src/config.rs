//! Gateway settings: defaults, overridden by an optional TOML file, overridden by flags and
//! environment variables (the CLI applies those). No file is needed to start.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use ctxd_core::budget::Thresholds;
use serde::Deserialize;

/// Everything `ctxd serve` needs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    /// Origin (and optional path prefix) of the Anthropic API; the client's path is appended.
    pub upstream_anthropic: String,
    /// Origin (and optional path prefix) of the OpenAI API.
    pub upstream_openai: String,
    /// Origin (and optional path prefix) of Google's Gemini API.
    pub upstream_gemini: String,
    /// Upstreams per model pattern and API, over the three above (`crate::routes`).
    pub routes: Vec<crate::routes::Route>,
    pub store: ctxd_store::Location,
    /// Largest request body accepted (after decompression too).
    pub max_body_bytes: usize,
    pub connect_timeout: Duration,
    /// Longest wait for the upstream's response headers, and then between two chunks.
    pub read_timeout: Duration,
    /// Sessions kept indexed in memory (least recently used beyond this are dropped).
    pub cached_sessions: usize,
    /// Bytes the cached sessions may hold in memory together: logs, the distillation's branch
    /// copies and the previous requests kept for splitting (at most a quarter of it). The least
    /// recently used beyond it are dropped, and reloaded from the store when next asked for.
    pub session_cache_bytes: usize,
    /// Threads serving requests. One by default: a request costs the gateway well under a
    /// millisecond of CPU (about one at 1 MB bodies), and on few cores every hand-off between
    /// two workers (waking a parked one) costs more tail latency than the parallelism brings
    /// (measured: docs/benchmarks.md). Raise it for a gateway serving many busy agents at once.
    /// The store's writer and blocking reads have threads of their own.
    pub workers: usize,
    /// Longest a response's end waits for the store to commit its turn; past it the client
    /// gets the API's error instead of the end (see `relay.rs`).
    pub commit_timeout: Duration,
    /// `synchronous` of the gateway's store: `Normal` (the default) survives a process crash
    /// at every commit and fsyncs at checkpoints; `Full` fsyncs every commit, surviving power
    /// loss too, for about a millisecond per commit (docs/store.md).
    pub store_sync: ctxd_store::Durability,
    /// What a conversation request gets when its session cannot be read from the store (a
    /// database down, a disk failing).
    pub store_unavailable: StoreUnavailable,
    /// After SIGTERM, how long in-flight requests may run before what is left is closed
    /// (each open stream ends with the API's error event).
    pub shutdown_timeout: Duration,
    /// Longest a client may take to send a request's headers (a stalled client is dropped).
    pub header_timeout: Duration,
    /// Longest a client may take to send a request's body (answered 408).
    pub body_timeout: Duration,
    /// Open client connections at most; more are answered 503 and closed at once. Lowered at
    /// start to fit the open-file limit (raised to the hard limit first).
    pub max_connections: usize,
    /// Serve clients that send no API key on a listener beyond loopback (they share one
    /// tenant, so anyone who can reach the port reads their sessions). Off by default.
    pub allow_keyless: bool,
    /// How a request finds its tenant (`tenancy.rs`): one local tenant on loopback by default.
    pub tenancy: crate::tenancy::TenancyMode,
    /// Operator-named tenants, found by the `x-ctxd-key` their clients send.
    pub tenants: crate::tenancy::NamedTenants,
    /// Where spans go over OTLP/HTTP (`http://host:4318`); none: nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// Spending limits per session, project, tenant or everything, per day, month or ever.
    pub budgets: Vec<ctxd_core::spend::Budget>,
    /// Prices for budgets in dollars: the user's, then the list prices.
    pub prices: ctxd_core::spend::PriceTable,
    /// The environment variable holding the dashboard's operator token (`/ui` shows every
    /// tenant to whoever sends it). The name, not the token: settings are printed and logged.
    pub admin_token_env: Option<String>,
    /// How stale the dashboard may show a session that keeps growing: its page and its row's
    /// figures are rebuilt at most once per interval (each rebuild reads and reports the whole
    /// session), the copy served in between. Zero: rebuilt at every change.
    pub ui_refresh: Duration,
    /// Bytes of request bodies (raw and decoded) all requests may hold at once beyond each
    /// one's first MiB; a large body finding it spent waits briefly, then gets 503.
    pub max_bodies_in_flight_bytes: usize,
    /// Longest a session's request waits for a distillation pass still running (0: not at
    /// all); past it the request goes without that pass's edits, which land at the next.
    pub distill_wait: Duration,
    /// The share of one core distillation passes may use, in percent (1-100): a pass waits
    /// until the ones before it are within it.
    pub distill_cpu_percent: u8,
    /// Tools whose outputs distillation never edits (names as the agent calls them, e.g.
    /// `Read`): what the user wants the model to keep seeing whole.
    pub distill_exclude_tools: Vec<String>,
    /// An old exchange is omitted whole when the classifier's P(relevant) is below this (0:
    /// never omitted; the seed's 0.2). Omission saves the most after distillation's own edits
    /// and is what retention trades for it (docs/eval.md).
    pub exchange_omit: f32,
    /// Distillation's thresholds (`distill-chunk-keep`, `distill-none-threshold`,
    /// `distill-max-keep-ratio`,
    /// `distill-small-min-chars`, `distill-min-result-chars`; `ctxd eval --sweep` measures them).
    pub distill_tuning: DistillTuning,
    /// The classifier distillation asks (`[classifier]` in the file; local by default).
    pub classifier: ctxd_engine::distill::ClassifierSettings,
    /// What ctxd changes in what the model sees.
    pub management: Management,
    /// Shell-output digests' thresholds and shell tools (on or off per agent in
    /// [`Mechanisms::digests`]).
    pub digest: ctxd_core::mechanisms::digest::Config,
    /// Meta-amnesia's threshold and read-like tools (on or off per agent in
    /// [`Mechanisms::amnesia`]).
    pub amnesia: ctxd_core::mechanisms::amnesia::Config,
    /// How long a request waits for its round's judgment at most (past it: retained).
    pub amnesia_budget: Duration,
    /// Anthropic `cache_control` breakpoints planned on the requests ctxd rewrites, and
    /// recorded on every request (`--no-cache-plan` leaves the client's as they are).
    pub cache_plan: bool,
}

/// What ctxd changes in the requests it forwards, and with which budget.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Management {
    /// Record only: every request goes upstream as the client's own bytes; conversations are
    /// still stored and reported, but nothing is injected and no window is reset.
    pub record_only: bool,
    /// The budget's lines before they are fitted to a model's window (the seed's defaults).
    pub thresholds: Thresholds,
    /// The mechanisms for every agent, unless `agents` says otherwise.
    pub mechanisms: Mechanisms,
    /// Per agent name (`claude-code`, `codex`, `pi`, `sdk`, or an `x-ctxd-agent` name).
    pub agents: BTreeMap<String, MechanismOverrides>,
    /// Context windows by model-name prefix, checked before ctxd's own table (longest prefix
    /// wins).
    pub model_windows: Vec<(String, u64)>,
    /// ctxd's tools the gateway offers the model and answers itself, unless `agents` says
    /// otherwise.
    pub tools: ToolsSetting,
    /// Write facts: a write's content stripped at the tail, a fact in its place
    /// (`--no-write-facts`, `--write-facts-min-bytes`; `write-facts`, `write-facts-min-bytes`).
    pub write_facts: ctxd_core::mechanisms::writes::Settings,
    /// Lazy tools' base set per agent (on or off per agent in [`Mechanisms::lazy_tools`];
    /// `[lazy-base-tools]`: `AGENT = ["tool", ...]`, `other` for agents without a row).
    pub lazy_base: ctxd_core::mechanisms::lazy::BaseTools,
}

/// Which of ctxd's tools the gateway adds to a request's tool list (`--tools`, `tools = ...`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolsSetting {
    /// Every tool of the engine's registry (the default: the model keeps its notes, resets
    /// its window and finds its way back through history and `recall`).
    #[default]
    All,
    /// None: the client's tools go upstream alone.
    None,
    /// These tools, by name or group (`reset`, `remaining`, `notes`, `history`, `recall`).
    Names(Vec<String>),
}

impl ToolsSetting {
    /// `all`, `none`, or a comma-separated list of tool and group names.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let spec = spec.trim();
        match spec.to_ascii_lowercase().as_str() {
            "all" => return Ok(ToolsSetting::All),
            "none" | "" => return Ok(ToolsSetting::None),
            _ => {}
        }
        let known = offerable();
        let names: Vec<String> = spec
            .split(',')
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        for n in &names {
            if !known.contains(&n.as_str()) && group(n).is_none() {
                return Err(format!(
                    "tools {n:?}: not one of ctxd's tools ({}) nor a group (reset, remaining, notes, history, recall)",
                    known.join(", ")
                ));
            }
        }
        Ok(ToolsSetting::Names(names))
    }

    /// The tool names this setting offers, in the registry's order.
    pub fn names(&self) -> Vec<&'static str> {
        let all = offerable();
        match self {
            ToolsSetting::All => all.to_vec(),
            ToolsSetting::None => Vec::new(),
            ToolsSetting::Names(names) => {
                let wanted = |tool: &str| {
                    names
                        .iter()
                        .any(|n| n == tool || group(n).is_some_and(|g| g.contains(&tool)))
                };
                all.iter().copied().filter(|n| wanted(n)).collect()
            }
        }
    }
}

/// The registry's tools this setting chooses among: all but `find_capability`, which lazy tools
/// offer (and only then).
fn offerable() -> Vec<&'static str> {
    ctxd_engine::tools::names()
        .iter()
        .copied()
        .filter(|n| *n != ctxd_core::mechanisms::lazy::FIND_CAPABILITY)
        .collect()
}

/// The tools of a group name.
fn group(name: &str) -> Option<Vec<&'static str>> {
    use ctxd_core::offered as o;
    Some(match name {
        "reset" => vec![o::RESET_TOOL, o::RESET_ALIAS],
        "remaining" => vec![o::REMAINING_TOOL],
        "notes" => o::NOTES_TOOLS.to_vec(),
        "history" => o::HISTORY_TOOLS.to_vec(),
        "recall" => vec![o::RECALL_TOOL],
        _ => return None,
    })
}

impl<'de> Deserialize<'de> for ToolsSetting {
    /// `"all"`, `"none"`, `"notes,recall"`, or a list `["notes", "recall"]`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(String),
            List(Vec<String>),
        }
        let spec = match Raw::deserialize(d)? {
            Raw::One(s) => s,
            Raw::List(l) if l.is_empty() => "none".to_owned(),
            Raw::List(l) => l.join(","),
        };
        ToolsSetting::parse(&spec).map_err(serde::de::Error::custom)
    }
}

pub use ctxd_engine::turn::Mechanisms;

/// An agent's departures from the default [`Mechanisms`] and tools.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MechanismOverrides {
    pub reminders: Option<bool>,
    pub resets: Option<bool>,
    pub distill: Option<bool>,
    pub digests: Option<bool>,
    pub amnesia: Option<bool>,
    pub lazy_tools: Option<bool>,
    pub tools: Option<ToolsSetting>,
}

impl Management {
    /// The mechanisms for agent `agent`.
    pub fn mechanisms_for(&self, agent: &str) -> Mechanisms {
        let mut m = self.mechanisms;
        if let Some(o) = self.agents.get(agent) {
            m.reminders = o.reminders.unwrap_or(m.reminders);
            m.resets = o.resets.unwrap_or(m.resets);
            m.distill = o.distill.unwrap_or(m.distill);
            m.digests = o.digests.unwrap_or(m.digests);
            m.amnesia = o.amnesia.unwrap_or(m.amnesia);
            m.lazy_tools = o.lazy_tools.unwrap_or(m.lazy_tools);
        }
        m
    }

    /// ctxd's tools offered to agent `agent`'s model.
    pub fn tools_for(&self, agent: &str) -> &ToolsSetting {
        self.agents
            .get(agent)
            .and_then(|o| o.tools.as_ref())
            .unwrap_or(&self.tools)
    }

    /// The configured window of `model` (longest matching prefix, case-insensitive).
    pub fn configured_window(&self, model: &str) -> Option<u64> {
        let m = model.to_ascii_lowercase();
        self.model_windows
            .iter()
            .filter(|(prefix, _)| m.starts_with(&prefix.to_ascii_lowercase()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|&(_, w)| w)
    }
}

/// `MODEL=TOKENS` (a `--model-window` value).
pub fn parse_model_window(spec: &str) -> Result<(String, u64), String> {
    let (model, tokens) = spec
        .rsplit_once('=')
        .ok_or_else(|| format!("--model-window {spec:?}: expected MODEL=TOKENS"))?;
    let tokens: u64 = tokens
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|e| format!("--model-window {spec:?}: {e}"))?;
    if model.trim().is_empty() || tokens == 0 {
        return Err(format!(
            "--model-window {spec:?}: expected a model name and a window above 0"
        ));
    }
    Ok((model.trim().to_owned(), tokens))
}

/// `normal` or `full` (a `--store-sync` value).
/// What a conversation request gets while the store cannot be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreUnavailable {
    /// HTTP 503 in the API's error shape, with `Retry-After`: nothing reaches the provider
    /// that the store could not record, so nothing answered is missing from the log.
    #[default]
    Refuse,
    /// Forwarded as the client sent it, unmanaged and unrecorded (the agent keeps working;
    /// those turns are missing from the log, and the next managed request sees them only as
    /// the client resends them).
    Pass,
}

pub fn parse_store_unavailable(s: &str) -> Result<StoreUnavailable, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "refuse" => Ok(StoreUnavailable::Refuse),
        "pass" => Ok(StoreUnavailable::Pass),
        other => Err(format!(
            "store-unavailable {other:?}: expected refuse or pass"
        )),
    }
}

pub fn parse_store_sync(s: &str) -> Result<ctxd_store::Durability, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "normal" => Ok(ctxd_store::Durability::Normal),
        "full" => Ok(ctxd_store::Durability::Full),
        other => Err(format!("store-sync {other:?}: expected normal or full")),
    }
}

/// Distillation's thresholds a user may tune: where a chunk is kept, how much of an output is
/// worth an edit, and the range of outputs judged whole (below it, too small to judge; above
/// it, chunked).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DistillTuning {
    /// A chunk is kept when P(needed) reaches this (0 to 1).
    pub chunk_keep: f32,
    /// A whole output goes only when "none needed" wins with at least this (0 to 1).
    pub none_threshold: f32,
    /// Keeping more than this share of an output is not worth an edit (0 to 1).
    pub max_keep_ratio: f32,
    /// Outputs from this many characters are judged whole...
    pub small_min_chars: usize,
    /// ...and from this many, chunked.
    pub min_result_chars: usize,
}

impl Default for DistillTuning {
    fn default() -> Self {
        let c = ctxd_core::distill::Config::default();
        DistillTuning {
            chunk_keep: c.chunk_keep,
            none_threshold: c.none_threshold,
            max_keep_ratio: c.max_keep_ratio,
            small_min_chars: c.small_min_chars,
            min_result_chars: c.min_result_chars,
        }
    }
}

impl DistillTuning {
    /// The thresholds, checked: probabilities 0 to 1, and the small-output range not empty.
    pub fn checked(self) -> Result<Self, String> {
        for (name, p) in [
            ("distill-chunk-keep", self.chunk_keep),
            ("distill-none-threshold", self.none_threshold),
            ("distill-max-keep-ratio", self.max_keep_ratio),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name}: {p}: expected a probability, 0 to 1"));
            }
        }
        if self.small_min_chars >= self.min_result_chars {
            return Err(format!(
                "distill-small-min-chars ({}) must be below distill-min-result-chars ({})",
                self.small_min_chars, self.min_result_chars
            ));
        }
        Ok(self)
    }
}

/// An `--exchange-omit` probability: 0 (old exchanges are never omitted) to 1.
pub fn parse_exchange_omit(p: f32) -> Result<f32, String> {
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p}: expected a probability from 0 to 1"))
    }
}

/// A meta-amnesia threshold in tokens, in [`ctxd_core::mechanisms::amnesia::MIN_TOKENS_RANGE`].
pub fn parse_amnesia_min_tokens(n: u64) -> Result<u64, String> {
    let r = &ctxd_core::mechanisms::amnesia::MIN_TOKENS_RANGE;
    if r.contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n}: expected {} to {} tokens", r.start(), r.end()))
    }
}

/// The digest threshold's range (a `--digest-min-tokens` value): above the digest's own cap,
/// so a digest is always smaller than what it replaces.
pub const DIGEST_MIN_TOKENS: std::ops::RangeInclusive<u64> = 1_100..=10_000_000;

/// A digest threshold in tokens, in [`DIGEST_MIN_TOKENS`].
pub fn parse_digest_min_tokens(n: u64) -> Result<u64, String> {
    if DIGEST_MIN_TOKENS.contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{n}: expected {} to {} tokens",
            DIGEST_MIN_TOKENS.start(),
            DIGEST_MIN_TOKENS.end()
        ))
    }
}

/// A share of one core in percent, 1 to 100 (a `--distill-cpu-percent` value).
pub fn parse_cpu_percent(n: u64) -> Result<u8, String> {
    match u8::try_from(n) {
        Ok(p @ 1..=100) => Ok(p),
        _ => Err(format!("{n}: expected a percent of one core, 1 to 100")),
    }
}

impl Settings {
    pub fn new(store: impl Into<ctxd_store::Location>) -> Self {
        Settings {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            upstream_anthropic: "https://api.anthropic.com".into(),
            upstream_openai: "https://api.openai.com".into(),
            upstream_gemini: "https://generativelanguage.googleapis.com".into(),
            routes: Vec::new(),
            store: store.into(),
            max_body_bytes: 64 * 1024 * 1024,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(600),
            cached_sessions: 256,
            session_cache_bytes: 512 * 1024 * 1024,
            workers: 1,
            commit_timeout: Duration::from_secs(10),
            store_sync: ctxd_store::Durability::Normal,
            store_unavailable: StoreUnavailable::Refuse,
            shutdown_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            allow_keyless: false,
            tenancy: crate::tenancy::TenancyMode::Auto,
            tenants: crate::tenancy::NamedTenants::new(),
            budgets: Vec::new(),
            otlp_endpoint: None,
            prices: ctxd_core::spend::PriceTable::default(),
            admin_token_env: None,
            ui_refresh: Duration::from_secs(2),
            max_bodies_in_flight_bytes: 256 * 1024 * 1024,
            distill_wait: Duration::ZERO,
            distill_cpu_percent: ctxd_core::pace::DEFAULT_CPU_PERCENT,
            distill_exclude_tools: Vec::new(),
            exchange_omit: ctxd_core::distill::Config::default().exchange_omit,
            distill_tuning: DistillTuning::default(),
            classifier: ctxd_engine::distill::ClassifierSettings::default(),
            management: Management::default(),
            digest: ctxd_core::mechanisms::digest::Config::default(),
            amnesia: ctxd_core::mechanisms::amnesia::Config::default(),
            amnesia_budget: ctxd_engine::amnesia::DEFAULT_BUDGET,
            cache_plan: true,
        }
    }

    /// Apply a TOML settings file over these settings.
    pub fn apply_file(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        let file: FileSettings = toml::from_str(&text)
            .map_err(|e| format!("config {}: {}", path.display(), e.message()))?;
        if let Some(listen) = file.listen {
            self.listen = listen
                .parse()
                .map_err(|e| format!("config {}: listen {listen:?}: {e}", path.display()))?;
        }
        if let Some(u) = file.upstream_anthropic {
            self.upstream_anthropic = u;
        }
        if let Some(u) = file.upstream_openai {
            self.upstream_openai = u;
        }
        if let Some(u) = file.upstream_gemini {
            self.upstream_gemini = u;
        }
        for route in file.routes.unwrap_or_default() {
            let route = route
                .checked()
                .map_err(|e| format!("config {}: [[routes]]: {e}", path.display()))?;
            self.routes.push(route);
        }
        if let Some(s) = file.store {
            self.store = ctxd_store::Location::parse(&s);
        }
        if let Some(n) = file.max_body_bytes {
            self.max_body_bytes = n;
        }
        if let Some(s) = file.connect_timeout {
            self.connect_timeout = Duration::from_secs(s);
        }
        if let Some(s) = file.read_timeout {
            self.read_timeout = Duration::from_secs(s);
        }
        if let Some(n) = file.cached_sessions {
            self.cached_sessions = n.max(1);
        }
        if let Some(n) = file.session_cache_bytes {
            self.session_cache_bytes = n;
        }
        if let Some(n) = file.workers {
            self.workers = n;
        }
        if let Some(s) = file.commit_timeout {
            self.commit_timeout = Duration::from_secs(s);
        }
        if let Some(s) = file.store_unavailable {
            self.store_unavailable = parse_store_unavailable(&s)
                .map_err(|e| format!("config {}: {e}", path.display()))?;
        }
        if let Some(s) = file.store_sync {
            self.store_sync = parse_store_sync(&s)?;
        }
        if let Some(s) = file.shutdown_timeout {
            self.shutdown_timeout = Duration::from_secs(s);
        }
        if let Some(s) = file.header_timeout {
            self.header_timeout = Duration::from_secs(s);
        }
        if let Some(s) = file.body_timeout {
            self.body_timeout = Duration::from_secs(s);
        }
        if let Some(n) = file.max_connections {
            self.max_connections = n;
        }
        if let Some(b) = file.allow_keyless {
            self.allow_keyless = b;
        }
        if let Some(mode) = file.tenancy {
            self.tenancy = crate::tenancy::TenancyMode::parse(&mode)
                .map_err(|e| format!("config {}: {e}", path.display()))?;
        }
        for (name, value) in file.tenants.unwrap_or_default() {
            let hash = crate::tenancy::check_name(&name)
                .and_then(|()| crate::tenancy::parse_key_hash(&value))
                .map_err(|e| format!("config {}: [tenants] {name}: {e}", path.display()))?;
            self.tenants.insert(name, hash);
        }
        for b in file.budgets.unwrap_or_default() {
            let budget = b
                .budget()
                .map_err(|e| format!("config {}: [[budgets]]: {e}", path.display()))?;
            self.budgets.push(budget);
        }
        if let Some(url) = file.otlp_endpoint {
            self.otlp_endpoint = Some(url);
        }
        if let Some(prices) = file.prices {
            self.prices = ctxd_core::spend::PriceTable::new(prices);
        }
        if let Some(name) = file.admin_token_env {
            self.admin_token_env = Some(name);
        }
        if let Some(ms) = file.ui_refresh_ms {
            self.ui_refresh = Duration::from_millis(ms);
        }
        if let Some(n) = file.max_bodies_in_flight_bytes {
            self.max_bodies_in_flight_bytes = n;
        }
        if let Some(ms) = file.distill_wait_ms {
            self.distill_wait = Duration::from_millis(ms);
        }
        if let Some(p) = file.distill_cpu_percent {
            self.distill_cpu_percent = parse_cpu_percent(p)
                .map_err(|e| format!("config {}: distill-cpu-percent: {e}", path.display()))?;
        }
        if let Some(tools) = file.distill_exclude_tools {
            self.distill_exclude_tools = tools;
        }
        if let Some(p) = file.exchange_omit {
            self.exchange_omit = parse_exchange_omit(p)
                .map_err(|e| format!("config {}: exchange-omit: {e}", path.display()))?;
        }
        let t = &mut self.distill_tuning;
        let mut tuned = *t;
        tuned.chunk_keep = file.distill_chunk_keep.unwrap_or(t.chunk_keep);
        tuned.none_threshold = file.distill_none_threshold.unwrap_or(t.none_threshold);
        tuned.max_keep_ratio = file.distill_max_keep_ratio.unwrap_or(t.max_keep_ratio);
        tuned.small_min_chars = file.distill_small_min_chars.unwrap_or(t.small_min_chars);
        tuned.min_result_chars = file.distill_min_result_chars.unwrap_or(t.min_result_chars);
        *t = tuned
            .checked()
            .map_err(|e| format!("config {}: {e}", path.display()))?;
        if let Some(c) = file.classifier {
            self.classifier = c;
        }
        let m = &mut self.management;
        if let Some(b) = file.record_only {
            m.record_only = b;
        }
        if let Some(n) = file.reserve {
            m.thresholds.reserve = n;
        }
        if let Some(n) = file.reminder_margin {
            m.thresholds.reminder_margin = n;
        }
        if let Some(n) = file.warning_runway {
            m.thresholds.warning_runway = n;
        }
        if let Some(b) = file.reminders {
            m.mechanisms.reminders = b;
        }
        if let Some(b) = file.resets {
            m.mechanisms.resets = b;
        }
        if let Some(b) = file.distill {
            m.mechanisms.distill = b;
        }
        if let Some(b) = file.digests {
            m.mechanisms.digests = b;
        }
        if let Some(n) = file.digest_min_tokens {
            self.digest.min_tokens = parse_digest_min_tokens(n)
                .map_err(|e| format!("config {}: digest-min-tokens: {e}", path.display()))?;
        }
        for (agent, tools) in file.digest_shell_tools {
            if agent == "other" {
                self.digest.shell_tools.other = tools;
            } else {
                self.digest.shell_tools.agents.insert(agent, tools);
            }
        }
        if let Some(t) = file.tools {
            m.tools = t;
        }
        if let Some(b) = file.write_facts {
            m.write_facts.enabled = b;
        }
        if let Some(n) = file.write_facts_min_bytes {
            m.write_facts.min_bytes = n;
        }
        m.agents.extend(file.agents);
        // Flags given later are pushed after these and win (see `configured_window`: the
        // longest prefix wins, and among equal prefixes the last).
        m.model_windows.extend(file.model_windows);
        if let Some(b) = file.amnesia {
            self.management.mechanisms.amnesia = b;
        }
        if let Some(b) = file.cache_plan {
            self.cache_plan = b;
        }
        if let Some(n) = file.amnesia_min_tokens {
            self.amnesia.min_tokens = parse_amnesia_min_tokens(n)
                .map_err(|e| format!("config {}: amnesia-min-tokens: {e}", path.display()))?;
        }
        if let Some(b) = file.lazy_tools {
            self.management.mechanisms.lazy_tools = b;
        }
        for (agent, tools) in file.lazy_base_tools {
            let base = &mut self.management.lazy_base;
            if agent == "other" {
                base.other = tools;
            } else {
                base.agents.insert(agent, tools);
            }
        }
        for (agent, reads) in file.amnesia_read_tools {
            if agent == "other" {
                self.amnesia.read_tools.other = reads;
            } else {
                self.amnesia.read_tools.agents.insert(agent, reads);
            }
        }
        Ok(())
    }

    /// Check the upstream URLs (trailing slashes removed) and the worker count.
    /// Distillation's settings before a pass fills in its session (store id, provider).
    pub fn distill_config(&self) -> ctxd_core::distill::Config {
        ctxd_core::distill::Config {
            exclude_tools: self.distill_exclude_tools.clone(),
            exchange_omit: self.exchange_omit,
            chunk_keep: self.distill_tuning.chunk_keep,
            none_threshold: self.distill_tuning.none_threshold,
            max_keep_ratio: self.distill_tuning.max_keep_ratio,
            small_min_chars: self.distill_tuning.small_min_chars,
            min_result_chars: self.distill_tuning.min_result_chars,
            ..ctxd_core::distill::Config::default()
        }
    }

    pub fn validate(&mut self) -> Result<(), String> {
        if !(1..=1024).contains(&self.workers) {
            return Err(format!("--workers {} must be 1 to 1024", self.workers));
        }
        if self.max_connections == 0 {
            return Err("--max-connections must be at least 1".into());
        }
        let min = &ctxd_core::mechanisms::writes::MIN_BYTES_RANGE;
        if !min.contains(&self.management.write_facts.min_bytes) {
            return Err(format!(
                "--write-facts-min-bytes {} must be {} to {}",
                self.management.write_facts.min_bytes,
                min.start(),
                min.end()
            ));
        }
        if self.tenancy == crate::tenancy::TenancyMode::Named && self.tenants.is_empty() {
            return Err(
                "--tenancy named serves named tenants only, and the config names none \
                 ([tenants]; `ctxd tenant-key NAME` makes one)"
                    .into(),
            );
        }
        if let Some(name) = &self.admin_token_env {
            // At start, not at the first dashboard request: a token that is not there is a
            // mistake the operator should see at once.
            crate::ui::admin_token(name)?;
        }
        for (name, d) in [
            ("header-timeout", self.header_timeout),
            ("body-timeout", self.body_timeout),
            ("commit-timeout", self.commit_timeout),
        ] {
            if d.is_zero() {
                return Err(format!("--{name} must be at least 1 second"));
            }
        }
        if let Some(url) = &self.otlp_endpoint {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| format!("--otlp-endpoint {url:?} is not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(format!("--otlp-endpoint {url:?} must be http or https"));
            }
        }
        for (name, url) in [
            ("upstream-anthropic", &mut self.upstream_anthropic),
            ("upstream-openai", &mut self.upstream_openai),
            ("upstream-gemini", &mut self.upstream_gemini),
        ] {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| format!("--{name} {url:?} is not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(format!("--{name} {url:?} must be http or https"));
            }
            while url.ends_with('/') {
                url.pop();
            }
        }
        Ok(())
    }
}

/// The TOML file's shape: every field optional, unknown fields refused (a typo is an error,
/// not a silently ignored setting).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileSettings {
    listen: Option<String>,
    upstream_anthropic: Option<String>,
    upstream_openai: Option<String>,
    upstream_gemini: Option<String>,
    /// `[[routes]]`: model = PATTERN, api = NAME (optional), upstream = URL, name (optional).
    routes: Option<Vec<crate::routes::Route>>,
    /// A file path, or a `postgres://` URL.
    store: Option<String>,
    max_body_bytes: Option<usize>,
    /// Seconds, as `--connect-timeout` (`connect-timeout-secs` is the older name).
    #[serde(alias = "connect-timeout-secs")]
    connect_timeout: Option<u64>,
    /// Seconds, as `--read-timeout` (`read-timeout-secs` is the older name).
    #[serde(alias = "read-timeout-secs")]
    read_timeout: Option<u64>,
    cached_sessions: Option<usize>,
    session_cache_bytes: Option<usize>,
    workers: Option<usize>,
    /// Seconds, as `--commit-timeout`.
    #[serde(alias = "commit-timeout-secs")]
    commit_timeout: Option<u64>,
    store_sync: Option<String>,
    /// `refuse` or `pass`, as `--store-unavailable`.
    store_unavailable: Option<String>,
    /// Seconds, as `--shutdown-timeout`.
    #[serde(alias = "shutdown-timeout-secs")]
    shutdown_timeout: Option<u64>,
    /// Seconds, as `--header-timeout`.
    #[serde(alias = "header-timeout-secs")]
    header_timeout: Option<u64>,
    /// Seconds, as `--body-timeout`.
    #[serde(alias = "body-timeout-secs")]
    body_timeout: Option<u64>,
    max_connections: Option<usize>,
    allow_keyless: Option<bool>,
    /// `auto`, `local`, `credential` or `named`, as `--tenancy`.
    tenancy: Option<String>,
    /// `[tenants]` table: a tenant's name = `"b3:<BLAKE3 of its key>"` (`ctxd tenant-key`).
    tenants: Option<BTreeMap<String, String>>,
    /// As `--otlp-endpoint`.
    otlp_endpoint: Option<String>,
    /// `[[budgets]]` tables, as `--budget`.
    budgets: Option<Vec<FileBudget>>,
    /// `[prices]` table: model-name prefix = `{ input, output, cache-read, cache-write }`.
    prices: Option<BTreeMap<String, ctxd_core::spend::Price>>,
    admin_token_env: Option<String>,
    /// Milliseconds, as `--ui-refresh-ms`.
    ui_refresh_ms: Option<u64>,
    max_bodies_in_flight_bytes: Option<usize>,
    /// Milliseconds, as `--distill-wait-ms`.
    distill_wait_ms: Option<u64>,
    /// Percent of one core, as `--distill-cpu-percent`.
    distill_cpu_percent: Option<u64>,
    /// Tool names, as `--distill-exclude-tools`.
    distill_exclude_tools: Option<Vec<String>>,
    /// A probability, as `--exchange-omit`.
    exchange_omit: Option<f32>,
    distill_chunk_keep: Option<f32>,
    distill_none_threshold: Option<f32>,
    distill_max_keep_ratio: Option<f32>,
    distill_small_min_chars: Option<usize>,
    distill_min_result_chars: Option<usize>,
    /// `[classifier]` table: `kind`, `base_url`, `model`, `api_key_env`, `timeout_ms`,
    /// `concurrency`, `price_per_mtok`.
    classifier: Option<ctxd_engine::distill::ClassifierSettings>,
    record_only: Option<bool>,
    reserve: Option<u64>,
    reminder_margin: Option<u64>,
    warning_runway: Option<u64>,
    reminders: Option<bool>,
    resets: Option<bool>,
    distill: Option<bool>,
    digests: Option<bool>,
    /// Tokens, as `--digest-min-tokens`.
    digest_min_tokens: Option<u64>,
    /// `[digest-shell-tools]` table: `AGENT = ["tool", ...]`, the shell tools whose outputs
    /// are digested (over the defaults per agent; `other` for agents without a row).
    #[serde(default)]
    digest_shell_tools: BTreeMap<String, Vec<String>>,
    amnesia: Option<bool>,
    /// `cache-plan = false` as `--no-cache-plan`.
    cache_plan: Option<bool>,
    /// Tokens, as `--amnesia-min-tokens`.
    amnesia_min_tokens: Option<u64>,
    /// `[amnesia-read-tools.AGENT]` tables: `tools = [...]` (every result a read) and
    /// `shell = [...]` (a read when the command only reads); `other` for agents without a row.
    #[serde(default)]
    amnesia_read_tools: BTreeMap<String, ctxd_core::mechanisms::amnesia::AgentReads>,
    tools: Option<ToolsSetting>,
    lazy_tools: Option<bool>,
    /// `[lazy-base-tools]` table: `AGENT = ["tool", ...]`, the client's tools that always go
    /// upstream with lazy tools (over the defaults per agent; `other` for agents without a row).
    #[serde(default)]
    lazy_base_tools: BTreeMap<String, Vec<String>>,
    write_facts: Option<bool>,
    write_facts_min_bytes: Option<usize>,
    /// `[agents.NAME]` tables: `reminders`, `resets`, `distill`, `digests`, `amnesia`,
    /// `lazy-tools`, `tools`.
    #[serde(default)]
    agents: BTreeMap<String, MechanismOverrides>,
    /// `[model-windows]` table: `"MODEL_PREFIX" = TOKENS`.
    #[serde(default)]
    model_windows: BTreeMap<String, u64>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn routes_from_the_file_are_checked_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctxd.toml");
        std::fs::write(
            &path,
            "[[routes]]\nmodel = \"deepseek-*\"\napi = \"anthropic\"\nupstream = \"https://api.deepseek.com/anthropic/\"\n\n\
             [[routes]]\nmodel = \"*\"\napi = \"chat\"\nupstream = \"http://127.0.0.1:8080\"\nname = \"local\"\n",
        )
        .unwrap();
        let mut s = Settings::new("x.db");
        s.apply_file(&path).unwrap();
        let names: Vec<_> = s
            .routes
            .iter()
            .map(|r| (r.name(), r.upstream.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("api.deepseek.com", "https://api.deepseek.com/anthropic"),
                ("local", "http://127.0.0.1:8080")
            ]
        );
        for (bad, says) in [
            (
                "[[routes]]\nmodel = \"a*b\"\nupstream = \"http://x\"\n",
                "prefix ending",
            ),
            (
                "[[routes]]\nmodel = \"x\"\napi = \"vertex\"\nupstream = \"http://x\"\n",
                "vertex",
            ),
            ("[[routes]]\nmodel = \"x\"\nurl = \"http://x\"\n", "url"),
        ] {
            std::fs::write(&path, bad).unwrap();
            let e = Settings::new("x.db").apply_file(&path).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn a_file_overrides_defaults_and_typos_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctxd.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9999\"\nupstream-openai = \"http://127.0.0.1:1/\"\nread-timeout-secs = 5\nworkers = 3\n",
        )
        .unwrap();
        let mut s = Settings::new("x.db");
        s.apply_file(&path).unwrap();
        s.validate().unwrap();
        assert_eq!(s.listen.port(), 9999);
        assert_eq!(s.upstream_openai, "http://127.0.0.1:1");
        assert_eq!(s.read_timeout, Duration::from_secs(5));
        assert_eq!(s.workers, 3);
        // The keys are the flags' names; the older `*-secs` names still read.
        std::fs::write(&path, "read-timeout = 7\nconnect-timeout = 2\n").unwrap();
        s.apply_file(&path).unwrap();
        assert_eq!(s.read_timeout, Duration::from_secs(7));
        assert_eq!(s.connect_timeout, Duration::from_secs(2));
        s.workers = 0;
        assert!(s.validate().unwrap_err().contains("workers"));
        s.workers = 1;
        assert_eq!(s.distill_cpu_percent, 25);
        std::fs::write(&path, "distill-cpu-percent = 40\n").unwrap();
        s.apply_file(&path).unwrap();
        assert_eq!(s.distill_cpu_percent, 40);
        // Distillation's tuning reaches the passes' config.
        assert_eq!(s.distill_config(), ctxd_core::distill::Config::default());
        std::fs::write(
            &path,
            "distill-exclude-tools = [\"Read\", \"Grep\"]\nexchange-omit = 0.0\n",
        )
        .unwrap();
        s.apply_file(&path).unwrap();
        let c = s.distill_config();
        assert_eq!(c.exclude_tools, ["Read", "Grep"]);
        assert_eq!(c.exchange_omit, 0.0);
        // A whole number is a probability too.
        std::fs::write(&path, "exchange-omit = 1\n").unwrap();
        s.apply_file(&path).unwrap();
        assert_eq!(s.distill_config().exchange_omit, 1.0);
        std::fs::write(
            &path,
            "distill-chunk-keep = 0.6\ndistill-max-keep-ratio = 0.5\ndistill-small-min-chars = 500\ndistill-min-result-chars = 3000\n",
        )
        .unwrap();
        let mut s = Settings::new("x.db");
        s.apply_file(&path).unwrap();
        let c = s.distill_config();
        assert_eq!(
            (
                c.chunk_keep,
                c.max_keep_ratio,
                c.small_min_chars,
                c.min_result_chars
            ),
            (0.6, 0.5, 500, 3000)
        );
        std::fs::write(&path, "distill-small-min-chars = 9000\n").unwrap();
        let e = Settings::new("x.db").apply_file(&path).unwrap_err();
        assert!(e.contains("must be below distill-min-result-chars"), "{e}");
        std::fs::write(&path, "exchange-omit = 1.5\n").unwrap();
        let e = s.apply_file(&path).unwrap_err();
        assert!(e.contains("exchange-omit") && e.contains("0 to 1"), "{e}");
        for bad in [0, 101] {
            std::fs::write(&path, format!("distill-cpu-percent = {bad}\n")).unwrap();
            let e = s.apply_file(&path).unwrap_err();
            assert!(
                e.contains("distill-cpu-percent") && e.contains("1 to 100"),
                "{e}"
            );
        }
        std::fs::write(&path, "lisen = \"x\"\n").unwrap();
        assert!(s.apply_file(&path).unwrap_err().contains("lisen"));
        s.upstream_anthropic = "ftp://x".into();
        assert!(s.validate().is_err());
    }

    #[test]
    fn management_keys_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctxd.toml");
        std::fs::write(
            &path,
            "record-only = true\nreserve = 8000\nreminder-margin = 9000\nwarning-runway = 4000\n\
             reminders = false\n[agents.claude-code]\nresets = false\ndistill = false\n\
             [model-windows]\n\"claude-sonnet-4-5\" = 1000000\n",
        )
        .unwrap();
        let mut s = Settings::new("x.db");
        s.apply_file(&path).unwrap();
        let m = &s.management;
        assert!(m.record_only);
        assert_eq!(
            m.thresholds,
            Thresholds {
                reserve: 8_000,
                reminder_margin: 9_000,
                warning_runway: 4_000
            }
        );
        assert!(!m.mechanisms.reminders && m.mechanisms.resets);
        assert_eq!(
            m.mechanisms_for("claude-code"),
            Mechanisms {
                reminders: false,
                resets: false,
                distill: false,
                digests: true,
                amnesia: false,
                lazy_tools: false,
            }
        );
        assert!(m.mechanisms_for("codex").resets);
        std::fs::write(
            &path,
            "digests = false\ndigest-min-tokens = 4000\n[agents.pi]\ndigests = true\n\
             [digest-shell-tools]\npi = [\"sh\"]\nother = [\"run\"]\n",
        )
        .unwrap();
        let mut d = Settings::new("x.db");
        d.apply_file(&path).unwrap();
        assert!(!d.management.mechanisms_for("codex").digests);
        assert!(d.management.mechanisms_for("pi").digests);
        assert_eq!(d.digest.min_tokens, 4_000);
        assert!(d.digest.shell_tools.is_shell(Some("pi"), "sh"));
        assert!(!d.digest.shell_tools.is_shell(Some("pi"), "bash"));
        assert!(d.digest.shell_tools.is_shell(Some("claude-code"), "Bash"));
        assert!(d.digest.shell_tools.is_shell(Some("sdk"), "run"));
        std::fs::write(&path, "digest-min-tokens = 10\n").unwrap();
        let e = d.apply_file(&path).unwrap_err();
        assert!(e.contains("digest-min-tokens") && e.contains("1100"), "{e}");
        assert!(m.mechanisms_for("codex").distill);
        assert_eq!(
            m.configured_window("claude-sonnet-4-5-20250929"),
            Some(1_000_000)
        );
        std::fs::write(
            &path,
            "tools = [\"notes\", \"recall\"]\n[agents.codex]\ntools = \"none\"\n",
        )
        .unwrap();
        s.apply_file(&path).unwrap();
        let m = &s.management;
        let mut names = m.tools_for("pi").names();
        names.sort_unstable();
        let mut want = ctxd_core::offered::NOTES_TOOLS.to_vec();
        want.push("recall");
        want.sort_unstable();
        assert_eq!(names, want);
        assert!(m.tools_for("codex").names().is_empty());
        std::fs::write(&path, "tools = \"notes,bogus\"\n").unwrap();
        assert!(s.apply_file(&path).unwrap_err().contains("bogus"));
        std::fs::write(&path, "[agents.pi]\nreminder = true\n").unwrap();
        assert!(s.apply_file(&path).unwrap_err().contains("reminder"));
        assert_eq!(
            parse_model_window("gpt-4=32_768"),
            Ok(("gpt-4".to_owned(), 32_768))
        );
        assert!(parse_model_window("gpt-4").is_err());
        assert!(parse_model_window("=5").is_err());
    }

    #[test]
    fn lazy_tools_settings_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctxd.toml");
        let mut d = Settings::new("x.db");
        assert!(!d.management.mechanisms_for("claude-code").lazy_tools);
        assert!(!d
            .management
            .tools_for("pi")
            .names()
            .contains(&"find_capability"));
        std::fs::write(
            &path,
            "lazy-tools = true
[agents.pi]
lazy-tools = false
             [lazy-base-tools]
claude-code = [\"Bash\", \"Read\"]
other = [\"run\"]
",
        )
        .unwrap();
        d.apply_file(&path).unwrap();
        let m = &d.management;
        assert!(m.mechanisms_for("claude-code").lazy_tools);
        assert!(!m.mechanisms_for("pi").lazy_tools);
        assert_eq!(m.lazy_base.row(Some("claude-code")), ["Bash", "Read"]);
        assert_eq!(m.lazy_base.row(Some("sdk")), ["run"]);
        assert!(m
            .lazy_base
            .row(Some("codex"))
            .contains(&"apply_patch".to_owned()));
        // `find_capability` comes with lazy tools, never through `tools`.
        assert!(ToolsSetting::parse("find_capability").is_err());
    }

    #[test]
    fn amnesia_settings_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctxd.toml");
        std::fs::write(
            &path,
            "amnesia = true\namnesia-min-tokens = 500\n[agents.codex]\namnesia = false\n\
             [amnesia-read-tools.pi]\ntools = [\"view\"]\nshell = []\n",
        )
        .unwrap();
        let mut d = Settings::new("x.db");
        d.apply_file(&path).unwrap();
        assert!(d.management.mechanisms_for("pi").amnesia);
        assert!(!d.management.mechanisms_for("codex").amnesia);
        assert_eq!(d.amnesia.min_tokens, 500);
        let t = &d.amnesia.read_tools;
        assert!(t.is_read(Some("pi"), "view", &serde_json::json!({})));
        assert!(!t.is_read(Some("pi"), "bash", &serde_json::json!({"command": "cat a"})));
        assert!(t.is_read(Some("claude-code"), "Read", &serde_json::json!({})));
        std::fs::write(&path, "[amnesia-read-tools.pi]\nreads = [\"x\"]\n").unwrap();
        assert!(Settings::new("x.db").apply_file(&path).is_err());
        std::fs::write(&path, "amnesia-min-tokens = 99999999999\n").unwrap();
        let e = Settings::new("x.db").apply_file(&path).unwrap_err();
        assert!(e.contains("amnesia-min-tokens"), "{e}");
    }
}

/// A `[[budgets]]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileBudget {
    scope: ctxd_core::spend::Scope,
    period: ctxd_core::spend::Period,
    /// The limit in dollars...
    usd: Option<f64>,
    /// ...or in tokens.
    tokens: Option<u64>,
    /// The soft limit, a share of the limit (default 0.8).
    warn_at: Option<f64>,
    /// Refuse requests at the limit (default true).
    hard: Option<bool>,
}

impl FileBudget {
    fn budget(&self) -> Result<ctxd_core::spend::Budget, String> {
        use ctxd_core::spend::Limit;
        let limit = match (self.usd, self.tokens) {
            (Some(usd), None) if usd.is_finite() && usd >= 0.0 => {
                Limit::MicroUsd((usd * 1e6).round() as u64)
            }
            (None, Some(tokens)) => Limit::Tokens(tokens),
            _ => return Err("give one limit: usd = 5.0 or tokens = 2000000".into()),
        };
        let warn_at = self.warn_at.unwrap_or(ctxd_core::spend::DEFAULT_WARN_AT);
        if !(0.0..=1.0).contains(&warn_at) {
            return Err(format!("warn-at {warn_at}: a share of the limit, 0 to 1"));
        }
        Ok(ctxd_core::spend::Budget {
            scope: self.scope,
            period: self.period,
            limit,
            warn_at,
            hard: self.hard.unwrap_or(true),
        })
    }
}
