//! `ctxd-bench gateway`: the gateway's added latency, side by side in one run.
//!
//! The mock upstream (`ctxd-mock`) runs in this process on a thread of its own; `ctxd serve`
//! runs as a child in front of it with a fresh store. For each body size × mode (JSON, SSE),
//! K sessions each get a realistic Anthropic conversation prefix of that size ([`bodies`]),
//! sent once through the gateway as a warm-up (and its store writer left to finish writing
//! them: the rows measure a steady state); then an open-loop load at a fixed rate ([`load`])
//! alternates between the mock directly and the gateway in short slices, so drift in the
//! machine's load hits both phases alike; other proxies in front of the same mock (`--peer
//! NAME=URL`, the mock's port fixed by `--mock-port`) take their turn in each slice. Each
//! request is its session's prefix plus one new user message, with `x-ctxd-session`.
//!
//! Reported per row: latency p50/p99/max direct and via the gateway, the added p50/p99 (the
//! gateway's percentile minus the direct one), the gateway's own overhead histogram from its
//! `/metrics` ([`metrics`]), its peak RSS, the warm-up's drain time and the writes still queued
//! for its store when the load ended. A missed target is reported, not an error.

pub(crate) mod bodies;
pub(crate) mod child;
mod cpu;
mod dashboard;
pub(crate) mod load;
pub(crate) mod metrics;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use ctxd_mock::{Config, MockServer, Recording};
use serde::Serialize;

use self::child::Gateway;
use self::load::{quantile_ms, Job, Sample};
use self::metrics::Histogram;

const KIB: usize = 1024;
/// The targets: p99 added latency by body size, at 200 requests/s.
const TARGETS: [(usize, f64); 2] = [(100 * KIB, 1.0), (1024 * KIB, 10.0)];
const TARGET_RATE: f64 = 200.0;

#[derive(Debug, Args)]
pub struct GatewayBenchArgs {
    /// Requests per second, in each phase; several (`200,800,1600`) give a row per rate, to
    /// see where the gateway stops keeping up.
    #[arg(long, value_delimiter = ',', default_value = "200")]
    pub rate: Vec<f64>,
    /// Measured seconds per phase (direct and gateway) for each size and mode.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Phases alternate every this many seconds.
    #[arg(long, default_value_t = 1.0)]
    pub slice: f64,
    /// Request body sizes (bytes, or with a k/m suffix: KiB, MiB).
    #[arg(long, value_delimiter = ',', default_value = "2k,100k,1m", value_parser = parse_size)]
    pub sizes: Vec<usize>,
    /// Response modes.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "json,sse")]
    pub modes: Vec<Mode>,
    /// Conversations per size and mode (requests go round-robin over them).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub sessions: u32,
    /// Only the mock, directly: the load generator's and the mock's own baseline.
    #[arg(long)]
    pub direct_only: bool,
    /// The `ctxd` to run `serve` from (default: the one beside this binary).
    #[arg(long, value_name = "PATH")]
    pub gateway_bin: Option<PathBuf>,
    /// A dashboard client beside the load: every SECS seconds it fetches the `/ui` sessions
    /// list and one busy session's page, as an open browser tab does.
    #[arg(long, value_name = "SECS")]
    pub dashboard_poll: Option<f64>,
    /// A PostgreSQL database for the gateways' store (`postgres://USER@HOST/DB`, empty or
    /// used by benches only): every row runs on SQLite, then on this database with one
    /// gateway and with two (the load alternating between them), side by side.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// Bodies carry prompt-cache breakpoints as Claude Code's do (the system prompt and the
    /// last two user messages), which the gateway reads on every request that has them.
    #[arg(long)]
    pub cache_control: bool,
    /// Another proxy in front of this bench's mock, measured in the same alternating slices
    /// as the mock directly and ctxd (so the ratio holds on a noisy machine): NAME=URL, its
    /// base URL (it must forward `/v1/messages` to the mock: see `--mock-port`). Repeatable.
    #[arg(long = "peer", value_name = "NAME=URL", value_parser = parse_peer)]
    pub peers: Vec<Peer>,
    /// The mock upstream's port on 127.0.0.1, for peers configured to forward to it (default:
    /// any free port).
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    pub mock_port: u16,
    /// Print one JSON object per row (one a line) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// A proxy measured beside ctxd (`--peer NAME=URL`).
#[derive(Clone, Debug)]
pub struct Peer {
    pub name: String,
    pub base_url: String,
}

fn parse_peer(s: &str) -> Result<Peer, String> {
    let (name, url) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NAME=URL (e.g. nginx=http://127.0.0.1:8081)"))?;
    let url = url.trim_end_matches('/');
    if name.is_empty() || !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "{s:?} is not NAME=URL with an http:// URL (e.g. nginx=http://127.0.0.1:8081)"
        ));
    }
    Ok(Peer {
        name: name.to_owned(),
        base_url: url.to_owned(),
    })
}

/// Where the gateways of a group of rows keep their store, and how many there are.
struct Setup {
    label: &'static str,
    store: std::ffi::OsString,
    gateways: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Json,
    Sse,
}

/// One size × mode.
#[derive(Debug, Serialize)]
pub struct Row {
    /// `sqlite`, `postgres` (one gateway) or `postgres×2` (two, the load alternating).
    pub store: String,
    pub size_bytes: usize,
    pub mode: Mode,
    pub rate: f64,
    pub direct: Stats,
    pub gateway: Option<Stats>,
    pub added_p50_ms: Option<f64>,
    pub added_p99_ms: Option<f64>,
    pub target_added_p99_ms: Option<f64>,
    pub target_met: Option<bool>,
    /// The gateway's own `ctxd_overhead_seconds` over this row's measured requests.
    pub overhead: Option<Overhead>,
    /// The durable commit's cost: `ctxd_commit_wait_seconds`, how long each response's end
    /// waited for its turn's commit, over this row's measured requests.
    pub commit_wait: Option<Overhead>,
    /// The gateways' CPU time over the row's measured phases, per request they served: how
    /// many requests a second one core would carry is 1000 over this.
    pub gateway_cpu_ms_per_request: Option<f64>,
    /// The same for the PostgreSQL server, when it runs on this machine (every process named
    /// `postgres`, so a server the bench has to itself).
    pub store_cpu_ms_per_request: Option<f64>,
    /// The gateway's VmHWM after this row (a running peak).
    pub gateway_peak_rss_mb: Option<f64>,
    /// How long the gateway's store writer took to drain the warm-up's writes (the sessions'
    /// prefixes) before the measured phases began.
    pub warmup_drain_s: Option<f64>,
    /// Writes still queued for the store when the row's load ended, plus sessions whose
    /// indexes the writer has still to catch up: a writer that cannot keep up shows here.
    pub store_queue_after: Option<f64>,
    /// The dashboard client's requests during the row (`--dashboard-poll`).
    pub dashboard: Option<Stats>,
    /// Each `--peer`, in the same slices.
    pub peers: Vec<PeerRow>,
}

/// A peer proxy's latency in a row, and what it added to the mock's.
#[derive(Debug, Serialize)]
pub struct PeerRow {
    pub name: String,
    pub latency: Stats,
    pub added_p50_ms: Option<f64>,
    pub added_p99_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Stats {
    pub requests: usize,
    pub errors: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Overhead {
    pub count: f64,
    pub mean_ms: Option<f64>,
    /// Upper bounds of the buckets holding p50 and p99.
    pub p50_le_ms: Option<f64>,
    pub p99_le_ms: Option<f64>,
}

pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let lower = s.trim().to_ascii_lowercase();
    let (digits, unit) = match lower.strip_suffix('k') {
        Some(d) => (d, KIB),
        None => match lower.strip_suffix('m') {
            Some(d) => (d, KIB * KIB),
            None => (lower.as_str(), 1),
        },
    };
    match digits.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n * unit),
        _ => Err(format!("{s:?} is not a size (e.g. 2048, 100k, 1m)")),
    }
}

/// Everything a run keeps alive: the runtime, the client, the mock, the gateway.
struct Bench {
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    mock: MockServer,
    /// The gateways of the current setup (none with `--direct-only`): requests go to each in
    /// turn.
    gateways: Vec<Gateway>,
    store_label: &'static str,
    /// Numbers each new user message, so every request is unique.
    next_message: u64,
}

pub fn run(args: &GatewayBenchArgs) -> anyhow::Result<()> {
    let rates_ok = !args.rate.is_empty() && args.rate.iter().all(|r| *r > 0.0 && r.is_finite());
    if !(rates_ok && args.duration > 0.0 && args.slice > 0.0) {
        bail!("--rate, --duration and --slice must be positive");
    }
    if args
        .dashboard_poll
        .is_some_and(|p| !(p > 0.0 && p.is_finite()))
    {
        bail!("--dashboard-poll must be a positive number of seconds");
    }
    let dir = std::env::temp_dir().join(format!("ctxd-bench-gateway-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = run_in(args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(args: &GatewayBenchArgs, dir: &std::path::Path) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256)
        .build()
        .context("building the HTTP client")?;
    // No record: 1 MB bodies at 200/s would grow it by 200 MB a second.
    let mock = MockServer::start_blocking(Config {
        recording: Recording::Off,
        port: args.mock_port,
        ..Config::default()
    })?;
    let bin = crate::ctxd_binary(args.gateway_bin.as_deref())?;
    let mut setups = vec![Setup {
        label: "sqlite",
        store: dir.join("bench.db").into_os_string(),
        gateways: usize::from(!args.direct_only),
    }];
    if let Some(url) = args.postgres.as_ref().filter(|_| !args.direct_only) {
        for (label, gateways) in [("postgres", 1), ("postgres×2", 2)] {
            setups.push(Setup {
                label,
                store: url.into(),
                gateways,
            });
        }
    }
    let mut bench = Bench {
        rt,
        client,
        mock,
        gateways: Vec::new(),
        store_label: "sqlite",
        next_message: 0,
    };
    if !args.json {
        println!(
            "ctxd-bench gateway: {} req/s, {} s per phase in slices of {} s, {} sessions per row{}",
            args.rate
                .iter()
                .map(f64::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            args.duration,
            args.slice,
            args.sessions,
            if args.direct_only {
                ", direct only"
            } else {
                ""
            }
        );
        println!("{}", header());
    }
    let mut rows = Vec::new();
    for setup in &setups {
        bench.gateways.clear();
        for i in 0..setup.gateways {
            let name = format!("gateway-{}-{i}", setup.label);
            let g = Gateway::start(&bin, &setup.store, dir, &name, &bench.mock.base_url(), &[])?;
            bench.gateways.push(g);
        }
        bench.store_label = setup.label;
        for &size in &args.sizes {
            for &mode in &args.modes {
                for &rate in &args.rate {
                    let row = bench.row(args, size, mode, rate)?;
                    if args.json {
                        println!("{}", serde_json::to_string(&row)?);
                    } else {
                        println!("{}", line(&row));
                        for peer in &row.peers {
                            println!("{}", peer_line(&row, peer));
                        }
                    }
                    rows.push(row);
                }
            }
        }
    }
    bench.gateways.clear();
    if !args.json {
        for row in rows.iter().filter(|r| r.target_added_p99_ms.is_some()) {
            println!("{}", verdict(row));
        }
    }
    Ok(())
}

impl Bench {
    fn row(
        &mut self,
        args: &GatewayBenchArgs,
        size: usize,
        mode: Mode,
        rate: f64,
    ) -> anyhow::Result<Row> {
        // Unique per run, setup and rate: a PostgreSQL database may hold an earlier run's
        // sessions.
        let tag = format!(
            "{size}-{}-{}-{rate}-{}",
            if mode == Mode::Sse { "sse" } else { "json" },
            self.store_label,
            std::process::id()
        );
        let sessions = bodies::sessions(
            args.sessions as usize,
            size,
            mode == Mode::Sse,
            args.cache_control,
            &tag,
        );
        let direct_url = format!("{}/v1/messages", self.mock.base_url());
        let gateway_urls: Vec<String> = self
            .gateways
            .iter()
            .map(|g| format!("{}/v1/messages", g.base_url))
            .collect();
        // Warm-up, not measured: connections (to every gateway), and each session's prefix
        // into the store.
        let peer_urls: Vec<String> = args
            .peers
            .iter()
            .map(|p| format!("{}/v1/messages", p.base_url))
            .collect();
        for (n, s) in sessions.iter().enumerate() {
            let gateway = (!gateway_urls.is_empty()).then(|| &gateway_urls[n % gateway_urls.len()]);
            for url in std::iter::once(&direct_url)
                .chain(gateway)
                .chain(&peer_urls)
            {
                let job = Job {
                    url: url.clone(),
                    session: s.key.clone(),
                    body: s.prefix_body(),
                };
                if !self.rt.block_on(load::send(&self.client, job)) {
                    bail!("warm-up request to {url} failed{}", self.log_hint());
                }
            }
        }
        // The measured phases start from a steady state: the warm-up wrote each session's whole
        // prefix (the history index with it), which a real session pays once, not per request.
        let warmup_drain_s = self.drain_store(Duration::from_secs(300))?;
        let before = self.histograms();
        let slices = (args.duration / args.slice).ceil().max(1.0) as usize;
        let per_slice = ((rate * args.duration) / slices as f64).round().max(1.0) as usize;
        let dashboard = self.dashboard(args);
        let (mut direct, mut via) = (Vec::new(), Vec::new());
        let mut peers: Vec<Vec<Sample>> = vec![Vec::new(); peer_urls.len()];
        let (mut gateway_cpu, mut store_cpu) = (Some(0.0), Some(0.0));
        for _ in 0..slices {
            direct.extend(self.slice(
                std::slice::from_ref(&direct_url),
                &sessions,
                rate,
                per_slice,
            ));
            if !gateway_urls.is_empty() {
                // Only the gateway phases: between them the gateways idle (their writers may
                // finish a phase's last commits, which this then misses).
                let before = (self.gateway_cpu(), cpu::postgres_seconds());
                via.extend(self.slice(&gateway_urls, &sessions, rate, per_slice));
                let after = (self.gateway_cpu(), cpu::postgres_seconds());
                let add = |sum: Option<f64>, a: Option<f64>, b: Option<f64>| Some(sum? + (b? - a?));
                gateway_cpu = add(gateway_cpu, before.0, after.0);
                store_cpu = add(store_cpu, before.1, after.1);
            }
            for (samples, url) in peers.iter_mut().zip(&peer_urls) {
                samples.extend(self.slice(std::slice::from_ref(url), &sessions, rate, per_slice));
            }
        }
        let per_request = |cpu: Option<f64>| {
            (!via.is_empty())
                .then(|| cpu.map(|s| s * 1000.0 / via.len() as f64))
                .flatten()
        };
        let gateway_cpu_ms_per_request = per_request(gateway_cpu);
        let store_cpu_ms_per_request = if self.store_label.starts_with("postgres") {
            per_request(store_cpu)
        } else {
            None
        };
        let dashboard = dashboard.map(|(stop, task)| {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            stats(&self.rt.block_on(task).unwrap_or_default())
        });
        let store_queue_after = self.store_queue();
        let after = self.histograms();
        let since = |pick: fn(&Histograms) -> &Option<Histogram>| match (
            before.as_ref().and_then(|b| pick(b).as_ref()),
            after.as_ref().and_then(|a| pick(a).as_ref()),
        ) {
            (Some(before), Some(after)) => Some(overhead(&after.since(before))),
            _ => None,
        };
        let overhead = since(|h| &h.overhead);
        let commit_wait = since(|h| &h.commit_wait);
        if self.gateways.iter_mut().any(|g| !g.alive()) {
            bail!("a gateway exited during the run{}", self.log_hint());
        }
        let direct = stats(&direct);
        let gateway = (!gateway_urls.is_empty()).then(|| stats(&via));
        let added = |pick: fn(&Stats) -> Option<f64>| {
            let g = gateway.as_ref().and_then(pick)?;
            Some(g - pick(&direct)?)
        };
        let added_p99_ms = added(|s| s.p99_ms);
        let peers = args
            .peers
            .iter()
            .zip(&peers)
            .map(|(peer, samples)| {
                let latency = stats(samples);
                let over = |pick: fn(&Stats) -> Option<f64>| Some(pick(&latency)? - pick(&direct)?);
                PeerRow {
                    name: peer.name.clone(),
                    added_p50_ms: over(|s| s.p50_ms),
                    added_p99_ms: over(|s| s.p99_ms),
                    latency,
                }
            })
            .collect();
        // The targets are set at 200 requests/s: rows at other rates measure capacity.
        let target = TARGETS
            .iter()
            .find(|(s, _)| *s == size && rate == TARGET_RATE)
            .map(|(_, t)| *t);
        Ok(Row {
            store: self.store_label.to_owned(),
            size_bytes: size,
            mode,
            rate,
            added_p50_ms: added(|s| s.p50_ms),
            added_p99_ms,
            target_added_p99_ms: target,
            target_met: target.zip(added_p99_ms).map(|(t, a)| a < t),
            direct,
            gateway,
            overhead,
            commit_wait,
            gateway_cpu_ms_per_request,
            store_cpu_ms_per_request,
            gateway_peak_rss_mb: self
                .gateways
                .iter()
                .filter_map(Gateway::peak_rss_mb)
                .reduce(f64::max),
            warmup_drain_s,
            store_queue_after,
            dashboard,
            peers,
        })
    }

    /// The dashboard client, started when asked for and there is a gateway: its stop flag and
    /// its task (which returns its samples).
    fn dashboard(
        &self,
        args: &GatewayBenchArgs,
    ) -> Option<(
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        tokio::task::JoinHandle<Vec<Sample>>,
    )> {
        let period = Duration::from_secs_f64(args.dashboard_poll?);
        let base = self.gateways.first()?.base_url.clone();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = self.rt.spawn(dashboard::poll(
            self.client.clone(),
            base,
            period,
            stop.clone(),
        ));
        Some((stop, task))
    }

    /// `count` requests at `rate`, to `urls` in turn (several gateways behind no load
    /// balancer but this).
    fn slice(
        &mut self,
        urls: &[String],
        sessions: &[bodies::Session],
        rate: f64,
        count: usize,
    ) -> Vec<Sample> {
        let first = self.next_message;
        self.next_message += count as u64;
        load::run(&self.rt, &self.client, rate, count, |i| {
            let s = &sessions[i % sessions.len()];
            Job {
                // Each session alternates between the gateways (request i of a round goes to
                // gateway i + round): no stickiness, as behind a round-robin balancer.
                url: urls[(i + i / sessions.len()) % urls.len()].clone(),
                session: s.key.clone(),
                body: s.body(first + i as u64),
            }
        })
    }

    /// The gateways' `/metrics` texts now, one after the other (the parsers sum a metric over
    /// its lines, so over the gateways too).
    fn scrape(&self) -> Option<String> {
        let mut all = String::new();
        for g in &self.gateways {
            let url = format!("{}/metrics", g.base_url);
            let text = self.rt.block_on(async {
                let res = self.client.get(url).send().await.ok()?;
                res.bytes().await.ok()
            })?;
            all.push_str(&String::from_utf8_lossy(&text));
            all.push('\n');
        }
        (!self.gateways.is_empty()).then_some(all)
    }

    /// The gateways' CPU seconds so far, summed.
    fn gateway_cpu(&self) -> Option<f64> {
        self.gateways.iter().map(Gateway::cpu_seconds).sum()
    }

    /// The gateway's histograms now, if it exports them.
    fn histograms(&self) -> Option<Histograms> {
        let text = self.scrape()?;
        Some(Histograms {
            overhead: metrics::parse(&text, metrics::OVERHEAD),
            commit_wait: metrics::parse(&text, metrics::COMMIT_WAIT),
        })
    }

    /// Writes queued for the gateway's store now, plus the sessions whose indexes its writer
    /// has still to catch up.
    fn store_queue(&self) -> Option<f64> {
        metrics::store_backlog(&self.scrape()?)
    }

    /// Distillation passes queued or running now (paced to a share of a core, the warm-up's
    /// can take seconds): a row measures the steady state, not their backlog.
    fn distill_pending(&self) -> f64 {
        self.scrape()
            .and_then(|text| metrics::gauge(&text, "ctxd_distill_pending"))
            .unwrap_or(0.0)
    }

    /// Wait until the gateway's store writer has nothing queued and nothing left to index, and
    /// no distillation pass is pending; the seconds it took.
    fn drain_store(&self, limit: Duration) -> anyhow::Result<Option<f64>> {
        if self.gateways.is_empty() {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        loop {
            match self.store_queue() {
                Some(depth) if depth + self.distill_pending() > 0.0 => {}
                // Absent: nothing was ever queued.
                _ => return Ok(Some(started.elapsed().as_secs_f64())),
            }
            if started.elapsed() > limit {
                bail!("the gateway's store writer did not drain the warm-up within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_hint(&self) -> String {
        self.gateways.iter().map(Gateway::log_tail).collect()
    }
}

fn stats(samples: &[Sample]) -> Stats {
    let mut ok: Vec<Duration> = samples.iter().filter(|s| s.ok).map(|s| s.latency).collect();
    ok.sort_unstable();
    Stats {
        requests: samples.len(),
        errors: samples.len() - ok.len(),
        p50_ms: quantile_ms(&ok, 0.50),
        p99_ms: quantile_ms(&ok, 0.99),
        max_ms: quantile_ms(&ok, 1.0),
    }
}

/// One scrape's histograms.
struct Histograms {
    overhead: Option<Histogram>,
    commit_wait: Option<Histogram>,
}

fn overhead(h: &Histogram) -> Overhead {
    Overhead {
        count: h.count,
        mean_ms: h.mean_ms(),
        p50_le_ms: h.quantile_bound_ms(0.50),
        p99_le_ms: h.quantile_bound_ms(0.99),
    }
}

fn header() -> String {
    format!(
        "{:>10} {:>9} {:>4} {:>6} {:>11} {:>7} {:>22} {:>22} {:>15} {:>22} {:>20} {:>13} {:>8} {:>8} {:>6} {:>22}",
        "store",
        "size",
        "mode",
        "req/s",
        "requests",
        "errors",
        "direct p50/p99/max ms",
        "gateway p50/p99/max ms",
        "added p50/p99",
        "overhead mean/p50≤/p99≤",
        "commit mean/p99≤",
        "cpu ms/req g/db",
        "peak MB",
        "drain s",
        "q end",
        "dashboard n p50/max ms"
    )
}

fn line(r: &Row) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    let triple = |s: &Stats| format!("{} / {} / {}", ms(s.p50_ms), ms(s.p99_ms), ms(s.max_ms));
    let (requests, errors, via) = match &r.gateway {
        Some(g) => (
            format!("{}/{}", r.direct.requests, g.requests),
            format!("{}/{}", r.direct.errors, g.errors),
            triple(g),
        ),
        None => (
            r.direct.requests.to_string(),
            r.direct.errors.to_string(),
            "-".to_owned(),
        ),
    };
    let commit = r.commit_wait.as_ref().map_or_else(
        || "-".to_owned(),
        |o| format!("{} / {}", ms(o.mean_ms), ms(o.p99_le_ms)),
    );
    let overhead = r.overhead.as_ref().map_or_else(
        || "-".to_owned(),
        |o| {
            format!(
                "{} / {} / {}",
                ms(o.mean_ms),
                ms(o.p50_le_ms),
                ms(o.p99_le_ms)
            )
        },
    );
    let dashboard = r.dashboard.as_ref().map_or_else(
        || "-".to_owned(),
        |d| {
            format!(
                "{} {} / {}",
                d.requests - d.errors,
                ms(d.p50_ms),
                ms(d.max_ms)
            )
        },
    );
    let cpu = match (r.gateway_cpu_ms_per_request, r.store_cpu_ms_per_request) {
        (None, _) => "-".to_owned(),
        (Some(g), None) => format!("{g:.2}"),
        (Some(g), Some(db)) => format!("{g:.2} / {db:.2}"),
    };
    format!(
        "{:>10} {:>9} {:>4} {:>6} {:>11} {:>7} {:>22} {:>22} {:>15} {:>22} {:>20} {:>13} {:>8} {:>8} {:>6} {:>22}",
        r.store,
        size_label(r.size_bytes),
        if r.mode == Mode::Sse { "sse" } else { "json" },
        r.rate,
        requests,
        errors,
        triple(&r.direct),
        via,
        format!("{} / {}", ms(r.added_p50_ms), ms(r.added_p99_ms)),
        overhead,
        commit,
        cpu,
        r.gateway_peak_rss_mb
            .map_or_else(|| "-".to_owned(), |m| format!("{m:.1}")),
        r.warmup_drain_s
            .map_or_else(|| "-".to_owned(), |s| format!("{s:.1}")),
        r.store_queue_after
            .map_or_else(|| "-".to_owned(), |q| format!("{q:.0}")),
        dashboard,
    )
}

/// A peer's line under its row, in the row's columns: its latency where the gateway's is.
fn peer_line(r: &Row, p: &PeerRow) -> String {
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    let l = &p.latency;
    format!(
        "{:>10} {:>9} {:>4} {:>6} {:>11} {:>7} {:>22} {:>22} {:>15}",
        format!("↳ {}", p.name),
        size_label(r.size_bytes),
        if r.mode == Mode::Sse { "sse" } else { "json" },
        r.rate,
        l.requests,
        l.errors,
        "",
        format!("{} / {} / {}", ms(l.p50_ms), ms(l.p99_ms), ms(l.max_ms)),
        format!("{} / {}", ms(p.added_p50_ms), ms(p.added_p99_ms)),
    )
}

fn verdict(r: &Row) -> String {
    let target = r.target_added_p99_ms.unwrap_or_default();
    let mode = if r.mode == Mode::Sse { "sse" } else { "json" };
    match (r.target_met, r.added_p99_ms) {
        (Some(true), Some(a)) => format!(
            "target {} {mode} ({}): p99 added {a:.2} ms < {target} ms: met",
            size_label(r.size_bytes),
            r.store
        ),
        (Some(false), Some(a)) => format!(
            "target {} {mode} ({}): p99 added {a:.2} ms ≥ {target} ms: MISSED",
            size_label(r.size_bytes),
            r.store
        ),
        _ => format!(
            "target {} {mode} ({}): p99 added < {target} ms: not measured",
            size_label(r.size_bytes),
            r.store
        ),
    }
}

fn size_label(bytes: usize) -> String {
    if bytes >= KIB * KIB && bytes.is_multiple_of(KIB * KIB) {
        format!("{} MiB", bytes / (KIB * KIB))
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("2k"), Ok(2048));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("500"), Ok(500));
        assert!(parse_size("0").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("-1k").is_err());
        assert_eq!(size_label(100 * 1024), "100 KiB");
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(size_label(1000), "1000 B");
    }

    #[test]
    fn peers_parse() {
        let p = parse_peer("nginx=http://127.0.0.1:8081/").unwrap();
        assert_eq!(
            (p.name.as_str(), p.base_url.as_str()),
            ("nginx", "http://127.0.0.1:8081")
        );
        assert!(parse_peer("nginx").is_err());
        assert!(parse_peer("=http://x").is_err());
        assert!(parse_peer("litellm=127.0.0.1:4000").is_err());
    }

    #[test]
    fn stats_count_errors_apart() {
        let s = |ms: u64, ok: bool| Sample {
            latency: Duration::from_millis(ms),
            ok,
        };
        let st = stats(&[s(1, true), s(2, true), s(50, false), s(3, true)]);
        assert_eq!((st.requests, st.errors), (4, 1));
        assert_eq!(st.max_ms, Some(3.0));
        assert_eq!(st.p50_ms, Some(2.0));
    }
}
