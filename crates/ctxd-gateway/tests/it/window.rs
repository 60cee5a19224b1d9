//! A conversation that reaches the reserve gets a new window at the turn's end: from the next
//! request on, the provider sees the boot and what follows it, while the client keeps sending
//! its whole history and the store keeps all of it.

use serde_json::{json, Value};

use crate::support::{branch_messages, injected_count, rewritten, window_reasons, Rig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reserve_opens_a_window_and_the_next_request_is_rewritten() {
    let mut rig = Rig::start().await;
    let h = [("x-api-key", "sk-w"), ("x-ctxd-session", "long-one")];
    // The mock reports about one input token per 4 body bytes: 750 KB is ~187k tokens, past
    // the reserve of a 200k window (and inside it: the strict mock refuses more).
    let big = "lorem ipsum dolor sit amet ".repeat(750_000 / 27);
    let first = json!({"role": "user", "content": big});
    let body1 = json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [first]});
    let r = rig
        .post("/v1/messages", &h, serde_json::to_vec(&body1).unwrap())
        .await;
    assert!(r.status().is_success());
    let reply: Value = r
        .bytes()
        .await
        .map(|b| serde_json::from_slice::<Value>(&b).unwrap())
        .unwrap();
    assert_eq!(reply["content"][0]["text"], "done");

    let next = r#"{"role":"user","content":"what now?"}"#;
    let body2 = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{},{},{next}]}}"#,
        serde_json::to_string(&first).unwrap(),
        json!({"role": "assistant", "content": reply["content"]}),
    );
    let r = rig
        .post("/v1/messages", &h, body2.clone().into_bytes())
        .await;
    assert!(r.status().is_success());
    assert!(rewritten(&r));
    let _ = r.bytes().await.unwrap();

    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 2);
    let upstream = String::from_utf8(sent[1].body.to_vec()).unwrap();
    assert!(
        upstream.len() < body2.len() / 10,
        "the old window folded away"
    );
    let v: Value = serde_json::from_str(&upstream).unwrap();
    let messages = v["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{upstream}");
    let boot = messages[0]["content"][0]["text"].as_str().unwrap();
    assert!(boot.contains("<checkpoint>"), "{boot}");
    // The client's own element goes as its bytes; every other field keeps its place.
    assert!(upstream.ends_with(&format!("{next}]}}")), "{upstream}");
    assert!(upstream.starts_with(r#"{"model":"claude-sonnet-4-5","max_tokens":10,"messages":["#));

    // The store keeps everything: the big message, the answer, the window, the new message.
    let stored = rig.stored().await;
    let session = stored.load(&stored.sessions()[0]);
    let kinds: Vec<&str> = session
        .entries
        .iter()
        .map(|e| match &e.kind {
            ctxd_core::model::EntryKind::WindowMarker { .. } => "marker",
            ctxd_core::model::EntryKind::WindowBoot { .. } => "boot",
            ctxd_core::model::EntryKind::Message(m) if m.injected.is_some() => "reminder",
            ctxd_core::model::EntryKind::Message(_) => "message",
            _ => "other",
        })
        .collect();
    assert!(
        kinds.contains(&"marker") && kinds.contains(&"boot"),
        "{kinds:?}"
    );
    let messages = branch_messages(&session);
    assert!(messages.iter().any(|(_, t)| t.starts_with("lorem ipsum")));
    let n = messages.len();
    assert_eq!(messages[n - 2].1, "what now?");
    assert_eq!(messages[n - 1].1, "done", "the answer in the new window");
}

/// A conversation with some history, then the provider refuses a request as too long.
async fn overflowing_rig(refusals: usize, api: &str) -> (Rig, Vec<u8>) {
    use ctxd_mock::{Config, Reply};
    let message = if api == "anthropic" {
        "prompt is too long: 210000 tokens > 200000 maximum"
    } else {
        "This model's maximum context length is 200000 tokens. However, your messages resulted in 210000 tokens."
    };
    let mut script = vec![Reply::text("first answer")];
    script.extend((0..refusals).map(|_| Reply::error(400, message)));
    let rig = Rig::with(
        Config {
            script,
            ..Config::default()
        },
        |_| {},
    )
    .await;
    let (path, h, first, second) = overflow_bodies(api);
    let r = rig.post(path, &h, first).await;
    assert!(r.status().is_success());
    let _ = r.bytes().await.unwrap();
    (rig, second)
}

/// Route, headers, the first request and the one that overflows.
type OverflowBodies = (
    &'static str,
    [(&'static str, &'static str); 2],
    Vec<u8>,
    Vec<u8>,
);

fn overflow_bodies(api: &str) -> OverflowBodies {
    if api == "anthropic" {
        let m1 = json!([{"role": "user", "content": "old question with old context"}]);
        let m2 = json!([{"role": "user", "content": "old question with old context"},
            {"role": "assistant", "content": [{"type": "text", "text": "first answer"}]},
            {"role": "user", "content": "a new question"}]);
        let b = |m: &Value| {
            serde_json::to_vec(
                &json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": m}),
            )
            .unwrap()
        };
        (
            "/v1/messages",
            [("x-api-key", "sk-o"), ("x-ctxd-session", "overflow")],
            b(&m1),
            b(&m2),
        )
    } else {
        let m1 = json!([{"role": "user", "content": "old question with old context"}]);
        let m2 = json!([{"role": "user", "content": "old question with old context"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "a new question"}]);
        let b = |m: &Value, stream: bool| {
            serde_json::to_vec(&json!({"model": "gpt-4o", "stream": stream, "messages": m}))
                .unwrap()
        };
        (
            "/v1/chat/completions",
            [
                ("authorization", "Bearer sk-o"),
                ("x-ctxd-session", "overflow"),
            ],
            b(&m1, false),
            b(&m2, true),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_is_recovered_inside_the_request() {
    for api in ["anthropic", "chat"] {
        let (mut rig, second) = overflowing_rig(1, api).await;
        let (path, h, _, _) = overflow_bodies(api);
        let r = rig.post(path, &h, second).await;
        assert!(r.status().is_success(), "{api}: {}", r.status());
        assert!(rewritten(&r));
        let text = r.text().await.unwrap();
        assert!(
            !text.contains("too long") && !text.contains("maximum context"),
            "{text}"
        );
        let sent = rig.mock.requests();
        assert_eq!(
            sent.len(),
            3,
            "{api}: first turn, the refused request, its retry"
        );
        let retry = String::from_utf8(sent[2].body.to_vec()).unwrap();
        assert!(retry.contains("Your context was reset"), "{retry}");
        assert!(
            !retry.contains("first answer"),
            "{api}: the old window folded away"
        );
        let stored = rig.stored().await;
        let session = stored.load(&stored.sessions()[0]);
        assert_eq!(window_reasons(&session), ["overflow"], "{api}");
        let messages = branch_messages(&session);
        assert_eq!(
            messages.last().unwrap().1,
            "done",
            "{api}: the answer is recorded"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_refusal_reaches_the_client_unchanged() {
    let (mut rig, second) = overflowing_rig(2, "anthropic").await;
    let (path, h, _, _) = overflow_bodies("anthropic");
    let r = rig.post(path, &h, second).await;
    assert_eq!(r.status(), 400);
    let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(
        body["error"]["message"],
        "prompt is too long: 210000 tokens > 200000 maximum"
    );
    assert_eq!(rig.mock.requests().len(), 3, "one retry, no more");
    let stored = rig.stored().await;
    let session = stored.load(&stored.sessions()[0]);
    assert_eq!(
        window_reasons(&session).len(),
        1,
        "one recovery window per failure chain"
    );
}

/// Management is the user's choice: record-only sends the client's bytes and changes nothing;
/// with resets off for an agent, reminders still come but no window opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_only_and_switched_off_resets_leave_the_request_alone() {
    for record_only in [true, false] {
        let mut rig = Rig::with(ctxd_mock::Config::default(), |s| {
            s.management.record_only = record_only;
            if !record_only {
                s.management.agents.insert(
                    "sdk".into(),
                    ctxd_gateway::config::MechanismOverrides {
                        reminders: None,
                        resets: Some(false),
                        distill: None,
                        digests: None,
                        amnesia: None,
                        lazy_tools: None,
                        tools: None,
                    },
                );
            }
        })
        .await;
        let h = [("x-api-key", "sk-r"), ("x-ctxd-session", "rec")];
        let big = "lorem ipsum dolor sit amet ".repeat(750_000 / 27);
        let first = json!({"role": "user", "content": big});
        let body1 = json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [first]});
        let r = rig
            .post("/v1/messages", &h, serde_json::to_vec(&body1).unwrap())
            .await;
        let reply: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        let body2 = serde_json::to_vec(&json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
            "messages": [first, {"role": "assistant", "content": reply["content"]},
                {"role": "user", "content": "what now?"}]}))
        .unwrap();
        let r = rig.post("/v1/messages", &h, body2.clone()).await;
        assert!(r.status().is_success());
        let _ = r.bytes().await.unwrap();
        let sent = rig.mock.requests();
        let stored = rig.stored().await;
        let session = stored.load(&stored.sessions()[0]);
        assert!(
            window_reasons(&session).is_empty(),
            "record_only={record_only}"
        );
        let injected = injected_count(&session);
        if record_only {
            assert_eq!(&sent[1].body[..], &body2[..], "the client's bytes");
            assert_eq!(injected, 0);
        } else {
            assert_eq!(injected, 1, "the final warning, without a reset");
            let upstream = String::from_utf8_lossy(&sent[1].body);
            assert!(upstream.contains("context_window_guidance"));
            assert!(upstream.contains("lorem ipsum"), "nothing folded away");
        }
    }
}

/// A small model (gpt-4, 8,192 tokens) is not reset every turn: its lines are scaled to fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_window_is_not_reset_every_turn() {
    let mut rig = Rig::start().await;
    let h = [
        ("authorization", "Bearer sk-s"),
        ("x-ctxd-session", "small"),
    ];
    let mut messages = vec![json!({"role": "user", "content": "hello"})];
    for turn in 0..5 {
        let body = serde_json::to_vec(&json!({"model": "gpt-4", "messages": messages})).unwrap();
        let r = rig.post("/v1/chat/completions", &h, body.clone()).await;
        assert!(r.status().is_success(), "turn {turn}: {}", r.status());
        let reply: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        let sent = rig.mock.requests();
        assert_eq!(
            &sent[turn].body[..],
            &body[..],
            "turn {turn}: passed through"
        );
        messages.push(reply["choices"][0]["message"].clone());
        messages.push(json!({"role": "user", "content": format!("question {turn}")}));
    }
    let stored = rig.stored().await;
    let session = stored.load(&stored.sessions()[0]);
    assert!(window_reasons(&session).is_empty());
}
