//! The gateway under abuse and at shutdown: a client stalled in its headers or its body, more
//! connections than the cap, a SIGTERM (here: the stop signal) with a stalled client and a long
//! stream in flight. Each limit answers in the API's shape; shutdown ends by its deadline.

use std::time::{Duration, Instant};

use ctxd_mock::{Config, Reply};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::Rig;

/// Read until the peer closes (or `limit` passes: then the test fails).
async fn read_to_close(s: &mut TcpStream, limit: Duration) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(limit, s.read_to_end(&mut out))
        .await
        .expect("the gateway did not close the connection")
        .ok();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_headers_are_dropped_and_a_trickled_body_is_answered_408() {
    let mut rig = Rig::with(Config::default(), |s| {
        s.header_timeout = Duration::from_secs(1);
        s.body_timeout = Duration::from_secs(1);
    })
    .await;
    let mut stalled = TcpStream::connect(rig.addr()).await.unwrap();
    stalled
        .write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    // Closed (hyper answers 408 or just closes), well before the 60 s a test would wait.
    let answer = read_to_close(&mut stalled, Duration::from_secs(20)).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );

    let mut trickle = TcpStream::connect(rig.addr()).await.unwrap();
    trickle
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"model\":",
        )
        .await
        .unwrap();
    let answer = read_to_close(&mut trickle, Duration::from_secs(20)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("did not arrive"));
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_503_at_once_and_idle_ones_are_reaped() {
    let mut rig = Rig::with(Config::default(), |s| {
        s.max_connections = 2;
        s.header_timeout = Duration::from_secs(1);
    })
    .await;
    let idle = [
        TcpStream::connect(rig.addr()).await.unwrap(),
        TcpStream::connect(rig.addr()).await.unwrap(),
    ];
    // Both slots are taken once the gateway has accepted them: a third connection is
    // answered at once, in a body both APIs' clients read as an error.
    let started = Instant::now();
    let refused = loop {
        let mut third = TcpStream::connect(rig.addr()).await.unwrap();
        third
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut third, Duration::from_secs(20)).await;
        if answer.starts_with("HTTP/1.1 503") {
            break answer;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{answer}");
    };
    let body: Value = serde_json::from_str(refused.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["type"], "error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("too many"));
    // The idle ones go after the header timeout; then requests are served again.
    let started = Instant::now();
    loop {
        if let Ok(r) = rig.client.get(rig.url("/healthz")).send().await {
            if r.status() == 200 {
                break;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(idle);
    rig.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_by_its_deadline_with_a_stalled_client_and_a_long_stream() {
    let mut rig = Rig::with(Config::default(), |s| {
        s.shutdown_timeout = Duration::from_secs(1);
        s.header_timeout = Duration::from_secs(300);
    })
    .await;
    // A stream of a minute or more.
    rig.mock
        .script()
        .push(Reply::text("word ".repeat(20_000)).event_delay(Duration::from_millis(100)));
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": true,
        "messages": [{"role": "user", "content": "talk for long"}]});
    let long = rig
        .post(
            "/v1/messages",
            &[("x-api-key", "sk-long"), ("x-ctxd-session", "long")],
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    assert_eq!(long.status(), 200);
    let mut stalled = TcpStream::connect(rig.addr()).await.unwrap();
    stalled
        .write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let reader = tokio::spawn(async move { long.text().await.unwrap_or_default() });
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(30), rig.stop())
        .await
        .expect("shutdown did not end");
    let took = started.elapsed();
    let streamed = reader.await.unwrap();
    assert!(!streamed.contains("message_stop"), "the stream was cut");
    assert!(
        streamed.contains("event: error") && streamed.contains("shutting down"),
        "{}",
        &streamed[streamed.len().saturating_sub(400)..]
    );
    let left = read_to_close(&mut stalled, Duration::from_secs(5)).await;
    assert!(!left.contains("200 OK"), "{left}");
    eprintln!("shutdown took {took:?}");
    // The store was closed cleanly: it opens, and holds no part of the cut answer.
    let stored = crate::support::Stored(
        ctxd_store::SqliteStore::open(&rig.store_path, ctxd_store::Durability::Full).unwrap(),
    );
    assert_eq!(stored.0.integrity_check().unwrap(), "ok");
    for record in stored.sessions() {
        let s = stored.load(&record);
        assert!(crate::support::branch_messages(&s)
            .iter()
            .all(|(role, _)| role != "Assistant"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_clients_are_refused_beyond_loopback_unless_allowed() {
    let body = serde_json::to_vec(&json!({"model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}]}))
    .unwrap();
    for allow in [false, true] {
        let mut rig = Rig::with(Config::default(), |s| {
            s.listen = "0.0.0.0:0".parse().unwrap();
            s.allow_keyless = allow;
        })
        .await;
        let r = rig.post("/v1/chat/completions", &[], body.clone()).await;
        if allow {
            assert_eq!(r.status(), 200);
        } else {
            assert_eq!(r.status(), 401);
            let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
            assert!(
                v["error"]["message"].as_str().unwrap().contains("API key"),
                "{v}"
            );
        }
        let r = rig
            .post(
                "/v1/chat/completions",
                &[("authorization", "Bearer sk-k")],
                body.clone(),
            )
            .await;
        assert_eq!(r.status(), 200);
        rig.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_body_in_flight_leaves_small_requests_served_and_refuses_another_huge_one() {
    let mut rig = Rig::with(Config::default(), |s| {
        s.max_body_bytes = 4 << 20;
        s.max_bodies_in_flight_bytes = 3 << 20;
        s.body_timeout = Duration::from_secs(60);
    })
    .await;
    // A client declares a 4 MiB body and trickles it: it holds the whole budget.
    let mut hog = TcpStream::connect(rig.addr()).await.unwrap();
    hog.write_all(
        format!(
            "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             x-api-key: sk-hog\r\ncontent-length: {}\r\n\r\n{{\"model\":",
            4 << 20
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A small request of a new session is served at once.
    let small = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let r = rig
        .post(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-small")],
            serde_json::to_vec(&small).unwrap(),
        )
        .await;
    assert_eq!(r.status(), 200);
    // Another huge one finds the budget spent: 503 in its API's shape, after a short wait.
    let huge = vec![b' '; 3 << 20];
    let r = rig
        .post(
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-huge")],
            huge,
        )
        .await;
    assert_eq!(r.status(), 503);
    let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bodies in flight"),
        "{v}"
    );
    drop(hog);
    rig.stop().await;
}
