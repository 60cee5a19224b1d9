//! Budgets through the gateway, on each API, JSON and SSE: a soft limit warns in a response
//! header, a hard limit refuses the next request with the API's own error naming the limit,
//! its period and how to raise it, and the counts survive a restart. (Two gateways racing on
//! PostgreSQL: `ctxd-store`'s `tests/postgres.rs`, the reservation itself.)

use std::time::{Duration, Instant};

use ctxd_core::spend::parse_budget;
use ctxd_mock::Config;
use ctxd_store::{Durability, SqliteStore, Store};
use serde_json::Value;

use crate::loops::Api;
use crate::support::Rig;

const APIS: [Api; 3] = [Api::Anthropic, Api::Chat, Api::Responses];

/// A session's first request (`session` names it): status, budget warnings, body.
async fn ask(rig: &Rig, api: Api, session: &str, stream: bool) -> (u16, Vec<String>, String) {
    let body = serde_json::to_vec(&api.body(&api.first_messages(), stream, false)).unwrap();
    let (auth_name, auth_value) = api.headers()[0];
    let resp = rig
        .post(
            api.path(),
            &[(auth_name, auth_value), ("x-ctxd-session", session)],
            body,
        )
        .await;
    let status = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("x-ctxd-budget-warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    (status, warnings, resp.text().await.unwrap())
}

/// Wait until the tenant's counter shows what the provider billed (settled off the request's
/// path, right after the response).
fn billed(store: &std::path::Path) -> u64 {
    let reader = SqliteStore::open(store, Durability::Normal).unwrap();
    let started = Instant::now();
    loop {
        let c = reader.spend("tenant:", "total").unwrap();
        if c.used.tokens > 0 && c.reserved.tokens == 0 {
            return c.used.tokens;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never settled: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn budgets(s: &mut ctxd_gateway::Settings) {
    // One token per session: the first request is admitted, the next is refused.
    s.budgets.push(parse_budget("session/total=1").unwrap());
    // The tenant's soft limit: a warning once anything was billed, never a refusal.
    s.budgets
        .push(parse_budget("tenant/total=1000000000,warn=0.0000001,soft").unwrap());
}

/// The refusal is the API's own error: status 400, its shape, the limit named.
fn assert_refused(api: Api, status: u16, body: &str) {
    assert_eq!(status, 400, "{api:?}: {body}");
    let v: Value = serde_json::from_str(body).unwrap();
    let message = match api {
        Api::Anthropic => {
            assert_eq!(v["type"], "error");
            assert_eq!(v["error"]["type"], "invalid_request_error");
            v["error"]["message"].as_str().unwrap().to_owned()
        }
        Api::Chat | Api::Responses => {
            assert_eq!(v["error"]["type"], "invalid_request_error");
            v["error"]["message"].as_str().unwrap().to_owned()
        }
    };
    for words in [
        "session/total budget of 1 tokens is reached",
        "it does not start over",
        "--budget",
    ] {
        assert!(message.contains(words), "{api:?}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_and_hard_limits_on_each_api_json_and_sse_and_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("budgets.db");
    let mut rig = Rig::with_store(
        Config::default(),
        store.clone(),
        tempfile::tempdir().unwrap(),
        budgets,
    )
    .await;
    let mut sessions = Vec::new();
    for api in APIS {
        for stream in [false, true] {
            let session = format!("budget-{api:?}-{stream}");
            let (status, _, body) = ask(&rig, api, &session, stream).await;
            assert_eq!(status, 200, "{api:?} stream={stream}: {body}");
            billed(&store);
            // The tenant's soft limit is passed now: warned, still served.
            let (status, warnings, body) =
                ask(&rig, api, &format!("{session}-other"), stream).await;
            assert_eq!(status, 200, "{api:?} stream={stream}: {body}");
            assert!(
                warnings
                    .iter()
                    .any(|w| w.starts_with("tenant/total budget: ") && w.contains("tokens of")),
                "{api:?} stream={stream}: {warnings:?}"
            );
            // The session's hard limit: refused before anything goes upstream.
            let upstream = rig.mock.requests().len();
            let (status, _, body) = ask(&rig, api, &session, stream).await;
            assert_refused(api, status, &body);
            assert_eq!(rig.mock.requests().len(), upstream, "nothing went upstream");
            sessions.push((api, stream, session));
        }
    }
    let before = SqliteStore::open(&store, Durability::Normal)
        .unwrap()
        .spend("tenant:", "total")
        .unwrap();
    rig.stop().await;

    // Counts survive a restart: the same sessions are still over their limit.
    let rig = Rig::with_store(
        Config::default(),
        store.clone(),
        tempfile::tempdir().unwrap(),
        budgets,
    )
    .await;
    for (api, stream, session) in &sessions {
        let (status, _, body) = ask(&rig, *api, session, *stream).await;
        assert_refused(*api, status, &body);
    }
    assert!(rig.mock.requests().is_empty());
    let after = SqliteStore::open(&store, Durability::Normal)
        .unwrap()
        .spend("tenant:", "total")
        .unwrap();
    assert_eq!(after.used, before.used, "refusals bill nothing");
    assert_eq!(after.reserved.tokens, 0, "and keep nothing reserved");
}
