use super::*;
use ctxd_core::model::Agent;
use ctxd_engine::turn::hash;
use std::path::{Path, PathBuf};

fn shared_sessions() -> PathBuf {
    ctxd_test_support::shared().join("sessions")
}

/// Every session file under `dir` that ctxd-formats imports (the others are named on stderr).
fn imported(dir: &Path) -> Vec<(PathBuf, Session)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .extension()
                .is_some_and(|e| e == "jsonl" || e == "json" || e == "traj")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|path| match ctxd_formats::import_path(&path) {
            Ok(import) => Some((path, import.session)),
            Err(e) => {
                eprintln!("skipped {}: {e}", path.display());
                None
            }
        })
        .collect()
}

/// The messages of `session`'s branch as its client sends them over `api`: one per response on
/// the APIs answering with one.
fn branch_messages(api: Api, session: &Session) -> Vec<Message> {
    let branch: Vec<Message> = active_branch(session)
        .into_iter()
        .filter_map(|p| session.entries[p].kind.as_message().cloned())
        .collect();
    merged(api, &branch)
}

/// What the round trip through the wire may lose, by design of the renderer: Chat sends no
/// thinking back (providers refuse or ignore it), and a Chat tool result or Chat/Responses
/// output is its text blocks only, one a line.
fn carried(api: Api, m: &Message) -> Vec<ContentBlock> {
    let text_only = |content: &[ContentBlock]| -> Vec<ContentBlock> {
        let text = ctxd_formats::wire::openai_chat::text_of(content);
        vec![ContentBlock::text(text)]
    };
    m.content
        .iter()
        .filter(|b| !(api == Api::Chat && matches!(b, ContentBlock::Thinking { .. })))
        .map(|b| match b {
            ContentBlock::ToolResult {
                call_id,
                tool_name,
                content,
                is_error,
            } if api != Api::Anthropic => ContentBlock::ToolResult {
                call_id: call_id.clone(),
                tool_name: tool_name.clone(),
                content: text_only(content),
                is_error: *is_error,
            },
            other => other.clone(),
        })
        .collect()
}

const APIS: [Api; 4] = [Api::Anthropic, Api::Chat, Api::Responses, Api::Gemini];

/// The API a session's agent speaks (the one the equivalence test replays it over).
fn native_api(session: &Session) -> Api {
    match session.meta.agent {
        Some(Agent::Codex) => Api::Responses,
        // Gemini CLI's over Chat until the Gemini API is served.
        Some(Agent::SweAgent | Agent::MiniSweAgent | Agent::GeminiCli) => Api::Chat,
        _ => Api::Anthropic,
    }
}

/// Every message of every shared session, rendered for its agent's API and parsed back, has
/// its tokens: nothing the model reads is lost or added on the way through the wire (beyond
/// what the API cannot carry, [`carried`], which is printed).
#[test]
fn messages_parse_back_to_the_same_tokens() {
    let sessions = imported(&shared_sessions());
    assert!(sessions.len() >= 8, "{}", sessions.len());
    let mut lossy: Vec<String> = Vec::new();
    for (path, session) in &sessions {
        let counter = ctxd_tokens::for_session(session);
        let api = native_api(session);
        let mut unsendable = 0;
        for m in branch_messages(api, session) {
            let want = blocks_tokens(&counter, &carried(api, &m));
            unsendable += blocks_tokens(&counter, &m.content) - want;
            let got: u64 = render::elements(api, &m)
                .iter()
                .map(|e| blocks_tokens(&counter, &api.parse_element(e).content))
                .sum();
            if got != want {
                lossy.push(format!(
                    "{} {api:?}: {want} tokens sent as {got}: {:?}",
                    path.display(),
                    m.content
                        .iter()
                        .map(|b| format!("{b:?}").chars().take(120).collect::<String>())
                        .collect::<Vec<_>>()
                ));
            }
        }
        eprintln!(
            "{} over {api:?}: {unsendable} tokens the API does not carry",
            path.display()
        );
    }
    assert!(lossy.is_empty(), "{}", lossy.join("\n"));
}

/// Every request of every shared session, on every API (the long sessions on their own): the
/// gateway's parser accepts it, each reply is what the next request sends back after what this
/// one sent (or a part of it, when the branch lacks some calls' results), and
/// [`measure_body`] counts the last one's parts as the parser reads them.
#[test]
fn every_shared_session_replays_as_requests_the_gateway_reads() {
    let mut partial_echoes = Vec::new();
    for (path, session) in imported(&shared_sessions()) {
        let counter = ctxd_tokens::for_session(&session);
        let name = path.display();
        // Every API for the shorter sessions; the long ones (Pi's 450 requests of up to a
        // megabyte) over their own API, to keep the test quick.
        let long = std::fs::metadata(&path).unwrap().len() > 600_000;
        for api in APIS {
            if long && api != native_api(&session) {
                continue;
            }
            let turns = client_turns(api, &session, "claude-sonnet-4-5");
            // Every shared session has an assistant response, so at least one request.
            assert!(!turns.is_empty(), "{name} {api:?}: no request");
            let mut prev: Option<(ParsedRequest, &ClientTurn)> = None;
            for (n, turn) in turns.iter().enumerate() {
                let req = ParsedRequest::parse_after(api, &turn.body, None)
                    .unwrap_or_else(|e| panic!("{name} {api:?} request {n}: {e}"))
                    .at_path(&crate::replay::path(api, "claude-sonnet-4-5"));
                assert!(!req.elements.is_empty(), "{name} {api:?} request {n}");
                assert_eq!(req.model.as_deref(), Some("claude-sonnet-4-5"));
                assert!(!req.stream);
                // The previous request's conversation and its reply open this one, unless the
                // client compacted in between.
                if let Some((before, before_turn)) = &prev {
                    let kept = before.elements.len();
                    let same_start = req.elements.len() >= kept
                        && (0..kept).all(|i| {
                            req.element_bytes(&turn.body, i)
                                == before.element_bytes(&before_turn.body, i)
                        });
                    if same_start {
                        let echo: Vec<Message> = (kept..req.elements.len())
                            .map(|i| req.message(&turn.body, i))
                            .take_while(|m| m.role == Role::Assistant)
                            .take(before_turn.reply.len())
                            .collect();
                        let hashes =
                            |ms: &[Message]| ms.iter().map(hash::message).collect::<Vec<_>>();
                        if hashes(&echo) != hashes(&before_turn.reply) {
                            // The branch may lack some calls' results (Claude Code 2.x parents
                            // each parallel call's result on its own call's line, so the
                            // active branch holds the last one's only): the projection then
                            // leaves those calls out of the echo.
                            let blocks = |ms: &[Message]| {
                                ms.iter()
                                    .flat_map(|m| m.content.clone())
                                    .collect::<Vec<_>>()
                            };
                            assert!(
                                is_subsequence(&blocks(&echo), &blocks(&before_turn.reply)),
                                "{name} {api:?} request {n}: the reply is not echoed"
                            );
                            partial_echoes.push(format!("{name} {api:?} request {n}"));
                        }
                    }
                }
                prev = Some((req, turn));
            }
            // The last request, counted: the projection's items' tokens, element by element
            // (one response's messages as one on Anthropic and Chat).
            let (req, last) = prev.unwrap();
            let tokens = measure_body(api, &last.body, &counter).unwrap();
            assert_eq!(tokens.messages.len(), req.elements.len());
            let tools: u64 = req
                .tools(&last.body)
                .iter()
                .map(|t| tool_def_tokens(&counter, t))
                .sum();
            assert_eq!(tokens.tools, tools);
            let system = req.system(&last.body).map_or(0, |s| counter.count(&s));
            assert_eq!(tokens.system, system);
        }
    }
    eprintln!(
        "{} replies echoed without some of their calls (results off the active branch):\n{}",
        partial_echoes.len(),
        partial_echoes.join("\n")
    );
}

/// Whether `a` is `b` with some blocks left out.
fn is_subsequence(a: &[ContentBlock], b: &[ContentBlock]) -> bool {
    let mut rest = b.iter();
    a.iter().all(|x| rest.any(|y| y == x))
}

#[test]
fn tools_are_made_up_from_the_calls_when_none_were_recorded() {
    let mut s = Session::default();
    s.push_linear(EntryKind::Message(Message::text(Role::User, "go")));
    let call = |id: &str, name: &str, args: Value| ContentBlock::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args,
    };
    let mut a = Message::new(
        Role::Assistant,
        vec![
            call("c1", "shell", json!({"command": ["ls"]})),
            call("c2", "apply_patch", json!("*** Begin Patch")),
        ],
    );
    a.response_id = Some("r1".into());
    s.push_linear(EntryKind::Message(a));
    let results = Message::new(
        Role::Tool,
        ["c1", "c2"]
            .iter()
            .map(|id| ContentBlock::ToolResult {
                call_id: (*id).into(),
                tool_name: None,
                content: vec![ContentBlock::text("ok")],
                is_error: false,
            })
            .collect(),
    );
    s.push_linear(EntryKind::Message(results));
    s.push_linear(EntryKind::Message(Message::text(Role::Assistant, "done")));
    let turns = client_turns(Api::Responses, &s, "gpt-5");
    assert_eq!(turns.len(), 2);
    let v: Value = serde_json::from_slice(&turns[0].body).unwrap();
    assert_eq!(v["tools"][0]["type"], "custom");
    assert_eq!(v["tools"][0]["name"], "apply_patch");
    assert_eq!(v["tools"][1]["name"], "shell");
    assert_eq!(v["tools"][1]["parameters"], json!({"type": "object"}));
    assert_eq!(v["stream"], false);
    assert_eq!(v["input"].as_array().unwrap().len(), 1);
    // A Responses reply: one message per item.
    assert_eq!(turns[0].reply.len(), 2);
    assert!(turns[0]
        .reply
        .iter()
        .all(|m| m.response_id.as_deref() == Some("r1")));
    let second: Value = serde_json::from_slice(&turns[1].body).unwrap();
    assert_eq!(second["input"][1]["type"], "function_call");
    assert_eq!(second["input"][2]["type"], "custom_tool_call");
    assert_eq!(second["input"][3]["type"], "function_call_output");
    // Anthropic: one message per response, max_tokens, the fields in a client's order.
    let turns = client_turns(Api::Anthropic, &s, "claude-sonnet-4-5");
    assert_eq!(turns[0].reply.len(), 1);
    let text = String::from_utf8(turns[1].body.clone()).unwrap();
    assert!(text.starts_with(r#"{"model":"claude-sonnet-4-5","max_tokens":16384,"tools":["#));
    assert!(text.ends_with(r#"],"stream":false}"#));
    let tokens = measure_body(
        Api::Anthropic,
        &turns[1].body,
        &ctxd_core::tokens::CharEstimate,
    )
    .unwrap();
    assert_eq!(tokens.messages.len(), 3);
    assert_eq!(tokens.system, 0);
}

/// Claude Code writes one response as one line per block: one request, and one message in
/// the next request.
#[test]
fn a_split_response_is_one_request_and_one_message() {
    let mut s = Session::default();
    s.push_linear(EntryKind::SystemPrompt {
        text: "be brief".into(),
    });
    s.push_linear(EntryKind::Message(Message::text(Role::User, "hi")));
    for block in [
        ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: Some("sig".into()),
            redacted: false,
        },
        ContentBlock::text("hello"),
    ] {
        let mut m = Message::new(Role::Assistant, vec![block]);
        m.response_id = Some("msg_1".into());
        s.push_linear(EntryKind::Message(m));
    }
    s.push_linear(EntryKind::Message(Message::text(Role::User, "again")));
    s.push_linear(EntryKind::Message(Message::text(Role::Assistant, "ok")));
    for api in APIS {
        let turns = client_turns(api, &s, "m");
        assert_eq!(turns.len(), 2, "{api:?}");
        let req = ParsedRequest::parse(api, &turns[1].body).unwrap();
        let expected = match api {
            Api::Anthropic => 3, // user, the response, user
            Api::Chat => 4,      // system, user, the response, user
            Api::Responses => 4, // user, reasoning, message, user
            Api::Gemini => 3,    // user, the response, user
        };
        assert_eq!(req.elements.len(), expected, "{api:?}");
        let system = match api {
            Api::Chat => req.message(&turns[1].body, 0).content,
            _ => vec![ContentBlock::text(req.system(&turns[1].body).unwrap())],
        };
        assert_eq!(system, vec![ContentBlock::text("be brief")], "{api:?}");
    }
}
