//! Scripted replies: a queue that overrides the built-in turn logic, one reply per request.
//! Replies can be queued while the server runs (`POST /_mock/script`), and a [`Action::Wait`]
//! holds a request until the next one is: a test can answer with what only exists once the
//! request was sent (an id the request carries).

use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

/// How long a `wait` reply holds its request when the spec names no time.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// One reply to one generation request (`/v1/messages`, `/v1/chat/completions`,
/// `/v1/responses`, Gemini's `/v1beta/models/MODEL:generateContent` and
/// `:streamGenerateContent`): what to say and how to deliver it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub action: Action,
    pub shape: Shape,
}

/// What a reply says.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The built-in turn logic (a shell tool call, or the final text).
    Default,
    /// These parts in order: text blocks and tool calls (several calls = a parallel batch).
    Parts(Vec<Part>),
    /// This HTTP status with the API's error body, before any byte of a stream.
    Error { status: u16, message: String },
    /// A stream that starts, then reports an error event (Anthropic `error`, Responses
    /// `response.failed`, Chat an `error` chunk, Gemini its error object as the next SSE event
    /// or array element). A non-streaming request gets a 500.
    FailMidStream { message: String },
    /// Hold the request until a reply is queued after this one (`POST /_mock/script`, or
    /// [`Script::push`]) and answer with it; none within `timeout`: a 400 saying so (a status
    /// clients do not retry), so a test that forgot to push fails at once and clearly.
    Wait { timeout: Duration },
}

/// One piece of a reply's content.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Text(String),
    /// A tool call; Responses renders it after the offered tool's kind (function,
    /// `local_shell`, `custom`); Gemini as a `functionCall` part without an `id`, the first
    /// one signed (`thoughtSignature`). Strict mode answers a Gemini call of an undeclared
    /// function with a 400 naming it (the script is wrong: the real model cannot).
    ToolCall {
        name: String,
        args: Value,
    },
    /// A tool call with the id the client will send back (Anthropic `tool_use.id`, Chat
    /// `tool_calls[].id`, Responses `call_id`, Gemini `functionCall.id`): a recorded response
    /// replayed exactly.
    ToolCallWithId {
        id: String,
        name: String,
        args: Value,
    },
    /// A thinking block (Anthropic `thinking`, or `redacted_thinking` carrying `signature` as
    /// its data) or a reasoning item (Responses: `text` as its summary, `signature` as its
    /// `encrypted_content`) or a thought part (Gemini: `{"text", "thought": true,
    /// "thoughtSignature"}`, the mock's own signature when none is given), in its place among
    /// the parts; Chat replies leave it out. A
    /// recorded response replayed exactly: the signature is not the mock's, so strict mode
    /// does not check it when it comes back.
    Thinking {
        text: String,
        signature: Option<String>,
        redacted: bool,
    },
    /// One token sampled from these (token, probability) alternatives at temperature 0: the
    /// text is the most likely, and a Chat request asking for `logprobs` gets them all as the
    /// first token's `top_logprobs` (how a classifier reads a yes/no answer).
    Sampled(Vec<(String, f64)>),
}

/// How a reply is delivered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Shape {
    /// Before the status line (time to first byte).
    pub first_byte_delay: Duration,
    /// Between SSE events.
    pub event_delay: Duration,
    /// Close the connection before the end of the body.
    pub truncate: Option<Truncate>,
    /// Pad the first text (one is added if the reply has none) so the body is this many bytes:
    /// exactly for JSON and SSE (an SSE comment takes the last few bytes); a Gemini JSON-array
    /// stream, which has no comments, within a few bytes under it.
    pub pad_to: Option<usize>,
    /// Extra response headers (name, value), on errors too: a 429's `retry-after`.
    pub headers: Vec<(String, String)>,
}

/// Where a truncated reply stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truncate {
    /// After this many SSE events (a JSON body counts as one event).
    AfterEvents(usize),
    /// After this many body bytes.
    AfterBytes(usize),
}

impl Reply {
    /// The built-in turn logic, for a reply that only changes the [`Shape`].
    pub fn default_turn() -> Self {
        Self::from(Action::Default)
    }

    pub fn text(text: impl Into<String>) -> Self {
        Self::parts(vec![Part::Text(text.into())])
    }

    pub fn tool_call(name: impl Into<String>, args: Value) -> Self {
        Self::parts(vec![Part::ToolCall {
            name: name.into(),
            args,
        }])
    }

    /// A one-token answer with these first-token probabilities (see [`Part::Sampled`]).
    pub fn sampled(alternatives: &[(&str, f64)]) -> Self {
        Self::parts(vec![Part::Sampled(
            alternatives
                .iter()
                .map(|(t, p)| ((*t).to_owned(), *p))
                .collect(),
        )])
    }

    pub fn parts(parts: Vec<Part>) -> Self {
        Self::from(Action::Parts(parts))
    }

    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self::from(Action::Error {
            status,
            message: message.into(),
        })
    }

    pub fn fail_mid_stream(message: impl Into<String>) -> Self {
        Self::from(Action::FailMidStream {
            message: message.into(),
        })
    }

    /// Hold the request until the next reply is queued (see [`Action::Wait`]).
    pub fn wait(timeout: Duration) -> Self {
        Self::from(Action::Wait { timeout })
    }

    pub fn first_byte_delay(mut self, delay: Duration) -> Self {
        self.shape.first_byte_delay = delay;
        self
    }

    pub fn event_delay(mut self, delay: Duration) -> Self {
        self.shape.event_delay = delay;
        self
    }

    pub fn truncate_after_events(mut self, events: usize) -> Self {
        self.shape.truncate = Some(Truncate::AfterEvents(events));
        self
    }

    pub fn truncate_after_bytes(mut self, bytes: usize) -> Self {
        self.shape.truncate = Some(Truncate::AfterBytes(bytes));
        self
    }

    pub fn pad_to(mut self, bytes: usize) -> Self {
        self.shape.pad_to = Some(bytes);
        self
    }

    /// An extra response header (e.g. `retry-after` on an error reply).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.shape.headers.push((name.into(), value.into()));
        self
    }

    pub fn with_shape(mut self, shape: Shape) -> Self {
        self.shape = shape;
        self
    }
}

impl From<Action> for Reply {
    fn from(action: Action) -> Self {
        Self {
            action,
            shape: Shape::default(),
        }
    }
}

/// A reply spec is not `default`, `text:TEXT`, `tool:NAME[:JSON]`, `error:STATUS[:MESSAGE]`,
/// `fail:MESSAGE`, `wait[:MILLISECONDS]` or `logprobs:TOKEN=P,TOKEN=P...`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad reply spec {spec:?}: {why} (want default, text:TEXT, tool:NAME[:JSON], error:STATUS[:MESSAGE], fail:MESSAGE, wait[:MILLISECONDS] or logprobs:TOKEN=P,TOKEN=P...)")]
pub struct ReplySpecError {
    pub spec: String,
    pub why: String,
}

/// The simple form used by the binary's `--reply` flag and `POST /_mock/script`.
impl FromStr for Reply {
    type Err = ReplySpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| ReplySpecError {
            spec: spec.to_owned(),
            why: why.to_owned(),
        };
        let (kind, rest) = spec.split_once(':').unwrap_or((spec, ""));
        match kind {
            "default" => Ok(Reply::default_turn()),
            "text" => Ok(Reply::text(rest)),
            "fail" => Ok(Reply::fail_mid_stream(rest)),
            "wait" if rest.is_empty() => Ok(Reply::wait(DEFAULT_WAIT)),
            "wait" => {
                let ms: u64 = rest
                    .parse()
                    .map_err(|_| bad("milliseconds is not a number"))?;
                Ok(Reply::wait(Duration::from_millis(ms)))
            }
            "tool" => {
                let (name, args) = rest.split_once(':').unwrap_or((rest, "{}"));
                if name.is_empty() {
                    return Err(bad("no tool name"));
                }
                let args = serde_json::from_str(args).map_err(|e| bad(&e.to_string()))?;
                Ok(Reply::tool_call(name, args))
            }
            "error" => {
                let (status, message) = rest.split_once(':').unwrap_or((rest, "mock error"));
                let status: u16 = status.parse().map_err(|_| bad("status is not a number"))?;
                if !(100..=999).contains(&status) {
                    return Err(bad("status out of range"));
                }
                Ok(Reply::error(status, message))
            }
            "logprobs" => {
                let mut alternatives = Vec::new();
                for pair in rest.split(',') {
                    let (token, p) = pair
                        .rsplit_once('=')
                        .ok_or_else(|| bad("an alternative is not TOKEN=P"))?;
                    let p: f64 = p
                        .parse()
                        .map_err(|_| bad("a probability is not a number"))?;
                    if token.is_empty() || !(p > 0.0 && p <= 1.0) {
                        return Err(bad("an alternative needs a token and 0 < P <= 1"));
                    }
                    alternatives.push((token.to_owned(), p));
                }
                Ok(Reply::parts(vec![Part::Sampled(alternatives)]))
            }
            _ => Err(bad("unknown kind")),
        }
    }
}

/// The queue of scripted replies; a cheap handle shared with the server.
#[derive(Clone, Debug, Default)]
pub struct Script {
    queue: Arc<Mutex<VecDeque<Reply>>>,
    /// Wakes the requests a [`Action::Wait`] holds when replies are queued.
    queued: Arc<Notify>,
}

impl Script {
    /// Queues a reply after those already queued.
    pub fn push(&self, reply: Reply) {
        self.lock().push_back(reply);
        self.queued.notify_waiters();
    }

    pub fn extend(&self, replies: impl IntoIterator<Item = Reply>) {
        self.lock().extend(replies);
        self.queued.notify_waiters();
    }

    /// Replies not yet used.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    pub fn clear(&self) {
        self.lock().clear();
    }

    pub(crate) fn pop(&self) -> Option<Reply> {
        self.lock().pop_front()
    }

    /// The next reply, waiting up to `timeout` for one to be queued (`None`: none came).
    pub(crate) async fn pop_within(&self, timeout: Duration) -> Option<Reply> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the queue is looked at, so a push in between is not missed.
            let queued = self.queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            if let Some(reply) = self.pop() {
                return Some(reply);
            }
            if tokio::time::timeout_at(deadline, queued).await.is_err() {
                return self.pop();
            }
        }
    }

    /// A panic elsewhere while holding the lock cannot leave the queue half-changed.
    fn lock(&self) -> MutexGuard<'_, VecDeque<Reply>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn specs_parse() {
        assert_eq!("default".parse::<Reply>().unwrap(), Reply::default_turn());
        assert_eq!("text:a:b".parse::<Reply>().unwrap(), Reply::text("a:b"));
        assert_eq!(
            r#"tool:Bash:{"command":"ls -la"}"#.parse::<Reply>().unwrap(),
            Reply::tool_call("Bash", json!({"command": "ls -la"}))
        );
        assert_eq!(
            "tool:Read".parse::<Reply>().unwrap(),
            Reply::tool_call("Read", json!({}))
        );
        assert_eq!(
            "error:529".parse::<Reply>().unwrap(),
            Reply::error(529, "mock error")
        );
        assert_eq!(
            "error:429:slow down".parse::<Reply>().unwrap(),
            Reply::error(429, "slow down")
        );
        assert_eq!(
            "fail:boom".parse::<Reply>().unwrap(),
            Reply::fail_mid_stream("boom")
        );
        assert_eq!("wait".parse::<Reply>().unwrap(), Reply::wait(DEFAULT_WAIT));
        assert_eq!(
            "logprobs:Yes=0.7, Yes=0.1,No=0.2".parse::<Reply>().unwrap(),
            Reply::sampled(&[("Yes", 0.7), (" Yes", 0.1), ("No", 0.2)])
        );
        assert_eq!(
            "wait:250".parse::<Reply>().unwrap(),
            Reply::wait(Duration::from_millis(250))
        );
    }

    #[test]
    fn bad_specs_say_why() {
        for spec in [
            "",
            "txt:a",
            "tool:",
            "tool:Bash:{",
            "error:abc",
            "error:42",
            "wait:soon",
            "logprobs:",
            "logprobs:Yes",
            "logprobs:Yes=x",
            "logprobs:Yes=0",
            "logprobs:=0.5",
        ] {
            let err = spec.parse::<Reply>().unwrap_err();
            assert_eq!(err.spec, spec);
        }
    }

    #[test]
    fn script_is_fifo_and_shared() {
        let script = Script::default();
        let other = script.clone();
        script.push(Reply::text("a"));
        other.extend([Reply::text("b")]);
        assert_eq!(script.len(), 2);
        assert_eq!(other.pop(), Some(Reply::text("a")));
        assert_eq!(script.pop(), Some(Reply::text("b")));
        assert!(script.pop().is_none());
    }

    #[tokio::test]
    async fn pop_within_waits_for_a_push_or_gives_up() {
        let script = Script::default();
        script.push(Reply::text("queued"));
        let ready = script.pop_within(Duration::from_secs(5)).await;
        assert_eq!(ready, Some(Reply::text("queued")), "a queued reply at once");
        let pusher = script.clone();
        let later = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            pusher.push(Reply::text("pushed"));
        });
        let waited = script.pop_within(Duration::from_secs(5)).await;
        assert_eq!(waited, Some(Reply::text("pushed")));
        later.await.unwrap();
        let started = std::time::Instant::now();
        assert_eq!(script.pop_within(Duration::from_millis(30)).await, None);
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
