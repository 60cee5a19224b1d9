//! Starting, stopping, ports, the blocking variant, health routes.

use ctxd_mock::{Config, MockServer, Reply};
use serde_json::json;

use crate::support::{client, post, start};

#[tokio::test]
async fn root_health_and_models() {
    let mock = start().await;
    let base = mock.base_url();
    assert!(base.starts_with("http://127.0.0.1:"));
    assert_eq!(client().head(&base).send().await.unwrap().status(), 200);
    assert_eq!(client().get(&base).send().await.unwrap().status(), 200);
    let models: serde_json::Value = serde_json::from_slice(
        &client()
            .get(format!("{base}/v1/models"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(models["data"].as_array().unwrap().len() >= 2);
    assert_eq!(models["object"], "list");
}

#[tokio::test]
async fn head_status_is_configurable() {
    let mock = MockServer::start(Config {
        head_status: 404,
        ..Config::default()
    })
    .await
    .unwrap();
    assert_eq!(
        client()
            .head(mock.base_url())
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
}

#[tokio::test]
async fn shutdown_closes_the_port() {
    let mock = start().await;
    let addr = mock.addr();
    post(&mock, "/v1/messages", &json!({"messages": []})).await;
    mock.shutdown().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still listening after shutdown"
    );
}

#[tokio::test]
async fn a_taken_port_is_an_error() {
    let mock = start().await;
    let err = MockServer::start(Config {
        port: mock.addr().port(),
        ..Config::default()
    })
    .await
    .unwrap_err();
    assert!(err.to_string().contains(&mock.addr().port().to_string()));
}

#[test]
fn blocking_variant_serves_sync_tests() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    mock.script().push(Reply::text("from a thread"));
    let addr = mock.addr();
    // A plain blocking HTTP/1.1 exchange, no async runtime on this side.
    use std::io::{Read, Write};
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("from a thread"));
    assert_eq!(mock.requests()[0].body, body.as_bytes());
    mock.stop();
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening after stop"
    );
}
