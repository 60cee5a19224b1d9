//! ctxd's own tools through the gateway, against the strict mock: the model is offered them
//! beside the client's, its calls are answered by ctxd in hidden rounds, and the client never
//! sees one. A scripted session on each API, JSON and SSE: a note written while the client's
//! tool call goes to the client, a reset the model asks for, the note read back in the new
//! window, a history search and a `recall` of the stored raw output. Every upstream request is
//! accepted; nothing from before the reset goes upstream after it.

use ctxd_core::model::{ContentBlock, EntryKind};
use ctxd_formats::wire::stream::Assembled;
use ctxd_gateway::config::ToolsSetting;
use ctxd_mock::{Config, Part, Reasoning, Reply};
use serde_json::{json, Value};

use crate::loops::{read_response, shell_output, Api};
use crate::support::Rig;

const CTXD_TOOLS: [&str; 5] = [
    "notes_write",
    "new_context",
    "notes_read",
    "history_search_contents",
    "recall",
];

pub(crate) fn user_text(api: Api, text: &str) -> Value {
    match api {
        Api::Responses => json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]}),
        _ => json!({"role": "user", "content": text}),
    }
}

/// One client turn: the response as the client reads it (its elements' wire JSON).
pub(crate) async fn turn(
    rig: &Rig,
    api: Api,
    conversation: &[Value],
    stream: bool,
    thinking: bool,
) -> (Assembled, Vec<Value>) {
    let body = serde_json::to_vec(&api.body(conversation, stream, thinking)).unwrap();
    let resp = rig.post(api.path(), &api.headers(), body).await;
    let status = resp.status();
    let text = resp.bytes().await.unwrap();
    assert!(
        status.is_success(),
        "{api:?} stream={stream}: {status} {}",
        String::from_utf8_lossy(&text[..text.len().min(800)])
    );
    let assembled = read_response(api, stream, &text);
    let elements = assembled
        .elements
        .iter()
        .map(|e| serde_json::from_slice(&e.wire).unwrap())
        .collect();
    (assembled, elements)
}

/// The client never sees a call of ctxd's tools.
pub(crate) fn no_ctxd_calls(api: Api, assembled: &Assembled) {
    for el in &assembled.elements {
        for b in &el.message.content {
            if let ContentBlock::ToolCall { name, .. } = b {
                assert!(
                    !CTXD_TOOLS.contains(&name.as_str()),
                    "{api:?}: the client saw ctxd's {name}"
                );
            }
        }
    }
}

pub(crate) fn text_of(assembled: &Assembled) -> String {
    assembled
        .elements
        .iter()
        .map(|e| ctxd_core::text::message_text(&e.message))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn session(api: Api, stream: bool, thinking: bool) {
    let config = Config {
        reasoning: if thinking {
            Reasoning::Always
        } else {
            Reasoning::Off
        },
        ..Config::default()
    };
    let mut rig = Rig::with(config, |s| s.management.tools = ToolsSetting::All).await;
    let script = rig.mock.script();

    // Turn 1: a note in a hidden round, then the client's own tool call.
    script.push(Reply::parts(vec![
        Part::Text("I will note the plan first.".into()),
        Part::ToolCall {
            name: "notes_write".into(),
            args: json!({"path": "plan.md", "text": "PLAN: fix the tokenizer; NOTE-MARK-7"}),
        },
    ]));
    script.push(Reply::tool_call("bash", json!({"command": "cargo test"})));
    let mut conversation = api.first_messages();
    let (a1, els) = turn(&rig, api, &conversation, stream, thinking).await;
    no_ctxd_calls(api, &a1);
    assert!(
        text_of(&a1).contains("I will note the plan first."),
        "{api:?}: the hidden round's text reaches the client: {:?}",
        text_of(&a1)
    );
    let output = shell_output(1, 6_000) + "\nZZ-OLD-WINDOW-TAIL\n";
    let results = api.results(&els, &output);
    conversation.extend(els);
    conversation.extend(results);

    // Turn 2: a reset the model asks for, the note read in the new window, a history search.
    script.push(Reply::tool_call("new_context", json!({})));
    script.push(Reply::tool_call("notes_read", json!({"path": "plan.md"})));
    script.push(Reply::tool_call(
        "history_search_contents",
        json!({"query": "run-1-start"}),
    ));
    script.push(Reply::text("Back on track."));
    let (a2, els) = turn(&rig, api, &conversation, stream, thinking).await;
    no_ctxd_calls(api, &a2);
    assert!(text_of(&a2).contains("Back on track."), "{api:?}");
    conversation.extend(els);

    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 6, "{api:?}: one upstream request per round");
    let bodies: Vec<String> = sent
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    for (i, r) in sent.iter().enumerate() {
        assert!(
            r.refused.is_none(),
            "{api:?} request {i} refused: {:?}\n{}",
            r.refused,
            &bodies[i][..bodies[i].len().min(3000)]
        );
        // ctxd's tools are offered on every request, after the client's.
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        let names: Vec<String> = v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                t.get("name")
                    .or_else(|| t.pointer("/function/name"))
                    .and_then(Value::as_str)
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(names[0], "bash", "{api:?}");
        assert!(names.iter().any(|n| n == "recall"), "{api:?}: {names:?}");
    }
    // The tools' definitions are the same bytes on every request.
    let tools_of = |b: &str| {
        b[b.find("\"tools\"").unwrap()..]
            .chars()
            .take(400)
            .collect::<String>()
    };
    assert_eq!(tools_of(&bodies[0]), tools_of(&bodies[3]), "{api:?}");
    // The hidden call went upstream with its result in the continuation, and the next client
    // request found it behind what the client was shown: the model sees its own tool history.
    assert!(bodies[1].contains("NOTE-MARK-7"), "{api:?}");
    assert!(
        bodies[2].contains("NOTE-MARK-7"),
        "{api:?}: the client's echo did not find the hidden exchange:\n{}",
        &bodies[2][..bodies[2].len().min(3000)]
    );
    // After the reset: the boot with the note in its index; nothing of the old window.
    assert!(
        bodies[3].contains("context was reset") || bodies[3].contains("new context window"),
        "{api:?}: no boot after the reset:\n{}",
        &bodies[3][..bodies[3].len().min(3000)]
    );
    assert!(
        bodies[3].contains("plan.md"),
        "{api:?}: the note is not in the boot's index"
    );
    for (i, b) in bodies.iter().enumerate().skip(3) {
        assert!(
            !b.contains("ZZ-OLD-WINDOW-TAIL"),
            "{api:?}: request {i} carries the old window's output"
        );
    }
    assert!(
        bodies[4].contains("NOTE-MARK-7"),
        "{api:?}: notes_read answered"
    );
    // The search's answer names the old output's item.
    let item = regex_item(&bodies[5]).unwrap_or_else(|| {
        panic!(
            "{api:?}: no item id in the search's answer:\n{}",
            &bodies[5]
        )
    });

    // Turn 3: recall of the raw output.
    script.push(Reply::tool_call("recall", json!({"entryId": item})));
    script.push(Reply::text("Here it is."));
    conversation.push(user_text(api, "Show me that output again."));
    let (a3, _) = turn(&rig, api, &conversation, stream, thinking).await;
    no_ctxd_calls(api, &a3);
    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 8, "{api:?}");
    for r in &sent {
        assert!(r.refused.is_none(), "{api:?}: refused {:?}", r.refused);
    }
    let last = String::from_utf8_lossy(&sent[7].body).into_owned();
    assert!(
        last.contains("ZZ-OLD-WINDOW-TAIL") && last.contains("run-1-start"),
        "{api:?}: recall did not return the raw output:\n{}",
        &last[last
            .find("\"tools\"")
            .unwrap_or(last.len())
            .saturating_sub(3000)..last.find("\"tools\"").unwrap_or(last.len())]
    );

    // The store: the hidden exchanges are on the branch, with the views the client echoed.
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let s = stored.load(&record);
    let branch = ctxd_core::tree::active_branch(&s);
    let calls: Vec<String> = branch
        .iter()
        .filter_map(|&p| match &s.entries[p].kind {
            EntryKind::Message(m) => Some(m.content.iter().filter_map(|b| match b {
                ContentBlock::ToolCall { name, .. } => Some(name.clone()),
                _ => None,
            })),
            _ => None,
        })
        .flatten()
        .collect();
    for t in [
        "new_context",
        "notes_read",
        "history_search_contents",
        "recall",
    ] {
        assert!(
            calls.iter().any(|c| c == t),
            "{api:?}: {t} not on the branch: {calls:?}"
        );
    }
    let shown = branch
        .iter()
        .filter(|&&p| {
            matches!(&s.entries[p].kind, EntryKind::Message(m)
            if ctxd_core::text::message_text(m).contains("I will note the plan first."))
        })
        .count();
    assert_eq!(
        shown, 1,
        "{api:?}: the client's echo was stored again beside the exchange"
    );
    let views = s
        .entries
        .iter()
        .filter(|e| matches!(&e.kind, EntryKind::Event { name, .. } if name == "ctxd.client_view"))
        .count();
    assert!(views >= 3, "{api:?}: {views} view events");
}

/// The first history item id (`i_…`) a search answer names in `text`.
fn regex_item(text: &str) -> Option<String> {
    let at = text.find("item_id")?;
    let start = at + text[at..].find("i_")?;
    let id: String = text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    (id.len() > 4).then_some(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_json_ctxd_tools_are_answered_by_the_gateway() {
    session(Api::Anthropic, false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_sse_ctxd_tools_are_answered_by_the_gateway() {
    session(Api::Anthropic, true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_thinking_ctxd_tools_keep_signed_blocks() {
    session(Api::Anthropic, true, true).await;
    session(Api::Anthropic, false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_json_ctxd_tools_are_answered_by_the_gateway() {
    session(Api::Chat, false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_sse_ctxd_tools_are_answered_by_the_gateway() {
    session(Api::Chat, true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_json_ctxd_tools_are_answered_by_the_gateway() {
    session(Api::Responses, false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_sse_ctxd_tools_are_answered_by_the_gateway() {
    session(Api::Responses, true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_reasoning_ctxd_tools_keep_encrypted_items() {
    session(Api::Responses, true, true).await;
    session(Api::Responses, false, true).await;
}

/// A response calling ctxd's tool and the client's together: ctxd's runs at once, the client's
/// reaches the client, and the next request carries both results where the API wants them.
async fn mixed(api: Api, stream: bool) {
    let mut rig = Rig::with(Config::default(), |s| {
        s.management.tools = ToolsSetting::All
    })
    .await;
    let script = rig.mock.script();
    script.push(Reply::parts(vec![
        Part::Text("Both at once.".into()),
        Part::ToolCall {
            name: "notes_write".into(),
            args: json!({"path": "mixed.md", "text": "MIXED-NOTE-3"}),
        },
        Part::ToolCall {
            name: "bash".into(),
            args: json!({"command": "ls"}),
        },
    ]));
    script.push(Reply::text("All done."));
    let mut conversation = api.first_messages();
    let (a1, els) = turn(&rig, api, &conversation, stream, false).await;
    no_ctxd_calls(api, &a1);
    let client_calls = a1
        .elements
        .iter()
        .flat_map(|e| &e.message.content)
        .filter(|b| matches!(b, ContentBlock::ToolCall { .. }))
        .count();
    assert_eq!(
        client_calls, 1,
        "{api:?} stream={stream}: the client's call reaches it"
    );
    let results = api.results(&els, "MIXED-LS-OUTPUT");
    conversation.extend(els);
    conversation.extend(results);
    let (a2, _) = turn(&rig, api, &conversation, stream, false).await;
    assert!(text_of(&a2).contains("All done."), "{api:?}");
    let sent = rig.mock.requests();
    assert_eq!(
        sent.len(),
        2,
        "{api:?}: no hidden round for a mixed response"
    );
    for r in &sent {
        assert!(
            r.refused.is_none(),
            "{api:?} stream={stream}: refused {:?}",
            r.refused
        );
    }
    let second = String::from_utf8_lossy(&sent[1].body);
    assert!(
        second.contains("MIXED-NOTE-3") && second.contains("MIXED-LS-OUTPUT"),
        "{api:?}: both calls and both results go upstream:\n{second}"
    );
    let stored = rig.stored().await;
    let record = stored.sessions().remove(0);
    let s = stored.load(&record);
    let results: Vec<(Option<String>, bool)> = ctxd_core::tree::active_branch(&s)
        .iter()
        .filter_map(|&p| match &s.entries[p].kind {
            EntryKind::Message(m) => Some(m.content.clone()),
            _ => None,
        })
        .flatten()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                tool_name,
                is_error,
                ..
            } => Some((tool_name, is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{api:?}: {results:?}");
    assert!(
        results.contains(&(Some("notes_write".into()), false)),
        "{api:?}: ctxd's call answered without error: {results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_calls_run_ctxds_and_hand_the_clients_over_on_every_api() {
    for api in [Api::Anthropic, Api::Chat, Api::Responses] {
        for stream in [false, true] {
            mixed(api, stream).await;
        }
    }
}

/// A client that compacts on its own (Claude Code's, Codex's, Pi's summary as the start of a new
/// conversation) stays in its session, and the model can still search what came before.
async fn client_compaction(api: Api, prefix: &str) {
    let mut rig = Rig::with(Config::default(), |s| {
        s.management.tools = ToolsSetting::All
    })
    .await;
    let script = rig.mock.script();
    script.push(Reply::text("Noted."));
    let mut conversation = api.first_messages();
    conversation.push(user_text(api, "Remember OLD-CONTEXT-99 for later."));
    // Anthropic wants alternating turns: merge into one user turn there.
    if matches!(api, Api::Anthropic) {
        conversation = vec![user_text(
            api,
            "Find the bug. Remember OLD-CONTEXT-99 for later.",
        )];
    }
    let _ = turn(&rig, api, &conversation, false, false).await;

    script.push(Reply::tool_call(
        "history_search_contents",
        json!({"query": "OLD-CONTEXT-99"}),
    ));
    script.push(Reply::text("Found it."));
    let mut compacted = api.first_messages();
    compacted.retain(|m| m["role"] == "system");
    compacted.push(user_text(
        api,
        &format!("{prefix}. Summary: we were finding a bug."),
    ));
    let (a, _) = turn(&rig, api, &compacted, false, false).await;
    assert!(text_of(&a).contains("Found it."), "{api:?}");
    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 3, "{api:?}");
    let second = String::from_utf8_lossy(&sent[1].body);
    assert!(
        !second.contains("OLD-CONTEXT-99"),
        "{api:?}: the compacted conversation goes upstream as the client sent it"
    );
    let third = String::from_utf8_lossy(&sent[2].body);
    assert!(
        third.contains("item_id") && third.matches("OLD-CONTEXT-99").count() >= 2,
        "{api:?}: the search finds the conversation before the client's compaction:\n{third}"
    );
    let stored = rig.stored().await;
    assert_eq!(stored.sessions().len(), 1, "{api:?}: one session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_own_compaction_keeps_the_session_and_its_history() {
    client_compaction(
        Api::Anthropic,
        "This session is being continued from a previous conversation that ran out of context",
    )
    .await;
    client_compaction(
        Api::Responses,
        "Another language model started to solve this problem and produced a summary of its thinking process",
    )
    .await;
    client_compaction(
        Api::Chat,
        "The conversation history before this point was compacted into the following summary:",
    )
    .await;
}
