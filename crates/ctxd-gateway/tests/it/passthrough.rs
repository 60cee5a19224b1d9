//! With nothing to change, what reaches the provider is byte for byte what the client sent:
//! every captured real request (Claude Code, Pi on three APIs, Codex), plain and compressed.

use std::io::Write;
use std::path::PathBuf;

use ctxd_core::model::{EntryKind, Role};
use ctxd_gateway::api::Api;
use ctxd_gateway::request::ParsedRequest;
use serde_json::Value;

use crate::support::Rig;

use ctxd_test_support::shared;

/// (file, path, headers, body bytes) of a captured POST.
pub(crate) type Captured = (String, String, Vec<(String, String)>, Vec<u8>);

/// Every captured POST.
pub(crate) fn captured() -> Vec<Captured> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(shared().join("clients/captured"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            if v["method"] != "POST" {
                continue;
            }
            let headers = v["headers"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "host" | "content-length" | "connection"))
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect();
            out.push((
                f.file_name().unwrap().to_string_lossy().into_owned(),
                v["path"].as_str().unwrap().to_owned(),
                headers,
                serde_json::to_vec(&v["body"]).unwrap(),
            ));
        }
    }
    out
}

/// Send one captured request through the gateway (its answer must be a success) and return
/// what reached the mock: exactly one request.
pub(crate) async fn send_captured(
    rig: &Rig,
    file: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Vec<ctxd_mock::Recorded> {
    rig.mock.clear();
    let mut req = rig.client.post(rig.url(path)).body(body.to_vec());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = req.send().await.unwrap();
    assert!(
        resp.status().is_success(),
        "{file} {path}: {}",
        resp.status()
    );
    let _ = resp.bytes().await.unwrap();
    let got = rig.mock.requests();
    assert_eq!(got.len(), 1, "{file}");
    got
}

async fn without_ctxd_tools() -> Rig {
    Rig::with(ctxd_mock::Config::default(), |s| {
        s.management.tools = ctxd_gateway::config::ToolsSetting::None;
    })
    .await
}

/// With ctxd's tools offered (the default), a captured request gains them after the client's
/// own tools and nothing else changes: every other field keeps its value, the conversation its
/// bytes. A request with no tools of its own (a title, a summary) goes byte-identical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captured_requests_gain_only_ctxds_tools_after_the_clients_own() {
    let rig = Rig::start().await;
    let ours: Vec<&str> = ctxd_engine::tools::specs().iter().map(|s| s.name).collect();
    let mut gained = 0;
    for (file, path, headers, body) in &captured() {
        let got = send_captured(&rig, file, path, headers, body).await;
        assert!(got[0].refused.is_none(), "{file}: {:?}", got[0].refused);
        let sent: serde_json::Value = serde_json::from_slice(body).unwrap();
        let mut upstream: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
        let client_tools = sent
            .get("tools")
            .and_then(|t| t.as_array())
            .map_or(0, Vec::len);
        if client_tools == 0 {
            assert!(
                got[0].body == body.as_slice(),
                "{file}: a request without tools changed"
            );
            continue;
        }
        let tools = upstream["tools"].as_array_mut().unwrap();
        let name = |t: &serde_json::Value| {
            t.get("name")
                .or_else(|| t.pointer("/function/name"))
                .and_then(|n| n.as_str())
                .unwrap_or("")
                .to_owned()
        };
        let added: Vec<String> = tools[client_tools..].iter().map(name).collect();
        assert!(
            !added.is_empty() && added.iter().all(|n| ours.contains(&n.as_str())),
            "{file}: {added:?}"
        );
        tools.truncate(client_tools);
        assert_eq!(upstream, sent, "{file}: more than the tools changed");
        gained += 1;
    }
    assert!(gained >= 5, "{gained} captured requests offered tools");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_captured_request_reaches_the_provider_byte_identical() {
    // Nothing to change: ctxd's own tools not offered (with them, see the next test).
    let mut rig = without_ctxd_tools().await;
    let requests = captured();
    assert!(
        requests.len() >= 10,
        "captured requests: {}",
        requests.len()
    );
    for (file, path, headers, body) in &requests {
        let got = send_captured(&rig, file, path, headers, body).await;
        assert_eq!(got[0].path, *path, "{file}: the query (?beta=true) is kept");
        assert!(
            got[0].body == body.as_slice(),
            "{file} {path}: body changed on the way"
        );
        for (k, v) in headers {
            if k == "accept-encoding" {
                continue; // the gateway reads the response, so it asks for it uncompressed
            }
            assert_eq!(got[0].header(k), Some(v.as_str()), "{file}: header {k}");
        }
    }
    // Each captured conversation is in the store, one session per client session, and a
    // conversation's second request added only its new messages, although clients move
    // `cache_control` (Claude Code's first message differs byte-wise between its requests).
    let mut expected: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for (file, path, _, body) in &requests {
        let api = match path.split('?').next().unwrap() {
            "/v1/messages" => Api::Anthropic,
            "/v1/chat/completions" => Api::Chat,
            _ => Api::Responses,
        };
        let req = ParsedRequest::parse(api, body).unwrap();
        let not_assistant = (0..req.elements.len())
            .filter(|&i| req.message(body, i).role != Role::Assistant)
            .count();
        expected.insert((file.clone(), path.clone()), not_assistant);
    }
    let stored = rig.stored().await;
    let mut got: Vec<usize> = stored
        .sessions()
        .iter()
        .map(|s| {
            stored
                .load(s)
                .entries
                .iter()
                .filter(|e| matches!(&e.kind, EntryKind::Message(m) if m.role != Role::Assistant))
                .count()
        })
        .collect();
    let mut want: Vec<usize> = expected.into_values().collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "non-assistant messages per session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_bodies_pass_through_compressed_and_are_recorded() {
    let mut rig = without_ctxd_tools().await;
    let (_, path, headers, body) = captured()
        .into_iter()
        .find(|(f, ..)| f.contains("codex"))
        .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&body).unwrap();
    let gz = gz.finish().unwrap();
    let mut req = rig
        .client
        .post(rig.url(&path))
        .header("content-encoding", "gzip")
        .body(gz.clone());
    for (k, v) in &headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = req.send().await.unwrap();
    assert!(resp.status().is_success());
    let _ = resp.bytes().await.unwrap();
    let got = rig.mock.requests();
    assert!(got[0].body == gz.as_slice());
    assert_eq!(got[0].header("content-encoding"), Some("gzip"));
    let stored = rig.stored().await;
    let sessions = stored.sessions();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].meta.agent.map(|a| a.as_str()), Some("codex"));
    let messages = crate::support::branch_messages(&stored.load(&sessions[0]));
    assert!(messages.len() >= 2, "{messages:?}");
}
