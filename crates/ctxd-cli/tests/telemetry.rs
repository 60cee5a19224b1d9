#![allow(clippy::unwrap_used, clippy::expect_used)]

//! OpenTelemetry, opt-in: with `--otlp-endpoint` an OTLP receiver (the mock's `/v1/traces`)
//! gets a span per request with the GenAI attributes and ctxd's, never content; without it,
//! nothing is exported even where the standard OTEL_* variables name a collector.

mod common;

use std::time::{Duration, Instant};

use common::post;
use ctxd_mock::{Config, MockServer};
use serde_json::Value;

const SECRET_PROMPT: &str = "PROMPT-CONTENT-NEVER-EXPORTED-7";

fn body(stream: bool) -> String {
    serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 50, "stream": stream,
        "messages": [{"role": "user", "content": SECRET_PROMPT}]})
    .to_string()
}

/// The spans the receiver got: every span of every export, as JSON.
fn spans(receiver: &MockServer) -> Vec<Value> {
    receiver
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/traces")
        .flat_map(|r| {
            let doc: Value = serde_json::from_slice(&r.body).unwrap();
            let mut out = Vec::new();
            for rs in doc["resourceSpans"].as_array().cloned().unwrap_or_default() {
                for ss in rs["scopeSpans"].as_array().cloned().unwrap_or_default() {
                    out.extend(ss["spans"].as_array().cloned().unwrap_or_default());
                }
            }
            out
        })
        .collect()
}

/// A span's attribute by key, as its OTLP JSON value (`{"stringValue": ...}`, ...).
fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn int(v: Option<&Value>) -> i64 {
    let v = v.unwrap_or_else(|| panic!("attribute missing"));
    match &v["intValue"] {
        Value::String(s) => s.parse().unwrap(),
        n => n.as_i64().unwrap_or_else(|| panic!("not an int: {v}")),
    }
}

#[test]
fn each_request_is_a_span_with_genai_and_ctxd_attributes_and_no_content() {
    let upstream = MockServer::start_blocking(Config::default()).unwrap();
    let receiver = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("otel.db");
    let mut gw = common::serve(
        &store,
        &upstream.base_url(),
        &["--otlp-endpoint", &receiver.base_url()],
    );
    for (session, stream) in [("otel-json", false), ("otel-sse", true)] {
        let h = [
            ("x-api-key", "sk-otel"),
            ("x-ctxd-session", session),
            ("x-ctxd-project", "/work/otel-project"),
        ];
        let resp = post(&gw.addr, "/v1/messages", &h, &body(stream));
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    }
    // The batch goes out within a second; the gateway's shutdown sends what is left.
    let started = Instant::now();
    while spans(&receiver).len() < 2 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    common::stop(&mut gw);
    let spans = spans(&receiver);
    assert_eq!(spans.len(), 2, "one span per request: {spans:?}");
    for span in &spans {
        assert_eq!(span["name"], "chat claude-sonnet-4-5", "{span}");
        assert_eq!(span["kind"], 3, "SPAN_KIND_CLIENT: {span}");
        let text = |k: &str| {
            attr(span, k)
                .and_then(|v| v["stringValue"].as_str())
                .map(str::to_owned)
        };
        assert_eq!(text("gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(text("gen_ai.provider.name").as_deref(), Some("anthropic"));
        assert_eq!(
            text("gen_ai.request.model").as_deref(),
            Some("claude-sonnet-4-5")
        );
        assert!(text("gen_ai.response.id").is_some(), "{span}");
        assert_eq!(text("server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(text("ctxd.project").as_deref(), Some("/work/otel-project"));
        assert_eq!(text("ctxd.agent").as_deref(), Some("sdk"));
        assert!(text("ctxd.session.key").is_some_and(|k| k.starts_with("otel-")));
        assert!(int(attr(span, "gen_ai.usage.input_tokens")) > 0, "{span}");
        assert!(int(attr(span, "gen_ai.usage.output_tokens")) > 0, "{span}");
        assert!(attr(span, "gen_ai.usage.cache_read.input_tokens").is_some());
        assert!(int(attr(span, "ctxd.tokens.whole")) > 0, "{span}");
        assert!(attr(span, "ctxd.tokens.saved.windows").is_some(), "{span}");
        assert!(
            attr(span, "ctxd.cost.usd").and_then(|v| v["doubleValue"].as_f64()) > Some(0.0),
            "{span}"
        );
    }
    let all = receiver
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect::<String>();
    assert!(
        !all.contains(SECRET_PROMPT),
        "content went to the collector"
    );
    assert!(
        !all.contains("sk-otel"),
        "a credential went to the collector"
    );
}

#[test]
fn without_an_endpoint_nothing_is_exported_even_where_otel_variables_name_a_collector() {
    let upstream = MockServer::start_blocking(Config::default()).unwrap();
    let receiver = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("quiet.db");
    // The standard variables an SDK would follow: ctxd does not.
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.base_url());
    std::env::set_var(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        format!("{}/v1/traces", receiver.base_url()),
    );
    let mut gw = common::serve(&store, &upstream.base_url(), &[]);
    let resp = post(
        &gw.addr,
        "/v1/messages",
        &[("x-api-key", "sk-quiet")],
        &body(false),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    std::thread::sleep(Duration::from_millis(1_500));
    common::stop(&mut gw);
    assert!(
        receiver.requests().is_empty(),
        "no connection to a collector without --otlp-endpoint"
    );
}
