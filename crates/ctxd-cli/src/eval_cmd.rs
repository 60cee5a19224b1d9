//! `ctxd eval FILE...`: recorded sessions replayed through the distillation and write-facts
//! policies, measured against sending everything and against keep-the-last-N-outputs masking
//! (see [`replay`] for what each figure means).

mod bounds;
mod mechanisms;
mod replay;
mod split;
mod sweep;
mod terms;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use ctxd_core::distill::record::Usage;
use ctxd_engine::distill::{Classifier, ClassifierSettings, Configured};
use serde::Serialize;

use crate::load;
use replay::{Miss, Outcome, Retention, Sent};

/// Misses listed per session in the text output.
const TEXT_MISSES: usize = 3;

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Session files (every format `ctxd report` reads), or directories searched for them
    /// (`*.jsonl`, `*.json`, `*.traj`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print JSON (schema `ctxd.eval/2`): per session and in total, with every miss.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub classifier: crate::classifier_args::ClassifierArgs,
    /// No shell-output digests in ctxd's variant (distillation alone).
    #[arg(long)]
    pub no_digests: bool,
    /// Shell outputs of at least this many tokens are digested [default: 2000].
    #[arg(long, value_name = "TOKENS")]
    pub digest_min_tokens: Option<u64>,
    /// Meta-amnesia in ctxd's variant (off by default, as in `ctxd serve`): read-like results
    /// judged by the classifier when they arrive, a round of drops pruned at the tail.
    #[arg(long, conflicts_with = "no_amnesia")]
    pub amnesia: bool,
    /// No meta-amnesia (the default; for symmetry with `ctxd serve --no-amnesia`).
    #[arg(long)]
    pub no_amnesia: bool,
    /// Read-like results under this many tokens are retained unjudged [default: 250].
    #[arg(long, value_name = "TOKENS")]
    pub amnesia_min_tokens: Option<u64>,
    /// Lazy tools on, as `ctxd serve`'s agents table turns them on: only the agent's base set
    /// of the client's tools and `find_capability` go upstream.
    #[arg(long)]
    pub lazy_tools: bool,
    /// The baseline: keep the last N tool outputs, mask older ones (SWE-agent's rule).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub baseline_last: usize,
    /// Replay without write facts (writes keep their content in context).
    #[arg(long)]
    pub no_write_facts: bool,
    /// Writes carrying fewer bytes of content than this keep it (1 to 10000000).
    #[arg(long, value_name = "BYTES", default_value_t = ctxd_core::mechanisms::writes::DEFAULT_MIN_BYTES,
          value_parser = parse_min_bytes)]
    pub write_facts_min_bytes: usize,
    /// Old exchanges are omitted when the classifier's P(relevant) is below this (0: never),
    /// as `ctxd serve --exchange-omit`.
    #[arg(long, value_name = "P", default_value_t = ctxd_core::distill::Config::default().exchange_omit,
          value_parser = crate::serve_cmd::parse_exchange_omit)]
    pub exchange_omit: f32,
    /// Tools whose outputs distillation never edits, comma-separated, as `ctxd serve
    /// --distill-exclude-tools`.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub distill_exclude_tools: Vec<String>,
    /// The API the requests are sent in [default: the agent's own: Anthropic Messages for
    /// Claude Code and Pi, Responses for Codex, Chat Completions for the others].
    #[arg(long, value_enum)]
    pub api: Option<ApiArg>,
    /// The model the requests name (its window and tokenizer) [default: the session's, else
    /// claude-sonnet-4-5].
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Send each request at once after the previous answer, as a fast model does: a turn's
    /// distillation pass then lands one request later (by default the model's think time lets
    /// it finish before the next request, as `ctxd serve --distill-wait-ms` makes sure).
    #[arg(long)]
    pub back_to_back: bool,
    /// Write each upstream request's measure here, one JSON line per request (bytes, BLAKE3,
    /// tokens of the system prompt, the tools and each message): what the equivalence test
    /// compares with the bodies `ctxd serve` sent.
    #[arg(long, value_name = "FILE")]
    pub requests: Option<PathBuf>,
    /// With `--requests`, each body whole too (what the equivalence test saves on a
    /// difference).
    #[arg(long, requires = "requests", hide = true)]
    pub requests_with_bodies: bool,
    /// Replay at each of these values of a setting instead, one row per point (tokens, cost,
    /// visible and recoverable retention, cost with recall): `exchange-omit`, `chunk-keep`,
    /// `none-threshold`, `max-keep-ratio`, `small-min-chars`, `min-result-chars`. Repeat for every combination.
    #[arg(long, value_name = "SETTING=V1,V2,...", conflicts_with = "mechanisms")]
    pub sweep: Vec<sweep::Sweep>,
    /// The tuning/test split of the sessions (a TOML file with `tune` and `test` lists of
    /// paths; the repository's is `eval/split.toml`): with `--half`, only that half's files.
    #[arg(long, value_name = "FILE", requires = "half")]
    pub split: Option<PathBuf>,
    /// `tune` or `test`: the half of `--split` to replay.
    #[arg(long, value_enum, requires = "split")]
    pub half: Option<split::Half>,
    /// Measure each mechanism on and off instead: every mechanism alone, all of them together
    /// (meta-amnesia included), and all but each one; a table of tokens saved, cost saved,
    /// retention and estimated cache hit rate (the switches above set only the thresholds).
    #[arg(long, conflicts_with_all = ["no_digests", "no_write_facts", "amnesia", "no_amnesia"])]
    pub mechanisms: bool,
}

/// `--api`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ApiArg {
    Anthropic,
    Chat,
    Responses,
    Gemini,
}

impl ApiArg {
    fn api(self) -> ctxd_gateway::api::Api {
        match self {
            ApiArg::Anthropic => ctxd_gateway::api::Api::Anthropic,
            ApiArg::Chat => ctxd_gateway::api::Api::Chat,
            ApiArg::Responses => ctxd_gateway::api::Api::Responses,
            ApiArg::Gemini => ctxd_gateway::api::Api::Gemini,
        }
    }
}

/// The API a session's agent speaks.
fn api_of(args: &EvalArgs, session: &ctxd_core::model::Session) -> ctxd_gateway::api::Api {
    use ctxd_core::model::Agent;
    if let Some(a) = args.api {
        return a.api();
    }
    match session.meta.agent {
        Some(Agent::ClaudeCode | Agent::Pi) => ctxd_gateway::api::Api::Anthropic,
        Some(Agent::Codex) => ctxd_gateway::api::Api::Responses,
        Some(Agent::GeminiCli) => ctxd_gateway::api::Api::Gemini,
        _ => ctxd_gateway::api::Api::Chat,
    }
}

/// The model a session's requests name.
fn model_of(args: &EvalArgs, session: &ctxd_core::model::Session) -> String {
    args.model
        .clone()
        .or_else(|| session.meta.model.clone())
        .unwrap_or_else(|| "claude-sonnet-4-5".to_owned())
}

/// Which of ctxd's mechanisms a replay runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Switches {
    pub distill: bool,
    pub digests: bool,
    pub write_facts: bool,
    pub amnesia: bool,
}

impl Switches {
    /// What the flags ask for: distillation, digests and write facts unless switched off,
    /// meta-amnesia only when asked (as `ctxd serve`).
    fn from_args(args: &EvalArgs) -> Switches {
        Switches {
            distill: true,
            digests: !args.no_digests,
            write_facts: !args.no_write_facts,
            amnesia: args.amnesia && !args.no_amnesia,
        }
    }
}

fn parse_min_bytes(s: &str) -> Result<usize, String> {
    let range = ctxd_core::mechanisms::writes::MIN_BYTES_RANGE;
    match s.trim().parse::<usize>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?}: expected bytes, {} to {}",
            range.start(),
            range.end()
        )),
    }
}

#[derive(Serialize)]
struct SessionRow {
    file: String,
    agent: String,
    bytes: u64,
    ms: f64,
    #[serde(flatten)]
    outcome: Outcome,
}

#[derive(Serialize, Default)]
struct Total {
    sessions: usize,
    bytes: u64,
    requests: usize,
    all: Sent,
    ctxd: Sent,
    last_n: Sent,
    ctxd_cost_with_recall: f64,
    bounds: bounds::Measured,
    retention_ctxd: Retention,
    retention_last_n: Retention,
    passes: usize,
    edits: usize,
    windows: usize,
    edited: std::collections::BTreeMap<String, usize>,
    saved_by: std::collections::BTreeMap<&'static str, i64>,
    /// Misses by the mechanism that hid the line.
    misses_by: std::collections::BTreeMap<String, usize>,
    /// The classifier's requests, input tokens, cost and time over every pass.
    classifier: Usage,
    classifier_ms: f64,
    policy_ms: f64,
    seconds: f64,
    mb_per_second: f64,
}

impl Total {
    fn add(&mut self, o: &Outcome) {
        self.requests += o.requests;
        self.all.add(&o.all);
        self.ctxd.add(&o.ctxd);
        self.last_n.add(&o.last_n);
        self.ctxd_cost_with_recall += o.ctxd_cost_with_recall;
        self.bounds.add(&o.bounds);
        self.retention_ctxd.add(&o.retention_ctxd);
        self.retention_last_n.add(&o.retention_last_n);
        self.passes += o.passes;
        self.edits += o.edits;
        self.windows += o.windows;
        for (k, v) in &o.edited {
            *self.edited.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.saved_by {
            *self.saved_by.entry(k).or_default() += v;
        }
        for m in &o.misses {
            *self.misses_by.entry(m.mechanism.clone()).or_default() += 1;
        }
        self.classifier.add(&o.classifier);
        self.classifier_ms += o.classifier_us as f64 / 1_000.0;
        self.policy_ms += o.policy_us as f64 / 1_000.0;
    }
}

#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    classifier: &'a str,
    /// The classifier's name in records (`local`, `openai:MODEL`).
    classifier_name: &'a str,
    baseline_last: usize,
    /// Distillation's settings (`--exchange-omit`, `--distill-exclude-tools`).
    exchange_omit: f32,
    distill_exclude_tools: &'a [String],
    sessions: &'a [SessionRow],
    total: &'a Total,
}

/// The session files named (directories searched, sorted).
fn collect(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out)?;
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    found.sort();
    for p in found {
        if p.is_dir() {
            walk(&p, out)?;
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "jsonl" | "json" | "traj"))
        {
            // A file found in a directory that ctxd cannot read (a format not supported yet)
            // is left out with a note; one named on the command line is an error.
            match load::import(&p) {
                Ok(_) => out.push(p),
                Err(e) => eprintln!("ctxd eval: left out {}: {e:#}", p.display()),
            }
        }
    }
    Ok(())
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        1.0
    } else {
        a / b
    }
}

/// The digests' settings (`None`: off), the threshold checked as `ctxd serve` checks it.
fn digest_config(
    args: &EvalArgs,
    on: bool,
) -> anyhow::Result<Option<ctxd_core::mechanisms::digest::Config>> {
    let mut cfg = ctxd_core::mechanisms::digest::Config::default();
    if let Some(n) = args.digest_min_tokens {
        cfg.min_tokens = ctxd_gateway::config::parse_digest_min_tokens(n)
            .map_err(|e| anyhow::anyhow!("--digest-min-tokens {e}"))?;
    }
    Ok(on.then_some(cfg))
}

/// Meta-amnesia's settings (`None`: off), the threshold checked as `ctxd serve` checks it.
fn amnesia_config(
    args: &EvalArgs,
    on: bool,
) -> anyhow::Result<Option<ctxd_core::mechanisms::amnesia::Config>> {
    let mut cfg = ctxd_core::mechanisms::amnesia::Config::default();
    if let Some(n) = args.amnesia_min_tokens {
        cfg.min_tokens = ctxd_gateway::config::parse_amnesia_min_tokens(n)
            .map_err(|e| anyhow::anyhow!("--amnesia-min-tokens {e}"))?;
    }
    Ok(on.then_some(cfg))
}

/// The gateway's settings for a replay with `switches` on: `ctxd serve`'s defaults, the
/// mechanisms and thresholds the flags name.
fn settings(args: &EvalArgs, switches: Switches) -> anyhow::Result<ctxd_gateway::Settings> {
    // The replay keeps its log in memory: the store named here is never opened.
    let mut s = ctxd_gateway::Settings::new(":memory:");
    s.management.mechanisms.distill = switches.distill;
    s.management.mechanisms.digests = switches.digests;
    s.management.mechanisms.amnesia = switches.amnesia;
    s.management.mechanisms.lazy_tools = args.lazy_tools;
    s.management.write_facts = ctxd_core::mechanisms::writes::Settings {
        enabled: switches.write_facts,
        min_bytes: args.write_facts_min_bytes,
    };
    if let Some(cfg) = digest_config(args, true)? {
        s.digest = cfg;
    }
    if let Some(cfg) = amnesia_config(args, true)? {
        s.amnesia = cfg;
    }
    s.exchange_omit = args.exchange_omit;
    s.distill_exclude_tools = args.distill_exclude_tools.clone();
    Ok(s)
}

/// The replay's options for one session.
fn options<'a, C>(
    args: &EvalArgs,
    settings: &'a ctxd_gateway::Settings,
    session: &ctxd_core::model::Session,
    counter: &'a dyn ctxd_core::tokens::TokenCounter,
    runtime: &'a tokio::runtime::Runtime,
    classifier: &'a C,
) -> replay::Options<'a, C> {
    replay::Options {
        settings,
        last_n: args.baseline_last,
        counter,
        runtime,
        classifier,
        api: api_of(args, session),
        model: model_of(args, session),
        timing: if args.back_to_back {
            replay::Timing::BackToBack
        } else {
            replay::Timing::ThinkTime
        },
        with_bodies: args.requests_with_bodies,
    }
}

/// The runtime the classifier runs on (the logprob classifier's HTTP needs the I/O driver).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// A progress bar over `len` files, on a terminal only.
fn progress(len: usize) -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(len as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    })
}

/// The classifier the flags name, checked (a flag of the other kind is an error).
fn classifier(args: &EvalArgs) -> anyhow::Result<Configured> {
    let settings = args.classifier.over(&ClassifierSettings::default())?;
    crate::classifier_args::configured(&settings)
}

pub fn run(args: &EvalArgs) -> anyhow::Result<()> {
    let classifier = classifier(args)?;
    // The thresholds are checked before any work.
    digest_config(args, true)?;
    amnesia_config(args, true)?;
    let mut files = collect(&args.files)?;
    if let (Some(path), Some(half)) = (&args.split, args.half) {
        files = split::Split::read(path)?.keep(half, files)?;
    }
    if files.is_empty() {
        anyhow::bail!("no session files found");
    }
    if args.mechanisms {
        return mechanisms::run(args, &files, &classifier);
    }
    if !args.sweep.is_empty() {
        return sweep::run(args, &files, &classifier);
    }
    let runtime = runtime()?;
    let settings = settings(args, Switches::from_args(args))?;
    let mut request_lines = args.requests.as_ref().map(|_| Vec::new());
    let bar = progress(files.len());
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut total = Total::default();
    for path in &files {
        if let Some(bar) = &bar {
            bar.set_message(path.display().to_string());
        }
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let t0 = Instant::now();
        let import = load::import(path)?;
        let counter = load::tokenizer(&import.session);
        let opts = options(
            args,
            &settings,
            &import.session,
            &counter,
            &runtime,
            &classifier,
        );
        let outcome = replay::replay(&import.session, &opts, request_lines.as_mut())
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let ms = t0.elapsed().as_secs_f64() * 1_000.0;
        total.sessions += 1;
        total.bytes += bytes;
        total.add(&outcome);
        rows.push(SessionRow {
            file: path.display().to_string(),
            agent: import
                .session
                .meta
                .agent
                .map_or("unknown", |a| a.as_str())
                .to_owned(),
            bytes,
            ms,
            outcome,
        });
        if let Some(bar) = &bar {
            bar.inc(1);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if let (Some(path), Some(lines)) = (&args.requests, &request_lines) {
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        );
        for line in lines {
            serde_json::to_writer(&mut f, line)?;
            writeln!(f)?;
        }
        f.flush()?;
    }
    total.seconds = started.elapsed().as_secs_f64();
    total.mb_per_second = total.bytes as f64 / 1e6 / total.seconds.max(1e-9);

    let mut stdout = std::io::stdout().lock();
    if args.json {
        let report = Report {
            schema: "ctxd.eval/2",
            classifier: args.classifier.classifier.as_deref().unwrap_or("local"),
            classifier_name: classifier.name(),
            baseline_last: args.baseline_last,
            exchange_omit: args.exchange_omit,
            distill_exclude_tools: &args.distill_exclude_tools,
            sessions: &rows,
            total: &total,
        };
        serde_json::to_writer(&mut stdout, &report)?;
        writeln!(stdout)?;
        return Ok(());
    }
    write_text(&mut stdout, args, classifier.name(), &rows, &total)?;
    Ok(())
}

fn name_of(file: &str) -> String {
    let name = Path::new(file)
        .file_name()
        .map_or_else(|| file.to_owned(), |n| n.to_string_lossy().into_owned());
    if name.chars().count() > 28 {
        let head: String = name.chars().take(27).collect();
        format!("{head}…")
    } else {
        name
    }
}

fn write_text(
    out: &mut impl Write,
    args: &EvalArgs,
    classifier: &str,
    rows: &[SessionRow],
    total: &Total,
) -> std::io::Result<()> {
    write_table(out, classifier, args.baseline_last, rows, total)?;
    write_totals(out, total)?;
    write_mechanisms(out, args)?;
    if total.classifier.input_tokens > 0 {
        writeln!(
            out,
            "classifier {}: {} requests, {} input tokens, ${:.4}",
            classifier,
            total.classifier.requests,
            total.classifier.input_tokens,
            total.classifier.cost_usd
        )?;
    }
    write_misses(out, rows)
}

/// The heading, a row per session, and the total's row.
fn write_table(
    out: &mut impl Write,
    classifier: &str,
    n: usize,
    rows: &[SessionRow],
    total: &Total,
) -> std::io::Result<()> {
    writeln!(
        out,
        "ctxd eval: classifier {classifier}, baseline last-{n} masking; tokens and cache-adjusted cost as a share of sending everything"
    )?;
    writeln!(
        out,
        "{:<28} {:>5} {:>11} {:>7} {:>7} {:>7} {:>7} {:>15} {:>15} {:>7}",
        "session",
        "reqs",
        "all tokens",
        "ctxd",
        format!("last-{n}"),
        "cost",
        format!("last-{n}"),
        "retained ctxd",
        format!("last-{n}"),
        "clf ms"
    )?;
    for r in rows {
        let o = &r.outcome;
        write_row(
            out,
            (&name_of(&r.file), o.requests),
            (&o.all, &o.ctxd, &o.last_n),
            (&o.retention_ctxd, &o.retention_last_n),
            o.classifier_us as f64 / 1_000.0,
        )?;
    }
    write_row(
        out,
        ("total", total.requests),
        (&total.all, &total.ctxd, &total.last_n),
        (&total.retention_ctxd, &total.retention_last_n),
        total.classifier_ms,
    )
}

/// One row: sending everything's tokens, ctxd's and last-N's shares of its tokens and cost,
/// their retention, the classifier's milliseconds.
fn write_row(
    out: &mut impl Write,
    (name, reqs): (&str, usize),
    (all, ctxd, last): (&Sent, &Sent, &Sent),
    (rc, rl): (&Retention, &Retention),
    ms: f64,
) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<28} {:>5} {:>11} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>6.1}% {:>7} {:>6.1}% {:>7} {:>7.1}",
        name,
        reqs,
        all.input_tokens,
        ratio(ctxd.input_tokens as f64, all.input_tokens as f64),
        ratio(last.input_tokens as f64, all.input_tokens as f64),
        ratio(ctxd.cost, all.cost),
        ratio(last.cost, all.cost),
        rc.share() * 100.0,
        format!("({}/{})", rc.retained, rc.used_lines),
        rl.share() * 100.0,
        format!("({}/{})", rl.retained, rl.used_lines),
        ms
    )
}

/// The totals' lines: throughput, retention, the bounds, savings, edits and misses.
fn write_totals(out: &mut impl Write, total: &Total) -> std::io::Result<()> {
    writeln!(
        out,
        "{} sessions, {:.2} MB in {:.2} s: {:.1} MB/s; {} passes, {} edits; policy {:.1} ms, classifier {:.1} ms",
        total.sessions,
        total.bytes as f64 / 1e6,
        total.seconds,
        total.mb_per_second,
        total.passes,
        total.edits,
        total.policy_ms,
        total.classifier_ms
    )?;
    writeln!(
        out,
        "retention: visible {:.1}%, recoverable (a stub naming `recall` shown) {:.1}%; {} used lines the client itself no longer sent (not counted); cost with one recall round per output missed at a request {:.3}",
        total.retention_ctxd.share() * 100.0,
        total.retention_ctxd.recoverable_share() * 100.0,
        total.retention_ctxd.client_dropped,
        ratio(total.ctxd_cost_with_recall, total.all.cost)
    )?;
    let (a, b) = (&total.bounds.decided_once, &total.bounds.after_last_use);
    writeln!(
        out,
        "bounds at 100% retention (every output and call over {} characters cut to the lines the work uses again): (a) decided once, tokens {:.3} cost {:.3}; (b) dropped after last use, tokens {:.3} cost {:.3}",
        bounds::MIN_ITEM_CHARS,
        ratio(a.input_tokens as f64, total.all.input_tokens as f64),
        ratio(a.cost, total.all.cost),
        ratio(b.input_tokens as f64, total.all.input_tokens as f64),
        ratio(b.cost, total.all.cost),
    )?;
    let join = |m: &mut dyn Iterator<Item = String>| m.collect::<Vec<_>>().join(", ");
    writeln!(
        out,
        "tokens saved by mechanism (the gateway's accounting, 4 bytes a token): {}",
        join(&mut total.saved_by.iter().map(|(k, v)| format!("{k} {v}")))
    )?;
    writeln!(
        out,
        "edits: {}; windows opened {}; misses by mechanism: {}",
        join(&mut total.edited.iter().map(|(k, v)| format!("{k} {v}"))),
        total.windows,
        join(&mut total.misses_by.iter().map(|(k, v)| format!("{k} {v}")))
    )
}

/// The mechanisms and thresholds the replay ran with.
fn write_mechanisms(out: &mut impl Write, args: &EvalArgs) -> std::io::Result<()> {
    writeln!(
        out,
        "mechanisms: write facts {}, digests {}, amnesia {}; old exchanges omitted below P(relevant) {}{}; tools never distilled: {}; passes land {}",
        if args.no_write_facts { "off" } else { "on" },
        if args.no_digests { "off" } else { "on" },
        if args.amnesia && !args.no_amnesia { "on" } else { "off" },
        args.exchange_omit,
        if args.exchange_omit == 0.0 { " (never)" } else { "" },
        if args.distill_exclude_tools.is_empty() {
            "none".to_owned()
        } else {
            args.distill_exclude_tools.join(", ")
        },
        if args.back_to_back {
            "one request late (--back-to-back)"
        } else {
            "before the next request (think time)"
        }
    )
}

/// The first few misses of each session (all of them are in the JSON).
fn write_misses(out: &mut impl Write, rows: &[SessionRow]) -> std::io::Result<()> {
    let misses: Vec<(&str, &Miss)> = rows
        .iter()
        .flat_map(|r| {
            r.outcome
                .misses
                .iter()
                .take(TEXT_MISSES)
                .map(move |m| (r.file.as_str(), m))
        })
        .collect();
    if !misses.is_empty() {
        writeln!(out, "Misses (a few per session; all with --json):")?;
        for (file, m) in misses {
            writeln!(
                out,
                "  {} request {}: {} {} line {} ({}): {}\n    hidden by {}: {}{}",
                name_of(file),
                m.request,
                m.tool,
                m.entry,
                m.line,
                m.term,
                m.text,
                m.mechanism,
                m.hidden_by,
                if m.recoverable { " (recall shown)" } else { "" }
            )?;
        }
    }
    Ok(())
}
