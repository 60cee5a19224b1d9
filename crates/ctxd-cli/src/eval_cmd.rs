//! `ctxd eval FILE...`: recorded sessions replayed through the distillation and write-facts
//! policies, measured against sending everything and against keep-the-last-N-outputs masking
//! (see [`replay`] for what each figure means).

mod mechanisms;
mod replay;

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
    /// Print JSON (schema `ctxd.eval/1`): per session and in total, with every miss.
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
    /// Count what lazy tools would leave out of each request: the recorded tool definitions
    /// beyond the agent's base set (`ctxd serve`'s defaults) and the tools used since the last
    /// prompt. Only gateway captures record definitions; agents' session files do not.
    #[arg(long)]
    pub lazy_tools: bool,
    /// The baseline: keep the last N tool outputs, mask older ones (SWE-agent's rule).
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub baseline_last: usize,
    /// Replay without write facts (writes keep their content in context).
    #[arg(long)]
    pub no_write_facts: bool,
    /// Writes carrying fewer bytes of content than this keep it (1 to 10000000).
    #[arg(long, value_name = "BYTES", default_value_t = ctxd_core::wm::writes::DEFAULT_MIN_BYTES,
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
    /// Measure each mechanism on and off instead: every mechanism alone, all of them together
    /// (meta-amnesia included), and all but each one; a table of tokens saved, cost saved,
    /// retention and estimated cache hit rate (the switches above set only the thresholds).
    #[arg(long, conflicts_with_all = ["no_digests", "no_write_facts", "amnesia", "no_amnesia"])]
    pub mechanisms: bool,
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
    let range = ctxd_core::wm::writes::MIN_BYTES_RANGE;
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
    retention_ctxd: Retention,
    retention_last_n: Retention,
    passes: usize,
    edits: usize,
    write_facts: usize,
    write_facts_tokens: u64,
    digests: usize,
    digest_saved_tokens: u64,
    amnesia_judged: usize,
    amnesia_dropped: usize,
    amnesia_rounds: usize,
    amnesia_saved_tokens: u64,
    lazy_tools_tokens: u64,
    /// The classifier's requests, input tokens, cost and time over every pass.
    classifier: Usage,
    classifier_ms: f64,
    policy_ms: f64,
    seconds: f64,
    mb_per_second: f64,
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
            out.push(p);
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
) -> anyhow::Result<Option<ctxd_core::wm::digest::Config>> {
    let mut cfg = ctxd_core::wm::digest::Config::default();
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
) -> anyhow::Result<Option<ctxd_core::wm::amnesia::Config>> {
    let mut cfg = ctxd_core::wm::amnesia::Config::default();
    if let Some(n) = args.amnesia_min_tokens {
        cfg.min_tokens = ctxd_gateway::config::parse_amnesia_min_tokens(n)
            .map_err(|e| anyhow::anyhow!("--amnesia-min-tokens {e}"))?;
    }
    Ok(on.then_some(cfg))
}

/// The replay's options for one session with `switches` on.
fn options<'a, C>(
    args: &EvalArgs,
    switches: Switches,
    counter: &'a dyn ctxd_core::tokens::TokenCounter,
    runtime: &'a tokio::runtime::Runtime,
    classifier: &'a C,
) -> anyhow::Result<replay::Options<'a, C>> {
    Ok(replay::Options {
        distill: switches.distill,
        config: ctxd_core::distill::Config {
            exchange_omit: args.exchange_omit,
            exclude_tools: args.distill_exclude_tools.clone(),
            ..ctxd_core::distill::Config::default()
        },
        last_n: args.baseline_last,
        counter,
        runtime,
        classifier,
        write_facts: ctxd_core::wm::writes::Settings {
            enabled: switches.write_facts,
            min_bytes: args.write_facts_min_bytes,
        },
        digest: digest_config(args, switches.digests)?,
        amnesia: amnesia_config(args, switches.amnesia)?,
        lazy: args
            .lazy_tools
            .then(ctxd_core::wm::lazy::BaseTools::default),
    })
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
    let files = collect(&args.files)?;
    if files.is_empty() {
        anyhow::bail!("no session files found");
    }
    if args.mechanisms {
        return mechanisms::run(args, &files, &classifier);
    }
    let runtime = runtime()?;
    let switches = Switches::from_args(args);
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
        let opts = options(args, switches, &counter, &runtime, &classifier)?;
        let outcome = replay::replay(&import.session, &opts);
        let ms = t0.elapsed().as_secs_f64() * 1_000.0;
        total.sessions += 1;
        total.bytes += bytes;
        total.requests += outcome.requests;
        total.all.add(&outcome.all);
        total.ctxd.add(&outcome.ctxd);
        total.last_n.add(&outcome.last_n);
        total.retention_ctxd.add(&outcome.retention_ctxd);
        total.retention_last_n.add(&outcome.retention_last_n);
        total.passes += outcome.passes;
        total.edits += outcome.edits;
        total.write_facts += outcome.write_facts;
        total.write_facts_tokens += outcome.write_facts_tokens;
        total.digests += outcome.digests;
        total.digest_saved_tokens += outcome.digest_saved_tokens;
        total.amnesia_judged += outcome.amnesia_judged;
        total.amnesia_dropped += outcome.amnesia_dropped;
        total.amnesia_rounds += outcome.amnesia_rounds;
        total.amnesia_saved_tokens += outcome.amnesia_saved_tokens;
        total.lazy_tools_tokens += outcome.lazy_tools_tokens;
        total.classifier.add(&outcome.classifier);
        total.classifier_ms += outcome.classifier_us as f64 / 1_000.0;
        total.policy_ms += outcome.policy_us as f64 / 1_000.0;
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
    total.seconds = started.elapsed().as_secs_f64();
    total.mb_per_second = total.bytes as f64 / 1e6 / total.seconds.max(1e-9);

    let mut stdout = std::io::stdout().lock();
    if args.json {
        let report = Report {
            schema: "ctxd.eval/1",
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
    let n = args.baseline_last;
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
    let line = |out: &mut dyn Write,
                name: &str,
                reqs: usize,
                all: &Sent,
                ctxd: &Sent,
                last: &Sent,
                rc: &Retention,
                rl: &Retention,
                ms: f64|
     -> std::io::Result<()> {
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
    };
    for r in rows {
        let o = &r.outcome;
        line(
            out,
            &name_of(&r.file),
            o.requests,
            &o.all,
            &o.ctxd,
            &o.last_n,
            &o.retention_ctxd,
            &o.retention_last_n,
            o.classifier_us as f64 / 1_000.0,
        )?;
    }
    line(
        out,
        "total",
        total.requests,
        &total.all,
        &total.ctxd,
        &total.last_n,
        &total.retention_ctxd,
        &total.retention_last_n,
        total.classifier_ms,
    )?;
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
    if args.no_write_facts {
        writeln!(out, "write facts: off")?;
    } else {
        writeln!(
            out,
            "write facts (min {} bytes): {} writes stripped, {} tokens saved over the later requests ({:.1}% of all tokens)",
            args.write_facts_min_bytes,
            total.write_facts,
            total.write_facts_tokens,
            100.0 * ratio(total.write_facts_tokens as f64, total.all.input_tokens as f64)
        )?;
    }
    if args.no_digests {
        writeln!(out, "digests off")?;
    } else {
        writeln!(
            out,
            "digests: {} shell outputs, {} tokens saved over all requests (4 bytes a token)",
            total.digests, total.digest_saved_tokens
        )?;
    }
    if args.amnesia && !args.no_amnesia {
        writeln!(
            out,
            "amnesia: {} reads judged, {} dropped, {} rounds pruned, {} tokens saved over all requests (4 bytes a token)",
            total.amnesia_judged,
            total.amnesia_dropped,
            total.amnesia_rounds,
            total.amnesia_saved_tokens
        )?;
    } else {
        writeln!(out, "amnesia: off")?;
    }
    if args.lazy_tools {
        writeln!(
            out,
            "lazy tools: {} tokens of tool definitions left out over all requests (4 bytes a token; only sessions that record definitions count)",
            total.lazy_tools_tokens
        )?;
    } else {
        writeln!(out, "lazy tools: off")?;
    }
    writeln!(
        out,
        "old exchanges: omitted below P(relevant) {}{}; tools never distilled: {}",
        args.exchange_omit,
        if args.exchange_omit == 0.0 {
            " (never)"
        } else {
            ""
        },
        if args.distill_exclude_tools.is_empty() {
            "none".to_owned()
        } else {
            args.distill_exclude_tools.join(", ")
        }
    )?;
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
                "  {} request {}: {} {} line {} ({}): {}\n    hidden by: {}",
                name_of(file),
                m.request,
                m.tool,
                m.entry,
                m.line,
                m.term,
                m.text,
                m.hidden_by
            )?;
        }
    }
    Ok(())
}
