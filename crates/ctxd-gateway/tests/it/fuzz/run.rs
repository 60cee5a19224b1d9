//! One case played against a real gateway (a [`Rig`]) in front of the strict mock: the client's
//! conversation kept and resent whole each request, the mock scripted per request, and every
//! invariant checked on every upstream request and every client response.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use ctxd_core::model::{ContentBlock, EntryKind, Role};
use ctxd_formats::wire::stream::StreamError;
use ctxd_gateway::config::Mechanisms;
use ctxd_mock::{Config, Part, Reasoning, Recorded, Reply};
use serde_json::{json, Value};

use super::client::{self, Outcome, CLIENT_TOOLS, COMPACTION, SYSTEM};
use super::gen::{Api, Case, Env, Mock, Step, Window};
use crate::loops::shell_output;
use crate::support::Rig;

/// The invariants, numbered as in the module's doc.
pub const INVARIANTS: [&str; 6] = [
    "1 the provider accepts every upstream request",
    "2 the client's system prompt is on every upstream request",
    "3 every upstream request ends with what the client sent last",
    "4 the client sees only its tools and a non-empty answer, or the provider's error",
    "5 the client's usage is the sum of the upstream calls of its request",
    "6 the store's active branch holds every answer the client kept, once",
];

/// One broken invariant.
#[derive(Clone, Debug)]
pub struct Violation {
    /// Index into [`INVARIANTS`].
    pub invariant: usize,
    /// The step (`None`: at the end of the case).
    pub step: Option<usize>,
    /// What broke, in a few words, and in which situation: violations of one class are one
    /// finding.
    pub class: String,
    pub detail: String,
}

/// What a case did.
#[derive(Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    /// Invariant checks made (each one an assertion that could fail).
    pub checks: usize,
    pub requests: usize,
    pub upstream: usize,
    /// The situation of the step being checked (its kind, hidden rounds), for classes.
    pub context: String,
    /// Whether the step's request had a hidden round.
    pub hidden: bool,
}

impl Report {
    fn check(
        &mut self,
        invariant: usize,
        step: Option<usize>,
        what: &str,
        ok: bool,
        detail: impl FnOnce() -> String,
    ) {
        self.checks += 1;
        if !ok {
            // What the client is shown depends on the hidden rounds, not on how the client
            // built its request: invariants 4 and 5 name only the former.
            let context = if invariant == 1 {
                // The call's kind (in `what`) is the situation: one finding per kind.
                ""
            } else if invariant >= 3 {
                if self.hidden {
                    "after a hidden round"
                } else {
                    ""
                }
            } else {
                self.context.as_str()
            };
            let class = if context.is_empty() || step.is_none() {
                what.to_owned()
            } else {
                format!("{what} ({context})")
            };
            self.violations.push(Violation {
                invariant,
                step,
                class,
                detail: detail(),
            });
        }
    }
}

/// Which key identifies the client's last element.
#[derive(Clone, Debug)]
enum Key {
    /// A prompt (or summary) carrying this marker.
    Marker(String),
    /// Results, the last answering this call id. Gemini pairs a response with its call by
    /// name and order, and a call without an id gets one derived from its arguments, which
    /// ctxd may shorten (write facts): there, a response carrying the marker of the last
    /// result (its output's first word) is the one too.
    Result(String, String),
}

/// The client's state.
struct Client {
    api: Api,
    conversation: Vec<Value>,
    /// The client's calls of the last answer, not yet answered: (id, name).
    pending: Vec<(String, String)>,
    last: Option<(Vec<Value>, Vec<u8>, Key)>,
    next: usize,
}

impl Client {
    fn marker(&mut self, kind: &str) -> String {
        self.next += 1;
        format!("FZ{kind}{}.", self.next)
    }

    /// The index of every prompt the client wrote (not results, not answers).
    fn prompts(&self) -> Vec<usize> {
        self.conversation
            .iter()
            .enumerate()
            .filter(|(_, el)| {
                !client::is_assistant(self.api, el)
                    && client::results_of(self.api, el).is_empty()
                    && client::all_text(el).contains("FZP")
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// The mock's reply for `m`, its texts and errors carrying `n`.
fn reply(api: Api, stream: bool, m: &Mock, n: usize) -> Reply {
    let bash = |i: usize| Part::ToolCall {
        name: "Bash".into(),
        args: json!({"command": format!("cargo test # FZC{n}-{i}")}),
    };
    match m {
        Mock::Text(len) => {
            let mut t = format!("FZA{n}. ");
            while t.len() < *len {
                t.push_str("the fix is in the parser; ");
            }
            Reply::text(t)
        }
        Mock::Calls { n: k, write } => Reply::parts(
            (0..*k)
                .map(|i| {
                    if *write {
                        Part::ToolCall {
                            name: "Write".into(),
                            args: json!({"file_path": format!("src/fz{n}_{i}.rs"),
                                "content": "fn main() { println!(\"fuzz\"); }\n".repeat(80)}),
                        }
                    } else {
                        bash(i)
                    }
                })
                .collect(),
        ),
        Mock::Ctxd { tools, text } => {
            let mut parts = Vec::new();
            if *text {
                parts.push(Part::Text(format!("FZH{n}. Let me check my notes.")));
            }
            for t in tools {
                parts.push(Part::ToolCall {
                    name: (*t).into(),
                    args: ctxd_args(t, n),
                });
            }
            Reply::parts(parts)
        }
        Mock::Mixed { tool, client } => {
            let mut parts = vec![Part::ToolCall {
                name: (*tool).into(),
                args: ctxd_args(tool, n),
            }];
            parts.extend((0..*client).map(bash));
            Reply::parts(parts)
        }
        // Google has no 529: its overload is a 503 `UNAVAILABLE`.
        Mock::Error {
            status: 529,
            retry_after,
        } if api == Api::Gemini => {
            let r = Reply::error(503, error_message(m, n));
            match retry_after {
                Some(s) => r.header("retry-after", s.to_string()),
                None => r,
            }
        }
        Mock::Error {
            status,
            retry_after,
        } => {
            let r = Reply::error(*status, error_message(m, n));
            match retry_after {
                Some(s) => r.header("retry-after", s.to_string()),
                None => r,
            }
        }
        Mock::Overflow => Reply::error(400, overflow_message(api)),
        Mock::FailMidStream => Reply::fail_mid_stream(error_message(m, n)),
        // Gemini's stream has no terminal event: the chunk with the finish reason ends it. A
        // text is two chunks, so three texts make sure the cut comes before that chunk.
        Mock::Cut(k) if stream && api == Api::Gemini => Reply::parts(
            (0..3)
                .map(|i| Part::Text(format!("FZA{n}. cut short {i}. ")))
                .collect(),
        )
        .truncate_after_events(*k),
        Mock::Cut(k) if stream => {
            Reply::text(format!("FZA{n}. cut short")).truncate_after_events(*k)
        }
        Mock::Cut(_) => Reply::text(format!("FZA{n}. cut short")).truncate_after_bytes(20),
    }
}

fn ctxd_args(tool: &str, n: usize) -> Value {
    match tool {
        "notes_append" => json!({"path": "fuzz.md", "text": format!("step note {n}\n")}),
        "notes_read" => json!({"path": "fuzz.md"}),
        _ => json!({}),
    }
}

fn error_message(m: &Mock, n: usize) -> String {
    match m {
        Mock::Error { status, .. } => format!("fuzz provider error FZE{n}. (status {status})"),
        _ => format!("fuzz stream failure FZE{n}."),
    }
}

fn overflow_message(api: Api) -> &'static str {
    match api {
        Api::Anthropic => "prompt is too long: 250000 tokens > 200000 maximum",
        Api::Gemini => {
            "The input token count (1250000) exceeds the maximum number of tokens allowed \
             (1048576)."
        }
        _ => {
            "This model's maximum context length is 200000 tokens. However, your messages \
              resulted in 250000 tokens. (context_length_exceeded)"
        }
    }
}

/// How the mock answered one upstream call.
#[derive(Clone, Debug)]
enum Answered {
    Refused,
    /// The scripted reply (its index in the step's list) or the mock's default turn.
    Scripted(Option<usize>),
}

pub async fn run(case: &Case) -> Report {
    let api = case.api;
    let env = &case.env;
    let model = client::model(api, env);
    let mut config = Config {
        reasoning: if env.thinking {
            Reasoning::Always
        } else {
            Reasoning::Off
        },
        ..Config::default()
    };
    if let Window::Small(w) = env.window {
        config.windows = vec![(model.to_owned(), w)];
    }
    let e = env.clone();
    let mut rig = Rig::with(config, move |s| {
        // The rig points Anthropic and OpenAI at the mock; Gemini goes there too.
        s.upstream_gemini = s.upstream_openai.clone();
        s.management.mechanisms = Mechanisms {
            reminders: e.reminders,
            resets: e.resets,
            distill: e.distill,
            digests: e.digests,
            amnesia: false,
            lazy_tools: e.lazy_tools,
        };
        if let Window::Small(w) = e.window {
            s.management.model_windows = vec![(model.to_owned(), w)];
        }
        s.cache_plan = e.cache_plan;
        s.management.write_facts.enabled = e.write_facts;
        if e.distill_wait {
            s.distill_wait = Duration::from_secs(2);
        }
    })
    .await;
    let session = format!("fuzz-{}", case.seed);
    let headers = client::headers(api, env, &session);
    let mut report = Report::default();
    let mut c = Client {
        api,
        conversation: client::start(api),
        pending: Vec::new(),
        last: None,
        next: 0,
    };

    // Whether ctxd's tools were called in the last request sent (hidden rounds, mixed calls).
    let mut last_ctxd = false;
    for (si, step) in case.steps.iter().enumerate() {
        let step_at = Some(si);
        report.context.clear();
        report.hidden = false;
        // The client's request.
        let (conversation, body, key) = match step {
            Step::Resend { .. } if c.last.is_some() => {
                let (conv, body, key) = c.last.clone().unwrap();
                (conv, body, key)
            }
            Step::Edit { back, .. } if !c.prompts().is_empty() => {
                let prompts = c.prompts();
                let at = prompts[prompts.len() - 1 - (*back).min(prompts.len() - 1)];
                c.conversation.truncate(at);
                c.pending.clear();
                let m = c.marker("P");
                client::push_user(
                    api,
                    &mut c.conversation,
                    client::prompt(api, &format!("{m} Actually, do it differently."), false),
                );
                (c.conversation.clone(), Vec::new(), Key::Marker(m))
            }
            Step::Compact { .. } => {
                let m = c.marker("P");
                c.conversation = client::start(api);
                c.pending.clear();
                let text = format!(
                    "{COMPACTION}\n{m} Summary: the user asked to fix the failing tests; \
                     the parser was changed; continue from there."
                );
                c.conversation.push(client::prompt(api, &text, false));
                (c.conversation.clone(), Vec::new(), Key::Marker(m))
            }
            Step::Send { image, output, .. } if !c.pending.is_empty() => {
                let calls = std::mem::take(&mut c.pending);
                let o = c.marker("O");
                let out =
                    |i: usize| format!("{o}{i} exit 0\n{}", shell_output(c.next * 7 + i, *output));
                let results = client::results(api, env, &calls, &out);
                let _ = image;
                c.conversation.extend(results);
                (
                    c.conversation.clone(),
                    Vec::new(),
                    Key::Result(
                        calls.last().map(|(id, _)| id.clone()).unwrap_or_default(),
                        format!("{o}{} exit 0", calls.len().saturating_sub(1)),
                    ),
                )
            }
            _ => {
                let image = matches!(step, Step::Send { image: true, .. });
                let m = c.marker("P");
                c.pending.clear();
                client::push_user(
                    api,
                    &mut c.conversation,
                    client::prompt(
                        api,
                        &format!("{m} Please look at the failing test and fix it."),
                        image,
                    ),
                );
                (c.conversation.clone(), Vec::new(), Key::Marker(m))
            }
        };
        let body = if body.is_empty() {
            serde_json::to_vec(&client::body(api, env, &conversation, case.stream)).unwrap()
        } else {
            body
        };
        c.last = Some((conversation.clone(), body.clone(), key.clone()));

        // The mock's replies for this request.
        let mocks = step.replies();
        let script = rig.mock.script();
        script.clear();
        // Unique per step: a resend must not repeat the markers of the answer it replaces.
        let base = si + 1;
        script.extend(
            mocks
                .iter()
                .enumerate()
                .map(|(i, m)| reply(api, case.stream, m, base * 100 + i)),
        );
        let before = rig.mock.requests().len();

        let mut req = rig
            .client
            .post(rig.url(&api.path(model, case.stream, env.agent, case.json_array)))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in &headers {
            req = req.header(k, v);
        }
        report.requests += 1;
        let sent = tokio::time::timeout(Duration::from_secs(60), async {
            let resp = req.send().await?;
            let status = resp.status().as_u16();
            let h = resp.headers().clone();
            let bytes = resp.bytes().await?;
            Ok::<_, reqwest::Error>((status, h, bytes))
        })
        .await;
        let (status, resp_headers, bytes) = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                report.check(3, step_at, "the request failed", false, || {
                    format!("the request failed: {e}")
                });
                continue;
            }
            Err(_) => {
                report.check(3, step_at, "no answer within 60 s", false, || {
                    "no answer within 60 s".into()
                });
                continue;
            }
        };
        let outcome = client::read(api, case.stream, status, &resp_headers, &bytes);
        let upstream: Vec<Recorded> = rig.mock.requests()[before..]
            .iter()
            .filter(|r| api.is_model_call(r.route()))
            .cloned()
            .collect();
        report.upstream += upstream.len();

        // Which reply answered each upstream call.
        let mut consumed = 0usize;
        let answered: Vec<Answered> = upstream
            .iter()
            .map(|r| match &r.refused {
                Some(_) => Answered::Refused,
                None => {
                    let a = (consumed < mocks.len()).then_some(consumed);
                    consumed += 1;
                    Answered::Scripted(a)
                }
            })
            .collect();

        if trace() {
            trace_step(api, si, step, &conversation, &upstream, &outcome);
        }
        let context = format!(
            "[{} step; upstream: {}]",
            match step {
                Step::Send { .. } => "Send",
                Step::Resend { .. } => "Resend",
                Step::Edit { .. } => "Edit",
                Step::Compact { .. } => "Compact",
            },
            answered
                .iter()
                .map(|a| match a {
                    Answered::Refused => "refused".to_owned(),
                    Answered::Scripted(Some(k)) => short(&mocks[*k]),
                    Answered::Scripted(None) => "default".to_owned(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        );
        report.context = format!(
            "{}{}",
            match step {
                Step::Send { .. } => "Send",
                Step::Resend { .. } => "Resend",
                Step::Edit { .. } => "Edit",
                Step::Compact { .. } => "Compact",
            },
            if matches!(step, Step::Resend { .. }) && last_ctxd {
                ", resending a request ctxd's tools were called in"
            } else {
                ""
            }
        );
        report.hidden = mocks
            .iter()
            .take(consumed)
            .any(|m| matches!(m, Mock::Ctxd { .. }));
        last_ctxd = mocks
            .iter()
            .take(consumed)
            .any(|m| matches!(m, Mock::Ctxd { .. } | Mock::Mixed { .. }));
        let before_checks = report.violations.len();
        check_upstream(&mut report, si, api, env, &upstream, &answered, mocks, &key);
        check_outcome(
            &mut report,
            si,
            api,
            &outcome,
            &upstream,
            &answered,
            mocks,
            base,
        );

        for v in &mut report.violations[before_checks..] {
            v.detail = format!("{} {}", context, v.detail);
        }

        // The client's view after the response.
        // Only the calls of the answer just shown wait for results (a resend replaced the
        // answer that made the earlier ones).
        c.pending.clear();
        if let Outcome::Answer { elements, .. } = outcome {
            c.conversation = conversation;
            // As the client keeps them (Gemini CLI: its own call ids, no thoughts).
            let elements: Vec<Value> = elements
                .into_iter()
                .map(|el| client::echo(api, env, el, 1_796_479_242_614 + si as u64))
                .collect();
            for el in &elements {
                c.pending.extend(client::calls_of(api, el));
            }
            c.conversation.extend(elements);
        } else {
            c.conversation = conversation;
            c.pending.clear();
        }
    }

    // Invariant 6: the store's active branch.
    report.context.clear();
    let stored = rig.stored().await;
    let sessions = stored.sessions();
    let mut markers: HashMap<String, usize> = HashMap::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    // Gemini's calls are known by what they say: a call the model made twice alike is kept
    // twice, and stored twice.
    let mut kept: HashMap<String, usize> = HashMap::new();
    for el in c
        .conversation
        .iter()
        .filter(|el| client::is_assistant(api, el))
    {
        let text = client::all_text(el);
        for m in answer_markers(&text) {
            markers.insert(m, 0);
        }
        for id in stored_call_keys(api, el) {
            *kept.entry(id.clone()).or_default() += 1;
            ids.insert(id, 0);
        }
    }
    for record in &sessions {
        let s = stored.load(record);
        for &p in &ctxd_core::tree::active_branch(&s) {
            let EntryKind::Message(m) = &s.entries[p].kind else {
                continue;
            };
            if m.role != Role::Assistant {
                continue;
            }
            let text = ctxd_core::text::message_text(m);
            for mk in answer_markers(&text) {
                if let Some(n) = markers.get_mut(&mk) {
                    *n += 1;
                }
            }
            for b in &m.content {
                if let ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } = b
                {
                    let key = match api {
                        Api::Gemini => gemini_call_key(name, arguments),
                        _ => id.clone(),
                    };
                    if let Some(n) = ids.get_mut(&key) {
                        *n += 1;
                    }
                }
            }
        }
    }
    let mut keys: Vec<_> = markers.into_iter().chain(ids).collect();
    keys.sort();
    for (k, n) in keys {
        let want = if api == Api::Gemini {
            kept.get(&k).copied().unwrap_or(1)
        } else {
            1
        };
        report.check(
            5,
            None,
            "an answer the client kept is stored other than once",
            n == want,
            || {
                format!(
                "the answer {k} the client kept is on the active branch {n} times ({} sessions)",
                sessions.len()
            )
            },
        );
    }
    report
}

/// A Gemini call by what it says: Gemini CLI gives the calls it keeps ids of its own, which
/// the store learns only when they are sent back.
fn gemini_call_key(name: &str, args: &Value) -> String {
    ctxd_formats::wire::gemini::derived_call_id(name, args, 0)
}

/// The keys of the calls of a model element the client kept, as invariant 6 finds them in
/// the store: the call id, or (Gemini) [`gemini_call_key`].
fn stored_call_keys(api: Api, el: &Value) -> Vec<String> {
    match api {
        Api::Gemini => el["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("functionCall"))
            .map(|c| gemini_call_key(c["name"].as_str().unwrap_or_default(), &c["args"]))
            .collect(),
        _ => client::calls_of(api, el)
            .into_iter()
            .map(|(id, _)| id)
            .collect(),
    }
}

/// `CTXD_FUZZ_TRACE=1`: every step's requests and answer, summarised, on stderr.
fn trace() -> bool {
    std::env::var("CTXD_FUZZ_TRACE").is_ok_and(|v| v != "0")
}

/// An element in a few words: its role or type, its markers, calls and results.
fn summary(api: Api, el: &Value) -> String {
    let role = el["role"]
        .as_str()
        .or_else(|| el["type"].as_str())
        .unwrap_or("?");
    let text = client::all_text(el);
    let mut marks: Vec<String> = Vec::new();
    for k in ["FZP", "FZA", "FZH", "FZO"] {
        for (i, _) in text.match_indices(k) {
            marks.push(
                text[i..]
                    .chars()
                    .take_while(|c| *c != ' ' && *c != '\n')
                    .collect(),
            );
        }
    }
    marks.dedup();
    if is_boot(&text) {
        marks.push("BOOT".into());
    }
    if text.starts_with("[ctxd]") || text.contains("<system-reminder>") {
        marks.push("ctxd-text".into());
    }
    let calls: Vec<String> = client::calls_of(api, el)
        .into_iter()
        .map(|(id, n)| format!("call {n} {}", &id[id.len().saturating_sub(4)..]))
        .collect();
    let results: Vec<String> = client::results_of(api, el)
        .into_iter()
        .map(|id| format!("result {}", &id[id.len().saturating_sub(4)..]))
        .collect();
    format!(
        "{role}[{}]",
        marks
            .into_iter()
            .chain(calls)
            .chain(results)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

fn trace_step(
    api: Api,
    si: usize,
    step: &Step,
    conversation: &[Value],
    upstream: &[Recorded],
    outcome: &Outcome,
) {
    let list = |els: &[Value]| {
        els.iter()
            .map(|el| summary(api, el))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "step {si}: {step:?}\n  client sends: {}",
        list(conversation)
    );
    for (j, r) in upstream.iter().enumerate() {
        let up = r
            .json()
            .map(|b| client::conversation(api, &b))
            .unwrap_or_default();
        eprintln!(
            "  upstream {j} ({:?}, refused {:?}): {}",
            r.status,
            r.refused,
            list(&up)
        );
        // `CTXD_FUZZ_TRACE=2`: the whole conversation array too.
        if std::env::var("CTXD_FUZZ_TRACE").is_ok_and(|v| v == "2") {
            eprintln!("    {}", Value::Array(up.clone()));
        }
    }
    match outcome {
        Outcome::Answer { elements, .. } => eprintln!("  client shown: {}", list(elements)),
        Outcome::HttpError { status, body, .. } => {
            eprintln!("  client error {status}: {}", head(body, 300));
        }
        Outcome::StreamError { error, .. } => eprintln!("  client stream error: {error}"),
    }
}

/// A reply in a word.
fn short(m: &Mock) -> String {
    match m {
        Mock::Text(_) => "text".into(),
        Mock::Calls { n, .. } => format!("{n} client calls"),
        Mock::Ctxd { tools, .. } => format!("hidden {}", tools.join("+")),
        Mock::Mixed { tool, client } => format!("{tool}+{client} client calls"),
        Mock::Error { status, .. } => format!("error {status}"),
        Mock::Overflow => "overflow".into(),
        Mock::FailMidStream => "failed stream".into(),
        Mock::Cut(_) => "cut".into(),
    }
}

/// The answer markers (`FZA12.`, `FZH3.`) in a text.
fn answer_markers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for kind in ["FZA", "FZH"] {
        let mut rest = text;
        while let Some(at) = rest.find(kind) {
            let tail = &rest[at + kind.len()..];
            let digits: String = tail.chars().take_while(char::is_ascii_digit).collect();
            if !digits.is_empty() && tail[digits.len()..].starts_with('.') {
                out.push(format!("{kind}{digits}."));
            }
            rest = &rest[at + kind.len()..];
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Invariants 1-3 on each upstream request of one client request.
#[allow(clippy::too_many_arguments)]
fn check_upstream(
    report: &mut Report,
    si: usize,
    api: Api,
    env: &Env,
    upstream: &[Recorded],
    answered: &[Answered],
    mocks: &[Mock],
    key: &Key,
) {
    let step = Some(si);
    let mut previous: Option<&Mock> = None;
    for (j, r) in upstream.iter().enumerate() {
        let call_kind = match previous {
            None if j == 0 => "client's request",
            Some(Mock::Ctxd { .. }) => "continuation after a hidden round",
            Some(Mock::Overflow) => "resend after an overflow",
            _ => "retry",
        };
        let refused_class = format!(
            "refused by rule {} on the {call_kind}",
            r.refused.as_deref().unwrap_or_default()
        );
        // With resets off nothing of ctxd's makes a conversation shorter than the client's
        // own: the provider's refusal of a conversation over its window is the client's
        // (invariant 4 checks the client gets it in its API's shape).
        let client_too_long = !env.resets && r.refused.as_deref() == Some("context_window");
        report.check(
            0,
            step,
            &refused_class,
            r.refused.is_none() || client_too_long,
            || {
                let up = r
                    .json()
                    .map(|b| client::conversation(api, &b))
                    .unwrap_or_default();
                let last: Vec<String> = up
                    .iter()
                    .rev()
                    .take(4)
                    .rev()
                    .map(|el| head(&el.to_string(), 300))
                    .collect();
                format!(
                    "upstream call {j} refused ({:?}); its {} elements end: {}",
                    r.refused,
                    up.len(),
                    last.join(" | ")
                )
            },
        );
        let Some(body) = r.json() else {
            report.check(0, step, "an upstream body is not JSON", false, || {
                let body = r.decoded_body().unwrap_or_default();
                format!(
                    "upstream call {j} is not JSON: {}",
                    head(&String::from_utf8_lossy(&body), 1500)
                )
            });
            continue;
        };
        // 2: the system prompt.
        let system = match api {
            Api::Anthropic => client::all_text(&body["system"]),
            Api::Chat => {
                let first = &body["messages"][0];
                if matches!(first["role"].as_str(), Some("system" | "developer")) {
                    client::all_text(&first["content"])
                } else {
                    String::new()
                }
            }
            Api::Responses => {
                let first = &body["input"][0];
                let lead = if matches!(first["role"].as_str(), Some("system" | "developer")) {
                    client::all_text(&first["content"])
                } else {
                    String::new()
                };
                client::all_text(&body["instructions"]) + &lead
            }
            Api::Gemini => client::all_text(&body["systemInstruction"]),
        };
        report.check(
            1,
            step,
            &format!("system prompt missing on the {call_kind}"),
            system.contains(SYSTEM),
            || {
                format!(
                    "upstream call {j} (after {}) lacks the client's system prompt; it starts: {}",
                    previous.map_or("the client's request".into(), |m| format!("{m:?}")),
                    head(&serde_json::to_string(&body).unwrap_or_default(), 600)
                )
            },
        );
        // 3: the conversation's end.
        let up = client::conversation(api, &body);
        let continuation = matches!(previous, Some(Mock::Ctxd { .. }));
        let verdict = if continuation {
            ends_with_ctxd_results(api, &up)
        } else {
            ends_with(api, &up, key)
        };
        let verdict_class = format!(
            "the {call_kind} {}",
            verdict
                .as_ref()
                .err()
                .map_or("", |(class, _)| class.as_str())
        );
        report.check(2, step, &verdict_class, verdict.is_ok(), || {
            format!(
                "upstream call {j} ({}) {}",
                if continuation {
                    "a hidden round's continuation".to_owned()
                } else {
                    format!("the client's request, last element {key:?}")
                },
                verdict.clone().err().unwrap_or_default().1
            )
        });
        previous = match &answered[j] {
            Answered::Refused => previous,
            Answered::Scripted(Some(k)) => Some(&mocks[*k]),
            Answered::Scripted(None) => None,
        };
    }
}

/// A ctxd addition: not the model's, answers no call, carries none of the client's markers
/// (a reminder, a boot message).
fn is_addition(api: Api, el: &Value) -> bool {
    let text = client::all_text(el);
    !client::is_assistant(api, el)
        && client::results_of(api, el).is_empty()
        && (!text.contains("FZP") || is_boot(&text))
}

/// A new window's boot message (it may quote the client's prompts).
fn is_boot(text: &str) -> bool {
    text.contains("Your context was reset")
}

/// Chat's system/developer message (Responses' developer item).
fn is_system(api: Api, el: &Value) -> bool {
    !matches!(api, Api::Anthropic) && matches!(el["role"].as_str(), Some("system" | "developer"))
}

fn describe(el: &Value) -> String {
    head(&el.to_string(), 400)
}

/// What an element is, for a class: the model's, results (ctxd's or the client's), a boot.
fn kind(api: Api, up: &[Value], i: usize, names: &HashMap<String, String>) -> String {
    let el = &up[i];
    let results = client::results_at(api, up, i);
    if client::is_assistant(api, el) {
        let text = client::all_text(el);
        if el["type"] == "reasoning" {
            "ends with a reasoning item".into()
        } else if !client::calls_of(api, el).is_empty() {
            "ends with the model's calls".into()
        } else if text.contains("FZA") || text.contains("FZH") {
            "ends with an earlier answer".into()
        } else {
            "ends with the model's element".into()
        }
    } else if !results.is_empty() {
        let ctxd = results.iter().any(|id| {
            names
                .get(id)
                .is_some_and(|n| !CLIENT_TOOLS.contains(&n.as_str()))
        });
        if ctxd {
            "ends with results of ctxd's calls".into()
        } else {
            "ends with other results of the client's".into()
        }
    } else {
        "ends with another prompt".into()
    }
}

fn call_names(api: Api, up: &[Value]) -> HashMap<String, String> {
    up.iter().flat_map(|el| client::calls_of(api, el)).collect()
}

/// The conversation ends, past ctxd's additions, with the element carrying `key`.
fn ends_with(api: Api, up: &[Value], key: &Key) -> Result<(), (String, String)> {
    let names = call_names(api, up);
    for (i, el) in up.iter().enumerate().rev() {
        let carries = match key {
            Key::Marker(m) => {
                !client::is_assistant(api, el) && client::all_text(el).contains(m.as_str())
            }
            Key::Result(id, marker) => {
                let results = client::results_at(api, up, i);
                results.contains(id)
                    || (api == Api::Gemini
                        && !results.is_empty()
                        && client::all_text(el).contains(marker.as_str()))
            }
        };
        if carries {
            return Ok(());
        }
        if !is_addition(api, el) {
            return Err((
                kind(api, up, i, &names),
                format!("ends with {}", describe(el)),
            ));
        }
    }
    let boot = up.iter().any(|el| is_boot(&client::all_text(el)));
    // A window that opened at this request (a threshold reset at the batch's end, an
    // overflow's recovery window): everything before its boot folds away by design, the
    // client's last element too; the boot's checkpoint carries the open requests.
    if boot
        && up
            .iter()
            .all(|el| is_addition(api, el) || is_system(api, el))
    {
        return Ok(());
    }
    Err((
        if boot {
            "lacks the client's last element (a new window of ctxd's additions)".into()
        } else {
            "lacks the client's last element".into()
        },
        format!(
            "has no element carrying the client's last ({} elements: {})",
            up.len(),
            up.iter()
                .map(|el| head(&el.to_string(), 200))
                .collect::<Vec<_>>()
                .join(" | ")
        ),
    ))
}

/// The conversation ends, past ctxd's additions, with results of ctxd's calls; or it is a
/// new window (the model called `new_context`) of ctxd's additions alone, its boot among them.
fn ends_with_ctxd_results(api: Api, up: &[Value]) -> Result<(), (String, String)> {
    if up
        .iter()
        .all(|el| is_addition(api, el) || is_system(api, el))
        && up.iter().any(|el| is_boot(&client::all_text(el)))
    {
        return Ok(());
    }
    let names = call_names(api, up);
    for (i, el) in up.iter().enumerate().rev() {
        let results = client::results_of(api, el);
        if !results.is_empty() || !is_addition(api, el) {
            let k = kind(api, up, i, &names);
            return if k == "ends with results of ctxd's calls" {
                Ok(())
            } else {
                Err((k, format!("ends with {}", describe(el))))
            };
        }
    }
    Err((
        "has no results of ctxd's calls".into(),
        "has no results of ctxd's calls".into(),
    ))
}

/// Invariants 4 and 5 on the client's response.
#[allow(clippy::too_many_arguments)]
fn check_outcome(
    report: &mut Report,
    si: usize,
    api: Api,
    outcome: &Outcome,
    upstream: &[Recorded],
    answered: &[Answered],
    mocks: &[Mock],
    base: usize,
) {
    let step = Some(si);
    // The reply the last upstream call got.
    let last = answered.last().map(|a| match a {
        Answered::Refused => None,
        Answered::Scripted(Some(k)) => Some((*k, &mocks[*k])),
        Answered::Scripted(None) => None,
    });
    let failed_last = match last {
        Some(Some((k, m))) => match m {
            Mock::Error {
                status,
                retry_after,
            } => Some((
                Some(if api == Api::Gemini && *status == 529 {
                    503
                } else {
                    *status
                }),
                error_message(m, base * 100 + k),
                retry_after.map(|s| s.to_string()),
            )),
            Mock::Overflow => Some((
                Some(400),
                match api {
                    Api::Anthropic => "prompt is too long".to_owned(),
                    Api::Gemini => "exceeds the maximum number of tokens".to_owned(),
                    _ => "context_length_exceeded".to_owned(),
                },
                None,
            )),
            Mock::FailMidStream => Some((None, error_message(m, base * 100 + k), None)),
            Mock::Cut(_) => Some((None, String::new(), None)),
            _ => None,
        },
        // Refused: invariant 1 said so; the client's error is the mock's 400.
        Some(None) if matches!(answered.last(), Some(Answered::Refused)) => {
            Some((Some(400), String::new(), None))
        }
        _ => None,
    };
    match outcome {
        Outcome::Answer {
            assembled,
            elements,
        } => {
            let mut any = false;
            for el in elements {
                for (_, name) in client::calls_of(api, el) {
                    any = true;
                    report.check(3, step, "the client was shown a call of ctxd's tools", CLIENT_TOOLS.contains(&name.as_str()), || {
                        format!("the client was shown a call of ctxd's {name}")
                    });
                }
            }
            let text: String = assembled
                .elements
                .iter()
                .map(|e| ctxd_core::text::message_text(&e.message))
                .collect();
            report.check(3, step, "an empty answer", any || !text.trim().is_empty(), || {
                format!(
                    "an empty answer (after {} upstream calls: {:?})",
                    upstream.len(),
                    answered
                )
            });
            // The model stopped to call tools: the client must get a call to answer.
            let tool_stop = matches!(
                assembled.stop_reason.as_deref(),
                Some("tool_use" | "tool_calls")
            );
            report.check(
                3,
                step,
                "an answer that stops for tool use without a call the client can answer",
                any || !tool_stop,
                || {
                    format!(
                        "stop reason {:?}, no call shown (upstream: {answered:?})",
                        assembled.stop_reason
                    )
                },
            );
            // The rounds' limit may end an exchange on a hidden round: then the client is told
            // why (`served::cut_notice`), never handed an empty or silent answer.
            let hidden_last = matches!(last, Some(Some((_, Mock::Ctxd { .. }))))
                && !text.contains("ctxd ended this turn");
            report.check(
                3,
                step,
                "the client was given a hidden round's response (no continuation, no word of why)",
                !hidden_last,
                || {
                    format!(
                        "after {} upstream calls the last, a call of ctxd's tools only, was not continued",
                        upstream.len()
                    )
                },
            );
            if let Some((status, message, _)) = &failed_last {
                report.check(3, step, "an answer though the last upstream call failed", false, || {
                    format!(
                        "an answer though the last upstream call failed ({status:?} {message})"
                    )
                });
            }
            // 5: usage.
            let mut sum = ctxd_core::model::Usage::default();
            for r in upstream {
                if let Some(u) = r.usage {
                    sum.input += u.input;
                    sum.output += u.output;
                    sum.cache_read += u.cache_read;
                    sum.cache_write += u.cache_write;
                }
            }
            let got = assembled.usage.unwrap_or_default();
            report.check(4, step, "usage is not the sum of the upstream calls", got == sum, || {
                format!(
                    "the client's usage {got:?} is not the sum of its {} upstream calls' {sum:?} ({:?})",
                    upstream.len(),
                    upstream.iter().map(|r| r.usage).collect::<Vec<_>>()
                )
            });
        }
        Outcome::HttpError {
            status,
            retry_after,
            body,
        } => {
            report.check(3, step, "an error not in the API's shape", client::error_shape_ok(api, body), || {
                format!("a {status} error not in the API's shape: {}", head(body, 400))
            });
            match &failed_last {
                None => report.check(3, step, "an error though no upstream call failed", false, || {
                    format!(
                        "a {status} error though no upstream call failed ({} calls: {answered:?}): {}",
                        upstream.len(),
                        head(body, 400)
                    )
                }),
                Some((want, message, want_retry)) => {
                    if let Some(want) = want {
                        report.check(3, step, "the provider's status is lost", status == want, || {
                            format!(
                                "the provider's {want} reached the client as {status}: {}",
                                head(body, 400)
                            )
                        });
                    } else {
                        report.check(3, step, "a failed stream is not a 5xx", *status >= 500, || {
                            format!("a failed stream reached the client as {status}")
                        });
                    }
                    report.check(3, step, "the provider's message is lost", body.contains(message.as_str()), || {
                        format!(
                            "the provider's message {message:?} is not in the client's {status}: {}",
                            head(body, 400)
                        )
                    });
                    if want_retry.is_some() {
                        report.check(3, step, "the provider's retry-after is lost", retry_after == want_retry, || {
                            format!(
                                "the provider's retry-after {want_retry:?} reached the client as {retry_after:?} ({status})"
                            )
                        });
                    }
                }
            }
        }
        Outcome::StreamError { error, raw } => match &failed_last {
            None => report.check(3, step, "a failed response though no upstream call failed", false, || {
                format!(
                    "an unreadable or failed response though no upstream call failed ({answered:?}): {error}: {}",
                    head(raw, 600)
                )
            }),
            Some((_, message, _)) => {
                let said = match error {
                    StreamError::Provider { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                report.check(
                    3,
                    step, "the provider's error is not a provider error event",
                    matches!(error, StreamError::Provider { .. }) || message.is_empty(),
                    || format!("the provider's error reached the client as {error}: {}", head(raw, 600)),
                );
                report.check(3, step, "the provider's message is lost from the error event", said.contains(message.as_str()), || {
                    format!(
                        "the provider's message {message:?} is not in the client's error event: {said}"
                    )
                });
            }
        },
    }
}

fn head(s: &str, n: usize) -> String {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The report's violations, one line each.
pub fn describe_violations(report: &Report) -> String {
    let mut out = String::new();
    for v in &report.violations {
        let _ = writeln!(
            out,
            "    [{}] {}: {}",
            INVARIANTS[v.invariant],
            v.step.map_or("end".into(), |s| format!("step {s}")),
            v.detail
        );
    }
    out
}

/// The checkers themselves: each rejects what it must.
#[test]
fn the_checkers_reject_what_they_must() {
    let api = Api::Anthropic;
    let prompt = json!({"role": "user", "content": "FZP1. fix it"});
    let answer =
        json!({"role": "assistant", "content": [{"type": "text", "text": "FZA100. done"}]});
    let reminder =
        json!({"role": "user", "content": "<system-reminder>75% used</system-reminder>"});
    let key = Key::Marker("FZP1.".into());
    assert!(ends_with(api, std::slice::from_ref(&prompt), &key).is_ok());
    assert!(ends_with(api, &[prompt.clone(), reminder.clone()], &key).is_ok());
    let (class, _) = ends_with(api, &[prompt.clone(), answer.clone()], &key).unwrap_err();
    assert_eq!(class, "ends with an earlier answer");
    assert!(ends_with(api, std::slice::from_ref(&reminder), &key).is_err());
    // A continuation ends with the results of ctxd's calls, not with the client's.
    let call = |name: &str, id: &str| {
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name,
            "input": {}}]})
    };
    let result = |id: &str| {
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
            "content": "ok"}]})
    };
    let hidden = [prompt.clone(), call("notes_list", "t1"), result("t1")];
    assert!(ends_with_ctxd_results(api, &hidden).is_ok());
    let client_call = [prompt.clone(), call("Bash", "t2"), result("t2")];
    assert!(ends_with_ctxd_results(api, &client_call).is_err());
    assert!(ends_with_ctxd_results(api, &[prompt, answer]).is_err());
    assert_eq!(
        answer_markers("FZA12. text FZH3. more FZA12. FZA7 no dot"),
        vec!["FZA12.".to_owned(), "FZH3.".to_owned()]
    );
}

/// The checkers on Gemini's shapes: responses paired with calls by name and order, Gemini
/// CLI's echo, a prompt after a failed request.
#[test]
fn the_checkers_read_gemini() {
    use super::gen::Agent;
    let api = Api::Gemini;
    let user = |t: &str| json!({"role": "user", "parts": [{"text": t}]});
    let calls = json!({"role": "model", "parts": [
        {"text": "thinking", "thought": true, "thoughtSignature": "dGg="},
        {"functionCall": {"name": "notes_list", "args": {}}, "thoughtSignature": "c2ln"},
        {"functionCall": {"name": "Bash", "args": {"command": "ls"}}}]});
    let answers = json!({"role": "user", "parts": [
        {"functionResponse": {"name": "notes_list", "response": {"output": "none"}}},
        {"functionResponse": {"name": "Bash", "response": {"output": "FZO3.0 exit 0"}}}]});
    let up = [user("FZP1. fix it"), calls.clone(), answers];
    let ids = client::calls_of(api, &calls);
    let bash = ids.iter().find(|(_, n)| n == "Bash").unwrap().0.clone();
    assert_eq!(client::results_at(api, &up, 2).len(), 2);
    assert!(ends_with(api, &up, &Key::Result(bash.clone(), "FZO3.0 exit 0".into())).is_ok());
    assert!(ends_with_ctxd_results(api, &up).is_ok());
    let (class, _) = ends_with(api, &up[..2], &Key::Result(bash, String::new())).unwrap_err();
    assert_eq!(class, "ends with the model's calls");
    // Gemini CLI keeps no thoughts and ids its calls; Pi keeps the content as it came.
    let env = |agent| super::gen::Env {
        window: Window::Default,
        thinking: true,
        agent,
        reminders: false,
        resets: false,
        distill: false,
        digests: false,
        lazy_tools: false,
        cache_plan: false,
        write_facts: false,
        distill_wait: false,
    };
    let cli = client::echo(api, &env(Agent::GeminiCli), calls.clone(), 7);
    assert_eq!(cli["parts"].as_array().unwrap().len(), 2);
    assert_eq!(cli["parts"][0]["functionCall"]["id"], "notes_list_7_0");
    assert_eq!(cli["parts"][0]["thoughtSignature"], "c2ln");
    assert_eq!(client::echo(api, &env(Agent::Pi), calls.clone(), 7), calls);
    // A prompt after a user content (the request failed) joins it: roles alternate.
    let mut conv = vec![user("FZP1.")];
    client::push_user(api, &mut conv, user("FZP2."));
    assert_eq!(conv.len(), 1);
    assert_eq!(conv[0]["parts"].as_array().unwrap().len(), 2);
}
