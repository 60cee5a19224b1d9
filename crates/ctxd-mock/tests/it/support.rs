//! Shared helpers: a client that never uses a proxy, requests, and a small SSE reader.

use ctxd_mock::{Config, MockServer};
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use serde_json::Value;

pub async fn start() -> MockServer {
    start_with(Config::default()).await
}

pub async fn start_with(config: Config) -> MockServer {
    MockServer::start(config).await.unwrap()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A finished response: status, headers, whole body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn events(&self) -> Vec<Event> {
        sse(&self.body)
    }

    pub fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

pub async fn post(mock: &MockServer, path: &str, body: &Value) -> Reply {
    post_raw(mock, path, body.to_string().into_bytes(), &[]).await
}

pub async fn post_raw(
    mock: &MockServer,
    path: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut req = client()
        .post(format!("{}{path}", mock.base_url()))
        .body(body);
    req = req.header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let res = req.send().await.unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.bytes().await.unwrap().to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

/// Reads a response to its end or until the connection breaks: (bytes, broke).
pub async fn read_until_break(mut res: reqwest::Response) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        match res.chunk().await {
            Ok(Some(chunk)) => out.extend_from_slice(&chunk),
            Ok(None) => return (out, false),
            Err(_) => return (out, true),
        }
    }
}

/// One SSE event: its `event:` name and its `data:` (JSON when it parses, else a string).
#[derive(Debug, Clone)]
pub struct Event {
    pub name: Option<String>,
    pub data: Value,
}

/// Splits an SSE body on blank lines; comment lines (`:`) are skipped.
pub fn sse(body: &[u8]) -> Vec<Event> {
    let text = std::str::from_utf8(body).unwrap();
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .filter_map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push(v);
                } else {
                    assert!(line.starts_with(':'), "unexpected SSE line {line:?}");
                }
            }
            if data.is_empty() {
                return None;
            }
            let data = data.join("\n");
            let data = serde_json::from_str(&data).unwrap_or(Value::String(data));
            Some(Event { name, data })
        })
        .collect()
}

/// The names of the events (Anthropic and Responses name every event).
pub fn names(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e.name.as_deref().unwrap_or(""))
        .collect()
}
