#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd eval` on the real binary: a small Pi session of two runs, replayed as if live.

mod common;

use serde_json::{json, Value};

/// Two runs: a 10-file grep whose answer cites two files, then a question that uses one of
/// them and one the distillation dropped.
fn session() -> String {
    let mut lines = vec![
        json!({"type": "session", "version": 3, "id": "eval-1", "timestamp": "2025-12-01T10:00:00.000Z", "cwd": "/work/demo"}),
    ];
    let mut parent: Option<String> = None;
    let mut n = 0;
    let mut push = |message: Value, lines: &mut Vec<Value>| {
        n += 1;
        let id = format!("m{n}");
        lines.push(json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2025-12-01T10:00:01.000Z", "message": message}));
        parent = Some(id);
    };
    let assistant = |content: Value, n: usize| json!({"role": "assistant", "content": content, "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5", "responseId": format!("msg_{n}"), "stopReason": "stop", "timestamp": 1});
    let mut grep = String::new();
    for f in [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    ] {
        for k in 1..=8 {
            grep.push_str(&format!(
                "src/{f}.rs:{}:    let badge = render_badge_{f}_{k}(item);\n",
                k * 10
            ));
        }
    }
    push(
        json!({"role": "user", "content": "where is the badge rendered?", "timestamp": 1}),
        &mut lines,
    );
    push(
        assistant(
            json!([{"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "rg -n badge src"}}]),
            1,
        ),
        &mut lines,
    );
    push(
        json!({"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "content": [{"type": "text", "text": grep}], "isError": false, "timestamp": 1}),
        &mut lines,
    );
    push(
        assistant(
            json!([{"type": "text", "text": "In src/charlie.rs (render_badge_charlie_3) and src/golf.rs."}]),
            2,
        ),
        &mut lines,
    );
    push(
        json!({"role": "user", "content": "change the third charlie badge", "timestamp": 1}),
        &mut lines,
    );
    push(
        assistant(
            json!([{"type": "toolCall", "id": "c2", "name": "edit", "arguments": {"path": "src/charlie.rs", "old_string": "render_badge_charlie_3(item)", "new_string": "render_badge_charlie_3(item, true)"}}]),
            3,
        ),
        &mut lines,
    );
    push(
        json!({"role": "toolResult", "toolCallId": "c2", "toolName": "edit", "content": [{"type": "text", "text": "ok"}], "isError": false, "timestamp": 1}),
        &mut lines,
    );
    push(
        assistant(
            json!([{"type": "text", "text": "Done; render_badge_india_5 may need the same change."}]),
            4,
        ),
        &mut lines,
    );
    lines.iter().map(|l| l.to_string() + "\n").collect()
}

#[test]
fn eval_replays_a_session_and_measures_savings_retention_and_the_baseline() {
    let dir = common::fresh_dir("eval");
    let file = dir.join("session.jsonl");
    std::fs::write(&file, session()).unwrap();

    let out = common::succeed(
        common::ctxd()
            // Distillation alone: the session's big grep output would be a shell digest.
            .args(["eval", "--json", "--baseline-last", "1", "--no-digests"])
            .arg(&file),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "ctxd.eval/2");
    assert_eq!(v["classifier"], "local");
    assert_eq!(v["baseline_last"], 1);
    let s = &v["sessions"][0];
    assert_eq!(s["agent"], "pi");
    // Four responses, four requests.
    assert_eq!(s["requests"], 4);
    // The grep was distilled at the first run's end: the second run's requests show less of
    // it. ctxd's own tool definitions go with every request: on a session this short they
    // cost more than distillation saves, and the eval says so.
    let all = s["all"]["input_tokens"].as_u64().unwrap();
    let saved = &s["saved_by"];
    assert!(saved["distillation"].as_i64().unwrap() > 1000, "{saved}");
    assert!(saved["served-tools"].as_i64().unwrap() < 0, "{saved}");
    // Costs lie between every token read from the cache and every token written to it.
    for v in ["all", "ctxd", "last_n"] {
        let t = s[v]["input_tokens"].as_f64().unwrap();
        let c = s[v]["cost"].as_f64().unwrap();
        assert!(c > 0.1 * t && c < 1.25 * t, "{v}: cost {c} for {t} tokens");
    }
    // Sending everything only appends: each request reads the previous one from the cache.
    // The edit after the first run makes ctxd's third request rewrite from the grep on.
    assert!(s["all"]["cost"].as_f64().unwrap() < 0.7 * all as f64);
    // One pass with something to judge: the first run's end (the second run has nothing).
    assert_eq!(s["passes"], 1);
    assert_eq!(s["reasons"]["large/chunks"][0], 1, "{}", s["reasons"]);
    // Used lines: charlie_3 (kept: the answer cited it) and india_5 (dropped): one miss,
    // named with the mechanism and decision that hid it, and recoverable: the distilled
    // grep's stub names its `recall` id.
    assert_eq!(s["retention_ctxd"]["used_lines"], 2, "{s}");
    assert_eq!(s["retention_ctxd"]["retained"], 1);
    assert_eq!(s["retention_ctxd"]["recoverable"], 1);
    assert_eq!(s["retention_ctxd"]["client_dropped"], 0);
    let miss = &s["misses"][0];
    assert_eq!(miss["tool"], "bash");
    assert_eq!(miss["term"], "render_badge_india_5");
    assert_eq!(miss["request"], 4);
    assert_eq!(miss["mechanism"], "distillation");
    assert_eq!(miss["recoverable"], true);
    // What hid it: the first run's end distilled the grep, keeping other chunks; the pass
    // landed before the next request (the default timing, think time).
    let hidden = miss["hidden_by"].as_str().unwrap();
    assert!(
        hidden.starts_with("distilled large/chunks landed before request 3"),
        "{hidden}"
    );
    // One recall round for it costs more than not missing it.
    assert!(s["ctxd_cost_with_recall"].as_f64().unwrap() > s["ctxd"]["cost"].as_f64().unwrap());
    assert!(miss["text"]
        .as_str()
        .unwrap()
        .starts_with("src/india.rs:50:"));
    // The baseline keeps only the last output: the grep was still the last one when charlie_3
    // was used, and masked behind the edit's output when india_5 was.
    assert_eq!(s["retention_last_n"]["used_lines"], 2);
    assert_eq!(s["retention_last_n"]["retained"], 1);
    assert_eq!(v["total"]["sessions"], 1);
    assert!(v["total"]["mb_per_second"].as_f64().unwrap() > 0.0);

    // Text: the table, the throughput line and the miss.
    let out = common::ctxd()
        .args(["eval", "--no-digests"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("session.jsonl"), "{text}");
    assert!(
        text.contains("1 sessions,") && text.contains("MB/s"),
        "{text}"
    );
    assert!(text.contains("render_badge_india_5"), "{text}");
    assert!(
        text.contains("old exchanges omitted below P(relevant) 0.2; tools never distilled: none"),
        "{text}"
    );
    assert!(
        text.contains("retention: visible 50.0%, recoverable"),
        "{text}"
    );

    // The grep's tool excluded: nothing is edited, so nothing used is missed.
    let out = common::ctxd()
        .args([
            "eval",
            "--json",
            "--no-digests",
            "--distill-exclude-tools",
            "bash",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["distill_exclude_tools"], serde_json::json!(["bash"]));
    let s = &v["sessions"][0];
    assert_eq!(s["edits"], 0, "{s}");
    assert_eq!(s["retention_ctxd"]["retained"], 2, "{s}");
    // A probability out of range: clap's usage error, exit code 2.
    let out = common::ctxd()
        .args(["eval", "--exchange-omit", "2"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected a probability from 0 to 1"), "{err}");

    // An unknown classifier is one line and exit code 2.
    let err = one_line_error(
        common::ctxd()
            .args(["eval", "--classifier", "gpt"])
            .arg(&file),
    );
    assert!(err.contains("unknown classifier \"gpt\""), "{err}");

    // `minilm`: without the feature, how to build it; with it, a directory without the model
    // is named.
    let err = one_line_error(
        common::ctxd()
            .args(["eval", "--classifier", "minilm", "--classifier-model-dir"])
            .arg(&dir)
            .arg(&file),
    );
    if cfg!(feature = "minilm") {
        assert!(err.contains("--classifier-model-dir:"), "{err}");
        assert!(err.contains("lacks config.json"), "{err}");
    } else {
        assert!(
            err.contains("built without the `minilm` cargo feature")
                && err.contains("cargo build --release -p ctxd-cli --features minilm"),
            "{err}"
        );
    }
}

/// `ctxd eval --json FLAGS FILE`'s total for ctxd's variant.
/// The one-line message `cmd` fails with (exit code 2).
fn one_line_error(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    err
}

fn ctxd_total(file: &std::path::Path, flags: &[&str]) -> Value {
    let out = common::succeed(
        common::ctxd()
            .args(["eval", "--json"])
            .args(flags)
            .arg(file),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["total"]["ctxd"].clone()
}

#[test]
fn eval_mechanisms_measures_each_mechanism_alone_and_within_all() {
    let dir = common::fresh_dir("eval-mechanisms");
    let file = dir.join("session.jsonl");
    std::fs::write(&file, session()).unwrap();

    let out = common::succeed(
        common::ctxd()
            .args(["eval", "--mechanisms", "--json"])
            .arg(&file),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "ctxd.eval.mechanisms/2");
    assert_eq!(v["requests"], 4);
    let rows = v["mechanisms"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["mechanism"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["distillation", "digests", "write-facts", "amnesia"]);
    let row = |name: &str| rows.iter().find(|r| r["mechanism"] == name).unwrap();
    // Each variant is exactly the replay `ctxd eval` runs with those switches.
    assert_eq!(
        row("distillation")["alone"]["sent"],
        ctxd_total(&file, &["--no-digests", "--no-write-facts"])
    );
    assert_eq!(v["all"]["sent"], ctxd_total(&file, &["--amnesia"]));
    assert_eq!(row("amnesia")["all_but"]["sent"], ctxd_total(&file, &[]));
    // The grep is distilled, or digested: each alone sends less than none of them (ctxd's
    // tools, reminders and windows alone); a mechanism with nothing to do in this session (its
    // one edit is under write facts' threshold) sends what none does.
    let none = v["none"]["tokens"].as_f64().unwrap();
    let alone = |name: &str| row(name)["alone"]["tokens"].as_f64().unwrap();
    assert!(alone("distillation") < none - 0.1, "{v}");
    assert!(alone("digests") < none - 0.1, "{v}");
    assert_eq!(alone("write-facts"), none);
    // Estimated cache hits: shares, and sending everything only appends.
    for r in rows {
        let rate = r["alone"]["cache_hit_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&rate), "{r}");
    }
    assert!(
        v["everything_cache_hit_rate"].as_f64().unwrap() > 0.3,
        "{v}"
    );

    // Text: one row per mechanism, all together, and the verdict against distillation alone.
    let out = common::succeed(common::ctxd().args(["eval", "--mechanisms"]).arg(&file));
    let text = String::from_utf8(out.stdout).unwrap();
    for name in [
        "distillation",
        "digests",
        "write-facts",
        "amnesia",
        "none of them",
        "all together",
    ] {
        assert!(text.contains(name), "{text}");
    }
    assert!(text.contains("distillation alone"), "{text}");

    // The mechanism switches conflict with the table's own: one line, exit code 2.
    let out = common::ctxd()
        .args(["eval", "--mechanisms", "--no-digests"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn eval_with_the_openai_classifier_runs_against_a_model_server() {
    let dir = common::fresh_dir("eval-openai");
    let file = dir.join("session.jsonl");
    std::fs::write(&file, session()).unwrap();
    let mock = ctxd_mock::MockServer::start_blocking(ctxd_mock::Config::default()).unwrap();
    let url = format!("{}/v1", mock.base_url());

    let out = common::succeed(
        common::ctxd()
            .args(["eval", "--json", "--no-digests", "--classifier", "openai"])
            .args(["--classifier-url", &url, "--classifier-model", "judge-1"])
            .args(["--classifier-price-per-mtok", "0.2"])
            .arg(&file),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["classifier"], "openai");
    assert_eq!(v["classifier_name"], "openai:judge-1");
    let s = &v["sessions"][0];
    assert_eq!(s["requests"], 4);
    assert_eq!(s["passes"], 1);
    // One request per question of the pass, every one answered (nothing kept for an error).
    let sent = mock
        .requests()
        .iter()
        .filter(|r| r.route() == "/v1/chat/completions" && r.refused.is_none())
        .count() as u64;
    assert!(sent > 2, "{sent}");
    let total = &v["total"]["classifier"];
    assert_eq!(total["requests"].as_u64().unwrap(), sent, "{v}");
    assert_eq!(s["classifier"]["requests"], total["requests"]);
    let tokens = total["input_tokens"].as_u64().unwrap();
    assert!(tokens > 100 * sent, "{tokens} input tokens");
    let cost = total["cost_usd"].as_f64().unwrap();
    assert!((cost - tokens as f64 * 0.2 / 1e6).abs() < 1e-9, "{cost}");
    let reasons = s["reasons"].as_object().unwrap();
    assert!(
        !reasons.keys().any(|k| k.ends_with("/error")),
        "{reasons:?}"
    );

    // Text: the classifier's line.
    let out = common::succeed(
        common::ctxd()
            .args(["eval", "--no-digests", "--classifier", "openai"])
            .args(["--classifier-url", &url, "--classifier-model", "judge-1"])
            .arg(&file),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("classifier openai:judge-1:"), "{text}");
    mock.stop();
}

#[test]
fn bad_classifier_flags_say_which_and_exit_2() {
    let dir = common::fresh_dir("eval-flags");
    let file = dir.join("session.jsonl");
    std::fs::write(&file, session()).unwrap();
    for (args, want) in [
        (
            vec!["--classifier", "openai", "--classifier-model", "m"],
            "--classifier-url: missing",
        ),
        (
            vec![
                "--classifier",
                "openai",
                "--classifier-url",
                "http://127.0.0.1:9/v1",
            ],
            "--classifier-model: missing",
        ),
        (
            vec!["--classifier-url", "http://127.0.0.1:9/v1"],
            "--classifier-url: applies to the openai classifier only",
        ),
        (
            vec![
                "--classifier",
                "openai",
                "--classifier-url",
                "127.0.0.1:9",
                "--classifier-model",
                "m",
            ],
            "--classifier-url:",
        ),
        (
            vec![
                "--classifier",
                "openai",
                "--classifier-url",
                "http://127.0.0.1:9/v1",
                "--classifier-model",
                "m",
                "--classifier-key-env",
                "CTXD_EVAL_TEST_NO_SUCH_KEY",
            ],
            "--classifier-key-env: names CTXD_EVAL_TEST_NO_SUCH_KEY, which is not set",
        ),
    ] {
        let err = one_line_error(common::ctxd().arg("eval").args(&args).arg(&file));
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
