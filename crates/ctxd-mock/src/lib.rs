//! ctxd-mock: a mock upstream model server for ctxd's tests and benchmarks.
//!
//! The gateway forwards to a provider; tests point it at this server instead. It speaks the
//! four wire APIs agents use (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses,
//! Google Gemini `generateContent`), streaming (each API's real SSE event sequence) and not,
//! and records every request exactly as received (raw body bytes, no decoding) so a test can
//! assert what reached "the provider".
//!
//! Gemini's routes: `POST /v1beta/models/MODEL:generateContent` (JSON),
//! `:streamGenerateContent?alt=sse` (SSE, events framed `data: {chunk}\r\n\r\n`, no
//! `[DONE]`), `:streamGenerateContent` without `alt=sse` (one JSON array sent element by
//! element, `[{chunk}\r\n,{chunk}\r\n]`), `:countTokens` (`{"totalTokens": N}`, of
//! `generateContentRequest` when given, else of the body), `GET /v1beta/models` and
//! `/v1beta/models/MODEL`; the same under `/v1/` (where `GET /v1/models` lists Google's models
//! for a request with `x-goog-api-key` or `?key=`). The model is the path's, split on the last
//! `:`. Credentials are recorded as sent, like any header and query: [`Recorded::header`]
//! (`x-goog-api-key`), [`Recorded::query`] (`key`). Replies: `candidates[0].content.parts`,
//! `finishReason: "STOP"`, `usageMetadata` (`promptTokenCount` counting cached tokens,
//! `candidatesTokenCount`, `totalTokenCount`, and `cachedContentTokenCount` /
//! `thoughtsTokenCount` when not zero, as Google leaves zeros out), `modelVersion`,
//! `responseId`; a stream's last chunk finishes and carries the whole usage. Errors, scripted
//! or not, in Google's shape: `{"error":{"code","message","status"}}` (`INVALID_ARGUMENT`,
//! `NOT_FOUND`, `RESOURCE_EXHAUSTED`, `INTERNAL`, `UNAVAILABLE`, ...).
//!
//! - [`MockServer`] binds 127.0.0.1 and serves on the current tokio runtime
//!   ([`MockServer::start`]) or on a thread of its own ([`MockServer::start_blocking`]).
//! - [`Config`] sets the final text, reasoning items, recording, a default [`Shape`].
//! - [`Reply`] / [`Script`]: queued replies that override the built-in turn logic: text, tool
//!   calls, HTTP errors, errors mid-stream, delays, truncated streams, padding. Out of
//!   process, `POST /_mock/script` queues more (a JSON array of `--reply` specs; `DELETE`
//!   forgets them), and a `wait` reply holds its request until the next one is queued, so a
//!   test can answer with what it reads in the recorded request (an id only the run knows).
//! - [`Recorded`]: one request as received.
//! - Chat Completions with `logprobs: true` list each token's log-probability and its
//!   `top_logprobs` alternatives, deterministically: a [`Part::Sampled`] reply (spec
//!   `logprobs:Yes=0.7,No=0.3`) sets the first token's; a judging request (logprobs asked, no
//!   tools, nothing scripted) gets a one-token Yes/No, or a letter when its last user message
//!   lists `A) …` options, steered by `mock:p=0.8` / `mock:pick=C` in that message (else from a
//!   hash of it).
//!
//! # Strict by default
//!
//! Like the real providers, the mock refuses malformed conversations, with each API's own
//! status (400) and error body, before a scripted reply is taken (a refusal consumes none;
//! scripted errors come after the check). Every refusal is recorded like any request, names
//! its rule in the [`REFUSED_HEADER`] response header (`x-mock-refused`) and in
//! [`Recorded::refused`] (`"refused"` in `/_mock/requests`). The rules, with the real APIs'
//! messages:
//!
//! - Anthropic Messages (`invalid_request_error`): `messages` present and non-empty; roles
//!   `user`/`assistant` (`system` entries only with the `mid-conversation-system` beta); the
//!   first turn the user's; consecutive same-role messages form one turn; no empty content
//!   (but a final assistant message) and no empty text block; each `tool_use` answered by a
//!   `tool_result` at the start of the next (user) turn, each `tool_result` answering a
//!   `tool_use` of the turn before; with `thinking.type: enabled`, an ongoing tool loop's
//!   assistant turn starts with a `thinking`/`redacted_thinking` block (not with `adaptive`,
//!   where the model may skip thinking, nor when [`Config::reasoning`] is `Off`: a mock that
//!   gives no thinking blocks cannot demand them back); a thinking block with a mock-issued signature must
//!   carry the text it was signed for. The mock's signatures encode a hash of the text
//!   (`Reasoning::WhenAsked`/`Always` replies carry them, JSON and `signature_delta`);
//!   signatures it did not issue (captured from the real provider) are accepted unchecked.
//!   At most 4 `cache_control` blocks (tools, system, messages, nested ones, a top-level
//!   one): `A maximum of 4 blocks with cache_control may be provided. Found N.`
//! - OpenAI Chat (`invalid_request_error`, `param` `messages.[N].role`): `messages` present
//!   and non-empty; an assistant message with `tool_calls` followed by a `tool` message per
//!   call id before any other user/assistant message; a `tool` message answering a call of
//!   the assistant message before it; system/developer messages anywhere; `top_logprobs` only
//!   with `logprobs: true`, and from 0 to 20 (`param` `top_logprobs`).
//! - OpenAI Responses (`param: "input"`): every `function_call`/`custom_tool_call` in an
//!   `input` array has its output item, every output item answers an earlier call; not
//!   checked with `previous_response_id` (the mock keeps no server state).
//! - Gemini (`400 INVALID_ARGUMENT`, Google's error body; rules `gemini.*`, listed in
//!   `validate/gemini.rs`): function declarations named validly and uniquely; `contents`
//!   present and non-empty; roles `user`/`model` (a `function` role is refused: function
//!   responses go in a `user` turn); no empty `parts`; one data field per part; the mock's own
//!   rules: the first content the user's, roles alternating strictly, the last the user's;
//!   every `functionCall` answered in the next content by a `functionResponse` of its name
//!   (and id), one each, any order, and no other response; a mock-issued `thoughtSignature`
//!   on the part it was issued for (`Corrupted thought signature.`); in the current tool loop,
//!   a call the mock signed sent back without its signature is refused, as Gemini 3 does. The
//!   mock signs the first `functionCall` part of a reply (bound to its name and arguments) and
//!   every thought part (bound to its text), JSON and streamed.
//! - Context window, all four APIs: the request's token estimate (a quarter of its decoded
//!   bytes, the `input_tokens` replies report) against the model's window, from
//!   [`Config::windows`] (model-name prefix, longest wins), else a built-in table (claude 200k,
//!   1M for `[1m]`/`-1m` names or the `context-1m` beta; gpt-5/codex 400k; gpt-4.1 1,047,576;
//!   gpt-4o/gpt-4-turbo 128k; gpt-4 8,192; gpt-3.5 16,385; o1/o3/o4 200k; gemini 1,048,576),
//!   else [`Config::default_window`]; over it, each API's overflow error
//!   (`prompt is too long: N tokens > M maximum`; `context_length_exceeded`; `The input token
//!   count (N) exceeds the maximum number of tokens allowed (M).`).
//!
//! An Anthropic request that marks breakpoints goes through a simulated prompt cache
//! (`cache.rs`: entries at breakpoints, reads within 20 blocks before one, 5-minute TTL,
//! [`Config::cache_min_tokens`]); its usage reports `cache_read_input_tokens` and
//! `cache_creation_input_tokens`, and `input_tokens` the rest, JSON and SSE. Gemini caches
//! implicitly: every request reads the longest prefix an earlier one ended a content at
//! (same model, within the TTL, at least [`Config::cache_min_tokens`]) and reports it as
//! `cachedContentTokenCount`.
//!
//! Messages whose shape the rules cannot read (a field of an unexpected type) are left alone:
//! the rules judge conversation structure, not the schema. [`Config::strict`] `= false` (the
//! binary's `--lax`) restores the old behaviour, any shape getting a reply; tests opting into
//! it should say why.
//!
//! Built-in turn logic (the same as `shared/clients/mock_llm.py`): when tools are offered and the
//! last non-system message is user text, call the shell-like tool (`Bash`, `bash`, `shell`,
//! `exec_command`, ...) with `ls`, arguments shaped after its schema; when a tool result follows
//! the last user text, answer with the final text (`"done"`).
//!
//! ```
//! use ctxd_mock::{Config, MockServer, Reply};
//!
//! let mock = MockServer::start_blocking(Config::default()).unwrap();
//! mock.script().push(Reply::text("hello"));
//! // point the client or the gateway at mock.base_url(), send requests, then:
//! assert!(mock.requests().is_empty());
//! mock.stop();
//! ```

mod body;
mod cache;
mod config;
mod error;
mod handlers;
mod ids;
mod record;
mod reply;
mod request;
mod router;
mod script;
mod server;
mod signature;
mod sse;
mod turn;
mod validate;

pub use body::DecodeError;
pub use config::{Config, Reasoning, Recording};
pub use error::MockError;
pub use record::{Recorded, ReplyUsage};
pub use script::{Action, Part, Reply, ReplySpecError, Script, Shape, Truncate};
pub use server::MockServer;
pub use validate::REFUSED_HEADER;

/// The wire API a request speaks (chosen by its route).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Anthropic,
    OpenAiChat,
    OpenAiResponses,
    /// Google Gemini `generateContent` / `streamGenerateContent` (`/v1beta/models/...`).
    Gemini,
}
