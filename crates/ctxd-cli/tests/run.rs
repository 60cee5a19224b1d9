#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd run`: an agent through the gateway for its lifetime. A gateway of its own when none
//! serves the store (stopped when the agent exits), the running one otherwise; the agent's exit
//! code and signals pass through; the closing summary sums what the run's requests did.
//! The real agents (Claude Code, Codex, Pi) under `ctxd run` are in tests/clients; Gemini CLI
//! is stood in for by a script named `gemini`.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ctxd;
use ctxd_mock::{Config, MockServer};

/// An "agent": python3 sending two turns of one session to `$ANTHROPIC_BASE_URL`.
const TWO_TURNS: &str = r#"
import json, os, urllib.request
base = os.environ["ANTHROPIC_BASE_URL"]
messages = [{"role": "user", "content": "hello"}]
for turn in range(2):
    body = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": messages}).encode()
    req = urllib.request.Request(base + "/v1/messages", data=body, headers={
        "content-type": "application/json", "x-api-key": "sk-run-%d" % turn,
        "x-ctxd-session": "run-session"})
    answer = json.load(urllib.request.urlopen(req, timeout=30))
    messages += [{"role": "assistant", "content": answer["content"]},
                 {"role": "user", "content": "and then?"}]
print("agent finished")
"#;

/// `ctxd --store STORE run --no-summary --`, the command to follow.
fn quiet_run(store: &std::path::Path) -> Command {
    let mut cmd = ctxd();
    cmd.args([
        "--store",
        store.to_str().unwrap(),
        "run",
        "--no-summary",
        "--",
    ]);
    cmd
}

/// [`quiet_run`] of `command`, run to its end.
fn run_quietly(store: &std::path::Path, command: &[&str]) -> std::process::Output {
    quiet_run(store).args(command).output().unwrap()
}

#[test]
fn a_command_runs_through_a_gateway_of_its_own_and_its_exit_code_comes_back() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("run.db");
    let out = ctxd()
        .args(["--store", store.to_str().unwrap(), "run", "--"])
        .args(["python3", "-c", TWO_TURNS])
        .env("CTXD_UPSTREAM_ANTHROPIC", mock.base_url())
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("agent finished"), "{stdout}");
    assert!(
        stderr.contains("ctxd run: command: 1 session, 2 turns, 2 requests; sent "),
        "{stderr}"
    );
    assert!(stderr.contains("in the whole conversation"), "{stderr}");
    assert_eq!(mock.requests().len(), 2, "both turns went upstream");
    // The gateway's log went to its file, not into the agent's terminal.
    assert!(!stderr.contains("INFO"), "{stderr}");
    let mut log = store.as_os_str().to_owned();
    log.push(".run.log");
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("gateway stopped; store closed"), "{log}");
    // The session is in the store, and the gateway is gone: the lock is free.
    let listed =
        common::succeed(ctxd().args(["--store", store.to_str().unwrap(), "sessions", "--stored"]));
    assert!(String::from_utf8_lossy(&listed.stdout).contains("run-session"));
    assert!(ctxd_gateway::ServeLock::serving(&store).is_none());

    // The agent's own exit code, and a signal's as a shell reports it.
    let out = run_quietly(&store, &["sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_quietly(&store, &["sh", "-c", "kill -KILL $$"]);
    assert_eq!(out.status.code(), Some(128 + 9));
    let out = ctxd()
        .args(["--store", store.to_str().unwrap(), "run", "--"])
        .arg("no-such-agent-anywhere")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start no-such-agent-anywhere"));
}

#[test]
fn the_gateway_already_serving_the_store_is_used() {
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("served.db");
    let mut gw = common::serve(&store, &mock.base_url(), &[]);
    let out = ctxd()
        .args(["--store", store.to_str().unwrap(), "run", "--"])
        .args([
            "sh",
            "-c",
            "echo \"$ANTHROPIC_BASE_URL $OPENAI_BASE_URL $GOOGLE_GEMINI_BASE_URL\"",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let url = format!("http://{}", gw.addr);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{url} {url}/v1 {url}")
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no request went through ctxd"));
    let out = ctxd()
        .args(["--store", store.to_str().unwrap(), "run", "--"])
        .args(["python3", "-c", TWO_TURNS])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("1 session, 2 turns, 2 requests"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("dashboard: {url}/ui/session/")),
        "{stderr}"
    );
    common::stop(&mut gw);
}

#[test]
fn a_terminate_signal_reaches_the_agent_and_its_exit_code_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("sig.db");
    let ready = dir.path().join("ready");
    let script = format!(
        "trap 'exit 42' TERM; touch {}; while true; do sleep 0.05; done",
        ready.display()
    );
    let mut child = quiet_run(&store)
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ready.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the agent never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(child.wait().unwrap().code(), Some(42));
}

/// A stand-in for Gemini CLI (`gemini` on PATH): two turns of one conversation to
/// `$GOOGLE_GEMINI_BASE_URL` as Gemini CLI sends them (its user agent, the key in
/// `x-goog-api-key`), after checking that the user's key reached it untouched.
const FAKE_GEMINI: &str = r#"#!/usr/bin/env python3
import json, os, sys, urllib.request
assert os.environ.get("GEMINI_API_KEY") == "AIza-run-test", "the user's key did not pass"
base = os.environ["GOOGLE_GEMINI_BASE_URL"]
print("base", base)
contents = [{"role": "user", "parts": [{"text": "hello"}]}]
for turn in range(2):
    body = json.dumps({"contents": contents,
                       "systemInstruction": {"role": "user", "parts": [{"text": "You are a CLI agent."}]}}).encode()
    req = urllib.request.Request(base + "/v1beta/models/gemini-2.5-flash:generateContent", data=body,
        headers={"content-type": "application/json", "x-goog-api-key": os.environ["GEMINI_API_KEY"],
                 "user-agent": "GeminiCLI/0.61.0/gemini-2.5-flash (linux; x64; terminal)"})
    answer = json.load(urllib.request.urlopen(req, timeout=30))
    contents += [answer["candidates"][0]["content"], {"role": "user", "parts": [{"text": "and then?"}]}]
print("gemini finished", " ".join(sys.argv[1:]))
"#;

#[test]
fn gemini_cli_is_pointed_at_the_gateway_and_told_how_to_select_its_key() {
    use std::os::unix::fs::PermissionsExt;
    let mock = MockServer::start_blocking(Config::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (home, bin) = (dir.path().join("home"), dir.path().join("bin"));
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    let gemini = bin.join("gemini");
    std::fs::write(&gemini, FAKE_GEMINI).unwrap();
    std::fs::set_permissions(&gemini, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let store = dir.path().join("gemini.db");
    let run = |summary: bool| {
        let mut cmd = common::ctxd_in(&home);
        cmd.args(["--store", store.to_str().unwrap(), "run"]);
        if !summary {
            cmd.arg("--no-summary");
        }
        cmd.args(["gemini", "-p", "hi"])
            .env("PATH", &path)
            .env("GEMINI_API_KEY", "AIza-run-test")
            .env("CTXD_UPSTREAM_GEMINI", mock.base_url())
            .env_remove("GOOGLE_GEMINI_BASE_URL")
            .env_remove("GEMINI_CLI_HOME")
            // No system-wide settings of this machine's.
            .env(
                "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
                dir.path().join("system.json"),
            )
            .current_dir(dir.path())
            .output()
            .unwrap()
    };

    // No auth selected in its settings: the run says what to add, and where.
    let out = run(true);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("gemini finished -p hi"), "{stdout}");
    let base = stdout
        .lines()
        .find_map(|l| l.strip_prefix("base "))
        .unwrap();
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");
    assert!(!base.trim_start_matches("http://").contains('/'), "{base}");
    let settings = home.join(".gemini").join("settings.json");
    assert!(
        stderr.contains(&format!(
            r#"add "security": {{"auth": {{"selectedType": "gemini-api-key"}}}} to {}"#,
            settings.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("ctxd run: gemini-cli: 1 session, 2 turns, 2 requests; sent "),
        "{stderr}"
    );
    assert!(!stderr.contains("AIza-run-test"), "{stderr}");
    assert_eq!(mock.requests().len(), 2, "both turns went upstream");
    assert!(!settings.exists(), "the user's settings are not written");

    // Selected: nothing to say.
    std::fs::write(
        &settings,
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
    )
    .unwrap();
    let out = run(false);
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
