use serde_json::json;

use super::*;
use crate::model::Message;
use crate::tokens::CharEstimate;
use crate::view::{entry_ids, project_checked};

fn user(s: &mut Session, text: &str) -> usize {
    s.push_linear(EntryKind::Message(Message::text(Role::User, text)));
    s.entries.len() - 1
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ContentBlock {
    ContentBlock::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args,
    }
}

fn result(id: &str, text: &str, is_error: bool) -> ContentBlock {
    ContentBlock::ToolResult {
        call_id: id.into(),
        tool_name: None,
        content: vec![ContentBlock::text(text)],
        is_error,
    }
}

fn thinking(n: u32) -> ContentBlock {
    ContentBlock::Thinking {
        thinking: format!("let me look {n}"),
        signature: Some(format!("sig-{n}")),
        redacted: false,
    }
}

fn push(s: &mut Session, role: Role, content: Vec<ContentBlock>) -> usize {
    s.push_linear(EntryKind::Message(Message::new(role, content)));
    s.entries.len() - 1
}

/// A file's content sharing no term with the task.
fn unrelated(n: usize) -> String {
    (0..n)
        .map(|i| format!("   {i}\tconst zebraQuokka{i} = platypusWombat({i});\n"))
        .collect()
}

fn all(s: &Session) -> Vec<usize> {
    (0..s.entries.len()).collect()
}

fn prep(s: &Session, new: &[usize], agent: &str) -> Option<Prepared> {
    prepare(
        s,
        &all(s),
        new,
        Some(agent),
        &Config::default(),
        &CharEstimate,
    )
}

fn judge_at(s: &mut Session, new: &[usize], agent: &str, p: f32) -> Record {
    let prepared = prep(s, new, agent).unwrap();
    judge(s, prepared, p)
}

/// Decide with the same P(needed) for every question, append the drafts; the record.
fn judge(s: &mut Session, prepared: Prepared, p: f32) -> Record {
    let n = prepared.plan.as_ref().map_or(0, |pl| pl.questions.len());
    let answers: Vec<_> = (0..n).map(|_| Ok(Answer::Yes(p))).collect();
    let (record, drafts) = decide(prepared, &answers, "test");
    for d in drafts {
        s.push_linear(d);
    }
    record
}

fn shown_ids(s: &Session) -> Vec<String> {
    let p = project_checked(s, &all(s)).unwrap();
    entry_ids(s, &p.items)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// A prompt, then a Claude Code `Read` round with thinking; the result new.
fn read_round() -> (Session, usize) {
    let mut s = Session::default();
    user(&mut s, "fix the failing parser test");
    push(
        &mut s,
        Role::Assistant,
        vec![
            thinking(1),
            call("c1", "Read", json!({"file_path": "src/zoo.js"})),
        ],
    );
    let r = push(
        &mut s,
        Role::User,
        vec![result("c1", &unrelated(80), false)],
    );
    (s, r)
}

#[test]
fn a_dropped_tail_round_is_omitted_whole_with_its_thinking() {
    let (mut s, r) = read_round();
    let before = shown_ids(&s);
    let p = prep(&s, &[r], "claude-code").unwrap();
    assert_eq!(p.entries.len(), 2, "the assistant message and its result");
    assert!(p.plan.is_some());
    let record = judge(&mut s, p, 0.1);
    assert_eq!(record.judgments[0].decision, Decision::Drop);
    assert_eq!(record.judgments[0].reason, "classifier");
    assert_eq!(record.pruned.len(), 2);
    assert!(record.removed_tokens > 500);
    // What is left is what the model saw before the round, byte for byte.
    assert_eq!(shown_ids(&s), before[..1].to_vec());
    // The record reads back from the log.
    let back: Vec<Record> = s
        .entries
        .iter()
        .filter_map(|e| Record::from_entry(&e.kind))
        .collect();
    assert_eq!(back, vec![record]);
}

#[test]
fn a_retained_result_keeps_its_round_and_is_recorded() {
    let (mut s, r) = read_round();
    let before = shown_ids(&s);
    let record = judge_at(&mut s, &[r], "claude-code", 0.8);
    assert_eq!(record.judgments[0].decision, Decision::Retain);
    assert_eq!(record.judgments[0].p_needed, Some(0.8));
    assert!(record.pruned.is_empty());
    assert_eq!(shown_ids(&s), before);
}

#[test]
fn no_answer_errors_and_small_results_retain() {
    // A missing answer (classifier failure, timeout) retains.
    let (mut s, r) = read_round();
    let p = prep(&s, &[r], "claude-code").unwrap();
    let (record, drafts) = decide(p, &[Err(Missing::Timeout)], "test");
    assert_eq!(record.judgments[0].decision, Decision::Retain);
    assert_eq!(record.judgments[0].reason, "timeout");
    assert_eq!(drafts.len(), 1, "the record only");
    let (record, _) = decide(prep(&s, &[r], "claude-code").unwrap(), &[], "test");
    assert_eq!(record.judgments[0].reason, "no-answer");
    s.entries.truncate(r);

    // An error result and a small one are not asked about.
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![call("c1", "Read", json!({"file_path": "x"}))],
    );
    let r = push(&mut s, Role::User, vec![result("c1", &unrelated(80), true)]);
    let p = prep(&s, &[r], "claude-code").unwrap();
    assert!(p.plan.is_none());
    assert_eq!(p.judgments[0].reason, "error");
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![call("c1", "Read", json!({"file_path": "x"}))],
    );
    let r = push(&mut s, Role::User, vec![result("c1", "tiny", false)]);
    let p = prep(&s, &[r], "claude-code").unwrap();
    assert_eq!(p.judgments[0].reason, "small");
    let (record, drafts) = decide(p, &[], "test");
    assert_eq!(record.classifier, "none");
    assert_eq!(drafts.len(), 1);
}

#[test]
fn a_mixed_parallel_round_stays_whole() {
    // Two reads in parallel (Chat: one assistant message, two tool messages), one small.
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![
            call("a", "read", json!({"path": "big.js"})),
            call("b", "read", json!({"path": "small.js"})),
        ],
    );
    let ra = push(&mut s, Role::Tool, vec![result("a", &unrelated(80), false)]);
    let rb = push(&mut s, Role::Tool, vec![result("b", "x = 1", false)]);
    let p = prep(&s, &[ra, rb], "pi").unwrap();
    assert!(p.plan.is_none(), "nothing worth asking");
    let reasons: Vec<&str> = p.judgments.iter().map(|j| j.reason.as_str()).collect();
    assert_eq!(reasons, ["mixed-round", "small"]);
    let before = shown_ids(&s);
    let record = judge(&mut s, p, 0.0);
    assert!(record.pruned.is_empty());
    assert_eq!(shown_ids(&s), before);

    // A read beside another tool's call: the round stays whole too.
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![
            call("a", "read", json!({"path": "big.js"})),
            call("b", "write", json!({"path": "out.js", "content": "x"})),
        ],
    );
    let ra = push(&mut s, Role::Tool, vec![result("a", &unrelated(80), false)]);
    let rb = push(&mut s, Role::Tool, vec![result("b", "ok", false)]);
    let p = prep(&s, &[ra, rb], "pi").unwrap();
    assert!(p.plan.is_none());
    assert_eq!(p.judgments.len(), 1);
    assert_eq!(p.judgments[0].reason, "mixed-round");

    // Both dropped: both go, with their one assistant message.
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![
            call("a", "read", json!({"path": "a.js"})),
            call("b", "read", json!({"path": "b.js"})),
        ],
    );
    let ra = push(&mut s, Role::Tool, vec![result("a", &unrelated(80), false)]);
    let rb = push(&mut s, Role::Tool, vec![result("b", &unrelated(90), false)]);
    let record = judge_at(&mut s, &[ra, rb], "pi", 0.1);
    assert_eq!(record.pruned.len(), 3);
    assert_eq!(shown_ids(&s).len(), 1);
}

#[test]
fn only_the_tail_round_and_only_while_new() {
    // The round before the tail was sent already: only the last round is judged, and an
    // earlier round is never pruned afterwards.
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![call("a", "Read", json!({"file_path": "a.js"}))],
    );
    push(&mut s, Role::User, vec![result("a", &unrelated(80), false)]);
    push(
        &mut s,
        Role::Assistant,
        vec![call("b", "Read", json!({"file_path": "b.js"}))],
    );
    let rb = push(&mut s, Role::User, vec![result("b", &unrelated(70), false)]);
    let record = judge_at(&mut s, &[rb], "claude-code", 0.1);
    assert_eq!(record.judgments.len(), 1);
    assert_eq!(record.judgments[0].call_id, "b");
    assert_eq!(shown_ids(&s).len(), 3, "the first round stays");

    // The element before the round came in the same request: not pruned (the model has
    // not seen it end a request).
    let mut s = Session::default();
    let u = user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![call("a", "Read", json!({"file_path": "a.js"}))],
    );
    let r = push(&mut s, Role::User, vec![result("a", &unrelated(80), false)]);
    assert!(prep(&s, &[u, u + 1, r], "claude-code").is_none());

    // A request ending in an assistant message, or results not new: nothing to judge.
    let (mut s, r) = read_round();
    assert!(prep(&s, &[], "claude-code").is_none());
    let a = push(&mut s, Role::Assistant, vec![ContentBlock::text("done")]);
    assert!(prep(&s, &[a], "claude-code").is_none());
    let p = project_checked(&s, &all(&s)).unwrap();
    assert!(tail_round(&p.items, |pos| pos == r).is_none());
}

#[test]
fn an_assistant_message_with_text_is_never_pruned() {
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![
            ContentBlock::text("I will read the file."),
            call("a", "Read", json!({"file_path": "a.js"})),
        ],
    );
    let r = push(&mut s, Role::User, vec![result("a", &unrelated(80), false)]);
    assert!(prep(&s, &[r], "claude-code").is_none());
}

#[test]
fn responses_items_reasoning_and_calls_go_together() {
    // Responses: a reasoning item, two function calls, their outputs, each its own entry.
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(&mut s, Role::Assistant, vec![thinking(7)]);
    push(
        &mut s,
        Role::Assistant,
        vec![call(
            "a",
            "shell",
            json!({"command": ["bash", "-lc", "cat src/a.js"]}),
        )],
    );
    push(
        &mut s,
        Role::Assistant,
        vec![call(
            "b",
            "shell",
            json!({"command": ["sed", "-n", "1,200p", "src/b.js"]}),
        )],
    );
    let ra = push(&mut s, Role::Tool, vec![result("a", &unrelated(80), false)]);
    let rb = push(&mut s, Role::Tool, vec![result("b", &unrelated(60), false)]);
    let record = judge_at(&mut s, &[ra, rb], "codex", 0.1);
    assert_eq!(record.pruned.len(), 5, "{record:?}");
    assert_eq!(shown_ids(&s).len(), 1);

    // A shell call that writes is not a read: nothing judged.
    let mut s = Session::default();
    user(&mut s, "fix it");
    push(
        &mut s,
        Role::Assistant,
        vec![call(
            "a",
            "shell",
            json!({"command": ["bash", "-lc", "cat a > b"]}),
        )],
    );
    let r = push(&mut s, Role::Tool, vec![result("a", &unrelated(80), false)]);
    assert!(prep(&s, &[r], "codex").is_none());
}

#[test]
fn a_dropped_round_stays_out_and_the_prefix_is_stable() {
    let (mut s, r) = read_round();
    judge_at(&mut s, &[r], "claude-code", 0.1);
    let sent = shown_ids(&s);
    // The model answered from the prompt alone; the client resends the round too.
    push(
        &mut s,
        Role::Assistant,
        vec![call("c2", "Grep", json!({"pattern": "parser"}))],
    );
    let r2 = push(
        &mut s,
        Role::User,
        vec![result("c2", "src/parser.rs:10: fn parse", false)],
    );
    let next = shown_ids(&s);
    assert_eq!(next[..sent.len()], sent[..], "byte-stable prefix");
    assert_eq!(next.len(), sent.len() + 2);
    // The small result is retained; nothing changes.
    let record = judge_at(&mut s, &[r2], "claude-code", 0.0);
    assert_eq!(record.judgments[0].reason, "small");
    assert_eq!(shown_ids(&s), next);
}

#[test]
fn the_same_call_after_a_drop_is_retained() {
    let (mut s, r) = read_round();
    judge_at(&mut s, &[r], "claude-code", 0.1);
    push(
        &mut s,
        Role::Assistant,
        vec![
            thinking(2),
            call("c9", "Read", json!({"file_path": "src/zoo.js"})),
        ],
    );
    let r2 = push(
        &mut s,
        Role::User,
        vec![result("c9", &unrelated(80), false)],
    );
    let p = prep(&s, &[r2], "claude-code").unwrap();
    assert_eq!(p.judgments[0].reason, "repeated");
    assert!(p.plan.is_none());
}

#[test]
fn the_accounting_charges_the_pruning_to_amnesia() {
    let (mut s, r) = read_round();
    let record = judge_at(&mut s, &[r], "claude-code", 0.1);
    let mut memo = crate::savings::EntryTokens::default();
    let m = crate::savings::measure(&s, &all(&s), &mut memo, 0);
    assert_eq!(m.saved.amnesia as u64, record.removed_tokens);
    assert_eq!(m.saved.distillation, 0);
    assert_eq!(m.saved_total(), m.saved.total());
}

#[test]
fn the_local_classifier_question_carries_the_task() {
    let (s, r) = read_round();
    let p = prep(&s, &[r], "claude-code").unwrap();
    let plan = p.plan.unwrap();
    assert_eq!(plan.run.question, "fix the failing parser test");
    assert!(
        plan.questions[0].text.contains("Read `src/zoo.js`"),
        "{}",
        plan.questions[0].text
    );
    let answers = crate::distill::local::answer_all(&plan);
    // Nothing of the task in the file: the local rules give a low P(needed).
    assert!(
        matches!(answers[0], Ok(Answer::Yes(p)) if p < DROP_BELOW),
        "{answers:?}"
    );
}

#[test]
fn read_only_commands_are_parsed_never_guessed() {
    for ok in [
        "cat src/a.rs",
        "sed -n '1,200p' src/a.rs",
        "rg -n 'fn main' src | head -50",
        "ls -la && find . -name '*.rs'",
        "grep -rn \"x > y\" src 2>/dev/null",
        "cd crates/core && git diff HEAD~1 -- src",
        "head -n 40 a.txt; tail -n 40 a.txt",
        "nl -ba src/lib.rs | sed -n '10,80p'",
    ] {
        assert!(is_read_only(ok), "{ok}");
    }
    for no in [
        "sed -i 's/a/b/' x",
        "sed 's/a/b/' x",
        "cat a > b",
        "echo hi >> log",
        "rm -rf target",
        "find . -name x -delete",
        "find . -exec rm {} ;",
        "cat $(ls)",
        "cat `ls`",
        "git branch new",
        "git checkout main",
        "cargo test",
        "ls &",
        "X=1 cat a",
        "cat 'unbalanced",
        "tee out.txt",
        "sort -o out in",
        "",
    ] {
        assert!(!is_read_only(no), "{no}");
    }
    assert_eq!(
        command_of(&json!({"command": ["bash", "-lc", "cat a"]})).as_deref(),
        Some("cat a")
    );
    assert_eq!(command_of(&json!({"cmd": "rg x"})).as_deref(), Some("rg x"));
    assert_eq!(
        command_of(&json!({"command": ["sed", "-n", "1,5p", "my file"]})).as_deref(),
        Some("sed -n 1,5p 'my file'")
    );
    let t = ReadTools::default();
    assert!(t.is_read(Some("claude-code"), "Read", &json!({})));
    assert!(!t.is_read(Some("claude-code"), "Bash", &json!({"command": "cat a"})));
    assert!(t.is_read(Some("pi"), "bash", &json!({"command": "cat a"})));
    assert!(!t.is_read(Some("pi"), "bash", &json!({"command": "make"})));
    assert!(t.is_read(Some("codex"), "exec_command", &json!({"cmd": "ls"})));
}
