//! What a reply says ([`Plan`]) and its bytes in each API's wire format ([`Rendered`]).
//!
//! A plan is built once per request (ids included), then rendered; padding re-renders it with a
//! longer text until the body has the requested size.

mod anthropic;
mod chat;
mod errors;
pub(crate) mod gemini;
mod logprobs;
mod pad;
mod responses;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::Value;

use crate::ids::{unix_now, Ids};
use crate::request::Head;
use crate::script::Part;
use crate::turn::{self, Call, ToolKind, Turn};
use crate::Api;

pub(crate) use errors::{error_body, refusal_body};
pub(crate) use pad::pad_to;

/// Text deltas are cut at this many bytes (a 1 MB text streams as 64 deltas).
const DELTA_BYTES: usize = 16 * 1024;

/// A reply's content with every id fixed, ready to render in one API's format.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub api: Api,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub reasoning: Option<Reasoned>,
    pub pieces: Vec<Piece>,
    /// Input tokens outside the cache (Anthropic's `input_tokens`).
    pub input_tokens: u64,
    /// Anthropic: what the simulated cache read and wrote ([`crate::cache`]).
    pub cache: crate::cache::Usage,
    /// Chat: a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// Usage reported at all ([`crate::Config::usage`]).
    pub usage: bool,
    /// Responses: echoed request fields.
    pub tool_choice: Value,
    pub previous_response_id: Value,
    /// Chat with `logprobs: true`: each token of the text, and how many alternatives to list.
    pub logprobs: Option<Vec<logprobs::TokenLogprob>>,
    pub top_logprobs: usize,
    /// Gemini streams: SSE (`alt=sse`) rather than a JSON array.
    pub gemini_sse: bool,
}

/// The thinking block (Anthropic), reasoning item (Responses) or thought part (Gemini).
#[derive(Clone, Debug)]
pub(crate) struct Reasoned {
    pub id: String,
    pub text: String,
    /// Anthropic `signature`, Responses `encrypted_content`.
    pub opaque: String,
}

#[derive(Clone, Debug)]
pub(crate) enum Piece {
    Text {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        call: Call,
    },
    /// A scripted thinking block / reasoning item ([`Part::Thinking`]).
    Thinking {
        id: String,
        text: String,
        signature: Option<String>,
        redacted: bool,
    },
}

/// A rendered reply body.
#[derive(Clone, Debug)]
pub(crate) enum Rendered {
    Json(Vec<u8>),
    /// One frame per SSE event.
    Sse(Vec<Bytes>),
    /// A JSON body sent chunked, piece by piece (Gemini's stream without `alt=sse`).
    JsonStream(Vec<Bytes>),
}

impl Rendered {
    pub(crate) fn len(&self) -> usize {
        match self {
            Rendered::Json(b) => b.len(),
            Rendered::Sse(frames) | Rendered::JsonStream(frames) => {
                frames.iter().map(Bytes::len).sum()
            }
        }
    }
}

/// What to say: scripted parts, or the turn logic's choice when `parts` is `None`.
pub(crate) struct PlanInput<'h, 'a> {
    pub api: Api,
    pub head: &'h Head<'a>,
    pub parts: Option<Vec<Part>>,
    pub final_text: &'h str,
    pub reasoning: bool,
    pub body_len: usize,
}

pub(crate) fn plan(input: PlanInput, ids: &Ids) -> Plan {
    let PlanInput {
        api,
        head,
        parts,
        final_text,
        reasoning,
        body_len,
    } = input;
    let logprobs_asked = api == Api::OpenAiChat && head.wants_logprobs();
    // The first token's alternatives, when a reply says them (or a judging request's).
    let mut first: Option<Vec<(String, f64)>> = None;
    let parts = match parts {
        Some(parts) => {
            let tools = head.tools_for(api);
            parts
                .into_iter()
                .map(|p| match p {
                    Part::Text(t) => Planned::Text(t),
                    Part::ToolCall { name, args } => {
                        let kind = turn::kind_of(&tools, &name);
                        Planned::Call(Call { name, args, kind }, None)
                    }
                    Part::ToolCallWithId { id, name, args } => {
                        let kind = turn::kind_of(&tools, &name);
                        Planned::Call(Call { name, args, kind }, Some(id))
                    }
                    Part::Thinking {
                        text,
                        signature,
                        redacted,
                    } => Planned::Thinking {
                        text,
                        signature,
                        redacted,
                    },
                    Part::Sampled(alternatives) => {
                        let text = logprobs::sampled(&alternatives);
                        if first.is_none() {
                            first = Some(alternatives);
                        }
                        Planned::Text(text)
                    }
                })
                .collect()
        }
        None if logprobs_asked && head.tools().is_empty() => {
            let alternatives = logprobs::judge(&head.last_user_text());
            let text = logprobs::sampled(&alternatives);
            first = Some(alternatives);
            vec![Planned::Text(text)]
        }
        None => match turn::decide(api, head) {
            Turn::Final => vec![Planned::Text(final_text.to_owned())],
            Turn::Tool(call) => vec![Planned::Call(call, None)],
        },
    };
    let (id_prefix, text_prefix) = match api {
        Api::Anthropic => ("msg_", ""),
        Api::OpenAiChat => ("chatcmpl-", ""),
        Api::OpenAiResponses => ("resp_", "msg_"),
        Api::Gemini => ("", ""),
    };
    let pieces = parts
        .into_iter()
        .map(|p| match p {
            Planned::Text(text) => Piece::Text {
                id: ids.next(text_prefix),
                text,
            },
            Planned::Call(call, given) => {
                let (id_prefix, call_prefix) = match (api, call.kind) {
                    (Api::Anthropic, _) => ("toolu_", ""),
                    (Api::OpenAiChat, _) => ("call_", ""),
                    (Api::OpenAiResponses, ToolKind::LocalShell) => ("lsh_", "call_"),
                    (Api::OpenAiResponses, ToolKind::Custom) => ("ctc_", "call_"),
                    (Api::OpenAiResponses, _) => ("fc_", "call_"),
                    (Api::Gemini, _) => ("", ""),
                };
                // The id the client sends back: Anthropic's and Chat's `id`, Responses'
                // `call_id` (its item `id` stays the mock's).
                let (id, call_id) = match (api, given) {
                    // Gemini: an `id` only when the script gives one (the real API omits it).
                    (Api::Gemini, given) => (given.unwrap_or_default(), String::new()),
                    (Api::OpenAiResponses, Some(given)) => (ids.next(id_prefix), given),
                    (_, Some(given)) => (given, ids.next(call_prefix)),
                    (_, None) => (ids.next(id_prefix), ids.next(call_prefix)),
                };
                Piece::Call { id, call_id, call }
            }
            Planned::Thinking {
                text,
                signature,
                redacted,
            } => Piece::Thinking {
                id: ids.next("rs_"),
                text,
                signature,
                redacted,
            },
        })
        .collect::<Vec<Piece>>();
    let logprobs = logprobs_asked.then(|| {
        let text: String = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Text { text, .. } => Some(text.as_str()),
                Piece::Call { .. } | Piece::Thinking { .. } => None,
            })
            .collect();
        logprobs::for_text(&text, first.as_deref())
    });
    let reasoning = reasoning.then(|| reasoned(api, ids));
    Plan {
        api,
        id: ids.next(id_prefix),
        created: unix_now(),
        model: head.model().to_owned(),
        reasoning,
        pieces,
        input_tokens: crate::validate::estimate_tokens(body_len),
        cache: crate::cache::Usage::default(),
        include_usage: head.include_usage(),
        usage: true,
        tool_choice: head
            .tool_choice
            .and_then(|r| serde_json::from_str(r.get()).ok())
            .unwrap_or_else(|| Value::String("auto".into())),
        previous_response_id: head
            .previous_response_id
            .and_then(|r| serde_json::from_str(r.get()).ok())
            .unwrap_or(Value::Null),
        logprobs,
        top_logprobs: head
            .top_logprobs()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0),
        gemini_sse: false,
    }
}

enum Planned {
    Text(String),
    /// A call, with the id a script gave it.
    Call(Call, Option<String>),
    Thinking {
        text: String,
        signature: Option<String>,
        redacted: bool,
    },
}

fn reasoned(api: Api, ids: &Ids) -> Reasoned {
    let id = ids.next("rs_");
    let b64 = base64::engine::general_purpose::STANDARD;
    let text = "The user asked for something; I will answer it.";
    let opaque = match api {
        Api::OpenAiResponses => format!(
            "gAAAAAB{}",
            b64.encode(format!("ctxd-mock encrypted reasoning {id}"))
        ),
        // Verifiable: strict mode refuses it sent back with another text.
        _ => crate::signature::sign(&id, text),
    };
    Reasoned {
        id,
        text: text.into(),
        opaque,
    }
}

impl Plan {
    /// Output tokens: a quarter of the text and argument bytes, plus the reasoning.
    pub(crate) fn output_tokens(&self) -> u64 {
        let bytes: usize = self
            .pieces
            .iter()
            .map(|p| match p {
                Piece::Text { text, .. } => text.len(),
                Piece::Call { call, .. } => call.args.to_string().len() + call.name.len(),
                Piece::Thinking { text, .. } => text.len(),
            })
            .sum();
        (bytes / 4).max(1) as u64 + self.reasoning_tokens()
    }

    pub(crate) fn reasoning_tokens(&self) -> u64 {
        self.reasoning
            .as_ref()
            .map_or(0, |r| (r.text.len() / 4) as u64)
    }

    pub(crate) fn has_calls(&self) -> bool {
        self.pieces.iter().any(|p| matches!(p, Piece::Call { .. }))
    }

    /// The reply in this plan's API: JSON, or SSE events when streaming.
    pub(crate) fn render(&self, stream: bool) -> Rendered {
        match (self.api, stream) {
            (Api::Anthropic, false) => Rendered::Json(anthropic::json(self)),
            (Api::Anthropic, true) => Rendered::Sse(anthropic::events(self)),
            (Api::OpenAiChat, false) => Rendered::Json(chat::json(self)),
            (Api::OpenAiChat, true) => Rendered::Sse(chat::events(self)),
            (Api::OpenAiResponses, false) => Rendered::Json(responses::json(self)),
            (Api::OpenAiResponses, true) => Rendered::Sse(responses::events(self)),
            (Api::Gemini, false) => Rendered::Json(gemini::json(self)),
            (Api::Gemini, true) if self.gemini_sse => Rendered::Sse(gemini::events(self)),
            (Api::Gemini, true) => Rendered::JsonStream(gemini::json_stream(self)),
        }
    }

    /// A stream that starts like this plan's, then reports an error.
    pub(crate) fn render_failure(&self, message: &str) -> Rendered {
        match self.api {
            Api::Anthropic => Rendered::Sse(anthropic::failure(self, message)),
            Api::OpenAiChat => Rendered::Sse(chat::failure(self, message)),
            Api::OpenAiResponses => Rendered::Sse(responses::failure(self, message)),
            Api::Gemini if self.gemini_sse => Rendered::Sse(gemini::failure(self, message, true)),
            Api::Gemini => Rendered::JsonStream(gemini::failure(self, message, false)),
        }
    }
}

/// One SSE event: `event:` line (when named) and one `data:` line.
pub(crate) fn sse(name: Option<&str>, data: &Value) -> Bytes {
    let json = data.to_string();
    let mut out = Vec::with_capacity(json.len() + 32);
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Text cut into deltas of at most [`DELTA_BYTES`], on char boundaries; one empty delta for an
/// empty text.
pub(crate) fn deltas(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > DELTA_BYTES {
        let mut cut = DELTA_BYTES;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out.push(rest);
    out
}

/// A string split in two on a char boundary (tool arguments stream in two deltas).
pub(crate) fn halves(s: &str) -> [&str; 2] {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid -= 1;
    }
    let (a, b) = s.split_at(mid);
    [a, b]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_cut_on_char_boundaries() {
        assert_eq!(deltas(""), vec![""]);
        let text = "é".repeat(DELTA_BYTES); // 2 bytes each
        let parts = deltas(&text);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| p.len() <= DELTA_BYTES));
        assert_eq!(halves("aé"), ["a", "é"]);
        assert_eq!(halves(""), ["", ""]);
    }
}
