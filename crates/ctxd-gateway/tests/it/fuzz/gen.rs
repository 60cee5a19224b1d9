//! The seeded generator: a case (one API, JSON or SSE, the gateway's settings, the mock's
//! windows) and its script of steps, each a client action and the mock's replies to the
//! upstream calls it causes. A case is a pure function of its seed.

use std::fmt;

use ctxd_formats::wire::stream::Api as WireApi;

/// The wire APIs the fuzzer plays: the gateway's four.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    Chat,
    Responses,
    /// Google's Gemini API: `/v1beta/models/{model}:generateContent`, and
    /// `:streamGenerateContent?alt=sse` when streaming (as Gemini CLI and Pi do).
    Gemini,
}

impl Api {
    /// The path the client posts to. Gemini: `/v1beta`, or `/v1` for the Python SDK (its
    /// default version).
    /// `json_array`: Gemini's stream without `alt=sse`, one JSON array sent element by element.
    pub fn path(self, model: &str, stream: bool, agent: Agent, json_array: bool) -> String {
        let version = if agent == Agent::Sdk { "v1" } else { "v1beta" };
        match (self, stream) {
            (Api::Anthropic, _) => "/v1/messages".into(),
            (Api::Chat, _) => "/v1/chat/completions".into(),
            (Api::Responses, _) => "/v1/responses".into(),
            (Api::Gemini, false) => format!("/{version}/models/{model}:generateContent"),
            (Api::Gemini, true) if json_array => {
                format!("/{version}/models/{model}:streamGenerateContent")
            }
            (Api::Gemini, true) => {
                format!("/{version}/models/{model}:streamGenerateContent?alt=sse")
            }
        }
    }

    /// Whether an upstream route (the path without its query) is a model call of this API.
    pub fn is_model_call(self, route: &str) -> bool {
        match self {
            Api::Gemini => {
                (route.starts_with("/v1beta/models/") || route.starts_with("/v1/models/"))
                    && (route.ends_with(":generateContent")
                        || route.ends_with(":streamGenerateContent"))
            }
            _ => route == self.path("", false, Agent::Sdk, false),
        }
    }

    pub fn wire(self) -> WireApi {
        match self {
            Api::Anthropic => WireApi::Anthropic,
            Api::Chat => WireApi::OpenAiChat,
            Api::Responses => WireApi::OpenAiResponses,
            Api::Gemini => WireApi::Gemini,
        }
    }
}

/// SplitMix64: small, fast, and the same sequence everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
}

pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The eight API/mode combinations; a case's seed picks one (`seed % 8`).
pub const COMBOS: [(Api, bool); 8] = [
    (Api::Anthropic, false),
    (Api::Anthropic, true),
    (Api::Chat, false),
    (Api::Chat, true),
    (Api::Responses, false),
    (Api::Responses, true),
    (Api::Gemini, false),
    (Api::Gemini, true),
];

/// The seed of the `i`th case of combination `combo` in a run seeded `base`.
pub fn case_seed(base: u64, combo: usize, i: usize) -> u64 {
    let n = COMBOS.len() as u64;
    (mix(base ^ mix(i as u64 + 1)) / n) * n + combo as u64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The model's own (200k for both models used).
    Default,
    /// ctxd's configured window and the mock's both this many tokens: resets, reminders and
    /// real overflows within a few large outputs.
    Small(u64),
    /// Anthropic's `context-1m-2025-08-07` beta.
    OneM,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    /// `user-agent: claude-cli/...`.
    ClaudeCode,
    /// `user-agent: codex_cli_rs/...`.
    Codex,
    /// No user agent ctxd knows (Gemini: the google-genai Python SDK, which echoes the
    /// model's content as it came, no ids added).
    Sdk,
    /// Gemini CLI: drops `thought: true` parts when it echoes the model's content, and adds
    /// an `id` of its own to every echoed call and to its response.
    GeminiCli,
    /// Pi's `google-generative-ai` provider: echoes everything (thoughts, signatures on text
    /// and calls), no ids.
    Pi,
}

impl Agent {
    /// Whether the client echoes the model's content as Gemini CLI does.
    pub fn gemini_cli(self) -> bool {
        self == Agent::GeminiCli
    }
}

/// The gateway's and the mock's settings for one case.
#[derive(Clone, Debug)]
pub struct Env {
    pub window: Window,
    pub thinking: bool,
    pub agent: Agent,
    pub reminders: bool,
    pub resets: bool,
    pub distill: bool,
    pub digests: bool,
    pub lazy_tools: bool,
    pub cache_plan: bool,
    pub write_facts: bool,
    /// The request waits up to 2 s for the previous turn's distillation pass.
    pub distill_wait: bool,
}

/// What the client does at one step.
#[derive(Clone, Debug)]
pub enum Step {
    /// The client's next message: the results of the calls the last answer made (each output
    /// `output` bytes), else a prompt (with a small PNG when `image`).
    Send {
        image: bool,
        output: usize,
        replies: Vec<Mock>,
    },
    /// The last request's body again, byte for byte (a retry, or the answer regenerated).
    Resend { replies: Vec<Mock> },
    /// The `back`th prompt from the end edited: the conversation cut before it, the new
    /// text sent (the conversation branches).
    Edit { back: usize, replies: Vec<Mock> },
    /// The client's own compaction: a new conversation of Claude Code's summary message.
    Compact { replies: Vec<Mock> },
}

impl Step {
    pub fn replies(&self) -> &[Mock] {
        match self {
            Step::Send { replies, .. }
            | Step::Resend { replies }
            | Step::Edit { replies, .. }
            | Step::Compact { replies } => replies,
        }
    }

    pub fn replies_mut(&mut self) -> &mut Vec<Mock> {
        match self {
            Step::Send { replies, .. }
            | Step::Resend { replies }
            | Step::Edit { replies, .. }
            | Step::Compact { replies } => replies,
        }
    }
}

/// The mock's reply to one upstream call.
#[derive(Clone, Debug, PartialEq)]
pub enum Mock {
    /// A final answer of about this many bytes.
    Text(usize),
    /// This many parallel calls of the client's tools (`Write` calls with content when
    /// `write`, else `Bash`).
    Calls { n: usize, write: bool },
    /// Calls of ctxd's tools only (a hidden round), after a text when `text`.
    Ctxd {
        tools: Vec<&'static str>,
        text: bool,
    },
    /// One call of ctxd's tool beside `client` calls of the client's, in one response.
    Mixed { tool: &'static str, client: usize },
    /// An HTTP error, with `retry-after` seconds when set.
    Error {
        status: u16,
        retry_after: Option<u32>,
    },
    /// The provider's "prompt is too long" (400).
    Overflow,
    /// A stream that starts and reports an error event (a 500 for a JSON request).
    FailMidStream,
    /// A text answer whose connection is cut after this many events.
    Cut(usize),
}

/// ctxd's tools a hidden round calls: those answered without arguments the run cannot know.
pub const HIDDEN_TOOLS: [&str; 6] = [
    "notes_list",
    "get_context_remaining",
    "history_list_windows",
    "notes_append",
    "notes_read",
    "new_context",
];

#[derive(Clone, Debug)]
pub struct Case {
    pub seed: u64,
    pub api: Api,
    pub stream: bool,
    /// Gemini's stream as one JSON array (no `alt=sse`; the API's default, which REST
    /// clients get): a quarter of the Gemini stream cases, from the seed alone.
    pub json_array: bool,
    pub env: Env,
    pub steps: Vec<Step>,
}

impl Case {
    pub fn generate(seed: u64, max_steps: usize) -> Case {
        let (api, stream) = COMBOS[(seed % COMBOS.len() as u64) as usize];
        let mut rng = Rng::new(seed);
        let window = match rng.below(10) {
            0..=4 => Window::Default,
            5..=7 => Window::Small(rng.range(20, 40) as u64 * 1000),
            _ if matches!(api, Api::Anthropic) => Window::OneM,
            _ => Window::Default,
        };
        let env = Env {
            window,
            thinking: !matches!(api, Api::Chat) && rng.chance(30),
            agent: match api {
                Api::Gemini => [Agent::GeminiCli, Agent::Pi, Agent::Sdk][rng.below(3)],
                _ => [Agent::ClaudeCode, Agent::Codex, Agent::Sdk][rng.below(3)],
            },
            reminders: rng.chance(80),
            resets: rng.chance(80),
            distill: rng.chance(50),
            digests: rng.chance(50),
            lazy_tools: rng.chance(20),
            cache_plan: rng.chance(70),
            write_facts: rng.chance(70),
            distill_wait: rng.chance(30),
        };
        let n = rng.range(2, max_steps.max(2));
        let mut steps = Vec::with_capacity(n);
        for i in 0..n {
            let step = match rng.below(100) {
                _ if i == 0 => send(&mut rng),
                0..=59 => send(&mut rng),
                60..=71 => Step::Resend {
                    replies: replies(&mut rng),
                },
                72..=81 => Step::Edit {
                    back: rng.below(3),
                    replies: replies(&mut rng),
                },
                82..=87 => Step::Compact {
                    replies: replies(&mut rng),
                },
                _ => send(&mut rng),
            };
            steps.push(step);
        }
        let json_array = api == Api::Gemini && stream && (seed / 8).is_multiple_of(4);
        if json_array {
            // ctxd offers its tools only where it can splice hidden rounds (not into Gemini's
            // JSON array): the model calls the client's tools alone.
            for step in &mut steps {
                for m in step.replies_mut() {
                    let plain = match &*m {
                        Mock::Ctxd { .. } => Mock::Text(120),
                        Mock::Mixed { client, .. } => Mock::Calls {
                            n: *client,
                            write: false,
                        },
                        other => other.clone(),
                    };
                    *m = plain;
                }
            }
        }
        Case {
            seed,
            api,
            stream,
            json_array,
            env,
            steps,
        }
    }
}

fn send(rng: &mut Rng) -> Step {
    let output = match rng.below(10) {
        0..=5 => rng.range(50, 2_000),
        6..=7 => rng.range(2_000, 8_000),
        _ => rng.range(15_000, 24_000),
    };
    Step::Send {
        image: rng.chance(10),
        output,
        replies: replies(rng),
    }
}

/// The replies to one client request: hidden rounds (rarely more than the gateway's 8),
/// an overflow now and then, then a terminal reply; sometimes an error in place of any.
fn replies(rng: &mut Rng) -> Vec<Mock> {
    let mut out = Vec::new();
    let hidden = match rng.below(100) {
        0..=59 => 0,
        60..=84 => 1,
        85..=95 => rng.range(2, 4),
        _ => rng.range(8, 10),
    };
    for _ in 0..hidden {
        let k = if rng.chance(20) { 2 } else { 1 };
        let mut tools = Vec::new();
        for _ in 0..k {
            // `new_context` rarely: each one opens a window.
            let t = HIDDEN_TOOLS[rng.below(HIDDEN_TOOLS.len())];
            if t == "new_context" && rng.chance(60) {
                tools.push("notes_list");
            } else {
                tools.push(t);
            }
        }
        out.push(Mock::Ctxd {
            tools,
            // Past the gateway's 8 rounds, mostly silent rounds: what the client gets then
            // is the last round's text alone.
            text: rng.chance(if hidden >= 8 { 10 } else { 40 }),
        });
        if rng.chance(7) {
            out.push(error(rng));
            return out;
        }
    }
    if rng.chance(6) {
        out.push(Mock::Overflow);
    }
    let terminal = match rng.below(100) {
        0..=39 => Mock::Text(rng.range(5, 600)),
        40..=69 => Mock::Calls {
            n: rng.range(1, 3),
            write: rng.chance(25),
        },
        70..=79 => Mock::Mixed {
            tool: HIDDEN_TOOLS[rng.below(4)],
            client: rng.range(1, 2),
        },
        80..=91 => error(rng),
        92..=95 => Mock::FailMidStream,
        _ => Mock::Cut(rng.range(1, 4)),
    };
    out.push(terminal);
    out
}

fn error(rng: &mut Rng) -> Mock {
    match rng.below(4) {
        0 => Mock::Error {
            status: 429,
            retry_after: Some(rng.range(1, 30) as u32),
        },
        1 => Mock::Error {
            status: 500,
            retry_after: None,
        },
        2 => Mock::Error {
            status: 529,
            retry_after: rng.chance(50).then_some(5),
        },
        _ => Mock::Overflow,
    }
}

impl Case {
    /// How the client reads the answer: `JSON`, `SSE`, or Gemini's streamed `array`.
    pub fn mode(&self) -> &'static str {
        match (self.stream, self.json_array) {
            (false, _) => "JSON",
            (true, false) => "SSE",
            (true, true) => "array",
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "case seed {} ({:?} {}): {:?}",
            self.seed,
            self.api,
            self.mode(),
            self.env
        )?;
        for (i, s) in self.steps.iter().enumerate() {
            writeln!(f, "  {i}: {s:?}")?;
        }
        Ok(())
    }
}
