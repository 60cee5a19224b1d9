//! Tenants: a credential that rotates (an OAuth login refreshed mid-session) continues the same
//! tenant, session and notes; on a shared gateway, tenants (by credential or by an
//! operator-named ctxd key) never see each other's sessions or notes; subscription logins pass
//! upstream untouched.

use ctxd_gateway::config::ToolsSetting;
use ctxd_gateway::tenancy;
use ctxd_mock::{Config, Part, Reply};
use ctxd_store::Store;
use serde_json::{json, Value};

use crate::support::Rig;

/// Claude Code on a Pro/Max login: a Bearer access token and the OAuth beta.
fn oauth_headers(token: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("authorization", token),
        ("anthropic-beta", "oauth-2025-04-20,claude-code-20250219"),
        ("x-claude-code-session-id", "cc-rotating-1"),
        ("user-agent", "claude-cli/2.1.197 (external, cli)"),
        ("anthropic-version", "2023-06-01"),
    ]
}

/// One Anthropic Messages turn: the answer's text (the status must be 200).
async fn turn(rig: &Rig, headers: &[(&str, &str)], messages: &[Value]) -> String {
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 200, "messages": messages,
        "tools": [{"name": "bash", "description": "run a command",
                   "input_schema": {"type": "object", "properties": {}}}]});
    let resp = rig
        .post("/v1/messages", headers, serde_json::to_vec(&body).unwrap())
        .await;
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// Every body the mock received, as text.
fn upstream_bodies(rig: &Rig) -> Vec<String> {
    rig.mock
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refreshed_oauth_token_continues_the_session_and_its_notes() {
    let mut rig = Rig::with(Config::default(), |s| {
        s.management.tools = ToolsSetting::All
    })
    .await;
    let script = rig.mock.script();
    // Under the first token the model notes something for the human and for the session.
    script.push(Reply::parts(vec![
        Part::ToolCall {
            name: "notes_write".into(),
            args: json!({"path": "@human/prefs.md", "text": "HUMAN-PREF-ROTATE-1"}),
        },
        Part::ToolCall {
            name: "notes_write".into(),
            args: json!({"path": "plan.md", "text": "SESSION-PLAN-ROTATE-2"}),
        },
    ]));
    script.push(Reply::text("noted"));
    let mut messages = vec![json!({"role": "user", "content": "remember my preferences"})];
    let first = turn(&rig, &oauth_headers("Bearer sk-ant-oat01-FIRST"), &messages).await;
    assert!(first.contains("noted"), "{first}");

    // The token is refreshed; the model reads both notes back.
    script.push(Reply::parts(vec![
        Part::ToolCall {
            name: "notes_read".into(),
            args: json!({"path": "@human/prefs.md"}),
        },
        Part::ToolCall {
            name: "notes_read".into(),
            args: json!({"path": "plan.md"}),
        },
    ]));
    script.push(Reply::text("you prefer what you said"));
    messages.push(json!({"role": "assistant", "content": first}));
    messages.push(json!({"role": "user", "content": "what do I prefer?"}));
    let second = turn(
        &rig,
        &oauth_headers("Bearer sk-ant-oat01-SECOND"),
        &messages,
    )
    .await;
    assert!(second.contains("you prefer"), "{second}");

    let sent = rig.mock.requests();
    assert_eq!(sent.len(), 4, "two rounds per turn");
    let last = &upstream_bodies(&rig)[3];
    assert!(
        last.contains("HUMAN-PREF-ROTATE-1") && last.contains("SESSION-PLAN-ROTATE-2"),
        "the notes written under the first token are read under the second: {}",
        &last[last.len().saturating_sub(1500)..]
    );
    // The login passes upstream untouched, and nothing of ctxd's own goes with it.
    for (r, token) in sent.iter().zip([
        "Bearer sk-ant-oat01-FIRST",
        "Bearer sk-ant-oat01-FIRST",
        "Bearer sk-ant-oat01-SECOND",
        "Bearer sk-ant-oat01-SECOND",
    ]) {
        assert_eq!(r.headers["authorization"], token);
        assert_eq!(
            r.headers["anthropic-beta"],
            "oauth-2025-04-20,claude-code-20250219"
        );
        assert!(r.headers.get("x-api-key").is_none());
        assert!(!r.headers.keys().any(|k| k.as_str().starts_with("x-ctxd-")));
    }

    let stored = rig.stored().await;
    let sessions = stored.sessions();
    assert_eq!(sessions.len(), 1, "one session across the refresh");
    assert_eq!(sessions[0].tenant, tenancy::LOCAL_TENANT);
    let raw = std::fs::read(&rig.store_path).unwrap();
    for token in [&b"sk-ant-oat01"[..], b"FIRST", b"SECOND"] {
        assert!(
            !raw.windows(token.len()).any(|w| w == token),
            "no credential in the store file"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_sdk_client_whose_key_changes_keeps_its_session_on_loopback() {
    let mut rig = Rig::start().await;
    let messages = vec![json!({"role": "user", "content": "hello"})];
    for key in ["sk-before", "sk-after"] {
        let h = [("x-api-key", key), ("x-ctxd-session", "sdk-rotating")];
        turn(&rig, &h, &messages).await;
    }
    let stored = rig.stored().await;
    assert_eq!(stored.sessions().len(), 1);
}

/// A shared gateway (beyond loopback): one tenant per credential, and Alice's ctxd key names
/// her tenant whatever token rides beside it.
async fn shared_rig() -> Rig {
    let mut tenants = tenancy::NamedTenants::new();
    for (name, key) in [("alice", "ck-alice-key"), ("bob", "ck-bob-key")] {
        let hash = tenancy::parse_key_hash(&tenancy::key_hash_value(key)).unwrap();
        tenants.insert(name.into(), hash);
    }
    Rig::with(Config::default(), move |s| {
        s.listen = "0.0.0.0:0".parse().unwrap();
        s.tenants = tenants;
        s.management.tools = ToolsSetting::All;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_shared_gateway_tenants_never_see_each_others_sessions_or_notes() {
    let mut rig = shared_rig().await;
    let script = rig.mock.script();
    let hello = vec![json!({"role": "user", "content": "hello"})];
    // Tenant one notes something for its human; tenant two, same session name, cannot read it.
    script.push(Reply::tool_call(
        "notes_write",
        json!({"path": "@human/secret.md", "text": "ONE-SECRET-NOTE-9"}),
    ));
    script.push(Reply::text("ok"));
    let one = [("x-api-key", "sk-one"), ("x-ctxd-session", "same-name")];
    turn(&rig, &one, &hello).await;
    script.push(Reply::tool_call(
        "notes_read",
        json!({"path": "@human/secret.md"}),
    ));
    script.push(Reply::text("ok"));
    let two = [
        ("authorization", "Bearer sk-two"),
        ("x-ctxd-session", "same-name"),
    ];
    turn(&rig, &two, &hello).await;
    let bodies = upstream_bodies(&rig);
    assert!(
        !bodies[3].contains("ONE-SECRET-NOTE-9"),
        "tenant two read tenant one's note"
    );

    // Alice under two tokens is one tenant and session; Bob with Alice's first token is not.
    script.push(Reply::tool_call(
        "notes_write",
        json!({"path": "@human/alice.md", "text": "ALICE-NOTE-4"}),
    ));
    script.push(Reply::text("ok"));
    let alice1 = [
        ("x-ctxd-key", "ck-alice-key"),
        ("authorization", "Bearer tok-a1"),
        ("x-ctxd-session", "work"),
    ];
    turn(&rig, &alice1, &hello).await;
    script.push(Reply::tool_call(
        "notes_read",
        json!({"path": "@human/alice.md"}),
    ));
    script.push(Reply::text("ok"));
    let alice2 = [
        ("x-ctxd-key", "ck-alice-key"),
        ("authorization", "Bearer tok-a2"),
        ("x-ctxd-session", "work"),
    ];
    turn(&rig, &alice2, &hello).await;
    script.push(Reply::tool_call(
        "notes_read",
        json!({"path": "@human/alice.md"}),
    ));
    script.push(Reply::text("ok"));
    let bob = [
        ("x-ctxd-key", "ck-bob-key"),
        ("authorization", "Bearer tok-a1"),
        ("x-ctxd-session", "work"),
    ];
    turn(&rig, &bob, &hello).await;
    let bodies = upstream_bodies(&rig);
    assert!(
        bodies[7].contains("ALICE-NOTE-4"),
        "Alice reads her note after her token changed"
    );
    assert!(!bodies[9].contains("ALICE-NOTE-4"), "Bob read Alice's note");
    for r in rig.mock.requests() {
        assert!(
            r.headers.get("x-ctxd-key").is_none(),
            "the ctxd key went upstream"
        );
    }

    // An unknown ctxd key, and no key at all, are refused in the API's shape.
    for headers in [
        vec![("x-ctxd-key", "ck-guess"), ("x-api-key", "sk-one")],
        vec![],
    ] {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": hello});
        let resp = rig
            .post("/v1/messages", &headers, serde_json::to_vec(&body).unwrap())
            .await;
        assert_eq!(resp.status(), 401);
        let v: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
        assert_eq!(v["type"], "error", "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("ctxd"));
    }

    let stored = rig.stored().await;
    let sessions = stored.sessions();
    let tenants: std::collections::BTreeSet<_> = sessions.iter().map(|s| &s.tenant).collect();
    assert_eq!(sessions.len(), 4, "one, two, alice, bob");
    assert_eq!(tenants.len(), 4);
    assert!(tenants.contains(&"name:alice".to_owned()));
    for s in &sessions {
        assert!(!s.tenant.contains("sk-"), "the credential is never stored");
        let other = sessions.iter().find(|o| o.id != s.id).unwrap();
        assert!(stored.0.session(&other.tenant, s.id).unwrap().is_none());
    }
    let raw = std::fs::read(&rig.store_path).unwrap();
    for secret in [&b"sk-one"[..], b"ck-alice-key", b"tok-a1"] {
        assert!(
            !raw.windows(secret.len()).any(|w| w == secret),
            "no credential or ctxd key in the store file"
        );
    }
}
