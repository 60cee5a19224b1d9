//! One gateway in front of two providers: requests go by model and API to their route's
//! upstream (JSON, SSE and passthrough alike), with the client's own credential; the response
//! names the route, the store records it, and the stats sum by it.

use ctxd_gateway::routes::Route;
use ctxd_gateway::stats::{grouped, GroupBy};
use ctxd_mock::{Config, MockServer};
use serde_json::json;

use crate::support::Rig;

fn models(mock: &MockServer) -> Vec<(String, String)> {
    mock.requests()
        .iter()
        .map(|r| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            (
                r.path.clone(),
                body["model"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_models_two_upstreams_one_gateway() {
    let other = MockServer::start(Config::default()).await.unwrap();
    let other_url = other.base_url();
    let mut rig = Rig::with(Config::default(), |s| {
        s.routes = vec![
            Route {
                model: "deepseek-*".into(),
                api: Some(ctxd_gateway::routes::RouteApi::Anthropic),
                upstream: other_url.clone(),
                name: Some("deepseek".into()),
            }
            .checked()
            .unwrap(),
            Route::parse(&format!("chat:local-*={other_url}")).unwrap(),
        ];
    })
    .await;
    let messages = json!([{"role": "user", "content": "hello"}]);
    let anthropic = |model: &str, stream: bool| {
        serde_json::to_vec(
            &json!({"model": model, "max_tokens": 10, "stream": stream, "messages": messages}),
        )
        .unwrap()
    };
    let chat =
        |model: &str| serde_json::to_vec(&json!({"model": model, "messages": messages})).unwrap();

    let default = rig
        .post(
            "/v1/messages",
            &[("x-api-key", "sk-ant"), ("x-ctxd-session", "a")],
            anthropic("claude-sonnet-4-5", false),
        )
        .await;
    assert_eq!(default.status(), 200);
    assert!(default.headers().get("x-ctxd-upstream").is_none());

    for stream in [false, true] {
        let routed = rig
            .post(
                "/v1/messages",
                &[("x-api-key", "sk-deep"), ("x-ctxd-session", "d")],
                anthropic("deepseek-chat", stream),
            )
            .await;
        assert_eq!(routed.status(), 200);
        assert_eq!(routed.headers()["x-ctxd-upstream"], "deepseek");
        let _ = routed.bytes().await.unwrap();
    }
    let counted = rig
        .post(
            "/v1/messages/count_tokens",
            &[("x-api-key", "sk-deep")],
            serde_json::to_vec(&json!({"model": "deepseek-chat", "messages": messages})).unwrap(),
        )
        .await;
    assert_eq!(counted.headers()["x-ctxd-upstream"], "deepseek");

    let local = rig
        .post(
            "/v1/chat/completions",
            &[
                ("authorization", "Bearer sk-local"),
                ("x-ctxd-session", "l"),
            ],
            chat("local-llama"),
        )
        .await;
    assert_eq!(local.status(), 200);
    assert_eq!(local.headers()["x-ctxd-upstream"], "127.0.0.1");
    let gpt = rig
        .post(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-oai"), ("x-ctxd-session", "g")],
            chat("gpt-5"),
        )
        .await;
    assert_eq!(gpt.status(), 200);
    // The Anthropic-only route does not take a Chat request of its pattern.
    let deepseek_chat = rig
        .post(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-oai"), ("x-ctxd-session", "dc")],
            chat("deepseek-chat"),
        )
        .await;
    assert!(deepseek_chat.headers().get("x-ctxd-upstream").is_none());

    let to_default = models(&rig.mock);
    let to_other = models(&other);
    assert_eq!(
        to_other
            .iter()
            .map(|(p, m)| (p.as_str(), m.as_str()))
            .collect::<Vec<_>>(),
        [
            ("/v1/messages", "deepseek-chat"),
            ("/v1/messages", "deepseek-chat"),
            ("/v1/messages/count_tokens", "deepseek-chat"),
            ("/v1/chat/completions", "local-llama"),
        ]
    );
    assert_eq!(
        to_default
            .iter()
            .map(|(p, m)| (p.as_str(), m.as_str()))
            .collect::<Vec<_>>(),
        [
            ("/v1/messages", "claude-sonnet-4-5"),
            ("/v1/chat/completions", "gpt-5"),
            ("/v1/chat/completions", "deepseek-chat"),
        ]
    );
    // Each upstream got the client's own credential.
    for r in other.requests() {
        let key = r
            .headers
            .get("x-api-key")
            .or_else(|| r.headers.get("authorization"))
            .unwrap();
        assert!(key == "sk-deep" || key == "Bearer sk-local", "{key:?}");
    }
    for r in rig.mock.requests() {
        assert!(r.headers.get("x-api-key").is_none_or(|k| k == "sk-ant"));
    }

    // The records name the route; the stats sum by it.
    let stored = rig.stored().await;
    let sessions = stored.sessions();
    let loaded: Vec<_> = sessions.iter().map(|r| stored.load(r)).collect();
    let by = grouped(GroupBy::Upstream, sessions.iter().zip(loaded.iter()));
    let requests = |key: &str| {
        by.groups
            .iter()
            .find(|g| g.key == key)
            .map_or(0, |g| g.totals.requests)
    };
    assert_eq!(
        requests("deepseek"),
        2,
        "{:?}",
        by.groups.iter().map(|g| &g.key).collect::<Vec<_>>()
    );
    assert_eq!(requests("127.0.0.1"), 1);
    assert_eq!(requests("(the API's upstream)"), 3);
}
