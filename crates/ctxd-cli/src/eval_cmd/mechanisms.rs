//! `ctxd eval --mechanisms`: each of ctxd's mechanisms measured on and off over the same
//! sessions: alone (what it saves by itself), within all (what all the others together lose
//! without it), and all of them together, against sending everything.
//!
//! Every variant is a full replay of every session ([`super::replay`]), so each figure is the
//! one `ctxd eval` prints for those switches; a session is imported and tokenized once.

use std::io::Write;
use std::path::PathBuf;

use ctxd_engine::distill::{Classifier, Configured};
use serde::Serialize;

use super::replay::{self, Retention, Sent};
use super::{options, progress, ratio, runtime, settings, EvalArgs, Switches};
use crate::load;

/// The mechanisms the eval can switch, in the order the table lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Mechanism {
    Distillation,
    Digests,
    WriteFacts,
    Amnesia,
}

const MECHANISMS: [Mechanism; 4] = [
    Mechanism::Distillation,
    Mechanism::Digests,
    Mechanism::WriteFacts,
    Mechanism::Amnesia,
];

impl Mechanism {
    fn name(self) -> &'static str {
        match self {
            Mechanism::Distillation => "distillation",
            Mechanism::Digests => "digests",
            Mechanism::WriteFacts => "write-facts",
            Mechanism::Amnesia => "amnesia",
        }
    }
}

impl Switches {
    const NONE: Switches = Switches {
        distill: false,
        digests: false,
        write_facts: false,
        amnesia: false,
    };
    const ALL: Switches = Switches {
        distill: true,
        digests: true,
        write_facts: true,
        amnesia: true,
    };

    fn with(mut self, m: Mechanism, on: bool) -> Switches {
        match m {
            Mechanism::Distillation => self.distill = on,
            Mechanism::Digests => self.digests = on,
            Mechanism::WriteFacts => self.write_facts = on,
            Mechanism::Amnesia => self.amnesia = on,
        }
        self
    }
}

/// What one variant measured over every session.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Measured {
    /// ctxd's requests: tokens, cached tokens (the prefix shared with the previous request),
    /// cache-adjusted cost.
    sent: Sent,
    retention: Retention,
    /// Shares of sending everything (1.0 = no saving).
    tokens: f64,
    cost: f64,
    cache_hit_rate: f64,
}

impl Measured {
    fn add(&mut self, o: &replay::Outcome) {
        self.sent.add(&o.ctxd);
        self.retention.add(&o.retention_ctxd);
    }
    fn finish(&mut self, everything: &Sent) {
        self.tokens = ratio(
            self.sent.input_tokens as f64,
            everything.input_tokens as f64,
        );
        self.cost = ratio(self.sent.cost, everything.cost);
        self.cache_hit_rate = self.sent.hit_rate();
    }
}

#[derive(Serialize)]
struct Row {
    mechanism: Mechanism,
    /// This mechanism alone.
    alone: Measured,
    /// Every mechanism but this one.
    all_but: Measured,
}

#[derive(Serialize)]
struct Report<'a> {
    schema: &'static str,
    classifier: &'a str,
    sessions: usize,
    requests: usize,
    /// Sending everything (the agent's own projection).
    everything: Sent,
    everything_cache_hit_rate: f64,
    /// None of these four: what ctxd sends with its tools, reminders and windows alone (the
    /// base each mechanism's saving starts from).
    none: Measured,
    all: Measured,
    mechanisms: &'a [Row],
}

pub(super) fn run(
    args: &EvalArgs,
    files: &[PathBuf],
    classifier: &Configured,
) -> anyhow::Result<()> {
    let runtime = runtime()?;
    let alone: Vec<Switches> = MECHANISMS
        .iter()
        .map(|&m| Switches::NONE.with(m, true))
        .collect();
    let all_but: Vec<Switches> = MECHANISMS
        .iter()
        .map(|&m| Switches::ALL.with(m, false))
        .collect();
    let mut variants: Vec<Switches> = vec![Switches::ALL, Switches::NONE];
    variants.extend(&alone);
    variants.extend(&all_but);

    let mut measured = vec![Measured::default(); variants.len()];
    let mut everything = Sent::default();
    let mut requests = 0;
    let bar = progress(files.len() * variants.len());
    for path in files {
        if let Some(bar) = &bar {
            bar.set_message(path.display().to_string());
        }
        let import = load::import(path)?;
        let counter = load::tokenizer(&import.session);
        for (i, &switches) in variants.iter().enumerate() {
            let settings = settings(args, switches)?;
            let opts = options(
                args,
                &settings,
                &import.session,
                &counter,
                &runtime,
                classifier,
            );
            let outcome = replay::replay(&import.session, &opts, None)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            if i == 0 {
                // Sending everything is the same in every variant.
                everything.add(&outcome.all);
                requests += outcome.requests;
            }
            measured[i].add(&outcome);
            if let Some(bar) = &bar {
                bar.inc(1);
            }
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    for m in &mut measured {
        m.finish(&everything);
    }
    let n = MECHANISMS.len();
    let rows: Vec<Row> = MECHANISMS
        .iter()
        .enumerate()
        .map(|(i, &mechanism)| Row {
            mechanism,
            alone: measured[2 + i],
            all_but: measured[2 + n + i],
        })
        .collect();
    let report = Report {
        schema: "ctxd.eval.mechanisms/2",
        classifier: classifier.name(),
        sessions: files.len(),
        requests,
        everything,
        everything_cache_hit_rate: everything.hit_rate(),
        none: measured[1],
        all: measured[0],
        mechanisms: &rows,
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut stdout, &report)?;
        writeln!(stdout)?;
    } else {
        write_text(&mut stdout, &report)?;
    }
    Ok(())
}

fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Percentage points, signed.
fn points(delta: f64) -> String {
    format!("{:+.1} pts", delta * 100.0)
}

fn write_text(out: &mut impl Write, r: &Report<'_>) -> std::io::Result<()> {
    writeln!(
        out,
        "ctxd eval --mechanisms: {} sessions, {} requests, classifier {}; sending everything: {} tokens, estimated cache hit rate {}",
        r.sessions,
        r.requests,
        r.classifier,
        r.everything.input_tokens,
        pct(r.everything_cache_hit_rate)
    )?;
    writeln!(
        out,
        "Saved: the share of sending everything not sent (tokens; cache-adjusted cost). Within all: all mechanisms against all but this one (retention Δ: what this one costs)."
    )?;
    writeln!(
        out,
        "{:<14} | {:>19} {:>10} {:>9} {:>9} | {:>24} {:>10} {:>11}",
        "mechanism",
        "alone: tokens saved",
        "cost saved",
        "retained",
        "cache hit",
        "within all: tokens saved",
        "cost saved",
        "retention Δ"
    )?;
    for row in r.mechanisms {
        let (a, b) = (&row.alone, &row.all_but);
        writeln!(
            out,
            "{:<14} | {:>19} {:>10} {:>9} {:>9} | {:>24} {:>10} {:>11}",
            row.mechanism.name(),
            pct(1.0 - a.tokens),
            pct(1.0 - a.cost),
            pct(a.retention.share()),
            pct(a.cache_hit_rate),
            pct(b.tokens - r.all.tokens),
            pct(b.cost - r.all.cost),
            points(r.all.retention.share() - b.retention.share()),
        )?;
    }
    let none = &r.none;
    writeln!(
        out,
        "{:<14} | {:>19} {:>10} {:>9} {:>9} |",
        "none of them",
        pct(1.0 - none.tokens),
        pct(1.0 - none.cost),
        pct(none.retention.share()),
        pct(none.cache_hit_rate),
    )?;
    let all = &r.all;
    writeln!(
        out,
        "{:<14} | {:>19} {:>10} {:>9} {:>9} |",
        "all together",
        pct(1.0 - all.tokens),
        pct(1.0 - all.cost),
        pct(all.retention.share()),
        pct(all.cache_hit_rate),
    )?;
    if let Some(distill) = r
        .mechanisms
        .iter()
        .find(|row| row.mechanism == Mechanism::Distillation)
    {
        let verdict = if all.cost < distill.alone.cost {
            "cheaper"
        } else {
            "NOT cheaper"
        };
        writeln!(
            out,
            "All mechanisms together cost {:.3} of sending everything, distillation alone {:.3}: together they are {verdict}.",
            all.cost, distill.alone.cost
        )?;
    }
    Ok(())
}
