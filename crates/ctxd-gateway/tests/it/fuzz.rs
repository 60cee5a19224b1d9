//! The conversation fuzzer: seeded agent conversations played through the real
//! gateway against the strict mock, on the four APIs (Anthropic, Chat, Responses, Gemini),
//! JSON and SSE, with every invariant checked on every upstream request and every client
//! response.
//!
//! A case is a pure function of its seed (`gen.rs`): the API and mode (`seed % 8`), the
//! gateway's mechanisms (reminders, resets, distillation, digests, lazy tools, write facts,
//! the cache plan), the window (the model's, a small one configured in both ctxd and the mock,
//! or Anthropic's 1M beta), the agent (Claude Code, Codex, an SDK; on Gemini: Gemini CLI, which
//! drops thought parts and ids its echoed calls, Pi or the Python SDK, which echo everything),
//! thinking/reasoning, and a
//! script of steps. Each step is a client action (its next prompt or the results of the calls
//! it was shown, 50 B to 24 KB each; the last body resent; an earlier prompt edited; Claude
//! Code's own compaction) with the mock's replies to the upstream calls it causes (text, 1-3
//! parallel client calls, hidden rounds of ctxd's tools, ctxd's call mixed with the client's,
//! 429 with `retry-after`, 500, 529, "prompt is too long", a stream failing or cut).
//! The harness plays the client (`run.rs`): it keeps its conversation, resends it whole, and
//! appends what it was shown.
//!
//! The invariants (`run::INVARIANTS`), checked on every request of every case:
//! 1. the strict mock refused no upstream request;
//! 2. the client's system prompt is on every upstream request, in every window (Anthropic
//!    `system`, Chat's leading system/developer message, Responses `instructions` or a leading
//!    developer message, Gemini `systemInstruction`);
//! 3. every upstream request ends with what the client sent last: walking back from the end,
//!    ctxd's additions (elements not the model's, answering no call, carrying none of the
//!    client's prompt markers: reminders, boot text) are skipped, and the first other element
//!    must carry the client's last element (its prompt's marker, or its result for the last
//!    call id, possibly with ctxd's text beside it in the same message). A continuation after
//!    a hidden round must end, the same way, with results of ctxd's calls;
//! 4. the client sees only its own tools and a non-empty answer, or, when the last upstream
//!    call failed, an error in its API's shape carrying the provider's status, message and
//!    `retry-after` (a stream already started carries the message in its error event);
//! 5. the client's usage is the sum of what the upstream calls of its request billed (the
//!    mock notes each complete reply's usage: `Recorded::usage`);
//! 6. after the rig stops, every answer the client kept (its text markers, its call ids) is
//!    on the store's active branch exactly once.
//!
//! CI runs `CTXD_FUZZ_CASES` (default 22) cases per API and mode from base seed
//! `CTXD_FUZZ_SEED` (default below) and prints the count of cases, requests and violations per
//! API and mode. It fails listing every finding (an invariant and a class: what broke, in
//! which situation) with its seeds and the first case shrunk to a minimal script (steps and
//! replies dropped while the finding still occurs, within `CTXD_FUZZ_SHRINK_SECS`, default 60;
//! `CTXD_FUZZ_SHRINK=0` prints the scripts unshrunk). `CTXD_FUZZ_CASE=<seed>` runs that one
//! case alone (`CTXD_FUZZ_KEEP` cuts it as shrinking printed, `CTXD_FUZZ_TRACE=1` prints its
//! requests and answers, `=2` also every upstream conversation whole); `CTXD_FUZZ_APIS=gemini`
//! runs only the APIs named; `CTXD_FUZZ_STEPS` bounds the steps of a case (default 8);
//! `CTXD_FUZZ_VERBOSE=1` lists every failing case's violations. A soak:
//! `CTXD_FUZZ_CASES=2000 CTXD_FUZZ_SEED=0x1234 CTXD_FUZZ_SHRINK=0 cargo test -p ctxd-gateway
//! --test it fuzz -- --nocapture`. See docs/fuzz.md.

mod client;
mod gen;
mod run;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gen::{case_seed, Case, Mock, COMBOS};
use run::{describe_violations, Report, INVARIANTS};

const DEFAULT_SEED: u64 = 0x00C7_0D34_F022;

fn head(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// A case run on its own task: a panic in the harness is a finding, not the end of the run.
async fn play(case: &Case) -> Report {
    let c = case.clone();
    match tokio::spawn(async move { run::run(&c).await }).await {
        Ok(r) => r,
        Err(e) => Report {
            violations: vec![run::Violation {
                invariant: 3,
                step: None,
                class: "the harness panicked".into(),
                detail: format!("the case panicked: {e}"),
            }],
            ..Report::default()
        },
    }
}

/// Whether `case` still breaks `invariant` the way `class` says.
async fn still_breaks(case: &Case, invariant: usize, class: &str) -> bool {
    play(case)
        .await
        .violations
        .iter()
        .any(|v| v.invariant == invariant && v.class == class)
}

/// What shrinking kept of a case: the original indexes of the steps kept, with the indexes of
/// the replies kept in each, and whether outputs and texts were made small. Printed as
/// `0:0.1/3:/5:1!small`, read back from `CTXD_FUZZ_KEEP` to replay a shrunk case.
#[derive(Clone, Debug, PartialEq)]
struct Cut {
    steps: Vec<(usize, Vec<usize>)>,
    small: bool,
}

impl Cut {
    fn all(case: &Case) -> Cut {
        Cut {
            steps: case
                .steps
                .iter()
                .enumerate()
                .map(|(i, s)| (i, (0..s.replies().len()).collect()))
                .collect(),
            small: false,
        }
    }

    fn apply(&self, case: &Case) -> Case {
        let mut out = case.clone();
        out.steps = self
            .steps
            .iter()
            .filter_map(|(i, replies)| {
                let mut step = case.steps.get(*i)?.clone();
                let all = step.replies().to_vec();
                *step.replies_mut() = replies
                    .iter()
                    .filter_map(|r| all.get(*r).cloned())
                    .collect();
                if self.small {
                    if let gen::Step::Send { output, image, .. } = &mut step {
                        *output = (*output).min(100);
                        *image = false;
                    }
                    for m in step.replies_mut() {
                        if let Mock::Text(n) = m {
                            *n = (*n).min(20);
                        }
                    }
                }
                Some(step)
            })
            .collect();
        out
    }

    fn parse(spec: &str) -> Option<Cut> {
        let (steps, small) = match spec.strip_suffix("!small") {
            Some(s) => (s, true),
            None => (spec, false),
        };
        let mut out = Vec::new();
        for part in steps.split('/').filter(|p| !p.is_empty()) {
            let (i, replies) = part.split_once(':')?;
            let replies = replies
                .split('.')
                .filter(|r| !r.is_empty())
                .map(|r| r.parse().ok())
                .collect::<Option<Vec<usize>>>()?;
            out.push((i.parse().ok()?, replies));
        }
        Some(Cut { steps: out, small })
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|(i, r)| {
                let r: Vec<String> = r.iter().map(usize::to_string).collect();
                format!("{i}:{}", r.join("."))
            })
            .collect();
        write!(
            f,
            "{}{}",
            steps.join("/"),
            if self.small { "!small" } else { "" }
        )
    }
}

/// The smallest cut found of `case` that still breaks `invariant` as `class`: steps dropped
/// one at a time (from the end), then replies, then outputs and texts made small, within
/// `budget`. The cut and the shrink runs made.
async fn shrink(case: &Case, invariant: usize, class: &str, budget: Duration) -> (Cut, usize) {
    let started = Instant::now();
    let mut best = Cut::all(case);
    let mut runs = 0;
    let mut progress = true;
    while progress && started.elapsed() < budget {
        progress = false;
        let mut i = best.steps.len();
        while i > 0 && best.steps.len() > 1 && started.elapsed() < budget {
            i -= 1;
            let mut cand = best.clone();
            cand.steps.remove(i);
            runs += 1;
            if still_breaks(&cand.apply(case), invariant, class).await {
                best = cand;
                progress = true;
            }
        }
        for s in 0..best.steps.len() {
            let mut r = best.steps[s].1.len();
            while r > 0 && started.elapsed() < budget {
                r -= 1;
                let mut cand = best.clone();
                cand.steps[s].1.remove(r);
                runs += 1;
                if still_breaks(&cand.apply(case), invariant, class).await {
                    best = cand;
                    progress = true;
                }
            }
        }
    }
    if started.elapsed() < budget {
        let mut cand = best.clone();
        cand.small = true;
        runs += 1;
        if still_breaks(&cand.apply(case), invariant, class).await {
            best = cand;
        }
    }
    (best, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_conversations_keep_every_invariant() {
    let started = Instant::now();
    let max_steps = env_u64("CTXD_FUZZ_STEPS").unwrap_or(8) as usize;
    let seeds: Vec<u64> = match env_u64("CTXD_FUZZ_CASE") {
        Some(seed) => vec![seed],
        None => {
            let base = env_u64("CTXD_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
            // 22 per API and mode: the fourth API's cases kept the step's time within a
            // quarter more than the three APIs' 25 each took (docs/fuzz.md).
            let per = env_u64("CTXD_FUZZ_CASES").unwrap_or(22) as usize;
            // `CTXD_FUZZ_APIS=gemini,chat`: only these APIs (a soak of one).
            let apis = std::env::var("CTXD_FUZZ_APIS")
                .unwrap_or_default()
                .to_lowercase();
            let combos: Vec<usize> = (0..COMBOS.len())
                .filter(|&c| {
                    apis.is_empty()
                        || apis
                            .split(',')
                            .any(|a| format!("{:?}", COMBOS[c].0).to_lowercase() == a.trim())
                })
                .collect();
            eprintln!("fuzz: base seed {base:#x}, {per} cases per API and mode");
            (0..per)
                .flat_map(|i| combos.iter().map(move |&c| case_seed(base, c, i)))
                .collect()
        }
    };
    let shrinking = env_u64("CTXD_FUZZ_SHRINK").unwrap_or(1) != 0;
    // Every failing case's violations, not only one per finding.
    let verbose = env_u64("CTXD_FUZZ_VERBOSE").unwrap_or(0) != 0;

    // Per combination: cases, cases failing, requests, upstream calls.
    let mut per_combo: BTreeMap<String, [usize; 4]> = BTreeMap::new();
    // Per invariant and class (one finding): the cases and one violation of each.
    let mut findings: BTreeMap<(usize, String), Vec<(Case, run::Violation)>> = BTreeMap::new();
    let mut checks = 0usize;
    let mut violations = 0usize;
    for &seed in &seeds {
        let mut case = Case::generate(seed, max_steps);
        if let Some(cut) = std::env::var("CTXD_FUZZ_KEEP")
            .ok()
            .filter(|_| seeds.len() == 1)
            .and_then(|k| Cut::parse(&k))
        {
            case = cut.apply(&case);
        }
        let t = Instant::now();
        let report = play(&case).await;
        checks += report.checks;
        violations += report.violations.len();
        let combo = format!("{:?} {}", case.api, case.mode());
        let row = per_combo.entry(combo).or_default();
        row[0] += 1;
        row[1] += usize::from(!report.violations.is_empty());
        row[2] += report.requests;
        row[3] += report.upstream;
        if seeds.len() == 1 {
            eprintln!("{case}");
        }
        if seeds.len() == 1 || (verbose && !report.violations.is_empty()) {
            eprintln!(
                "fuzz: seed {seed} ({:.1} s): {} violations\n{}",
                t.elapsed().as_secs_f64(),
                report.violations.len(),
                describe_violations(&report)
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        for v in &report.violations {
            if seen.insert((v.invariant, v.class.clone())) {
                findings
                    .entry((v.invariant, v.class.clone()))
                    .or_default()
                    .push((case.clone(), v.clone()));
            }
        }
    }
    let ran = started.elapsed();

    let mut out = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "fuzz: {} cases in {:.1} s, {checks} invariant checks, {violations} violations",
        seeds.len(),
        ran.as_secs_f64()
    );
    for (combo, [cases, failing, requests, upstream]) in &per_combo {
        let _ = writeln!(
            out,
            "  {combo:<15} {cases} cases, {failing} failing, {requests} client requests, {upstream} upstream calls"
        );
    }
    let shrink_budget = Duration::from_secs(env_u64("CTXD_FUZZ_SHRINK_SECS").unwrap_or(60));
    let shrink_started = Instant::now();
    let mut by_invariant: BTreeMap<usize, usize> = BTreeMap::new();
    for ((inv, _), cases) in &findings {
        *by_invariant.entry(*inv).or_default() += cases.len();
    }
    for (inv, n) in &by_invariant {
        let _ = writeln!(out, "  invariant {}: {n} case-findings", INVARIANTS[*inv]);
    }
    let mut last_inv = usize::MAX;
    for ((inv, class), cases) in &findings {
        if *inv != last_inv {
            let _ = writeln!(out, "\nINVARIANT {}", INVARIANTS[*inv]);
            last_inv = *inv;
        }
        let _ = writeln!(
            out,
            "\n  FINDING: {class}\n  in {} cases, seeds {:?}",
            cases.len(),
            cases
                .iter()
                .map(|(c, _)| c.seed)
                .take(8)
                .collect::<Vec<_>>()
        );
        let (first, v) = &cases[0];
        let _ = writeln!(
            out,
            "  e.g. seed {} {}: {}",
            first.seed,
            v.step.map_or("end".into(), |s| format!("step {s}")),
            head(&v.detail, 900)
        );
        let left = shrink_budget.saturating_sub(shrink_started.elapsed());
        if shrinking && !left.is_zero() {
            let (cut, runs) = shrink(first, *inv, class, left.min(Duration::from_secs(15))).await;
            let _ = writeln!(
                out,
                "  minimal script ({runs} shrink runs; replay: CTXD_FUZZ_CASE={} CTXD_FUZZ_STEPS={max_steps} CTXD_FUZZ_KEEP='{cut}'):\n{}",
                first.seed,
                cut.apply(first)
            );
        } else {
            let _ = writeln!(
                out,
                "  script (not shrunk; replay: CTXD_FUZZ_CASE={} CTXD_FUZZ_STEPS={max_steps}):\n{first}",
                first.seed
            );
        }
    }
    let _ = writeln!(out, "fuzz: total {:.1} s", started.elapsed().as_secs_f64());
    assert!(checks > 0, "the fuzzer checked nothing");
    assert!(findings.is_empty(), "the fuzzer found violations:\n{out}");
    eprintln!("{out}");
}
