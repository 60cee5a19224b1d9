//! `ctxd-bench soak`: what a week of agents does to a gateway's disk and memory, in minutes.
//!
//! The mock upstream runs in this process; `ctxd serve` runs as a child on a fresh SQLite store
//! with every mechanism on and a session cache bounded in bytes only (its count cap raised to
//! the number of sessions, so the byte budget is what binds). Many sessions advance together,
//! round by round, as agents do: each turn a user message, the mock's tool call, a tool result
//! of `--result-bytes`, the mock's final answer, each answer read back into the next request.
//! Every session's history grows at every round, and going round-robin over thousands of them is
//! the cache's worst case (each is evicted before it comes back).
//!
//! Every `--sample` seconds a line: the gateway's resident memory (VmRSS) and peak (VmHWM), the
//! database and WAL files' sizes, the session cache's estimate of its bytes, requests, errors and
//! latency in the interval. After the load it is sampled on while the store's backlog (the
//! deferred history indexing) drains, then at rest for `--rest` seconds: a WAL that is not
//! truncated at rest shows there. The summary states the peak RSS against the cache budget
//! (allowed: `--rss-factor` × the budget + `--rss-constant-mb`) and the WAL's peak against its
//! bound (`--wal-allowed-mb`) and the database.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use ctxd_mock::{Config, MockServer, Recording};
use serde::Serialize;
use serde_json::{json, Value};

use crate::gateway::bodies::Lcg;
use crate::gateway::child::Gateway;
use crate::gateway::load::quantile_ms;
use crate::gateway::metrics;

const MIB: f64 = 1024.0 * 1024.0;
/// Longest wait for the store's backlog after the load.
const DRAIN_LIMIT: Duration = Duration::from_secs(900);

#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Conversations, advancing together round by round.
    #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u32).range(1..))]
    pub sessions: u32,
    /// User turns per session (each is two requests: the tool call, then the final answer).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub turns: u32,
    /// Bytes of each turn's tool result: what a session's history grows by per turn.
    #[arg(long, default_value = "8k", value_parser = crate::gateway::parse_size)]
    pub result_bytes: usize,
    /// Requests in flight at once (closed loop: each waits for its answer).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// The gateway's session cache budget (`serve --session-cache-bytes`).
    #[arg(long, default_value = "64m", value_parser = crate::gateway::parse_size)]
    pub session_cache_bytes: usize,
    /// The peak RSS allowed is this many times the session cache budget (the allocator's
    /// overhead on what the budget charges)...
    #[arg(long, default_value_t = 1.4)]
    pub rss_factor: f64,
    /// ...plus this many MB (runtime, token tables, SQLite's caches, requests in flight).
    #[arg(long, default_value_t = 192.0)]
    pub rss_constant_mb: f64,
    /// The WAL may grow to this many MB at most, whatever the database's size: twice its
    /// 64 MiB limit (it is caught over the limit within 100 ms, then cut back between commits).
    #[arg(long, default_value_t = 128.0)]
    pub wal_allowed_mb: f64,
    /// Seconds between two samples.
    #[arg(long, default_value_t = 5.0)]
    pub sample: f64,
    /// Seconds the gateway is left at rest after the load and its store's backlog (the
    /// deferred history indexing) are done, still sampled.
    #[arg(long, default_value_t = 10.0)]
    pub rest: f64,
    /// The `ctxd` to run `serve` from (default: the one beside this binary).
    #[arg(long, value_name = "PATH")]
    pub gateway_bin: Option<PathBuf>,
    /// Print one JSON object per sample and one for the summary (one a line).
    #[arg(long)]
    pub json: bool,
}

/// One sample of the gateway and its store.
#[derive(Debug, Serialize)]
pub struct Sample {
    pub kind: &'static str,
    pub seconds: f64,
    /// `load`, `drain` (the store's backlog after the load) or `rest`.
    pub phase: &'static str,
    pub requests: u64,
    pub errors: u64,
    pub interval_p50_ms: Option<f64>,
    pub interval_p99_ms: Option<f64>,
    pub rss_mb: Option<f64>,
    pub peak_rss_mb: Option<f64>,
    pub db_mb: f64,
    pub wal_mb: f64,
    pub session_cache_mb: Option<f64>,
    pub store_queue: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub kind: &'static str,
    pub sessions: u32,
    pub turns: u32,
    pub result_bytes: usize,
    pub requests: u64,
    pub errors: u64,
    pub load_seconds: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub session_cache_budget_mb: f64,
    pub peak_rss_mb: Option<f64>,
    /// Peak RSS minus the cache budget.
    pub rss_beyond_budget_mb: Option<f64>,
    /// `--rss-factor` × the budget + `--rss-constant-mb`.
    pub rss_allowed_mb: f64,
    pub rss_within: Option<bool>,
    /// Seconds the store's backlog took to drain after the load.
    pub drain_seconds: f64,
    pub db_mb_end: f64,
    /// The WAL's largest size, polled every 50 ms.
    pub wal_mb_peak: f64,
    /// The WAL's largest size over the database's at that moment, over the samples where the
    /// database held 64 MiB or more.
    pub wal_to_db_peak: Option<f64>,
    pub wal_allowed_mb: f64,
    pub wal_within: bool,
    /// The WAL at the end of the rest.
    pub wal_mb_at_rest: f64,
}

pub fn run(args: &SoakArgs) -> anyhow::Result<()> {
    if !(args.sample > 0.0 && args.sample.is_finite() && args.rest >= 0.0) {
        bail!("--sample must be positive and --rest not negative");
    }
    let dir = std::env::temp_dir().join(format!("ctxd-bench-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = run_in(args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// What the workers share with the sampler.
#[derive(Default)]
struct Progress {
    requests: AtomicU64,
    errors: AtomicU64,
    /// Latencies since the last sample.
    interval: Mutex<Vec<Duration>>,
    /// Every latency, for the summary.
    all: Mutex<Vec<Duration>>,
}

impl Progress {
    fn record(&self, latency: Duration, ok: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        lock(&self.interval).push(latency);
        lock(&self.all).push(latency);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn run_in(args: &SoakArgs, dir: &Path) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .build()
        .context("building the HTTP client")?;
    let mock = MockServer::start_blocking(Config {
        recording: Recording::Off,
        ..Config::default()
    })?;
    let bin = crate::ctxd_binary(args.gateway_bin.as_deref())?;
    let db = dir.join("soak.db");
    let flags = vec![
        "--session-cache-bytes".to_owned(),
        args.session_cache_bytes.to_string(),
        "--cached-sessions".to_owned(),
        args.sessions.to_string(),
    ];
    let gateway = Gateway::start(
        &bin,
        db.as_os_str(),
        dir,
        "gateway-soak",
        &mock.base_url(),
        &flags,
    )?;
    let url = format!("{}/v1/messages", gateway.base_url);
    if !args.json {
        println!(
            "ctxd-bench soak: {} sessions × {} turns (tool results of {} B), {} in flight, \
             session cache {:.0} MiB",
            args.sessions,
            args.turns,
            args.result_bytes,
            args.concurrency,
            args.session_cache_bytes as f64 / MIB
        );
        println!("{}", header());
    }
    let progress = Arc::new(Progress::default());
    let sessions: Arc<Vec<tokio::sync::Mutex<Conversation>>> = Arc::new(
        (0..args.sessions)
            .map(|k| tokio::sync::Mutex::new(Conversation::new(k)))
            .collect(),
    );
    let total = args.sessions as usize * args.turns as usize;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let sampler = Sampler {
        handle: rt.handle().clone(),
        client: client.clone(),
        metrics_url: format!("{}/metrics", gateway.base_url),
        db: db.clone(),
        progress: progress.clone(),
        started,
        json: args.json,
    };
    let load = rt.spawn({
        let (client, progress, next, sessions) = (
            client.clone(),
            progress.clone(),
            next.clone(),
            sessions.clone(),
        );
        let result_bytes = args.result_bytes;
        let workers = args.concurrency;
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..workers {
                let (client, progress, next, sessions, url) = (
                    client.clone(),
                    progress.clone(),
                    next.clone(),
                    sessions.clone(),
                    url.clone(),
                );
                tasks.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total {
                            break;
                        }
                        let mut conversation = sessions[i % sessions.len()].lock().await;
                        conversation
                            .turn(&client, &url, result_bytes, &progress)
                            .await;
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
        }
    });
    // The WAL's peak between samples: polled on a thread of its own.
    let stop_polling = Arc::new(AtomicBool::new(false));
    let wal_poll = std::thread::spawn({
        let (wal, stop) = (wal_of(&db), stop_polling.clone());
        move || {
            let mut peak: f64 = 0.0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(file_mb(&wal));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        }
    });
    let mut samples = Vec::new();
    let period = Duration::from_secs_f64(args.sample);
    let mut gateway = gateway;
    while !load.is_finished() {
        std::thread::sleep(period.min(Duration::from_millis(200)));
        if started.elapsed().as_secs_f64() >= (samples.len() + 1) as f64 * args.sample {
            samples.push(sampler.take(&gateway, "load"));
        }
        if !gateway.alive() {
            bail!("the gateway exited during the soak{}", gateway.log_tail());
        }
    }
    rt.block_on(load).context("the load's task")?;
    let load_seconds = started.elapsed().as_secs_f64();
    samples.push(sampler.take(&gateway, "load"));
    // The deferred indexing catches up once the load stops: sampled until the store's queue is
    // empty, then at rest.
    let drain_started = Instant::now();
    while samples
        .last()
        .and_then(|s| s.store_queue)
        .is_some_and(|q| q > 0.0)
    {
        if drain_started.elapsed() > DRAIN_LIMIT {
            bail!("the store's backlog did not drain within {DRAIN_LIMIT:?}");
        }
        std::thread::sleep(period);
        samples.push(sampler.take(&gateway, "drain"));
    }
    let drain_seconds = drain_started.elapsed().as_secs_f64();
    let rest_end = Instant::now() + Duration::from_secs_f64(args.rest);
    while Instant::now() < rest_end {
        std::thread::sleep(period.min(rest_end.saturating_duration_since(Instant::now())));
        samples.push(sampler.take(&gateway, "rest"));
    }
    stop_polling.store(true, Ordering::Relaxed);
    let wal_polled_peak = wal_poll.join().unwrap_or(0.0);
    let summary = summarize(
        args,
        (&samples, wal_polled_peak),
        &progress,
        (load_seconds, drain_seconds),
        &gateway,
    );
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        for line in verdict(&summary) {
            println!("{line}");
        }
    }
    drop(gateway);
    Ok(())
}

/// Takes the samples: from its own thread, beside the load's runtime.
struct Sampler {
    handle: tokio::runtime::Handle,
    client: reqwest::Client,
    metrics_url: String,
    db: PathBuf,
    progress: Arc<Progress>,
    started: Instant,
    json: bool,
}

impl Sampler {
    fn take(&self, gateway: &Gateway, phase: &'static str) -> Sample {
        let text = self.handle.block_on(async {
            let res = self.client.get(&self.metrics_url).send().await.ok()?;
            res.text().await.ok()
        });
        let mut interval = std::mem::take(&mut *lock(&self.progress.interval));
        interval.sort_unstable();
        let store_queue = text.as_deref().and_then(metrics::store_backlog);
        let sample = Sample {
            kind: "sample",
            seconds: self.started.elapsed().as_secs_f64(),
            phase,
            requests: self.progress.requests.load(Ordering::Relaxed),
            errors: self.progress.errors.load(Ordering::Relaxed),
            interval_p50_ms: quantile_ms(&interval, 0.50),
            interval_p99_ms: quantile_ms(&interval, 0.99),
            rss_mb: gateway.rss_mb(),
            peak_rss_mb: gateway.peak_rss_mb(),
            db_mb: file_mb(&self.db),
            wal_mb: file_mb(&wal_of(&self.db)),
            session_cache_mb: text
                .as_deref()
                .and_then(|t| metrics::gauge(t, "ctxd_session_cache_bytes"))
                .map(|b| b / MIB),
            store_queue,
        };
        if self.json {
            if let Ok(line) = serde_json::to_string(&sample) {
                println!("{line}");
            }
        } else {
            println!("{}", line(&sample));
        }
        sample
    }
}

fn wal_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn file_mb(path: &Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / MIB)
}

/// The run's summary; `wal_polled_peak`: the WAL's largest size between the samples too.
fn summarize(
    args: &SoakArgs,
    (samples, wal_polled_peak): (&[Sample], f64),
    progress: &Progress,
    (load_seconds, drain_seconds): (f64, f64),
    gateway: &Gateway,
) -> Summary {
    let mut all = std::mem::take(&mut *lock(&progress.all));
    all.sort_unstable();
    let budget_mb = args.session_cache_bytes as f64 / MIB;
    let allowed_mb = args.rss_factor * budget_mb + args.rss_constant_mb;
    let peak_rss_mb = gateway.peak_rss_mb();
    let rss_beyond_budget_mb = peak_rss_mb.map(|p| p - budget_mb);
    let wal_to_db_peak = wal_to_db_peak(samples);
    let wal_mb_peak = samples
        .iter()
        .map(|s| s.wal_mb)
        .fold(wal_polled_peak, f64::max);
    Summary {
        kind: "summary",
        sessions: args.sessions,
        turns: args.turns,
        result_bytes: args.result_bytes,
        requests: progress.requests.load(Ordering::Relaxed),
        errors: progress.errors.load(Ordering::Relaxed),
        load_seconds,
        p50_ms: quantile_ms(&all, 0.50),
        p99_ms: quantile_ms(&all, 0.99),
        session_cache_budget_mb: budget_mb,
        peak_rss_mb,
        rss_beyond_budget_mb,
        rss_allowed_mb: allowed_mb,
        rss_within: peak_rss_mb.map(|p| p <= allowed_mb),
        drain_seconds,
        db_mb_end: samples.last().map_or(0.0, |s| s.db_mb),
        wal_mb_peak,
        wal_to_db_peak,
        wal_allowed_mb: args.wal_allowed_mb,
        wal_within: wal_mb_peak <= args.wal_allowed_mb,
        wal_mb_at_rest: samples.last().map_or(0.0, |s| s.wal_mb),
    }
}

/// The WAL's largest size over the database's at the same moment, once the database holds
/// 64 MiB: below that the WAL's own size limit says more than a ratio to a small file.
fn wal_to_db_peak(samples: &[Sample]) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.db_mb >= 64.0)
        .map(|s| s.wal_mb / s.db_mb)
        .reduce(f64::max)
}

fn header() -> String {
    format!(
        "{:>7} {:>5} {:>9} {:>6} {:>15} {:>8} {:>8} {:>9} {:>8} {:>9} {:>7}",
        "s",
        "phase",
        "requests",
        "errors",
        "p50/p99 ms",
        "RSS MB",
        "peak MB",
        "db MB",
        "WAL MB",
        "cache MB",
        "queue"
    )
}

fn line(s: &Sample) -> String {
    let opt = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
    };
    format!(
        "{:>7.1} {:>5} {:>9} {:>6} {:>15} {:>8} {:>8} {:>9.1} {:>8.1} {:>9} {:>7}",
        s.seconds,
        s.phase,
        s.requests,
        s.errors,
        format!(
            "{} / {}",
            opt(s.interval_p50_ms, 1),
            opt(s.interval_p99_ms, 1)
        ),
        opt(s.rss_mb, 1),
        opt(s.peak_rss_mb, 1),
        s.db_mb,
        s.wal_mb,
        opt(s.session_cache_mb, 1),
        opt(s.store_queue, 0),
    )
}

fn verdict(s: &Summary) -> Vec<String> {
    let mb = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    let met = |m: Option<bool>| match m {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    };
    vec![
        format!(
            "{} requests ({} errors) in {:.0} s; p50 {} ms, p99 {} ms",
            s.requests,
            s.errors,
            s.load_seconds,
            mb(s.p50_ms),
            mb(s.p99_ms)
        ),
        format!(
            "RSS: peak {} MB = session cache budget {:.0} MB + {} MB (allowed {:.0} MB): {}",
            mb(s.peak_rss_mb),
            s.session_cache_budget_mb,
            mb(s.rss_beyond_budget_mb),
            s.rss_allowed_mb,
            met(s.rss_within)
        ),
        format!(
            "WAL: peak {:.1} MB (allowed {:.0} MB), at most {} × the database; the store's \
             backlog drained in {:.0} s; at rest {:.1} MB beside {:.0} MB of database: {}",
            s.wal_mb_peak,
            s.wal_allowed_mb,
            s.wal_to_db_peak
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}")),
            s.drain_seconds,
            s.wal_mb_at_rest,
            s.db_mb_end,
            met(Some(s.wal_within))
        ),
    ]
}

/// One agent's conversation, as its client keeps it: every message sent and every answer.
struct Conversation {
    key: String,
    messages: Vec<Value>,
    rng: Lcg,
    turn: u32,
}

impl Conversation {
    fn new(k: u32) -> Self {
        Self {
            key: format!("soak-{}-{k}", std::process::id()),
            messages: Vec::new(),
            rng: Lcg(0x50A4_0000 + u64::from(k)),
            turn: 0,
        }
    }

    /// One user turn: the question, then a tool result for every call the answer makes (at
    /// most three rounds), until a final answer. A failed request rolls the turn back, as a
    /// client that retries the turn later would.
    async fn turn(
        &mut self,
        client: &reqwest::Client,
        url: &str,
        result_bytes: usize,
        progress: &Progress,
    ) {
        let kept = self.messages.len();
        self.turn += 1;
        let question = format!(
            "Turn {} of {}: {}",
            self.turn,
            self.key,
            self.rng.words(160)
        );
        self.messages
            .push(json!({"role": "user", "content": [{"type": "text", "text": question}]}));
        for _ in 0..3 {
            let Some(answer) = self.send(client, url, progress).await else {
                self.messages.truncate(kept);
                return;
            };
            let calls: Vec<String> = answer["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_owned))
                .collect();
            self.messages
                .push(json!({"role": "assistant", "content": answer["content"].clone()}));
            if calls.is_empty() {
                return;
            }
            let results: Vec<Value> = calls
                .iter()
                .map(|id| {
                    json!({"type": "tool_result", "tool_use_id": id,
                        "content": self.rng.words(result_bytes)})
                })
                .collect();
            self.messages
                .push(json!({"role": "user", "content": results}));
        }
    }

    /// Sends the conversation; its answer, or `None` on any failure.
    async fn send(
        &self,
        client: &reqwest::Client,
        url: &str,
        progress: &Progress,
    ) -> Option<Value> {
        let body = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are a coding agent. Be brief."}],
            "tools": [{"name": "Bash", "description": "Run a shell command",
                "input_schema": {"type": "object", "properties": {
                    "command": {"type": "string"}}, "required": ["command"]}}],
            "messages": self.messages,
        });
        let sent_at = Instant::now();
        let answer = async {
            let res = client
                .post(url)
                .header("content-type", "application/json")
                .header("x-api-key", "ctxd-bench")
                .header("anthropic-version", "2023-06-01")
                .header("x-ctxd-session", &self.key)
                .body(body.to_string())
                .send()
                .await
                .ok()?;
            if !res.status().is_success() {
                return None;
            }
            serde_json::from_slice::<Value>(&res.bytes().await.ok()?).ok()
        }
        .await;
        progress.record(sent_at.elapsed(), answer.is_some());
        answer
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample(db_mb: f64, wal_mb: f64) -> Sample {
        Sample {
            kind: "sample",
            seconds: 1.0,
            phase: "load",
            requests: 0,
            errors: 0,
            interval_p50_ms: None,
            interval_p99_ms: None,
            rss_mb: None,
            peak_rss_mb: None,
            db_mb,
            wal_mb,
            session_cache_mb: None,
            store_queue: None,
        }
    }

    #[test]
    fn the_wal_ratio_counts_only_once_the_database_is_large() {
        let samples = [sample(1.0, 60.0), sample(100.0, 30.0), sample(200.0, 20.0)];
        assert_eq!(wal_to_db_peak(&samples), Some(0.3));
        assert_eq!(wal_to_db_peak(&samples[..1]), None);
        assert_eq!(
            wal_of(Path::new("/x/soak.db")),
            PathBuf::from("/x/soak.db-wal")
        );
    }
}
