//! `ctxd eval --sweep SETTING=V1,V2,…`: the same sessions replayed at each point of one or
//! more settings (several `--sweep`s: every combination), one row per point: tokens, cost,
//! visible and recoverable retention, cost with recall. The frontier a user chooses a
//! setting from; each point is exactly what `ctxd serve` with that setting does (the
//! settings are the gateway's: `exchange-omit`, `distill-chunk-keep`, ... in its config).

use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;

use ctxd_engine::distill::{Classifier, Configured};
use serde::Serialize;

use super::replay::{Retention, Sent};
use super::{options, progress, ratio, runtime, settings, EvalArgs, Switches};
use crate::load;

/// A setting `--sweep` varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Knob {
    /// Old exchanges omitted below this P(relevant) (`exchange-omit`).
    ExchangeOmit,
    /// A chunk kept from this P(needed) (`distill-chunk-keep`).
    ChunkKeep,
    /// A whole output removed only when "none needed" wins with this (`distill-none-threshold`).
    NoneThreshold,
    /// Keeping more than this share is not worth an edit (`distill-max-keep-ratio`).
    MaxKeepRatio,
    /// Outputs judged whole from this many characters (`distill-small-min-chars`).
    SmallMinChars,
    /// Outputs chunked from this many characters (`distill-min-result-chars`).
    MinResultChars,
}

const KNOBS: [(&str, Knob); 6] = [
    ("exchange-omit", Knob::ExchangeOmit),
    ("chunk-keep", Knob::ChunkKeep),
    ("none-threshold", Knob::NoneThreshold),
    ("max-keep-ratio", Knob::MaxKeepRatio),
    ("small-min-chars", Knob::SmallMinChars),
    ("min-result-chars", Knob::MinResultChars),
];

impl Knob {
    fn name(self) -> &'static str {
        KNOBS
            .iter()
            .find(|(_, k)| *k == self)
            .map_or("?", |(n, _)| n)
    }
}

/// One `--sweep` flag: a setting and its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    pub knob: Knob,
    pub values: Vec<f64>,
}

impl FromStr for Sweep {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let names = || KNOBS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
        let (name, values) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected SETTING=V1,V2,... (settings: {})", names()))?;
        let knob = KNOBS
            .iter()
            .find(|(n, _)| *n == name.trim())
            .map(|(_, k)| *k)
            .ok_or_else(|| format!("{name:?}: not a setting --sweep knows ({})", names()))?;
        let values = values
            .split(',')
            .map(|v| {
                v.trim()
                    .parse::<f64>()
                    .map_err(|_| format!("{name}: {v:?} is not a number"))
            })
            .collect::<Result<Vec<f64>, String>>()?;
        if values.is_empty() {
            return Err(format!("{name}: no values"));
        }
        Ok(Sweep { knob, values })
    }
}

/// `settings` with `knob` at `v`, checked as `ctxd serve` checks its config.
fn set(settings: &mut ctxd_gateway::Settings, knob: Knob, v: f64) -> anyhow::Result<()> {
    let mut t = settings.distill_tuning;
    let whole = || {
        if v >= 0.0 && v.fract() == 0.0 {
            Ok(v as usize)
        } else {
            Err(anyhow::anyhow!(
                "--sweep {}: {v}: expected characters",
                knob.name()
            ))
        }
    };
    match knob {
        Knob::ExchangeOmit => {
            settings.exchange_omit = ctxd_gateway::config::parse_exchange_omit(v as f32)
                .map_err(|e| anyhow::anyhow!("--sweep exchange-omit: {e}"))?;
            return Ok(());
        }
        Knob::ChunkKeep => t.chunk_keep = v as f32,
        Knob::NoneThreshold => t.none_threshold = v as f32,
        Knob::MaxKeepRatio => t.max_keep_ratio = v as f32,
        Knob::SmallMinChars => t.small_min_chars = whole()?,
        Knob::MinResultChars => t.min_result_chars = whole()?,
    }
    settings.distill_tuning = t
        .checked()
        .map_err(|e| anyhow::anyhow!("--sweep {}={v}: {e}", knob.name()))?;
    Ok(())
}

/// One point of the sweep, over every session.
#[derive(Clone, Debug, Default, Serialize)]
struct Point {
    /// The settings of this point, by name.
    at: Vec<(&'static str, f64)>,
    sent: Sent,
    /// Shares of sending everything.
    tokens: f64,
    cost: f64,
    cost_with_recall: f64,
    retention: Retention,
    visible: f64,
    recoverable: f64,
}

#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    classifier: &'a str,
    sessions: usize,
    requests: usize,
    everything: Sent,
    points: &'a [Point],
}

/// Every combination of the sweeps' values.
fn grid(sweeps: &[Sweep]) -> Vec<Vec<(Knob, f64)>> {
    let mut out: Vec<Vec<(Knob, f64)>> = vec![Vec::new()];
    for s in sweeps {
        out = out
            .into_iter()
            .flat_map(|p| {
                s.values.iter().map(move |&v| {
                    let mut p = p.clone();
                    p.push((s.knob, v));
                    p
                })
            })
            .collect();
    }
    out
}

pub(super) fn run(
    args: &EvalArgs,
    files: &[PathBuf],
    classifier: &Configured,
) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let points = grid(&args.sweep);
    // Every point's settings are checked before any replay.
    let mut configs = Vec::with_capacity(points.len());
    for p in &points {
        let mut s = settings(args, Switches::from_args(args))?;
        for &(knob, v) in p {
            set(&mut s, knob, v)?;
        }
        configs.push(s);
    }
    let mut measured: Vec<Point> = points
        .iter()
        .map(|p| Point {
            at: p.iter().map(|&(k, v)| (k.name(), v)).collect(),
            ..Point::default()
        })
        .collect();
    let mut everything = Sent::default();
    let mut requests = 0;
    let bar = progress(files.len() * points.len());
    for path in files {
        let import = load::import(path)?;
        let counter = load::tokenizer(&import.session);
        for (i, s) in configs.iter().enumerate() {
            let opts = options(args, s, &import.session, &counter, &runtime, classifier);
            let o = super::replay::replay(&import.session, &opts, None)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            if i == 0 {
                everything.add(&o.all);
                requests += o.requests;
            }
            let p = &mut measured[i];
            p.sent.add(&o.ctxd);
            p.cost_with_recall += o.ctxd_cost_with_recall;
            p.retention.add(&o.retention_ctxd);
            if let Some(bar) = &bar {
                bar.inc(1);
            }
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    for p in &mut measured {
        p.tokens = ratio(p.sent.input_tokens as f64, everything.input_tokens as f64);
        p.cost = ratio(p.sent.cost, everything.cost);
        p.cost_with_recall = ratio(p.cost_with_recall, everything.cost);
        p.visible = p.retention.share();
        p.recoverable = p.retention.recoverable_share();
    }
    let report = Report {
        schema: "ctxd.eval.sweep/1",
        classifier: classifier.name(),
        sessions: files.len(),
        requests,
        everything,
        points: &measured,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "ctxd eval --sweep: {} sessions, {} requests, classifier {}; tokens and cache-adjusted cost as a share of sending everything",
        report.sessions, report.requests, report.classifier
    )?;
    writeln!(
        out,
        "{:<44} {:>7} {:>7} {:>12} {:>8} {:>12}",
        "point", "tokens", "cost", "cost+recall", "visible", "recoverable"
    )?;
    for p in &measured {
        let at =
            p.at.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
        writeln!(
            out,
            "{:<44} {:>7.3} {:>7.3} {:>12.3} {:>7.1}% {:>11.1}%",
            at,
            p.tokens,
            p.cost,
            p.cost_with_recall,
            p.visible * 100.0,
            p.recoverable * 100.0
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_parse_and_make_every_combination() {
        let a: Sweep = "chunk-keep=0.3,0.5".parse().unwrap();
        let b: Sweep = "exchange-omit=0,0.2,0.4".parse().unwrap();
        assert_eq!(a.knob, Knob::ChunkKeep);
        assert_eq!(grid(&[a, b]).len(), 6);
        assert!("chunk=1"
            .parse::<Sweep>()
            .unwrap_err()
            .contains("exchange-omit"));
        assert!("chunk-keep=x".parse::<Sweep>().is_err());
        assert!("chunk-keep".parse::<Sweep>().is_err());
    }

    #[test]
    fn a_point_is_checked_as_the_config_is() {
        let mut s = ctxd_gateway::Settings::new(":memory:");
        assert!(set(&mut s, Knob::ChunkKeep, 1.5).is_err());
        assert!(set(&mut s, Knob::SmallMinChars, 1e9).is_err());
        set(&mut s, Knob::MaxKeepRatio, 0.5).unwrap();
        assert_eq!(s.distill_config().max_keep_ratio, 0.5);
    }
}
