//! Bad input and a failing provider: errors in the API's own shape and status, nothing of a
//! failed response in the store.

use std::time::Duration;

use ctxd_mock::{Config, Reply};
use serde_json::{json, Value};

use crate::support::{branch_messages, Rig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_each_apis_error_shape() {
    let rig = Rig::with(Config::default(), |s| s.max_body_bytes = 4096).await;
    for (path, anthropic) in [
        ("/v1/messages", true),
        ("/v1/chat/completions", false),
        ("/v1/responses", false),
    ] {
        let check = |status: u16, body: &Value| {
            if anthropic {
                assert_eq!(body["type"], "error", "{path} {status}: {body}");
                assert!(body["error"]["message"].is_string());
            } else {
                assert!(
                    body["error"]["message"].is_string(),
                    "{path} {status}: {body}"
                );
                assert!(body["error"]["type"].is_string());
            }
        };
        let r = rig.post(path, &[], b"{\"messages\": [".to_vec()).await;
        assert_eq!(r.status(), 400, "{path}");
        check(
            400,
            &r.bytes()
                .await
                .map(|b| serde_json::from_slice::<Value>(&b).unwrap())
                .unwrap(),
        );
        let r = rig
            .client
            .post(rig.url(path))
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415, "{path}");
        check(
            415,
            &r.bytes()
                .await
                .map(|b| serde_json::from_slice::<Value>(&b).unwrap())
                .unwrap(),
        );
        let r = rig.post(path, &[], vec![b' '; 10_000]).await;
        assert_eq!(r.status(), 413, "{path}");
        check(
            413,
            &r.bytes()
                .await
                .map(|b| serde_json::from_slice::<Value>(&b).unwrap())
                .unwrap(),
        );
        let r = rig.post(path, &[], b"[1, 2]".to_vec()).await;
        assert_eq!(r.status(), 400, "{path}");
    }
    assert!(
        rig.mock.requests().is_empty(),
        "nothing bad reached the provider"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_errors_pass_through_and_failed_streams_end_with_an_error_event() {
    let mut rig = Rig::start().await;
    let h = [("x-api-key", "k"), ("x-ctxd-session", "s")];
    let body = |stream: bool| {
        serde_json::to_vec(&json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
            "stream": stream, "messages": [{"role": "user", "content": "hi"}]}))
        .unwrap()
    };
    rig.mock.script().push(Reply::error(429, "slow down"));
    let r = rig.post("/v1/messages", &h, body(false)).await;
    assert_eq!(r.status(), 429);
    let v: Value = r
        .bytes()
        .await
        .map(|b| serde_json::from_slice::<Value>(&b).unwrap())
        .unwrap();
    assert!(v.to_string().contains("slow down"));

    // Cut after two events: the client gets a well-formed error event at the end.
    rig.mock
        .script()
        .push(Reply::text("partial answer").truncate_after_events(2));
    let r = rig.post("/v1/messages", &h, body(true)).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("event: message_start"));
    assert!(text.trim_end().ends_with('}'), "{text}");
    assert!(text.contains("event: error"), "{text}");

    rig.mock.script().push(Reply::fail_mid_stream("boom"));
    let r = rig.post("/v1/messages", &h, body(true)).await;
    let text = r.text().await.unwrap();
    assert!(text.contains("error"), "{text}");

    let stored = rig.stored().await;
    let session = stored.load(&stored.sessions()[0]);
    let messages = branch_messages(&session);
    assert!(
        messages.iter().all(|(role, _)| role == "User"),
        "no assistant entry from failed responses: {messages:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_or_slow_provider_is_a_gateway_error() {
    let rig = Rig::with(Config::default(), |s| {
        s.read_timeout = Duration::from_millis(500);
    })
    .await;
    rig.mock
        .script()
        .push(Reply::text("late").first_byte_delay(Duration::from_secs(3)));
    let body = serde_json::to_vec(
        &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .unwrap();
    let r = rig.post("/v1/chat/completions", &[], body.clone()).await;
    assert_eq!(r.status(), 504);
    let v: Value = r
        .bytes()
        .await
        .map(|b| serde_json::from_slice::<Value>(&b).unwrap())
        .unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("upstream"));

    let down = Rig::with(Config::default(), |s| {
        s.upstream_openai = "http://127.0.0.1:9".into();
    })
    .await;
    let r = down.post("/v1/chat/completions", &[], body).await;
    assert_eq!(r.status(), 502);
    let v: Value = r
        .bytes()
        .await
        .map(|b| serde_json::from_slice::<Value>(&b).unwrap())
        .unwrap();
    assert_eq!(v["error"]["type"], "server_error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_502_that_names_no_url() {
    // A port nothing listens on: the connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut rig = Rig::with(Config::default(), |s| {
        s.upstream_anthropic = format!("http://127.0.0.1:{port}");
    })
    .await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]});
    let r = rig
        .post(
            "/v1/messages",
            &[("x-api-key", "sk-x")],
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    assert_eq!(r.status(), 502);
    let text = r.text().await.unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], "error");
    assert!(!text.contains(&port.to_string()), "{text}");
    assert!(!text.contains("127.0.0.1"), "{text}");
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_stream_from_upstream_ends_with_the_apis_error_event() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An "upstream" that answers every request with a 200 event stream of garbage.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = upstream.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = upstream.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = "data: {not json at all\n\nnothing: here\n\n";
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                             content-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    let mut rig = Rig::with(Config::default(), |s| {
        s.upstream_anthropic = format!("http://127.0.0.1:{port}");
    })
    .await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let r = rig
        .post(
            "/v1/messages",
            &[("x-api-key", "sk-x")],
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("event: error"), "{text}");
    assert!(text.contains("ended before it completed"), "{text}");
    rig.stop().await;
}

/// Every response names its request: the client's sane `x-request-id`, else a fresh id; a
/// client's own `x-ctxd-request-id` is not taken; the header never goes upstream.
#[tokio::test]
async fn every_response_carries_a_request_id() {
    let mut rig = Rig::start().await;
    let id = |r: &reqwest::Response| {
        r.headers()
            .get("x-ctxd-request-id")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let body = serde_json::to_vec(&json!({
        "model": "claude-sonnet-4-5", "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}]
    }))
    .unwrap();
    let r = rig
        .post(
            "/v1/messages",
            &[("x-request-id", "trace-42")],
            body.clone(),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(id(&r).as_deref(), Some("trace-42"));

    let r = rig
        .post(
            "/v1/messages",
            &[
                ("x-request-id", "no spaces"),
                ("x-ctxd-request-id", "forged"),
            ],
            body,
        )
        .await;
    let fresh = id(&r).unwrap();
    assert!(fresh.starts_with("ctxd-"), "{fresh}");

    // An error of ctxd's own and a route that is not a conversation carry one too.
    let r = rig.post("/v1/messages", &[], b"{".to_vec()).await;
    assert_eq!(r.status(), 400);
    assert!(id(&r).unwrap().starts_with("ctxd-"));
    let r = rig.client.get(rig.url("/healthz")).send().await.unwrap();
    assert!(id(&r).unwrap().starts_with("ctxd-"));

    for sent in rig.mock.requests() {
        assert!(sent.headers.get("x-ctxd-request-id").is_none());
        assert!(sent
            .headers
            .get("x-request-id")
            .is_none_or(|v| v == "trace-42" || v == "no spaces"));
    }
    rig.stop().await;
}
