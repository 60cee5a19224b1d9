//! A conversation that reaches the reserve gets a new window at the turn's end: from the next
//! request on, the provider sees the boot and what follows it, while the client keeps sending
//! its whole history and the store keeps all of it.

use serde_json::{json, Value};

use crate::support::{branch_messages, Rig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reserve_opens_a_window_and_the_next_request_is_rewritten() {
    let mut rig = Rig::start().await;
    let h = [("x-api-key", "sk-w"), ("x-ctxd-session", "long-one")];
    // The mock reports about one input token per 4 body bytes: 800 KB is ~200k tokens, past
    // the reserve of a 200k window.
    let big = "lorem ipsum dolor sit amet ".repeat(800_000 / 27);
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
    assert_eq!(
        r.headers()
            .get("x-ctxd-rewritten")
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
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
