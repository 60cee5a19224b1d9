#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The real `ctxd` binary on the shared real sessions and on bad input.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use ctxd_test_support::shared;

/// The agents of `../shared/sessions`, one directory each.
const AGENTS: [&str; 6] = [
    "pi",
    "claude-code",
    "codex",
    "swe-agent",
    "mini-swe-agent",
    "gemini-cli",
];

fn sessions() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for agent in AGENTS {
        for entry in std::fs::read_dir(shared().join("sessions").join(agent)).unwrap() {
            files.push(entry.unwrap().path());
        }
    }
    files.sort();
    assert!(files.len() >= 7, "shared sessions missing: {files:?}");
    files
}

fn ctxd(args: &[&str]) -> Output {
    common::ctxd().args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_dir(name: &str) -> common::TestDir {
    common::fresh_dir(name)
}

fn json_report(path: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["report", "--json"];
    args.extend_from_slice(extra);
    let p = path.to_str().unwrap();
    args.push(p);
    let out = ctxd(&args);
    assert!(out.status.success(), "{p}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_shared_session_reports_as_text_and_json() {
    for path in sessions() {
        let name = path.display().to_string();
        let text = ctxd(&["report", "--text", &name]);
        assert!(text.status.success(), "{name}: {}", stderr(&text));
        let body = String::from_utf8(text.stdout).unwrap();
        for heading in [
            "Context report:",
            "Composition",
            "Drift",
            "Largest messages",
            "Billed",
        ] {
            assert!(body.contains(heading), "{name}: no {heading}");
        }

        let r = json_report(&path, &[]);
        assert_eq!(r["schema"], "ctxd.report/1");
        let total = r["composition"]["total"].as_u64().unwrap();
        assert!(total > 0, "{name}");
        let rows: u64 = r["composition"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(rows, total, "{name}: the rows must add up to the estimate");
        for row in r["composition"]["rows"].as_array().unwrap() {
            if let Some(children) = row["children"].as_array() {
                let kids: u64 = children.iter().map(|c| c["tokens"].as_u64().unwrap()).sum();
                assert_eq!(
                    kids,
                    row["tokens"].as_u64().unwrap(),
                    "{name}: {}",
                    row["id"]
                );
            }
        }
        assert!(r["largest"].as_array().unwrap().len() <= 5);
        for l in r["largest"].as_array().unwrap() {
            assert!(l["descriptor"].as_str().unwrap().chars().count() <= 40);
        }
        let turns = r["turns"].as_array().unwrap();
        assert_eq!(
            turns.len() as u64,
            r["session"]["turn_count"].as_u64().unwrap()
        );

        // Sessions that carry provider usage name the drift, with both figures.
        let has_usage = turns.iter().any(|t| t["provider"].is_u64());
        if has_usage && r["headline"]["source"] == "provider" {
            let d = &r["drift"];
            assert_eq!(
                d["drift"].as_i64().unwrap(),
                d["provider_tokens"].as_i64().unwrap() - d["estimate"].as_i64().unwrap(),
                "{name}"
            );
        }
    }
}

#[test]
fn sessions_with_usage_show_drift_and_billed_totals() {
    let cases = [
        (
            "claude-code/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl",
            "claude-code",
        ),
        (
            "codex/rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl",
            "codex",
        ),
        ("pi/large-session.jsonl", "pi"),
        (
            "mini-swe-agent/astropy__astropy-12907.traj.json",
            "mini-swe-agent",
        ),
        ("gemini-cli/aim-control_pro.json", "gemini-cli"),
        ("gemini-cli/vct-gemini-session.jsonl", "gemini-cli"),
    ];
    for (file, agent) in cases {
        let r = json_report(&shared().join("sessions").join(file), &[]);
        assert_eq!(r["session"]["agent"], agent);
        assert!(r["drift"].is_object(), "{file}: no drift");
        assert_eq!(r["billed"]["source"], "usage", "{file}");
        assert!(r["billed"]["responses"].as_u64().unwrap() > 0);
        assert!(r["calibration"]["samples"].as_u64().unwrap() >= 3, "{file}");
    }
    // Claude Code's usage is counted once per response (python3 over the file: 170 ids).
    let r = json_report(
        &shared().join("sessions/claude-code/fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"),
        &[],
    );
    assert_eq!(r["billed"]["responses"], 170);
    assert_eq!(r["billed"]["output"], 51933);
    // Gemini CLI's usage is one per gemini message, a re-appended JSONL record counted once
    // (python3 over the file: 6 ids, output + thoughts 4293).
    let r = json_report(
        &shared().join("sessions/gemini-cli/vct-gemini-session.jsonl"),
        &[],
    );
    assert_eq!(r["billed"]["responses"], 6);
    assert_eq!(r["billed"]["output"], 4293);
    // SWE-agent records only session totals.
    let r = json_report(
        &shared().join("sessions/swe-agent/pydicom__pydicom-1458.traj"),
        &[],
    );
    assert_eq!(r["billed"]["source"], "totals");
}

#[test]
fn at_turn_reports_an_earlier_context() {
    let path = shared().join(
        "sessions/codex/rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl",
    );
    let now = json_report(&path, &[]);
    let then = json_report(&path, &["--at", "5"]);
    assert_eq!(then["session"]["at_turn"], 5);
    assert_eq!(then["turns"].as_array().unwrap().len(), 5);
    assert!(
        then["composition"]["total"].as_u64().unwrap()
            < now["composition"]["total"].as_u64().unwrap()
    );
    // The headline at a turn is the provider's figure for exactly that prompt.
    assert_eq!(then["headline"]["tokens"], then["turns"][4]["provider"]);
}

#[test]
fn a_corrupt_line_is_skipped_and_named() {
    let src = std::fs::read_to_string(shared().join("sessions/pi/large-session.jsonl")).unwrap();
    let mut lines: Vec<&str> = src.lines().collect();
    lines[41] = "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":[{\"ty";
    let dir = temp_dir("corrupt");
    let path = dir.join("copy.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();

    let out = ctxd(&["report", "--text", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("line 42"), "{}", stderr(&out));
    let r = json_report(&path, &[]);
    let warnings = r["import_warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0]
        .as_str()
        .unwrap()
        .starts_with("line 42: skipped"));
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let dir = temp_dir("bad");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.jsonl", Vec::new(), "empty"),
        ("blank.jsonl", b"\n  \n".to_vec(), "empty"),
        (
            "binary.jsonl",
            vec![0x7f, b'E', b'L', b'F', 0, 1, 2, 0xff, 0xfe],
            "binary",
        ),
        ("latin1.jsonl", b"{\"a\":\"caf\xe9\"}\n".to_vec(), "binary"),
        (
            "other.json",
            br#"{"name":"x","version":"1.0.0","dependencies":{}}"#.to_vec(),
            "not a session",
        ),
        ("array.json", b"[1, 2, 3]".to_vec(), "not a session"),
        (
            "text.txt",
            b"hello world\nthis is not json\n".to_vec(),
            "not a session",
        ),
        (
            "truncated.json",
            b"{\n  \"trajectory\": [\n    {\"action\": ".to_vec(),
            "JSON",
        ),
    ];
    for (name, bytes, expect) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let out = ctxd(&["report", path.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.starts_with("ctxd: "), "{name}: {err}");
        assert!(err.contains(expect), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(out.stdout.is_empty(), "{name}");
    }
    let out = ctxd(&["report", dir.join("missing.jsonl").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("No such file"), "{}", stderr(&out));
    // The same with a default store present (a missing file is then looked up as a stored
    // session): still one line that says there is no such file.
    let home = common::fresh_dir("bad-home");
    let pi = shared().join("sessions/pi/large-session.jsonl");
    let made = common::ctxd_in(&home)
        .args(["import", pi.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    assert!(common::default_store(&home).exists());
    let out = common::ctxd_in(&home)
        .args(["report", dir.join("missing.jsonl").to_str().unwrap()])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.to_lowercase().contains("no such file"), "{err}");
    let out = ctxd(&["report", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("directory"));
    let out = ctxd(&["report", "--bogus-flag", "x"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn several_files_give_one_json_line_each() {
    let files = sessions();
    let names: Vec<&str> = files.iter().map(|p| p.to_str().unwrap()).collect();
    let mut args = vec!["report", "--json"];
    args.extend(&names);
    let out = ctxd(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), files.len());
    for (line, name) in lines.iter().zip(&names) {
        assert_eq!(line["file"], *name);
    }
}

#[test]
fn sessions_lists_each_session_under_a_directory() {
    let dir = temp_dir("sessions");
    for (i, path) in sessions().iter().enumerate() {
        // Gemini CLI keeps its JSON sessions in `chats` directories.
        let gemini_json = path.extension().is_some_and(|e| e == "json")
            && path.parent().unwrap().ends_with("gemini-cli");
        let sub = if gemini_json {
            dir.join(format!("p{i}/chats"))
        } else {
            dir.join(format!("p{i}"))
        };
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::copy(path, sub.join(path.file_name().unwrap())).unwrap();
    }
    std::fs::write(dir.join("broken.jsonl"), b"not json\n").unwrap();
    let out = ctxd(&["sessions", "--json", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), sessions().len() + 1);
    let agents: std::collections::BTreeSet<&str> =
        rows.iter().filter_map(|r| r["agent"].as_str()).collect();
    for agent in AGENTS {
        assert!(agents.contains(agent), "{agent} missing: {agents:?}");
    }
    let pi = rows.iter().find(|r| r["agent"] == "pi").unwrap();
    assert_eq!(pi["turns"], 452);
    assert!(pi["peak_context"].as_u64().unwrap() > 100_000);
    assert_eq!(pi["peak_source"], "provider");
    let broken = rows
        .iter()
        .find(|r| r["path"].as_str().unwrap().ends_with("broken.jsonl"))
        .unwrap();
    assert!(broken["error"].as_str().unwrap().contains("not"));

    let text = ctxd(&["sessions", dir.to_str().unwrap()]);
    assert!(text.status.success());
    let body = String::from_utf8(text.stdout).unwrap();
    assert!(body.starts_with("AGENT"));
    let missing = ctxd(&["sessions", dir.join("nope").to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2));
}

/// `sessions --stored` lists the store: `--store PATH`, else `CTXD_STORE`, else the default
/// store, whichever side of the command the flag is on.
#[test]
fn stored_lists_the_default_store_or_ctxd_store() {
    let home = common::fresh_dir("store-alone");
    let file = shared().join("sessions/pi/large-session.jsonl");
    let run = |args: &[&str], env: Option<&Path>| {
        let mut cmd = common::ctxd_in(&home);
        if let Some(store) = env {
            cmd.env("CTXD_STORE", store);
        }
        let out = cmd.args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    // README's `ctxd import` then `ctxd sessions --stored`.
    run(&["import", file.to_str().unwrap()], None);
    let default = common::default_store(&home);
    assert!(default.exists());
    let listed = run(&["sessions", "--stored", "--json"], None);
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.contains("\"pi\""), "{listed}");
    let text = run(&["sessions", "--stored"], None);
    assert!(text.starts_with("   ID"), "{text}");
    // With CTXD_STORE exported, that store (here an empty one: said in words, not a bare
    // header).
    let other = home.join("other.db");
    let o = other.to_str().unwrap();
    run(
        &["--store", o, "notes", "write", "@human/a.md", "a note"],
        None,
    );
    assert_eq!(run(&["sessions", "--stored", "--json"], Some(&other)), "");
    let empty = run(&["sessions", "--stored"], Some(&other));
    assert_eq!(
        empty.trim(),
        format!("no sessions in the store {}", other.display())
    );
    // `--store PATH` on either side of the command, and it wins over CTXD_STORE.
    for args in [
        &["sessions", "--json", "--store", default.to_str().unwrap()][..],
        &["--store", default.to_str().unwrap(), "sessions", "--json"],
    ] {
        let listed = run(args, Some(&other));
        assert_eq!(listed.lines().count(), 1, "{args:?}: {listed}");
    }
}

/// `--store` always takes a value, so it cannot eat the word after it: `ctxd stats --store 4`
/// (meaning session 4) made an empty SQLite file `./4`, printed an empty table and exited 0;
/// `ctxd --store a.db sessions --store` silently used (and created) the default store. Now
/// each is one refusal naming what to type, exit 2, and no file is created anywhere; commands
/// that only read a store refuse a store that does not exist instead of creating it.
#[test]
fn store_takes_a_value_and_cannot_eat_a_session_name() {
    let home = common::fresh_dir("store-value");
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let run = |args: &[&str]| {
        common::ctxd_in(&home)
            .current_dir(&work)
            .args(args)
            .output()
            .unwrap()
    };
    for (args, says) in [
        (&["stats", "--store", "4"][..], "`4` is no store file"),
        (&["report", "--store", "4"], "`4` is no store file"),
        (
            &["--store", "a.db", "sessions", "--store"],
            "a value is required",
        ),
        (&["--store", "sessions"], "`sessions` is a command"),
        (&["sessions", "--store", "typo.db"], "no store at typo.db"),
        (&["stats", "--store", "typo.db"], "no store at typo.db"),
        (
            &["history", "windows", "4", "--store", "typo.db"],
            "no store at typo.db",
        ),
        (
            &["recall", "4", "e1", "--store", "typo.db"],
            "no store at typo.db",
        ),
        (
            &["notes", "list", "--store", "typo.db"],
            "no store at typo.db",
        ),
        (
            &["mcp", "--session", "4", "--store", "typo.db"],
            "no store at typo.db",
        ),
        (&["sessions", "--stored"], "no store at"),
        (&["stats"], "no store at"),
    ] {
        let out = run(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    let left: Vec<_> = std::fs::read_dir(&work).unwrap().collect();
    assert!(left.is_empty(), "files created: {left:?}");
    assert!(!common::default_store(&home).exists());
    // A file of that name is a store, though (`--store ./4` or `--store 4` alike).
    let pi = shared().join("sessions/pi/large-session.jsonl");
    let out = run(&["--store", "./4", "import", pi.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&["stats", "--store", "4"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// No help text prints an environment variable's value: `CTXD_STORE` can be a PostgreSQL URL
/// with its password (`[env: CTXD_STORE=postgres://u:secretpw@h/db]` was in every help), and
/// any other variable the CLI reads could hold something private. Every command's help and
/// every subcommand's, with every variable the helps name set to a secret.
#[test]
fn no_help_prints_an_environment_variables_value() {
    const SECRET: &str = "postgres://u:secretpw@h/db";
    fn helps(path: &[String], env: &[String], out: &mut Vec<(Vec<String>, String)>) {
        let mut cmd = common::ctxd();
        cmd.args(path).arg("--help");
        for name in env {
            cmd.env(name, SECRET);
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{path:?}: {}", stderr(&o));
        let text = String::from_utf8(o.stdout).unwrap();
        let subcommands: Vec<String> = text
            .split("\nCommands:\n")
            .nth(1)
            .map(|rest| {
                rest.lines()
                    .take_while(|l| l.starts_with("  "))
                    .filter_map(|l| l.split_whitespace().next())
                    .filter(|c| *c != "help")
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        out.push((path.to_vec(), text));
        for sub in subcommands {
            let mut deeper = path.to_vec();
            deeper.push(sub);
            helps(&deeper, env, out);
        }
    }
    // First pass: every variable any help names.
    let mut first = Vec::new();
    helps(&[], &[], &mut first);
    let mut env: Vec<String> = first
        .iter()
        .flat_map(|(_, text)| text.split("[env: ").skip(1))
        .filter_map(|rest| rest.split([']', '=']).next())
        .map(str::to_owned)
        .collect();
    env.sort();
    env.dedup();
    assert!(env.len() >= 30, "{env:?}");
    assert!(env.iter().any(|e| e == "CTXD_STORE"), "{env:?}");
    let mut second = Vec::new();
    helps(&[], &env, &mut second);
    assert!(second.len() >= 25, "{}", second.len());
    for (path, text) in &second {
        assert!(!text.contains("secretpw"), "ctxd {path:?} --help: {text}");
        assert!(!text.contains("[env: CTXD_STORE="), "ctxd {path:?} --help");
    }
    assert!(
        second
            .iter()
            .any(|(p, t)| p == &["sessions"] && t.contains("[env: CTXD_STORE]")),
        "the variable's name is still shown"
    );
}

#[test]
fn a_closed_pipe_is_quiet_and_exit_0() {
    use std::io::Read;
    let files: Vec<String> = sessions().iter().map(|p| p.display().to_string()).collect();
    let mut child = common::ctxd()
        .args(["report", "--json"])
        .args(&files)
        .args(&files)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The reader has gone (`| head -c 100`); the rest of the output has nowhere to go.
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Quiet about the pipe; an import warning about a file reached before the reader left
    // (under load) is that file's, not the pipe's.
    let err = stderr(&out);
    assert!(
        err.lines()
            .all(|l| l.contains(".jsonl: ") && !l.contains("pipe")),
        "{err}"
    );
}

#[test]
fn help_and_a_missing_command_name_only_what_exists() {
    let out = ctxd(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("report, sessions"), "{err}");
    assert!(!err.contains("bench-one"), "{err}");
    let help = String::from_utf8(ctxd(&["--help"]).stdout).unwrap();
    assert!(!help.contains("later"), "{help}");
    for command in ["serve", "report", "import", "notes", "history", "recall"] {
        assert!(help.contains(&format!("  {command} ")), "{command}: {help}");
    }
    let notes = String::from_utf8(ctxd(&["notes", "--help"]).stdout).unwrap();
    assert!(notes.contains("--session KEY"), "{notes}");
    let write = String::from_utf8(ctxd(&["notes", "write", "--help"]).stdout).unwrap();
    assert!(write.contains("@project/todo.md"), "{write}");
}

#[test]
fn a_busy_port_is_one_error_said_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = temp_dir("busy");
    let out = ctxd(&[
        "--store",
        dir.join("s.db").to_str().unwrap(),
        "serve",
        "--listen",
        &addr,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches("in use").count(), 1, "{err}");
    // The failed start left nothing: it made a new store, `-wal`, `-shm` and `.serve.lock`.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // Nor with the default store (nor its directory).
    let home = common::fresh_dir("busy-home");
    let out = common::ctxd_in(&home)
        .args(["serve", "--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!common::default_store(&home).parent().unwrap().exists());
}
