//! The record: raw bytes exactly as received, headers, paths; its JSON form; recording modes.

use std::io::Write;

use base64::Engine as _;
use ctxd_mock::{Config, Recording};
use serde_json::{json, Value};

use crate::support::{client, post, post_raw, start, start_with};

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn chat_body() -> Vec<u8> {
    // Odd spacing and escapes: the record must keep them byte for byte.
    br#"{ "model":"gpt-4o-mini" , "messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00"}],
      "tools":[{"type":"function","function":{"name":"bash","parameters":{}}}] }"#
        .to_vec()
}

#[tokio::test]
async fn bodies_headers_and_paths_are_kept_exactly() {
    let mock = start().await;
    let body = chat_body();
    post_raw(
        &mock,
        "/v1/chat/completions?x=1&y=%20",
        body.clone(),
        &[("x-api-key", "k1"), ("session_id", "s")],
    )
    .await;
    client().head(mock.base_url()).send().await.unwrap();
    let recs = mock.requests();
    assert_eq!(recs.len(), 2);
    let r = &recs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions?x=1&y=%20");
    assert_eq!(r.route(), "/v1/chat/completions");
    assert_eq!(&r.body[..], &body[..]);
    assert_eq!(r.body_len, body.len());
    assert_eq!(r.header("x-api-key"), Some("k1"));
    assert_eq!(r.header("session_id"), Some("s"));
    assert_eq!(r.json().unwrap()["model"], "gpt-4o-mini");
    assert!(r.received_at > 1.0e9);
    assert_eq!(
        (
            recs[1].method.as_str(),
            recs[1].path.as_str(),
            recs[1].body_len
        ),
        ("HEAD", "/", 0)
    );
    mock.clear();
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn compressed_bodies_are_recorded_raw_and_read_decoded() {
    let mock = start().await;
    let body = chat_body();
    let gz = gzip(&body);
    let r = post_raw(
        &mock,
        "/v1/chat/completions",
        gz.clone(),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!(
        r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "bash"
    );
    let zst =
        ruzstd::encoding::compress_to_vec(&body[..], ruzstd::encoding::CompressionLevel::Fastest);
    let r = post_raw(
        &mock,
        "/v1/chat/completions",
        zst.clone(),
        &[("content-encoding", "zstd")],
    )
    .await;
    assert_eq!(r.json()["choices"][0]["finish_reason"], "tool_calls");
    let usage = r.json()["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert_eq!(usage, body.len() / 4, "usage counts decoded bytes");
    let recs = mock.requests();
    assert_eq!(&recs[0].body[..], &gz[..]);
    assert_eq!(&recs[1].body[..], &zst[..]);
    assert_eq!(recs[1].decoded_body().unwrap(), body);

    let r = post_raw(
        &mock,
        "/v1/responses",
        b"garbage".to_vec(),
        &[("content-encoding", "zstd")],
    )
    .await;
    assert_eq!(r.status, 400);
    let r = post_raw(
        &mock,
        "/v1/messages",
        b"x".to_vec(),
        &[("content-encoding", "br")],
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("br"));
}

#[tokio::test]
async fn large_bodies_pass_and_the_limit_answers_413() {
    let mock = start_with(Config {
        body_limit: 4 << 20,
        ..Config::default()
    })
    .await;
    let filler = "x".repeat(3 << 20); // over axum's default 2 MB extractor limit
                                      // ~786k tokens: a model with a 1M window.
    let body = json!({"model": "claude-sonnet-4-5[1m]",
                      "messages": [{"role": "user", "content": filler}]})
    .to_string();
    let r = post_raw(&mock, "/v1/messages", body.clone().into_bytes(), &[]).await;
    assert_eq!(r.status, 200);
    assert_eq!(mock.requests()[0].body.len(), body.len());
    let big = vec![b' '; 5 << 20];
    let r = post_raw(&mock, "/v1/messages", big, &[]).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["error"]["type"], "request_too_large");
}

#[tokio::test]
async fn the_record_over_http() {
    let mock = start().await;
    post_raw(
        &mock,
        "/v1/messages?beta=true",
        chat_body(),
        &[("anthropic-version", "2023-06-01")],
    )
    .await;
    let binary = gzip(b"{}");
    post_raw(
        &mock,
        "/v1/responses",
        binary.clone(),
        &[("content-encoding", "gzip")],
    )
    .await;
    let url = format!("{}/_mock/requests", mock.base_url());
    let all: Value = serde_json::from_slice(
        &client()
            .get(&url)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 2, "the record route is not recorded");
    assert_eq!(all[0]["path"], "/v1/messages?beta=true");
    assert_eq!(all[0]["headers"]["anthropic-version"], "2023-06-01");
    assert_eq!(all[0]["body_encoding"], "utf8");
    assert_eq!(
        all[0]["body"].as_str().unwrap().as_bytes(),
        &chat_body()[..]
    );
    assert_eq!(all[1]["body_encoding"], "base64");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(all[1]["body"].as_str().unwrap())
        .unwrap();
    assert_eq!(decoded, binary);
    let r = client().delete(&url).send().await.unwrap();
    assert_eq!(r.status(), 204);
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn meta_and_off_keep_less() {
    let meta = start_with(Config {
        recording: Recording::Meta,
        ..Config::default()
    })
    .await;
    post_raw(&meta, "/v1/chat/completions", chat_body(), &[]).await;
    let r = &meta.requests()[0];
    assert!(r.body.is_empty());
    assert_eq!(r.body_len, chat_body().len());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let off = start_with(Config {
        recording: Recording::Off,
        ..Config::default()
    })
    .await;
    assert_eq!(
        post_raw(&off, "/v1/chat/completions", chat_body(), &[])
            .await
            .status,
        200
    );
    assert!(off.requests().is_empty());
}

#[tokio::test]
async fn log_file_gets_one_line_per_request() {
    let dir = std::env::temp_dir().join(format!("ctxd-mock-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("requests.jsonl");
    let _ = std::fs::remove_file(&path);
    let mock = start_with(Config {
        log: Some(path.clone()),
        recording: Recording::Off,
        ..Config::default()
    })
    .await;
    post(&mock, "/v1/messages", &json!({"messages": []})).await;
    post(&mock, "/v1/responses", &json!({"input": "hi"})).await;
    mock.shutdown().await;
    // The writer thread flushes after each burst; give it a moment.
    let mut lines = Vec::new();
    for _ in 0..100 {
        lines = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        if lines.len() == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(lines.len(), 2);
    let first: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(first["path"], "/v1/messages");
    assert_eq!(first["body"], json!({"messages": []}).to_string());
    std::fs::remove_dir_all(&dir).unwrap();
}
