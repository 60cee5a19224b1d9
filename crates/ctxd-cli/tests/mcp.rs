#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd mcp` on the real binary: raw JSON-RPC lines on its stdin, its answers read from its
//! stdout, over a store filled by `ctxd import`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

/// A store of its own (`name`: the test's) holding one imported Pi session (`pi:sess-v3`).
fn store(name: &str) -> (common::TestDir, String) {
    let dir = common::fresh_dir(name);
    let db = dir.join("s.db").to_str().unwrap().to_owned();
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ctxd-formats/tests/fixtures/pi/tree-v3.jsonl");
    common::succeed(common::ctxd().args(["--store", &db, "import"]).arg(fixture));
    (dir, db)
}

/// `ctxd mcp` running, its stdout read line by line on a thread (a reply that never comes
/// fails the test instead of hanging it).
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Server {
    fn start(db: &str, args: &[&str]) -> Self {
        let mut child = common::ctxd()
            .args(["--store", db, "mcp"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Server {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn reply(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("no reply from ctxd mcp");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        let reply = self.reply();
        assert_eq!(reply["id"], id, "{reply}");
        reply
    }

    fn initialize(&mut self) {
        let init = self.request(
            1,
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "ctxd-test", "version": "0"}
            }),
        );
        assert!(init["result"]["serverInfo"]["name"] == "ctxd", "{init}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    fn tool_names(&mut self, id: u64) -> Vec<String> {
        let list = self.request(id, "tools/list", json!({}));
        list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Close stdin: the server must end, and cleanly.
    fn finish(mut self) {
        drop(self.stdin.take());
        for _ in 0..300 {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{status}");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        panic!("ctxd mcp did not end when its stdin closed");
    }
}

#[test]
fn a_line_that_is_not_json_gets_a_parse_error_and_the_server_goes_on() {
    let (_dir, db) = store("mcp-parse");
    let mut s = Server::start(&db, &["--session", "pi:sess-v3"]);
    s.initialize();
    for bad in ["this is not json", r#"{"jsonrpc":"2.0","id":7,"method":"#] {
        s.send(bad);
        let reply = s.reply();
        assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
        assert_eq!(reply["error"]["code"], -32700, "{reply}");
        assert!(
            reply.as_object().unwrap().get("id") == Some(&Value::Null),
            "a parse error's id is null: {reply}"
        );
    }
    // Blank lines are no messages: nothing to answer.
    s.send("");
    // Still serving, in order: the next request is answered.
    let tools = s.tool_names(2);
    assert!(
        tools.iter().any(|t| t == "history_list_windows"),
        "{tools:?}"
    );
    let call = s.request(
        3,
        "tools/call",
        json!({"name": "history_list_windows", "arguments": {}}),
    );
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    s.finish();
}

#[test]
fn a_history_tool_without_a_session_is_a_tool_error_saying_how_to_name_one() {
    let (_dir, db) = store("mcp-no-session");
    let mut s = Server::start(&db, &[]);
    s.initialize();
    for (id, tool, args) in [
        (2, "history_list_windows", json!({})),
        (
            3,
            "history_read_item",
            json!({"item_id": "i_0000000000000000"}),
        ),
        (4, "recall", json!({"entryId": "a1"})),
    ] {
        let call = s.request(id, "tools/call", json!({"name": tool, "arguments": args}));
        assert!(call.get("error").is_none(), "not a protocol error: {call}");
        assert_eq!(call["result"]["isError"], true, "{call}");
        let text = call["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("--session"), "{text}");
    }
    s.finish();
}

#[test]
fn the_help_names_exactly_the_tools_served() {
    let (_dir, db) = store("mcp-help");
    let help = common::succeed(common::ctxd().args(["mcp", "--help"]));
    let help = String::from_utf8(help.stdout).unwrap();
    let mut s = Server::start(&db, &[]);
    s.initialize();
    let served = s.tool_names(2);
    s.finish();
    for word in ctxd_core::offered::tool_like_words(&help) {
        assert!(
            served.iter().any(|t| t == word),
            "the help names {word}, which ctxd mcp does not serve:\n{help}"
        );
    }
    let listed = help
        .split("Tools served: ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .unwrap_or_else(|| panic!("no list of the tools served:\n{help}"));
    // However the help is wrapped.
    let listed: Vec<&str> = listed.split(',').map(str::trim).collect();
    assert_eq!(listed, served);
}
