#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `ctxd serve` as users run it: the real binary in front of the mock upstream. The store is
//! readable by `ctxd sessions` and `ctxd report` while it runs; SIGTERM lets the in-flight
//! stream finish, writes everything and exits cleanly.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{post, Gateway};
use ctxd_mock::{Config, MockServer, Reply};

fn ctxd() -> Command {
    common::ctxd()
}

fn serve(store: &std::path::Path, upstream: &str) -> Gateway {
    common::serve(store, upstream, &[])
}

/// `ctxd report KEY --store STORE --json`, which must succeed.
fn report_json(store: &std::path::Path, key: &str) -> serde_json::Value {
    let out =
        common::succeed(ctxd().args(["report", key, "--store", store.to_str().unwrap(), "--json"]));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn body(stream: bool, messages: serde_json::Value) -> String {
    serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 50, "stream": stream,
        "messages": messages})
    .to_string()
}

#[test]
fn serve_records_while_the_cli_reads_and_stops_cleanly_on_sigterm() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("gw.db");
    let mut gw = serve(&store, &mock.base_url());
    let h = [("x-api-key", "sk-cli"), ("x-ctxd-session", "cli-session")];

    let first = post(
        &gw.addr,
        "/v1/messages",
        &h,
        &body(
            false,
            serde_json::json!([{"role": "user", "content": "hello"}]),
        ),
    );
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");

    // The CLI reads the store while the gateway runs. The store writer is asynchronous (it
    // gathers writes for up to 20 ms into one commit): poll until the turn is there.
    let started = Instant::now();
    let (listed, report) = loop {
        let listed = ctxd()
            .args(["sessions", "--store", store.to_str().unwrap(), "--json"])
            .output()
            .unwrap();
        assert!(
            listed.status.success(),
            "{}",
            String::from_utf8_lossy(&listed.stderr)
        );
        let listed = String::from_utf8(listed.stdout).unwrap();
        if listed.contains("\"key\":\"cli-session\"") {
            let report = report_json(&store, "cli-session");
            if report["session"]["turn_count"] == 1 || started.elapsed() > Duration::from_secs(10) {
                break (listed, report);
            }
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{listed}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(listed.contains("\"agent\":\"api\""), "{listed}");
    assert_eq!(report["session"]["turn_count"], 1, "{report}");

    // A slow stream is in flight when SIGTERM arrives: it finishes, then the process exits.
    mock.script()
        .push(Reply::text("slow answer").event_delay(Duration::from_millis(150)));
    let addr = gw.addr.clone();
    let slow = std::thread::spawn(move || {
        post(
            &addr,
            "/v1/messages",
            &[("x-api-key", "sk-cli"), ("x-ctxd-session", "cli-session")],
            &body(
                true,
                serde_json::json!([
                    {"role": "user", "content": "hello"},
                    {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
                    {"role": "user", "content": "and now slowly"},
                ]),
            ),
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let killed = Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let streamed = slow.join().unwrap();
    assert!(streamed.contains("event: message_stop"), "{streamed}");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = gw.child.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert!(TcpStream::connect(&gw.addr).is_err(), "no longer accepting");

    // Everything is in the store, the slow answer included.
    let report = report_json(&store, "cli-session");
    assert_eq!(report["session"]["turn_count"], 2, "{report}");
}

/// One HTTP/1.1 GET; the whole response as text.
fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn metrics_list_every_metric_from_the_start_and_one_turn_reads_right() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("gw.db");
    let gw = serve(&store, &mock.base_url());

    // Before any request: every metric README names, at zero.
    let metrics = get(&gw.addr, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    for name in [
        "ctxd_requests_total{",
        "ctxd_request_seconds_count{",
        "ctxd_upstream_seconds_count{",
        "ctxd_overhead_seconds_count{",
        "ctxd_rewritten_total{",
        "ctxd_rejected_total",
        "ctxd_store_queue_depth",
        "ctxd_store_write_errors_total",
        "ctxd_store_commit_seconds_count",
    ] {
        assert!(metrics.contains(name), "{name} missing: {metrics}");
    }
    assert!(metrics.contains("# HELP ctxd_requests_total"), "{metrics}");

    // One turn: the text report says "1 turn", and the headline's figure is in the per-turn
    // table (the last prompt, or a "now" row after it).
    let h = [("x-api-key", "sk-one"), ("x-ctxd-session", "one-turn")];
    let reply = post(
        &gw.addr,
        "/v1/messages",
        &h,
        &body(
            false,
            serde_json::json!([{"role": "user", "content": "hi"}]),
        ),
    );
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // The store writer is asynchronous: poll until the turn (and its answer) is there.
    let started = Instant::now();
    let r = loop {
        let out = ctxd()
            .args([
                "report",
                "one-turn",
                "--json",
                "--store",
                store.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        if out.status.success() {
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if r["billed"]["responses"] == 1 {
                break r;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never stored");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = ctxd()
        .args([
            "report",
            "one-turn",
            "--text",
            "--store",
            store.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("(1 turn:"), "{text}");
    assert!(
        !text.contains("1 turns") && !text.contains("1 responses"),
        "{text}"
    );
    let headline = r["headline"]["tokens"].as_u64().unwrap();
    let last = &r["turns"][0];
    let last = last["provider"]
        .as_u64()
        .or(last["estimate"].as_u64())
        .unwrap();
    let shown = format!(" {headline} ");
    let table = text.split("Context per turn").nth(1).unwrap();
    assert!(
        table.lines().any(|l| l.contains(&shown)),
        "headline {headline} (last prompt {last}) not in the table: {text}"
    );
}

#[test]
fn a_second_sigterm_exits_at_once_with_the_store_closed() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("gw.db");
    let mut gw = serve(&store, &mock.base_url());
    // A stream of a minute or more, against the default 30 s shutdown deadline.
    mock.script()
        .push(Reply::text("word ".repeat(20_000)).event_delay(Duration::from_millis(100)));
    let addr = gw.addr.clone();
    let long = std::thread::spawn(move || {
        post(
            &addr,
            "/v1/messages",
            &[("x-api-key", "sk-cli"), ("x-ctxd-session", "long")],
            &body(
                true,
                serde_json::json!([{"role": "user", "content": "talk for long"}]),
            ),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    let pid = gw.child.id().to_string();
    let term = || {
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
    };
    term();
    std::thread::sleep(Duration::from_millis(300));
    assert!(gw.child.try_wait().unwrap().is_none(), "the first waits");
    let started = Instant::now();
    term();
    let status = loop {
        if let Some(s) = gw.child.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    let streamed = long.join().unwrap();
    assert!(!streamed.contains("message_stop"));
    let store = ctxd_store::SqliteStore::open(&store, ctxd_store::Durability::Full).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
}

#[test]
fn a_second_gateway_on_the_same_store_is_refused_and_cli_writes_stay_correct() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("gw.db");
    let mut gw = serve(&store, &mock.base_url());

    let second = ctxd()
        .args(["--store", store.to_str().unwrap(), "serve"])
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("already served by another ctxd serve"),
        "{err}"
    );
    assert!(err.contains(&format!("pid {}", gw.child.id())), "{err}");

    // CLI writes beside the running gateway (their own transactions): notes and an import,
    // while the gateway records turns.
    let addr = gw.addr.clone();
    let turns = std::thread::spawn(move || {
        let mut messages = vec![serde_json::json!({"role": "user", "content": "turn 0"})];
        for i in 1..=20 {
            let out = post(
                &addr,
                "/v1/messages",
                &[("x-api-key", "sk-cli"), ("x-ctxd-session", "beside")],
                &body(false, serde_json::Value::Array(messages.clone())),
            );
            assert!(out.starts_with("HTTP/1.1 200"), "{out}");
            let json: serde_json::Value =
                serde_json::from_str(out.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            messages.push(serde_json::json!({"role": "assistant", "content": json["content"]}));
            messages.push(serde_json::json!({"role": "user", "content": format!("turn {i}")}));
        }
    });
    let fixture = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ctxd-formats/tests/fixtures/pi/tree-v3.jsonl");
    for i in 0..10 {
        common::succeed(
            ctxd()
                .args(["--store", store.to_str().unwrap(), "notes", "write"])
                .args([&format!("@human/n{i}.md"), "beside the gateway"]),
        );
    }
    common::succeed(
        ctxd()
            .args(["--store", store.to_str().unwrap(), "import"])
            .arg(&fixture),
    );
    turns.join().unwrap();

    // Every turn the gateway answered is stored (durable before acknowledged), beside the
    // CLI's writes.
    let report = report_json(&store, "beside");
    assert_eq!(report["session"]["turn_count"], 20, "{report}");
    let listed = ctxd()
        .args([
            "--store",
            store.to_str().unwrap(),
            "notes",
            "list",
            "--json",
        ])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.matches("@human/n").count(), 10, "{listed}");

    // A killed gateway leaves no stale lock.
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    let again = serve(&store, &mock.base_url());
    drop(again);
    let s = ctxd_store::SqliteStore::open(&store, ctxd_store::Durability::Full).unwrap();
    assert_eq!(s.integrity_check().unwrap(), "ok");
}

/// Durable before acknowledged, seen from outside: once the client holds a response, the
/// store holds its turn, and history search (literal and ranked) finds the answer at once,
/// although the gateway commits the log alone and leaves its indexes to idle time (the search
/// catches its session up first).
#[test]
fn an_answer_the_client_holds_is_stored_and_found_by_history_search_at_once() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("gw.db");
    let gw = serve(&store, &mock.base_url());
    let h = [("x-api-key", "sk-durable"), ("x-ctxd-session", "durable")];
    for (stream, word) in [(false, "okapi"), (true, "quokka")] {
        mock.script()
            .push(Reply::text(format!("the answer is the {word}")));
        let asked = format!("which animal, {stream}?");
        let answer = post(
            &gw.addr,
            "/v1/messages",
            &h,
            &body(
                stream,
                serde_json::json!([{"role": "user", "content": asked}]),
            ),
        );
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(word), "{answer}");
        for ranked in [false, true] {
            let mut search = ctxd();
            search.args(["history", "search", "durable", word, "--json", "--store"]);
            search.arg(&store);
            if ranked {
                search.arg("--ranked");
            }
            let out = search.output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let found = String::from_utf8(out.stdout).unwrap();
            assert!(
                found.contains(&format!("the answer is the {word}")),
                "ranked {ranked}, stream {stream}: {found}"
            );
        }
    }
    drop(gw);
}

/// The model writes a note through the gateway (ctxd's tool, answered by the gateway); the
/// person behind that API key reads and edits it with the CLI, naming the key by an environment
/// variable, and sees the model's change; another key sees nothing of it.
#[test]
fn a_person_reads_and_writes_their_own_tenants_notes_with_the_cli() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    mock.script().push(Reply::tool_call(
        "notes_write",
        serde_json::json!({"path": "@human/prefs.md", "text": "prefers small commits"}),
    ));
    mock.script().push(Reply::text("noted"));
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("gw.db");
    // Tenants by credential, as on a shared gateway; on loopback (below) the CLI's own tenant.
    let mut gw = common::serve(&store, &mock.base_url(), &["--tenancy", "credential"]);
    let tools = serde_json::json!([{"name": "bash", "description": "Run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]);
    let mut b: serde_json::Value = serde_json::from_str(&body(
        false,
        serde_json::json!([{"role": "user", "content": "remember my preference"}]),
    ))
    .unwrap();
    b["tools"] = tools;
    let resp = post(
        &gw.addr,
        "/v1/messages",
        &[("x-api-key", "sk-person-A")],
        &b.to_string(),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(
        resp.contains("noted") && !resp.contains("notes_write"),
        "{resp}"
    );
    stop(&mut gw);
    let s = store.to_str().unwrap();
    let read = |var: &str, key: &str| {
        ctxd()
            .args([
                "--store",
                s,
                "notes",
                "read",
                "@human/prefs.md",
                "--key-env",
                var,
            ])
            .env(var, key)
            .output()
            .unwrap()
    };
    let mine = read("MY_KEY", "sk-person-A");
    assert!(
        mine.status.success(),
        "{}",
        String::from_utf8_lossy(&mine.stderr)
    );
    assert!(String::from_utf8_lossy(&mine.stdout).contains("prefers small commits"));
    common::succeed(
        ctxd()
            .args([
                "--store",
                s,
                "notes",
                "append",
                "@human/prefs.md",
                "and tests first",
            ])
            .args(["--key-env", "MY_KEY"])
            .env("MY_KEY", "sk-person-A"),
    );
    let again = read("MY_KEY", "sk-person-A");
    assert!(String::from_utf8_lossy(&again.stdout).contains("and tests first"));
    let other = read("MY_KEY", "sk-person-B");
    assert!(
        !String::from_utf8_lossy(&other.stdout).contains("prefers"),
        "another key reads nothing of it"
    );
    let local = ctxd()
        .args(["--store", s, "notes", "read", "@human/prefs.md"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&local.stdout).contains("prefers"));
    let unset = ctxd()
        .args([
            "--store",
            s,
            "notes",
            "read",
            "@human/prefs.md",
            "--key-env",
            "NO_SUCH_VAR_X",
        ])
        .env_remove("NO_SUCH_VAR_X")
        .output()
        .unwrap();
    assert_eq!(unset.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unset.stderr).contains("NO_SUCH_VAR_X"));

    // A loopback gateway's clients are the machine's user, whatever key they send: their notes
    // are the ones `ctxd notes` reads without --key-env.
    mock.script().push(Reply::tool_call(
        "notes_write",
        serde_json::json!({"path": "@human/local.md", "text": "LOCAL-PREF-5"}),
    ));
    mock.script().push(Reply::text("noted"));
    let mut gw = serve(&store, &mock.base_url());
    let resp = post(
        &gw.addr,
        "/v1/messages",
        &[("authorization", "Bearer rotating-token-1")],
        &b.to_string(),
    );
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    stop(&mut gw);
    let local = common::succeed(ctxd().args(["--store", s, "notes", "read", "@human/local.md"]));
    assert!(String::from_utf8_lossy(&local.stdout).contains("LOCAL-PREF-5"));
}

/// SIGTERM and wait: the gateway's store is closed when this returns.
fn stop(gw: &mut Gateway) {
    common::stop(gw);
}

/// `ctxd serve` on `store` with `args` (and `env`) after the listener flag: it must refuse to
/// start with exit code 2; its stderr.
fn serve_refused(store: &str, args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> String {
    let mut cmd = ctxd();
    cmd.args(["--store", store, "serve", "--listen", "127.0.0.1:0"])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
    err
}

fn os<'a>(args: &[&'a str]) -> Vec<&'a std::ffi::OsStr> {
    args.iter().map(|a| std::ffi::OsStr::new(*a)).collect()
}

/// A classifier the gateway cannot build is refused at start with the flag to fix, exit 2;
/// the same settings from the config file name the table's key.
#[test]
fn a_bad_classifier_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("ctxd.db");
    let s = store.to_str().unwrap();
    let err = serve_refused(s, &os(&["--classifier", "openai"]), &[]);
    assert!(err.contains("--classifier-url"), "{err}");
    let config = dir.path().join("ctxd.toml");
    std::fs::write(
        &config,
        "[classifier]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
    )
    .unwrap();
    let err = serve_refused(
        s,
        &[std::ffi::OsStr::new("--config"), config.as_os_str()],
        &[],
    );
    assert!(err.contains("model"), "{err}");
}

/// A distillation CPU share outside 1-100 % is refused at start, from the flag, its
/// environment variable or the config file, exit 2 naming the setting.
#[test]
fn a_bad_distill_cpu_share_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("ctxd.db");
    let s = store.to_str().unwrap();
    for bad in ["0", "101", "half"] {
        let err = serve_refused(s, &os(&["--distill-cpu-percent", bad]), &[]);
        assert!(err.contains("--distill-cpu-percent"), "{err}");
    }
    serve_refused(s, &[], &[("CTXD_DISTILL_CPU_PERCENT", "0")]);
    let config = dir.path().join("ctxd.toml");
    std::fs::write(&config, "distill-cpu-percent = 500\n").unwrap();
    let err = serve_refused(
        s,
        &[std::ffi::OsStr::new("--config"), config.as_os_str()],
        &[],
    );
    assert!(err.contains("distill-cpu-percent"), "{err}");
}

/// One HTTP/1.1 request of any method without a body; the whole response as text.
fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// An MCP client ending its session (`DELETE /mcp`) gets 204: the official client accepts
/// 200 or 204, and on rmcp's 202 it printed "Session termination failed: 202" at every exit.
#[test]
fn ending_an_mcp_session_answers_204() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut gw = serve(&dir.path().join("gw.db"), &mock.base_url());
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}});
    let accept = ("accept", "application/json, text/event-stream");
    let resp = post(&gw.addr, "/mcp", &[accept], &init.to_string());
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let session = resp
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id: {resp}"));
    let ended = request(
        &gw.addr,
        "DELETE",
        "/mcp",
        &[accept, ("mcp-session-id", &session)],
    );
    assert!(ended.starts_with("HTTP/1.1 204"), "{ended}");
    stop(&mut gw);
}
