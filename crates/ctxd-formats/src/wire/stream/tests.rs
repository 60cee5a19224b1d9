//! Shared test helpers (`check`, `assemble`, `sse`) and the properties every API must keep:
//! the same result at any chunk split, each element's message equal to the request parser's
//! reading of its wire JSON and of the client's echo of it. `testdata/` holds responses recorded
//! from the clients' mock (`shared/clients/mock_llm.py`), byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;

use expect_test::{expect, Expect};
use serde_json::{json, Value};

use ctxd_core::model::{ContentBlock, Message};

use super::{assemble_json, Api, Assembled, Assembler, SseParser, StreamError};
use crate::wire::{anthropic, openai_chat, openai_responses};

/// An SSE stream of named events, as the Anthropic and Responses APIs write them.
pub(super) fn sse(events: &[(&str, Value)]) -> String {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

/// Assembles a stream fed in the given chunks.
fn assemble_chunks(api: Api, chunks: &[&[u8]]) -> Result<Assembled, StreamError> {
    let mut parser = SseParser::new();
    let mut asm = Assembler::new(api);
    for chunk in chunks {
        for ev in parser.feed(chunk) {
            asm.push(&ev);
        }
    }
    if let Some(ev) = parser.finish() {
        asm.push(&ev);
    }
    asm.finish()
}

pub(super) fn assemble(api: Api, stream: &str) -> Result<Assembled, StreamError> {
    assemble_chunks(api, &[stream.as_bytes()])
}

fn request_parser(api: Api) -> fn(&Value) -> Message {
    match api {
        Api::Anthropic => anthropic::message,
        Api::OpenAiChat => openai_chat::message,
        Api::OpenAiResponses => openai_responses::item,
        Api::Gemini => crate::wire::gemini::content,
    }
}

/// The invariants of every assembled response: each message is the request parser's reading
/// of its wire bytes, carries the response's model and id, and the last one its usage.
fn assert_consistent(api: Api, a: &Assembled) {
    for (i, el) in a.elements.iter().enumerate() {
        let parsed = request_parser(api)(&serde_json::from_slice(&el.wire).unwrap());
        assert_eq!(
            (&el.message.role, &el.message.content),
            (&parsed.role, &parsed.content),
            "element {i}"
        );
        assert_eq!(el.message.model, a.model);
        assert_eq!(el.message.response_id, a.response_id);
        let last = i + 1 == a.elements.len();
        assert_eq!(el.message.usage, if last { a.usage } else { None });
        let stop = if last { a.stop_reason.as_ref() } else { None };
        assert_eq!(el.message.stop_reason.as_ref(), stop);
    }
}

/// Assembles `stream` and compares a readable rendering with `expected`.
pub(super) fn check(api: Api, stream: &str, expected: Expect) {
    let a = assemble(api, stream).unwrap();
    assert_consistent(api, &a);
    expected.assert_eq(&render(&a));
}

/// Assembles a whole JSON body, checking the same invariants.
pub(super) fn check_json(api: Api, body: &Value) -> Assembled {
    let a = assemble_json(api, body.to_string().as_bytes()).unwrap();
    assert_consistent(api, &a);
    a
}

fn render(a: &Assembled) -> String {
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| "none".into());
    let usage = a.usage.map_or_else(
        || "none".into(),
        |u| {
            format!(
                "in {} out {} cache_read {} cache_write {}",
                u.input, u.output, u.cache_read, u.cache_write
            )
        },
    );
    let mut out = format!(
        "model={} id={} stop={} usage={usage}\n",
        opt(&a.model),
        opt(&a.response_id),
        opt(&a.stop_reason)
    );
    for el in &a.elements {
        let blocks: Vec<String> = el.message.content.iter().map(block).collect();
        let _ = writeln!(
            out,
            "{}: {}\n  {}",
            el.message.role.as_str(),
            blocks.join(" | "),
            String::from_utf8_lossy(&el.wire)
        );
    }
    out
}

fn block(b: &ContentBlock) -> String {
    match b {
        ContentBlock::Text { text } => format!("text({text})"),
        ContentBlock::Thinking {
            thinking,
            signature,
            redacted,
        } => {
            let parts: Vec<String> = [
                (!thinking.is_empty()).then(|| thinking.clone()),
                signature.as_ref().map(|s| format!("sig {s}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            let kind = if *redacted { "redacted" } else { "thinking" };
            format!("{kind}({})", parts.join(", "))
        }
        ContentBlock::ToolCall {
            id,
            name,
            arguments,
        } => format!("call {id} {name} {arguments}"),
        ContentBlock::ToolResult { call_id, .. } => format!("result {call_id}"),
        ContentBlock::Image(_) => "image".into(),
    }
}

/// Whatever the chunk boundaries (one split at every byte, byte by byte, uneven runs), the
/// result is the same; `\r\n` line ends and multi-byte characters included.
fn assert_split_invariant(api: Api, stream: &str) {
    let whole = assemble(api, stream).unwrap();
    let bytes = stream.as_bytes();
    for i in 0..=bytes.len() {
        let split = assemble_chunks(api, &[&bytes[..i], &bytes[i..]]);
        assert_eq!(split.as_ref(), Ok(&whole), "{api:?} split at byte {i}");
    }
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(assemble_chunks(api, &singles).as_ref(), Ok(&whole));
    for run in [2, 3, 7, 64] {
        let runs: Vec<&[u8]> = bytes.chunks(run).collect();
        assert_eq!(
            assemble_chunks(api, &runs).as_ref(),
            Ok(&whole),
            "runs of {run}"
        );
    }
}

#[test]
fn same_result_at_every_chunk_boundary() {
    let anthropic = super::anthropic::tests::thinking_text_tool().replace('\n', "\r\n");
    assert_split_invariant(Api::Anthropic, &anthropic);
    assert_split_invariant(Api::OpenAiChat, &super::chat::tests::parallel_calls());
    assert_split_invariant(Api::OpenAiResponses, &super::responses::tests::five_items());
}

#[test]
fn mock_streams_as_recorded() {
    check(
        Api::Anthropic,
        include_str!("testdata/anthropic_tool.sse"),
        expect![[r#"
            model=claude-sonnet-4-5 id=msg_0dc3ad9d06d94ab8ad1d624f stop=tool_use usage=in 70 out 5 cache_read 0 cache_write 0
            assistant: call toolu_ea9c0760282b4c1893bfb8b4 Bash {"command":"ls","description":"List files in the current directory"}
              {"role":"assistant","content":[{"id":"toolu_ea9c0760282b4c1893bfb8b4","input":{"command":"ls","description":"List files in the current directory"},"name":"Bash","type":"tool_use"}]}
        "#]],
    );
    check(
        Api::Anthropic,
        include_str!("testdata/anthropic_text.sse"),
        expect![[r#"
            model=claude-sonnet-4-5 id=msg_c3be03a42dcf429aa701cb07 stop=end_turn usage=in 23 out 5 cache_read 0 cache_write 0
            assistant: text(done)
              {"role":"assistant","content":[{"text":"done","type":"text"}]}
        "#]],
    );
    check(
        Api::OpenAiChat,
        include_str!("testdata/chat_tool.sse"),
        expect![[r#"
            model=gpt-4o-mini id=chatcmpl-f32d975e3e9a4d7e8f901aa1 stop=tool_calls usage=in 72 out 5 cache_read 0 cache_write 0
            assistant: call call_323e9dbeac5e46eb91cd5669 bash {"command":"ls"}
              {"role":"assistant","content":null,"tool_calls":[{"id":"call_323e9dbeac5e46eb91cd5669","type":"function","function":{"name":"bash","arguments":"{\"command\": \"ls\"}"}}]}
        "#]],
    );
    check(
        Api::OpenAiChat,
        include_str!("testdata/chat_text.sse"),
        expect![[r#"
            model=gpt-4o-mini id=chatcmpl-43a940411a52412d9c365332 stop=stop usage=none
            assistant: text(done)
              {"role":"assistant","content":"done"}
        "#]],
    );
    check(
        Api::OpenAiResponses,
        include_str!("testdata/responses_tool.sse"),
        expect![[r#"
            model=gpt-5.5 id=resp_0ff06840f59e42d3b62d4e64 stop=completed usage=in 70 out 5 cache_read 0 cache_write 0
            assistant: call call_e314b414f44e47d79d816a4b exec_command {"cmd":"ls"}
              {"arguments":"{\"cmd\": \"ls\"}","call_id":"call_e314b414f44e47d79d816a4b","id":"fc_37581c92f40a479daa7349a3","name":"exec_command","status":"completed","type":"function_call"}
        "#]],
    );
    check(
        Api::OpenAiResponses,
        include_str!("testdata/responses_text.sse"),
        expect![[r#"
            model=gpt-5.5 id=resp_d358f21505b04e6a9d1c43a2 stop=completed usage=in 12 out 5 cache_read 0 cache_write 0
            assistant: text(done)
              {"content":[{"annotations":[],"text":"done","type":"output_text"}],"id":"msg_5584e3b192eb4d028acd2f0c","role":"assistant","status":"completed","type":"message"}
        "#]],
    );
}

#[test]
fn mock_json_bodies() {
    for (api, body) in [
        (
            Api::Anthropic,
            &include_bytes!("testdata/anthropic_tool.json")[..],
        ),
        (Api::OpenAiChat, include_bytes!("testdata/chat_tool.json")),
        (
            Api::OpenAiResponses,
            include_bytes!("testdata/responses_tool.json"),
        ),
    ] {
        let a = assemble_json(api, body).unwrap();
        assert_consistent(api, &a);
        assert!(a.stop_reason.is_some());
        assert_eq!(a.elements.len(), 1, "{api:?}");
        let m = &a.elements[0].message;
        assert!(
            matches!(&m.content[..], [ContentBlock::ToolCall { arguments, .. }]
                if arguments.get("command").or(arguments.get("cmd")) == Some(&json!("ls"))),
            "{api:?}: {m:?}"
        );
        assert!(a.usage.is_some_and(|u| u.output == 5));
    }
}

/// What the real clients sent back after these very responses (shapes from
/// `shared/clients/captured/`: Claude Code, Pi on Chat, Codex) parses to the same message.
#[test]
fn clients_echo_parses_to_the_assembled_message() {
    let cases = [
        (
            Api::Anthropic,
            include_str!("testdata/anthropic_tool.sse"),
            json!({"role": "assistant", "content": [{"type": "tool_use",
                "id": "toolu_ea9c0760282b4c1893bfb8b4", "name": "Bash",
                "input": {"command": "ls", "description": "List files in the current directory"}}]}),
        ),
        (
            Api::OpenAiChat,
            include_str!("testdata/chat_tool.sse"),
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_323e9dbeac5e46eb91cd5669", "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]}),
        ),
        (
            Api::OpenAiResponses,
            include_str!("testdata/responses_tool.sse"),
            json!({"type": "function_call", "status": "completed", "id": "fc_37581c92f40a479daa7349a3",
                "name": "exec_command", "arguments": "{\"cmd\": \"ls\"}",
                "call_id": "call_e314b414f44e47d79d816a4b"}),
        ),
    ];
    for (api, stream, echo) in cases {
        let a = assemble(api, stream).unwrap();
        let echoed = request_parser(api)(&echo);
        let m = &a.elements[0].message;
        assert_eq!(
            (&m.role, &m.content),
            (&echoed.role, &echoed.content),
            "{api:?}"
        );
    }
}

#[test]
fn unknown_events_and_junk_after_the_end_are_ignored() {
    let mut stream = String::from(": hello\n\nevent: mystery\ndata: not json at all\n\n");
    stream.push_str(include_str!("testdata/anthropic_text.sse"));
    stream.push_str("event: error\ndata: {\"type\":\"error\",\"error\":{}}\n\n");
    let plain = assemble(Api::Anthropic, include_str!("testdata/anthropic_text.sse"));
    assert!(plain.is_ok());
    assert_eq!(assemble(Api::Anthropic, &stream), plain);
    // Data that is not JSON in an event the API defines is a broken stream.
    let broken = stream.replace(
        "event: mystery\ndata: not json at all",
        "event: content_block_delta\ndata: {\"index\": 0,",
    );
    assert!(matches!(
        assemble(Api::Anthropic, &broken),
        Err(StreamError::Malformed(m)) if m.starts_with("content_block_delta event")
    ));
}

#[test]
fn an_empty_stream_is_truncated() {
    for api in [Api::Anthropic, Api::OpenAiChat, Api::OpenAiResponses] {
        assert_eq!(assemble(api, ""), Err(StreamError::Truncated));
        assert!(matches!(
            assemble_json(api, b"{\"partial\":"),
            Err(StreamError::Malformed(_))
        ));
    }
}

/// Throughput of SSE splitting plus assembly on a long text answer, fed in 4 KB chunks as a
/// socket delivers them. Run with
/// `cargo test --release -p ctxd-formats --lib throughput -- --ignored --nocapture`.
#[test]
#[ignore = "measurement; prints medians"]
fn throughput() {
    let piece = "Lorem ipsum dolor sit amet, consectetur adipiscing elit \u{e9}t. ";
    let mut anthropic = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "m", "model": "m",
            "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    let delta = json!({"type": "content_block_delta", "index": 0,
        "delta": {"type": "text_delta", "text": piece}});
    anthropic.extend(std::iter::repeat_n(("content_block_delta", delta), 20_000));
    anthropic.push(("message_stop", json!({"type": "message_stop"})));
    let chunk =
        json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": piece}}]});
    let chat = format!("data: {chunk}\n\n").repeat(20_000) + "data: [DONE]\n\n";
    for (api, stream) in [(Api::Anthropic, sse(&anthropic)), (Api::OpenAiChat, chat)] {
        let chunks: Vec<&[u8]> = stream.as_bytes().chunks(4096).collect();
        let mut times: Vec<f64> = (0..11)
            .map(|_| {
                let start = std::time::Instant::now();
                let a = assemble_chunks(api, &chunks).unwrap();
                assert_eq!(a.elements.len(), 1);
                start.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "{api:?}: {:.1} MB of SSE, 20,000 deltas: median {:.1} ms, {:.0} MB/s, {:.2} us/event",
            stream.len() as f64 / 1e6,
            median * 1e3,
            stream.len() as f64 / 1e6 / median,
            median * 1e6 / 20_000.0
        );
    }
}
