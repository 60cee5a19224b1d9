//! `ctxd-mock`: the mock upstream as a process, for real clients and benchmarks.
//!
//! `ctxd-mock --port 18080 [--log requests.jsonl] [--reply text:hi --reply error:529 ...]
//! [--lax] [--window gpt-4o=128000 ...] [--default-window 200000]`
//!
//! Control routes, not recorded: `GET`/`DELETE /_mock/requests` (the record),
//! `POST /_mock/script` (queue `--reply` specs, a JSON array) and `DELETE /_mock/script`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use ctxd_mock::{Config, MockServer, Reasoning, Recording, Reply, Shape, Truncate};

/// A mock Anthropic / OpenAI / Gemini upstream on 127.0.0.1 for ctxd's tests and benchmarks.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Port on 127.0.0.1 (0: any free port, printed on stderr).
    #[arg(long, env = "MOCK_PORT", default_value_t = 18080)]
    port: u16,
    /// Append every request to this file as one JSON line (the /_mock/requests shape).
    #[arg(long, env = "MOCK_LOG")]
    log: Option<PathBuf>,
    /// What is kept in memory for GET /_mock/requests.
    #[arg(long, value_enum, default_value_t = RecordArg::Full)]
    record: RecordArg,
    /// The final answer's text.
    #[arg(long, env = "MOCK_FINAL_TEXT", default_value = "done")]
    final_text: String,
    /// Thinking blocks (Anthropic) and encrypted reasoning items (Responses).
    #[arg(long, value_enum, default_value_t = ReasoningArg::Off)]
    reasoning: ReasoningArg,
    /// Status of HEAD / (Claude Code's preflight).
    #[arg(long, env = "MOCK_HEAD_STATUS", default_value_t = 200)]
    head_status: u16,
    /// Scripted replies, used in order, one per generation request, before the built-in
    /// logic: default | text:TEXT | tool:NAME[:JSON] | error:STATUS[:MESSAGE] | fail:MESSAGE |
    /// wait[:MS] (hold the request until a reply is queued after it, by
    /// `POST /_mock/script` with a JSON array of these specs; default 30000 ms) |
    /// logprobs:TOKEN=P,TOKEN=P... (one token, the most likely; Chat `logprobs` lists them).
    #[arg(long = "reply", value_name = "SPEC")]
    replies: Vec<Reply>,
    /// Delay before the first byte of every reply, in milliseconds.
    #[arg(long, default_value_t = 0)]
    first_byte_delay_ms: u64,
    /// Delay between SSE events, in milliseconds.
    #[arg(long, default_value_t = 0)]
    event_delay_ms: u64,
    /// Pad every reply body to this many bytes.
    #[arg(long)]
    pad_to: Option<usize>,
    /// Close every reply's connection after this many SSE events.
    #[arg(long)]
    truncate_after_events: Option<usize>,
    /// Accept any request shape (by default the mock refuses, with the provider's own 400
    /// error, what the real APIs refuse).
    #[arg(long)]
    lax: bool,
    /// The context window of models whose name starts with MODEL_PREFIX, in tokens
    /// (repeatable; the longest matching prefix wins over the built-in table).
    #[arg(long = "window", value_name = "MODEL_PREFIX=TOKENS", value_parser = parse_window)]
    windows: Vec<(String, u64)>,
    /// The window of models no --window and no built-in entry knows.
    #[arg(long, value_name = "TOKENS", default_value_t = 200_000)]
    default_window: u64,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RecordArg {
    Full,
    Meta,
    Off,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ReasoningArg {
    Off,
    WhenAsked,
    Always,
}

impl Args {
    /// The validated form: flags turned into a [`Config`].
    fn config(self) -> Config {
        let shape = Shape {
            first_byte_delay: Duration::from_millis(self.first_byte_delay_ms),
            event_delay: Duration::from_millis(self.event_delay_ms),
            truncate: self.truncate_after_events.map(Truncate::AfterEvents),
            pad_to: self.pad_to,
            headers: Vec::new(),
        };
        Config {
            port: self.port,
            final_text: self.final_text,
            reasoning: match self.reasoning {
                ReasoningArg::Off => Reasoning::Off,
                ReasoningArg::WhenAsked => Reasoning::WhenAsked,
                ReasoningArg::Always => Reasoning::Always,
            },
            recording: match self.record {
                RecordArg::Full => Recording::Full,
                RecordArg::Meta => Recording::Meta,
                RecordArg::Off => Recording::Off,
            },
            log: self.log,
            script: self
                .replies
                .into_iter()
                .map(|r| r.with_shape(shape.clone()))
                .collect(),
            shape,
            head_status: self.head_status,
            strict: !self.lax,
            windows: self.windows,
            default_window: self.default_window,
            ..Config::default()
        }
    }
}

/// `MODEL_PREFIX=TOKENS`.
fn parse_window(s: &str) -> Result<(String, u64), String> {
    let (prefix, tokens) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("{s:?}: expected MODEL_PREFIX=TOKENS"))?;
    let tokens = tokens
        .trim()
        .parse()
        .map_err(|e| format!("{s:?}: tokens: {e}"))?;
    Ok((prefix.trim().to_owned(), tokens))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(run(args.config()))
}

async fn run(config: Config) -> anyhow::Result<()> {
    let server = MockServer::start(config).await?;
    eprintln!("ctxd-mock listening on {}", server.base_url());
    wait_for_signal().await?;
    server.shutdown().await;
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn wait_for_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for ctrl-c")?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("waiting for ctrl-c")?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn strictness_flags() {
        let args = Args::try_parse_from([
            "ctxd-mock",
            "--window",
            "gpt-4o=1000",
            "--window",
            "claude-x=2000",
            "--default-window",
            "300",
        ])
        .unwrap();
        let config = args.config();
        assert!(config.strict);
        assert_eq!(
            config.windows,
            [("gpt-4o".to_owned(), 1000), ("claude-x".to_owned(), 2000)]
        );
        assert_eq!(config.default_window, 300);
        let lax = Args::try_parse_from(["ctxd-mock", "--lax"])
            .unwrap()
            .config();
        assert!(!lax.strict);
        assert_eq!(lax.default_window, 200_000);
        assert!(Args::try_parse_from(["ctxd-mock", "--window", "gpt-4o"]).is_err());
        assert!(Args::try_parse_from(["ctxd-mock", "--window", "gpt-4o=x"]).is_err());
    }
}
