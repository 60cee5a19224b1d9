//! Conversation shapes that once went wrong, one test each, through the gateway against the
//! strict mock: a reset on Chat, a request sent again after a hidden round, the hidden rounds'
//! limit, a provider refusing a continuation (an error, a prompt too long), the window the
//! provider states, `get_context_remaining` in the window in use, an unreachable upstream, and
//! a Responses conversation the provider keeps (`previous_response_id`).

use ctxd_gateway::config::ToolsSetting;
use ctxd_mock::{Config, Reply};
use serde_json::{json, Value};

use crate::loops::Api;
use crate::served::{no_ctxd_calls, text_of, turn};
use crate::support::{window_reasons, Rig};

const APIS: [Api; 3] = [Api::Anthropic, Api::Chat, Api::Responses];

async fn rig_with_tools(config: Config) -> Rig {
    Rig::with(config, |s| s.management.tools = ToolsSetting::All).await
}

/// Every upstream request the mock got, as JSON; none refused.
fn upstream_bodies(rig: &Rig) -> Vec<Value> {
    rig.mock
        .requests()
        .iter()
        .map(|r| {
            assert_eq!(r.refused, None, "the mock refused {}", r.path);
            r.json().unwrap()
        })
        .collect()
}

fn conversation_of(api: Api, body: &Value) -> Vec<Value> {
    let key = if matches!(api, Api::Responses) {
        "input"
    } else {
        "messages"
    };
    body[key].as_array().cloned().unwrap_or_default()
}

/// The plain text of a conversation element (string content, or its text blocks).
fn element_text(el: &Value) -> String {
    match &el["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// POST `body` to `api`'s route with its usual headers (and `extra`); the response, which must
/// be a success.
async fn post_ok(rig: &Rig, api: Api, body: &Value, extra: &[(&str, &str)]) -> reqwest::Response {
    let mut headers = api.headers().to_vec();
    headers.extend_from_slice(extra);
    let resp = rig
        .post(api.path(), &headers, serde_json::to_vec(body).unwrap())
        .await;
    assert!(resp.status().is_success(), "{api:?}: {}", resp.status());
    resp
}

/// The `remaining_tokens` that `get_context_remaining` answered, as the last upstream request
/// carried it (`None`: absent, or `null`).
fn remaining_tokens(rig: &Rig) -> Option<u64> {
    let last = rig.mock.requests().last()?.json()?;
    let text = last.to_string();
    let after = text.split("remaining_tokens").nth(1)?;
    after
        .trim_start_matches(|c: char| !c.is_ascii_digit() && c != 'n')
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok())
}

#[tokio::test]
async fn a_reset_on_chat_keeps_the_clients_system_message() {
    let rig = rig_with_tools(Config::default()).await;
    rig.mock
        .script()
        .push(Reply::tool_call("new_context", json!({})));
    rig.mock.script().push(Reply::text("fresh start"));
    let api = Api::Chat;
    let (answer, _) = turn(&rig, api, &api.first_messages(), false, false).await;
    assert_eq!(text_of(&answer), "fresh start");
    let bodies = upstream_bodies(&rig);
    assert_eq!(bodies.len(), 2, "the call and its continuation");
    let after = conversation_of(api, &bodies[1]);
    assert_eq!(after[0]["role"], "system", "{after:?}");
    assert_eq!(after[0]["content"], "You are a coding agent.");
    assert!(
        element_text(&after[1]).contains("context"),
        "the boot follows the system message: {after:?}"
    );
}

/// The same body sent again after an answer that came through a hidden round (a retry, a
/// regeneration) goes upstream ending with the client's message, not the old answer.
#[tokio::test]
async fn a_request_sent_again_after_a_hidden_round_ends_with_the_clients_message() {
    for api in APIS {
        for stream in [false, true] {
            let rig = rig_with_tools(Config::default()).await;
            let script = rig.mock.script();
            script.push(Reply::tool_call("notes_list", json!({})));
            script.push(Reply::text("Answer A"));
            script.push(Reply::text("Answer B"));
            let first = vec![api.user_message("Do the thing")];
            let (a, _) = turn(&rig, api, &first, stream, false).await;
            assert_eq!(text_of(&a), "Answer A", "{api:?} {stream}");
            let (b, _) = turn(&rig, api, &first, stream, false).await;
            assert_eq!(text_of(&b), "Answer B", "{api:?} {stream}");
            let bodies = upstream_bodies(&rig);
            assert_eq!(bodies.len(), 3, "{api:?} {stream}");
            let again = conversation_of(api, &bodies[2]);
            let last = again.last().unwrap();
            assert_eq!(
                element_text(last),
                "Do the thing",
                "{api:?} {stream}: {again:?}"
            );
            assert_eq!(again.len(), 1, "{api:?} {stream}: {again:?}");
        }
    }
}

/// A model calling ctxd's tools without end: after the limit the client gets an ordinary end
/// of turn that says why, never an empty answer.
#[tokio::test]
async fn the_hidden_rounds_limit_ends_the_turn_with_a_word_of_why() {
    for api in APIS {
        for stream in [false, true] {
            let rig = rig_with_tools(Config::default()).await;
            for _ in 0..12 {
                rig.mock
                    .script()
                    .push(Reply::tool_call("get_context_remaining", json!({})));
            }
            let (a, _) = turn(&rig, api, &[api.user_message("go")], stream, false).await;
            no_ctxd_calls(api, &a);
            let text = text_of(&a);
            assert!(
                text.contains("ctxd ended this turn"),
                "{api:?} {stream}: {text:?}"
            );
            assert_eq!(rig.mock.requests().len(), 9, "{api:?} {stream}");
        }
    }
}

/// A provider refusing ctxd's continuation: a JSON client gets the provider's status and
/// body, a stream ends with the API's error event naming the status.
#[tokio::test]
async fn a_refused_continuation_reaches_the_client_as_the_providers_error() {
    for api in APIS {
        for stream in [false, true] {
            let rig = rig_with_tools(Config::default()).await;
            let script = rig.mock.script();
            script.push(Reply::tool_call("notes_list", json!({})));
            script.push(Reply::error(429, "rate limited: slow down"));
            let body = api.body(&[api.user_message("go")], stream, false);
            let resp = rig
                .post(
                    api.path(),
                    &api.headers(),
                    serde_json::to_vec(&body).unwrap(),
                )
                .await;
            let status = resp.status().as_u16();
            let text = String::from_utf8(resp.bytes().await.unwrap().to_vec()).unwrap();
            assert!(
                text.contains("rate limited: slow down"),
                "{api:?} {stream}: {text}"
            );
            if stream {
                assert_eq!(status, 200, "{api:?}: {text}");
                assert!(text.contains("HTTP 429"), "{api:?}: {text}");
                assert!(text.contains("error"), "{api:?}: {text}");
            } else {
                assert_eq!(status, 429, "{api:?}: {text}");
                let v: Value = serde_json::from_str(&text).unwrap();
                assert!(v["error"].is_object(), "{api:?}: {v}");
            }
        }
    }
}

/// A continuation the provider finds too long opens the recovery window and goes again, as a
/// first call does; the window it states is used from then on.
#[tokio::test]
async fn an_overflow_in_a_continuation_is_recovered_and_its_window_learned() {
    for api in APIS {
        let mut rig = rig_with_tools(Config::default()).await;
        let script = rig.mock.script();
        script.push(Reply::tool_call("notes_list", json!({})));
        script.push(Reply::error(
            400,
            "prompt is too long: 37400 tokens > 30000 maximum",
        ));
        script.push(Reply::text("recovered"));
        script.push(Reply::tool_call("get_context_remaining", json!({})));
        script.push(Reply::text("counted"));
        let mut conversation = vec![api.user_message("go")];
        let (a, els) = turn(&rig, api, &conversation, false, false).await;
        assert_eq!(text_of(&a), "recovered", "{api:?}");
        conversation.extend(els);
        conversation.push(api.user_message("how much room is left?"));
        let (b, _) = turn(&rig, api, &conversation, false, false).await;
        assert_eq!(text_of(&b), "counted", "{api:?}");
        // The tool's answer went upstream in the last continuation.
        let remaining = remaining_tokens(&rig)
            .unwrap_or_else(|| panic!("{api:?}: no remaining_tokens upstream"));
        assert!(remaining < 30_000, "{api:?}: {remaining} in a 30k window");
        let stored = rig.stored().await;
        let session = stored.load(&stored.sessions()[0]);
        assert!(
            window_reasons(&session).contains(&"overflow"),
            "{api:?}: {:?}",
            window_reasons(&session)
        );
    }
}

/// `get_context_remaining` counts against the window the reminders and resets use: the
/// configured one, and the 1M beta's.
#[tokio::test]
async fn get_context_remaining_counts_in_the_window_in_use() {
    let api = Api::Anthropic;
    // A model ctxd's table does not know, with a configured window.
    let rig = Rig::with(Config::default(), |s| {
        s.management.tools = ToolsSetting::All;
        s.management
            .model_windows
            .push(("acme-coder".into(), 30_000));
    })
    .await;
    rig.mock
        .script()
        .push(Reply::tool_call("get_context_remaining", json!({})));
    rig.mock.script().push(Reply::text("ok"));
    let mut body = api.body(&[api.user_message("room?")], false, false);
    body["model"] = json!("acme-coder-2");
    post_ok(&rig, api, &body, &[]).await;
    let r = remaining_tokens(&rig).expect("a number with a configured window");
    assert!(r < 30_000, "{r}");

    let rig = rig_with_tools(Config::default()).await;
    rig.mock
        .script()
        .push(Reply::tool_call("get_context_remaining", json!({})));
    rig.mock.script().push(Reply::text("ok"));
    let body = api.body(&[api.user_message("room?")], false, false);
    post_ok(
        &rig,
        api,
        &body,
        &[("anthropic-beta", "context-1m-2025-08-07")],
    )
    .await;
    let r = remaining_tokens(&rig).expect("a number");
    assert!(r > 200_000, "{r} under the 1M beta");
}

/// An upstream nothing listens on: the client's error names the cause.
#[tokio::test]
async fn an_unreachable_upstream_is_named_in_the_error() {
    let rig = Rig::with(Config::default(), |s| {
        // A port nothing listens on: bound, then released.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        s.upstream_anthropic = format!("http://127.0.0.1:{port}");
    })
    .await;
    let api = Api::Anthropic;
    let body = api.body(&[api.user_message("hi")], false, false);
    let resp = rig
        .post(
            api.path(),
            &api.headers(),
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    assert_eq!(resp.status().as_u16(), 502);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("could not connect") && text.to_lowercase().contains("refused"),
        "{text}"
    );
    assert!(
        !text.contains("127.0.0.1"),
        "the upstream's address stays behind: {text}"
    );
}

/// A Responses request continuing a conversation the provider keeps: ctxd sees only the new
/// input, so it goes upstream as sent (no tools of ctxd's) and the client is told.
#[tokio::test]
async fn a_previous_response_id_request_goes_unmanaged_and_says_so() {
    let rig = rig_with_tools(Config::default()).await;
    let api = Api::Responses;
    let mut body = api.body(&[api.user_message("and now?")], false, false);
    body["previous_response_id"] = json!("resp_123");
    let bytes = serde_json::to_vec(&body).unwrap();
    let resp = rig.post(api.path(), &api.headers(), bytes.clone()).await;
    assert!(resp.status().is_success());
    assert_eq!(
        resp.headers()
            .get("x-ctxd-unmanaged")
            .and_then(|v| v.to_str().ok()),
        Some("previous_response_id")
    );
    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].decoded_body().unwrap(),
        bytes,
        "sent as the client sent it"
    );
}

/// A learned window is kept in the store: a gateway started later on it (or another gateway on
/// a shared PostgreSQL store) uses it from its first request.
#[tokio::test]
async fn a_learned_window_outlives_the_gateway_that_learned_it() {
    let api = Api::Anthropic;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("ctxd.db");
    let tools = |s: &mut ctxd_gateway::Settings| s.management.tools = ToolsSetting::All;
    let mut first = Rig::with_store(
        Config::default(),
        store.clone(),
        tempfile::tempdir().unwrap(),
        tools,
    )
    .await;
    first.mock.script().push(Reply::error(
        400,
        "prompt is too long: 41000 tokens > 32000 maximum",
    ));
    let body = api.body(&[api.user_message("hi")], false, false);
    let resp = first
        .post(
            api.path(),
            &api.headers(),
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    // Recovered in a new window (the mock's own turn answers the retry).
    assert!(resp.status().is_success(), "{}", resp.status());
    // The store write is in the background: give it a moment, then stop.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    first.stop().await;

    let second = Rig::with_store(
        Config::default(),
        store,
        tempfile::tempdir().unwrap(),
        tools,
    )
    .await;
    second
        .mock
        .script()
        .push(Reply::tool_call("get_context_remaining", json!({})));
    second.mock.script().push(Reply::text("ok"));
    let body = api.body(&[api.user_message("room?")], false, false);
    post_ok(&second, api, &body, &[]).await;
    let remaining = remaining_tokens(&second).expect("no remaining_tokens upstream");
    assert!(remaining < 32_000, "{remaining}: the learned 32k window");
    drop(dir);
}
