//! SWE-agent `.traj` and mini-swe-agent `.traj.json` importers on the shared real trajectories.
//!
//! Facts counted independently with python3 over the JSON:
//! - pydicom__pydicom-1458.traj: `history` has 26 items (1 system, 13 user of which 1 is the
//!   `is_demo` demonstration, 1 the task and 11 observations; 12 assistant with `action`, the
//!   last one `submit` with no observation after it), `trajectory` has 12
//!   steps, `info.model_stats` = {tokens_sent 122612, tokens_received 1369, api_calls 12,
//!   instance_cost 1.26719}, exit_status "submitted"; no model or instance id in the file.
//! - astropy__astropy-12907.traj.json: 130 messages (1 system, 1 user, 64 assistant with one
//!   tool call each, 63 tool, 1 `exit`); every assistant `extra.response` is from
//!   deepseek-v4-flash with usage summing to prompt 1111619 (cached 1093760), completion 17133;
//!   model_stats = {instance_cost 0.04282165999999999, api_calls 64}; config model_name
//!   "deepseek/deepseek-chat"; trajectory_format "mini-swe-agent-1.1".

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test

mod common;
use common::{confuse, Rng};

use std::io::Cursor;

use ctxd_core::model::{Agent, ContentBlock, EntryKind, Message, Role, Session, Usage};
use ctxd_formats::{import_path, import_reader, Format};
use serde_json::json;

use ctxd_test_support::shared;

fn messages(s: &Session) -> impl Iterator<Item = &Message> {
    s.entries.iter().filter_map(|e| match &e.kind {
        EntryKind::Message(m) => Some(m),
        _ => None,
    })
}

fn event<'a>(s: &'a Session, name: &str) -> Option<&'a serde_json::Value> {
    s.entries.iter().find_map(|e| match &e.kind {
        EntryKind::Event { name: n, detail } if n == name => detail.as_ref(),
        _ => None,
    })
}

#[test]
fn swe_agent_history_imports() {
    let import = import_path(&shared().join("sessions/swe-agent/pydicom__pydicom-1458.traj"))
        .expect("imports");
    assert_eq!(import.format, Format::SweAgent);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    assert_eq!(s.meta.agent, Some(Agent::SweAgent));
    assert_eq!(s.meta.format, "swe-agent");
    assert_eq!(
        (s.meta.model.as_deref(), s.meta.id.as_deref()),
        (None, None)
    );

    // 26 history items + exit + billed totals.
    assert_eq!(s.entries.len(), 28);
    assert!(
        matches!(&s.entries[0].kind, EntryKind::SystemPrompt { text }
        if text.starts_with("SETTING: You are an autonomous programmer"))
    );
    let by_role = |r: Role| messages(s).filter(|m| m.role == r).count();
    assert_eq!((by_role(Role::User), by_role(Role::Assistant)), (13, 12));
    let injected = |k: &str| {
        messages(s)
            .filter(|m| m.injected.as_deref() == Some(k))
            .count()
    };
    assert_eq!(injected("demonstration"), 1);
    // Every assistant action but the last (`submit`) got an observation back.
    assert_eq!(injected("observation"), 11);
    // The task is the one user message nobody injected.
    let task: Vec<_> = messages(s)
        .filter(|m| m.role == Role::User && m.injected.is_none())
        .collect();
    assert_eq!(task.len(), 1);
    assert!(matches!(&task[0].content[0], ContentBlock::Text { text }
        if text.contains("Pixel Representation attribute should be optional")));

    assert_eq!(
        event(s, "exit").and_then(|d| d["exit_status"].as_str()),
        Some("submitted")
    );
    let totals = event(s, "billed_totals").expect("billed totals");
    assert_eq!(
        totals,
        &json!({"input": 122612, "output": 1369, "api_calls": 12, "cost": 1.26719})
    );
    assert!(
        matches!(&s.entries[27].kind, EntryKind::Event { name, .. } if name == "billed_totals")
    );
    for pair in s.entries.windows(2) {
        assert_eq!(pair[1].parent.as_ref(), Some(&pair[0].id));
    }
}

#[test]
fn swe_agent_falls_back_to_trajectory_steps() {
    let text =
        std::fs::read_to_string(shared().join("sessions/swe-agent/pydicom__pydicom-1458.traj"))
            .expect("read");
    let mut doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    doc.as_object_mut().map(|o| o.remove("history"));
    let import = import_reader(Cursor::new(doc.to_string().into_bytes())).expect("imports");
    assert_eq!(import.format, Format::SweAgent);
    assert_eq!(import.warnings.len(), 1);
    let s = &import.session;
    // 12 steps, each a response and an observation, then exit and billed totals.
    assert_eq!(s.entries.len(), 26);
    assert_eq!(
        messages(s).filter(|m| m.role == Role::Assistant).count(),
        12
    );
    assert_eq!(
        messages(s)
            .filter(|m| m.injected.as_deref() == Some("observation"))
            .count(),
        12
    );
}

#[test]
fn swe_agent_function_calling_history() {
    // The shape current SWE-agent writes with function calling.
    let doc = json!({
        "environment": "main",
        "replay_config": "{\"agent\":{\"model\":{\"name\":\"claude-sonnet-4-20250514\"}},\"problem_statement\":{\"id\":\"repo__repo-1\"}}",
        "trajectory": [],
        "history": [
            {"role": "system", "content": "sys", "agent": "main", "message_type": "system_prompt"},
            {"role": "user", "content": [{"type": "text", "text": "task"}], "agent": "main", "message_type": "observation"},
            {"role": "assistant", "content": "look", "thought": "look", "action": "ls", "agent": "main",
             "message_type": "action", "thinking_blocks": [{"type": "thinking", "thinking": "hmm", "signature": "sg"}],
             "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
            {"role": "tool", "content": [{"type": "text", "text": "a b"}], "agent": "main",
             "message_type": "observation", "tool_call_ids": ["toolu_1"]}
        ],
        "info": {"model_stats": {"instance_cost": 0.5, "tokens_sent": 10, "tokens_received": 2, "api_calls": 1}}
    });
    let import = import_reader(Cursor::new(doc.to_string().into_bytes())).expect("imports");
    let s = &import.session;
    assert_eq!(s.meta.model.as_deref(), Some("claude-sonnet-4-20250514"));
    assert_eq!(s.meta.id.as_deref(), Some("repo__repo-1"));
    let ms: Vec<_> = messages(s).collect();
    assert_eq!(ms.len(), 3);
    assert_eq!(ms[0].injected.as_deref(), Some("observation"));
    assert!(
        matches!(&ms[1].content[0], ContentBlock::Thinking { thinking, signature: Some(sig), .. }
        if thinking == "hmm" && sig == "sg")
    );
    assert!(
        matches!(&ms[1].content[2], ContentBlock::ToolCall { id, arguments, .. }
        if id == "toolu_1" && arguments["command"] == "ls")
    );
    assert!(
        matches!(&ms[2].content[0], ContentBlock::ToolResult { call_id, .. } if call_id == "toolu_1")
    );
}

#[test]
fn mini_swe_agent_imports_with_per_response_usage() {
    let import =
        import_path(&shared().join("sessions/mini-swe-agent/astropy__astropy-12907.traj.json"))
            .expect("imports");
    assert_eq!(import.format, Format::MiniSweAgent);
    assert!(import.warnings.is_empty(), "{:?}", import.warnings);
    let s = &import.session;
    assert_eq!(s.meta.agent, Some(Agent::MiniSweAgent));
    assert_eq!(s.meta.format, "mini-swe-agent/1.1");
    assert_eq!(s.meta.id.as_deref(), Some("astropy__astropy-12907"));
    assert_eq!(s.meta.model.as_deref(), Some("deepseek/deepseek-chat"));
    assert!(s
        .meta
        .started_at
        .as_deref()
        .is_some_and(|t| t.ends_with('Z')));

    // 130 messages (system prompt, exit event included) + billed totals.
    assert_eq!(s.entries.len(), 131);
    assert!(
        matches!(&s.entries[0].kind, EntryKind::SystemPrompt { text }
        if text.starts_with("You are a helpful assistant"))
    );
    let by_role = |r: Role| messages(s).filter(|m| m.role == r).count();
    assert_eq!(
        (
            by_role(Role::Assistant),
            by_role(Role::Tool),
            by_role(Role::User)
        ),
        (64, 63, 1)
    );
    let calls = messages(s)
        .flat_map(|m| m.content.iter())
        .filter(|b| matches!(b, ContentBlock::ToolCall { name, .. } if name == "bash"))
        .count();
    assert_eq!(calls, 64);

    let assistants: Vec<_> = messages(s).filter(|m| m.role == Role::Assistant).collect();
    assert!(assistants
        .iter()
        .all(|m| m.model.as_deref() == Some("deepseek-v4-flash")));
    assert!(assistants
        .iter()
        .all(|m| m.response_id.is_some() && m.usage.is_some()));
    let mut usage = Usage::default();
    for m in &assistants {
        usage.add(m.usage.as_ref().expect("usage"));
    }
    // input excludes the cached prompt tokens: 1111619 - 1093760.
    assert_eq!(
        usage,
        Usage {
            input: 17859,
            output: 17133,
            cache_read: 1_093_760,
            cache_write: 0
        }
    );
    let first = assistants[0].usage.expect("usage");
    assert_eq!(
        (first.input, first.cache_read, first.prompt_tokens()),
        (25, 1664, 1689)
    );

    assert_eq!(
        event(s, "exit").and_then(|d| d["exit_status"].as_str()),
        Some("Submitted")
    );
    assert_eq!(
        event(s, "billed_totals"),
        Some(&json!({"api_calls": 64, "cost": 0.04282165999999999}))
    );
}

#[test]
fn mini_swe_agent_v1_text_actions_and_litellm_anthropic_usage() {
    // mini-swe-agent 1.x: no tool role, observations are user messages.
    let doc = json!({
        "trajectory_format": "mini-swe-agent-1",
        "instance_id": "x__y-1",
        "info": {"config": {"model": {"model_name": "anthropic/claude-sonnet-4-5"}},
                 "model_stats": {"instance_cost": 0.1, "api_calls": 1}},
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "THOUGHT\n```bash\nls\n```",
             "extra": {"response": {"id": "r1", "model": "claude-sonnet-4-5",
                 "choices": [{"finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 1150, "completion_tokens": 9,
                     "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1000,
                     "prompt_tokens_details": {"cached_tokens": 1000}}}}},
            {"role": "user", "content": "<returncode>0</returncode>"}
        ]
    });
    let import = import_reader(Cursor::new(doc.to_string().into_bytes())).expect("imports");
    let s = &import.session;
    assert_eq!(s.meta.format, "mini-swe-agent/1");
    let ms: Vec<_> = messages(s).collect();
    assert_eq!(ms.len(), 3);
    assert_eq!(ms[0].injected, None);
    assert_eq!(ms[2].injected.as_deref(), Some("observation"));
    assert_eq!(ms[1].stop_reason.as_deref(), Some("stop"));
    assert_eq!(
        ms[1].usage,
        Some(Usage {
            input: 50,
            output: 9,
            cache_read: 1000,
            cache_write: 100
        })
    );
}

#[test]
fn trajectories_of_the_wrong_shape_are_errors_not_panics() {
    let bad = json!({"trajectory": [], "history": "nope", "info": {}});
    assert!(import_reader(Cursor::new(bad.to_string().into_bytes())).is_err());
    let odd = json!({"trajectory_format": "mini-swe-agent-1.1", "messages": [1, {"role": "user", "content": "t"}], "info": {}});
    let import = import_reader(Cursor::new(odd.to_string().into_bytes())).expect("imports");
    assert_eq!(import.warnings.len(), 1);
    assert_eq!(import.session.entries.len(), 1);
}

/// Import throughput: `cargo test --release -p ctxd-formats --test swe -- --ignored --nocapture`.
#[test]
#[ignore]
fn throughput() {
    for file in [
        "sessions/swe-agent/pydicom__pydicom-1458.traj",
        "sessions/mini-swe-agent/astropy__astropy-12907.traj.json",
    ] {
        let data = std::fs::read(shared().join(file)).expect("read");
        measure(file, &data, 100);
    }
}

/// Import `data` `rounds` times; prints the best round's MB/s (the machine may be shared: the
/// best round is the least disturbed one) and the mean.
fn measure(name: &str, data: &[u8], rounds: usize) {
    let mut best = f64::MAX;
    let mut total = 0.0;
    for _ in 0..rounds {
        let start = std::time::Instant::now();
        let import = import_reader(Cursor::new(data)).expect("imports");
        assert!(!import.session.entries.is_empty());
        drop(import);
        let secs = start.elapsed().as_secs_f64();
        best = best.min(secs);
        total += secs;
    }
    let mb = data.len() as f64 / 1e6;
    println!(
        "{name}: {mb:.2} MB, best {:.0} MB/s, mean {:.0} MB/s over {rounds} rounds",
        mb / best,
        mb * rounds as f64 / total
    );
}

#[test]
fn type_confused_trajectories_never_panic() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for file in [
        "sessions/swe-agent/pydicom__pydicom-1458.traj",
        "sessions/mini-swe-agent/astropy__astropy-12907.traj.json",
    ] {
        let text = std::fs::read_to_string(shared().join(file)).expect("read");
        let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
        for _ in 0..150 {
            let mut mutated = doc.clone();
            for _ in 0..6 {
                confuse(&mut mutated, &mut rng, 7, &[]);
            }
            // Any outcome but a panic is fine.
            let _ = import_reader(Cursor::new(mutated.to_string().into_bytes()));
        }
    }
}
