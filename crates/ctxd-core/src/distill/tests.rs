//! The seed's cases, each through the whole pass: plan → local answers → decisions → drafts
//! applied by the projection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};

use super::record::{savings, Outcome, Record};
use super::*;
use crate::model::{ContentBlock, Entry, EntryKind, Image, Message, Role, Session};
use crate::tree::active_branch;
use crate::view::{self, ItemKind as ViewKind};

#[derive(Default)]
struct Log {
    s: Session,
    n: usize,
}

impl Log {
    fn push(&mut self, kind: EntryKind) -> String {
        self.n += 1;
        let id = format!("e{}", self.n);
        let parent = self.s.entries.last().map(|e| e.id.clone());
        self.s.entries.push(Entry {
            id: EntryId::new(&id),
            parent,
            timestamp: None,
            sidechain: false,
            kind,
        });
        id
    }
    fn user(&mut self, text: &str) -> String {
        self.push(EntryKind::Message(Message::text(Role::User, text)))
    }
    fn say(&mut self, text: &str) -> String {
        self.push(EntryKind::Message(Message::text(Role::Assistant, text)))
    }
    fn call(&mut self, text: &str, id: &str, name: &str, args: Value) -> String {
        let mut content = Vec::new();
        if !text.is_empty() {
            content.push(ContentBlock::text(text));
        }
        content.push(ContentBlock::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args,
        });
        self.push(EntryKind::Message(Message::new(Role::Assistant, content)))
    }
    fn result_blocks(
        &mut self,
        id: &str,
        name: &str,
        content: Vec<ContentBlock>,
        err: bool,
    ) -> String {
        self.push(EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: id.into(),
                tool_name: Some(name.into()),
                content,
                is_error: err,
            }],
        )))
    }
    fn result(&mut self, id: &str, name: &str, text: &str) -> String {
        self.result_blocks(id, name, vec![ContentBlock::text(text)], false)
    }
    fn tool(&mut self, id: &str, name: &str, args: Value, output: &str) -> String {
        self.call("", id, name, args);
        self.result(id, name, output)
    }
    fn pass(&mut self, phase: Phase) -> (Plan, Decisions) {
        let cfg = Config::default();
        let branch = active_branch(&self.s);
        let plan = plan(&self.s, &branch, &cfg, phase);
        let answers = local::answer_all(&plan);
        let d = decide(&self.s, &plan, &answers, &cfg);
        for draft in d.drafts(local::NAME, record::Usage::default(), false) {
            self.push(draft);
        }
        (plan, d)
    }
    /// A run-end pass whose classifier gave no answer (`missing`), its record appended.
    fn pass_unanswered(&mut self, missing: Missing) -> Decisions {
        let cfg = Config::default();
        let p = plan(&self.s, &active_branch(&self.s), &cfg, Phase::RunEnd);
        let timed_out = missing == Missing::Timeout;
        let d = decide(&self.s, &p, &vec![Err(missing); p.questions.len()], &cfg);
        for draft in d.drafts(local::NAME, record::Usage::default(), timed_out) {
            self.push(draft);
        }
        d
    }
    /// The text the model now sees of a tool result entry (`None`: omitted).
    fn shown(&self, id: &str) -> Option<String> {
        let branch = active_branch(&self.s);
        let p = view::project_checked(&self.s, &branch).unwrap();
        p.items.iter().find_map(|it| {
            (self.s.entries[it.entry].id.as_str() == id).then(|| match &it.kind {
                ViewKind::Message { content, .. } => crate::recall::entry_text(
                    &EntryKind::Message(Message::new(Role::Tool, content.to_vec())),
                ),
                ViewKind::Summary { text, .. } => text.to_string(),
            })
        })
    }
    fn result_of<'a>(d: &'a Decisions, id: &str) -> &'a record::ItemResult {
        d.results.iter().find(|r| r.entry_id == id).unwrap()
    }
}

/// `n` short exchanges, too small to judge: a session long enough for edits of old items to
/// pay for their cache rewrite (the break-even rule counts the turns so far).
fn history(log: &mut Log, n: usize) {
    for i in 0..n {
        log.user(&format!("earlier question {i}"));
        log.say("earlier answer");
    }
}

/// A source file with numbered lines, as a read tool prints it.
fn source(name: &str, lines: usize) -> String {
    (1..=lines)
        .map(|i| format!("{i:>6}→    let {name}_value_{i} = compute_{name}_{i}(offset);\n"))
        .collect()
}

#[test]
fn a_superseded_read_is_replaced_by_a_stub_saying_so() {
    let mut log = Log::default();
    log.user("Fix the overflow in the parser");
    let read = log.tool(
        "c1",
        "read",
        json!({"path": "src/parser.rs"}),
        &source("parser", 120),
    );
    log.tool(
        "c2",
        "write",
        json!({"path": "src/parser.rs", "content": "fn parse() {}"}),
        "Wrote src/parser.rs",
    );
    log.say("I rewrote src/parser.rs; compute_parser_7 no longer overflows.");
    let (plan, d) = log.pass(Phase::RunEnd);
    let item = plan
        .items
        .iter()
        .find(|i| i.entry_id.as_str() == read)
        .unwrap();
    assert_eq!(
        item.signals.superseded.as_deref(),
        Some("this file was changed after this read (write src/parser.rs, 1 turn later)")
    );
    let r = Log::result_of(&d, &read);
    assert_eq!(r.outcome, Outcome::Removed, "{r:?}");
    let shown = log.shown(&read).unwrap();
    assert!(
        shown.starts_with("[ctxd] Omitted the output of read `src/parser.rs`"),
        "{shown}"
    );
    assert!(shown.contains("out of date: this file was changed after this read"));
    assert!(shown.contains(&format!("recall({{\"entryId\":\"{read}\"}})")));
}

#[test]
fn a_rerun_command_is_superseded_and_removed() {
    let mut log = Log::default();
    log.user("make the tests pass");
    let log_text: String = (0..150)
        .map(|i| format!("test case_{i} ... FAILED at tests/run.rs\n"))
        .collect();
    let first = log.tool(
        "c1",
        "bash",
        json!({"command": "cargo test 2>&1"}),
        &log_text,
    );
    log.tool(
        "c2",
        "edit",
        json!({"path": "src/lib.rs", "old_string": "a", "new_string": "b"}),
        "ok",
    );
    let second = log.tool(
        "c3",
        "bash",
        json!({"command": "cargo test"}),
        "test result: ok. 150 passed",
    );
    log.say("All 150 tests pass now.");
    let (plan, d) = log.pass(Phase::RunEnd);
    let item = plan
        .items
        .iter()
        .find(|i| i.entry_id.as_str() == first)
        .unwrap();
    assert_eq!(
        item.signals.superseded.as_deref(),
        Some("the command ran again (2 turns later)")
    );
    assert_eq!(Log::result_of(&d, &first).outcome, Outcome::Removed);
    assert!(log
        .shown(&first)
        .unwrap()
        .contains("out of date: the command ran again"));
    // The short, latest output is left alone (below the small-output size).
    assert_eq!(log.shown(&second).unwrap(), "test result: ok. 150 passed");
}

fn grep_output() -> String {
    let mut out = String::new();
    for f in [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
    ] {
        for n in 1..=8 {
            out.push_str(&format!(
                "src/{f}.rs:{}:    let status = render_status_badge_{f}(item, {n});\n",
                n * 10
            ));
        }
    }
    out
}

#[test]
fn a_grep_whose_answer_cites_some_files_keeps_those_files() {
    let mut log = Log::default();
    log.user("where is the status badge rendered?");
    let grep = log.tool("c1", "grep", json!({"pattern": "status"}), &grep_output());
    log.say("It is rendered in src/charlie.rs and src/golf.rs (render_status_badge_golf).");
    let (_, d) = log.pass(Phase::RunEnd);
    let r = Log::result_of(&d, &grep);
    assert_eq!(r.outcome, Outcome::Distilled, "{r:?}");
    assert_eq!(r.reason, "chunks");
    let shown = log.shown(&grep).unwrap();
    assert!(
        shown.starts_with("[ctxd] Distilled output of grep `status`"),
        "{shown}"
    );
    assert!(shown.contains("kept 2 of 8 parts"));
    // Kept hits verbatim, with the line numbers the tool printed.
    assert!(
        shown.contains("src/charlie.rs:30:    let status = render_status_badge_charlie(item, 3);")
    );
    assert!(shown.contains("src/golf.rs:80:"));
    assert!(!shown.contains("src/alpha.rs:10:"));
    // One omission line per removed run, with the lines to recall.
    let omissions: Vec<&str> = shown.lines().filter(|l| l.contains("omitted")).collect();
    assert_eq!(omissions.len(), 3, "{shown}");
    assert!(
        omissions[0].contains("lines 1-16 omitted"),
        "{}",
        omissions[0]
    );
    assert!(omissions[0].contains("src/alpha.rs, src/bravo.rs"));
    assert!(omissions[0].contains(&format!(
        "recall({{\"entryId\":\"{grep}\",\"offset\":1,\"limit\":16}})"
    )));
    // The recall offsets name the removed lines in the raw entry.
    let raw = crate::recall::entry_text(
        &log.s
            .entries
            .iter()
            .find(|e| e.id.as_str() == grep)
            .unwrap()
            .kind,
    );
    let sel = crate::recall::Selection::new(None, Some(25), Some(8)).unwrap();
    let back = crate::recall::render(&grep, &raw, &sel);
    assert!(back.starts_with("src/delta.rs:10:"), "{back}");
}

#[test]
fn an_image_only_prompt_is_its_own_question_and_old_images_become_stubs() {
    let mut log = Log::default();
    history(&mut log, 20);
    log.user("take a screenshot of the page");
    log.call("", "c1", "screenshot", json!({"url": "http://localhost"}));
    let shot = log.result_blocks(
        "c1",
        "screenshot",
        vec![
            ContentBlock::text("page.png"),
            ContentBlock::Image(Image {
                media_type: Some("image/png".into()),
                width: Some(1280),
                height: Some(960),
                data: Some("AAAA".into()),
                url: None,
            }),
        ],
        false,
    );
    log.say("Here it is.");
    log.push(EntryKind::Message(Message::new(
        Role::User,
        vec![ContentBlock::Image(Image::default())],
    )));
    for i in 0..3 {
        log.tool(
            &format!("d{i}"),
            "bash",
            json!({"command": format!("ls {i}")}),
            "x",
        );
    }
    log.say("Done.");
    let (plan, d) = log.pass(Phase::RunEnd);
    assert_eq!(plan.run.question, run::IMAGE_ONLY);
    let r = Log::result_of(&d, &shot);
    assert_eq!(r.kind, ItemKind::Image);
    let shown = log.shown(&shot).unwrap();
    assert!(
        shown.starts_with(
            "[ctxd] Removed 1 image from this output (1280×960; ~1.6k tokens), 5 turns old."
        ),
        "{shown}"
    );
    assert!(shown.ends_with("page.png"));
}

#[test]
fn steering_messages_continue_the_run_and_join_the_question() {
    let mut log = Log::default();
    log.user("list the failing modules");
    let out = log.tool(
        "c1",
        "bash",
        json!({"command": "make check"}),
        &"module_one failed to build\n".repeat(200),
    );
    log.user("also check the docs");
    log.tool("c2", "bash", json!({"command": "make docs"}), "docs ok");
    log.say("module_one fails; the docs build.");
    let (plan, d) = log.pass(Phase::RunEnd);
    assert_eq!(
        plan.run.question,
        "list the failing modules\n[The user added during the run] also check the docs"
    );
    // The output before the steering message is still the run's.
    assert!(plan.items.iter().any(|i| i.entry_id.as_str() == out));
    assert!(d.results.iter().any(|r| r.entry_id == out));
}

/// `n` short turns (a call and a tiny output each), so a long run's checkpoint pays off.
fn filler(log: &mut Log, n: usize, cite: impl Fn(usize) -> String) {
    for i in 0..n {
        log.tool(
            &format!("f{}", log.n),
            "bash",
            json!({"command": cite(i)}),
            "ok",
        );
    }
}

#[test]
fn a_checkpoint_waits_for_a_batch_of_old_enough_outputs() {
    let mut log = Log::default();
    log.user("run the build steps");
    for i in 0..3 {
        log.tool(
            &format!("c{i}"),
            "bash",
            json!({"command": format!("make step{i}")}),
            &"y\n".repeat(9_000),
        );
    }
    // 54,000 characters of old outputs, and a large recent one that is not old enough.
    filler(&mut log, 40, |i| format!("true {i}"));
    log.tool(
        "r1",
        "bash",
        json!({"command": "make recent"}),
        &"z\n".repeat(20_000),
    );
    let (mid, d) = log.pass(Phase::MidRun);
    assert!(
        mid.items.is_empty() && mid.pinned.is_empty(),
        "{:?}",
        mid.items
    );
    assert!(d.results.is_empty() && d.edits.is_empty());
    // Four turns on, the recent output is old enough too: the batch is due.
    filler(&mut log, 4, |i| format!("true again {i}"));
    let (mid, d) = log.pass(Phase::MidRun);
    assert_eq!(mid.items.len(), 4, "{:?}", mid.items);
    assert!(d.results.iter().all(|r| r.outcome == Outcome::Removed));
}

#[test]
fn a_kept_output_is_judged_again_at_run_end() {
    let mut log = Log::default();
    log.user("refactor the session loader");
    let big = log.tool(
        "c0",
        "read",
        json!({"path": "src/loader.rs"}),
        &source("loader", 100),
    );
    for i in 1..=3 {
        log.tool(
            &format!("c{i}"),
            "bash",
            json!({"command": format!("make step{i}")}),
            &"y\n".repeat(15_000),
        );
    }
    // The agent keeps using the whole file while it works.
    filler(&mut log, 50, |i| {
        format!("grep -n loader_value_{} src/loader.rs", 2 * i + 1)
    });
    let (mid, d1) = log.pass(Phase::MidRun);
    assert_eq!(mid.phase, Phase::MidRun);
    let first = Log::result_of(&d1, &big);
    assert_eq!(first.outcome, Outcome::Kept, "{first:?}");
    assert_eq!(first.reason, "whole-needed");
    // The outputs nothing cites went at the checkpoint.
    assert!(d1
        .results
        .iter()
        .filter(|r| r.tool == "bash")
        .all(|r| r.outcome == Outcome::Removed));
    // A second checkpoint does not ask again (the memo is read from the record).
    filler(&mut log, 5, |i| format!("true {i}"));
    let (mid2, _) = log.pass(Phase::MidRun);
    assert!(mid2.items.iter().all(|i| i.entry_id.as_str() != big));
    // The agent then rewrites the file and finishes: at run end the read is judged again, with
    // the final answer, and goes.
    log.tool(
        "w1",
        "write",
        json!({"path": "src/loader.rs", "content": "new"}),
        "written",
    );
    log.say("Refactored the loader.");
    let (end, d2) = log.pass(Phase::RunEnd);
    assert!(end.items.iter().any(|i| i.entry_id.as_str() == big));
    let again = Log::result_of(&d2, &big);
    assert_eq!(again.outcome, Outcome::Removed, "{again:?}");
    assert!(log
        .shown(&big)
        .unwrap()
        .contains("out of date: this file was changed after this read"));
}

/// An edit of another file quoting line 77 of a `source("util", 120)` read, and its result.
fn edit_quoting_line_77(log: &mut Log) {
    log.call(
        "",
        "c2",
        "edit",
        json!({"path": "src/other.rs", "old_string": "    let util_value_77 = compute_util_77(offset);", "new_string": "x"}),
    );
    log.result("c2", "edit", "ok");
}

/// The run ends; its pass distils `read`, keeping line 77 (which an edit quoted) verbatim.
fn run_end_keeps_the_quoted_line(log: &mut Log, read: &str) {
    log.say("Renamed.");
    let (_, d) = log.pass(Phase::RunEnd);
    let r = Log::result_of(&d, read);
    assert_eq!(r.outcome, Outcome::Distilled, "{r:?}");
    let shown = log.shown(read).unwrap();
    assert!(
        shown.contains("    77→    let util_value_77 = compute_util_77(offset);\n"),
        "{shown}"
    );
    assert!(!shown.contains("let util_value_2 = "), "{shown}");
}

#[test]
fn the_text_a_later_edit_quotes_stays_verbatim() {
    let mut log = Log::default();
    log.user("rename the helper");
    let read = log.tool(
        "c1",
        "read",
        json!({"path": "src/util.rs"}),
        &source("util", 120),
    );
    edit_quoting_line_77(&mut log);
    run_end_keeps_the_quoted_line(&mut log, &read);
}

#[test]
fn the_text_an_edit_quotes_stays_verbatim_after_write_facts_strip_the_edit() {
    let mut log = Log::default();
    log.user("rename the helper");
    let read = log.tool(
        "c1",
        "read",
        json!({"path": "src/util.rs"}),
        &source("util", 120),
    );
    // Pi's edit quoting lines 70-79 of the read: enough bytes for write facts to strip.
    let quoted: String = (70..80)
        .map(|i| format!("    let util_value_{i} = compute_util_{i}(offset);\n"))
        .collect();
    log.call(
        "",
        "c2",
        "edit",
        json!({"path": "src/util.rs", "oldText": quoted, "newText": "    let x = 1;\n"}),
    );
    log.result("c2", "edit", "Successfully replaced text in src/util.rs.");
    let branch = active_branch(&log.s);
    let fresh = [branch[branch.len() - 1]];
    let drafts = crate::mechanisms::writes::plan(
        &log.s,
        &branch,
        &fresh,
        &crate::mechanisms::writes::Settings::default(),
    );
    assert_eq!(drafts.len(), 1, "the edit is stripped");
    for d in drafts {
        log.push(d.kind);
    }
    // The stripped edit still pins what it quoted.
    run_end_keeps_the_quoted_line(&mut log, &read);
}

#[test]
fn an_older_codex_shell_output_is_judged_by_its_own_lines() {
    let mut log = Log::default();
    log.user("rename the helper");
    // An older Codex's `shell`: the output and its metadata as one JSON line; the kept line
    // is shown unescaped.
    let printed = source("util", 120);
    let wrapped = json!({"output": printed, "metadata": {"exit_code": 0, "duration_seconds": 0.1}})
        .to_string();
    assert!(!wrapped.contains('\n'));
    let read = log.tool(
        "c1",
        "shell",
        json!({"command": ["bash", "-lc", "sed -n 1,120p src/util.rs"]}),
        &wrapped,
    );
    edit_quoting_line_77(&mut log);
    run_end_keeps_the_quoted_line(&mut log, &read);
    // Codex's own key order, output first.
    let codex_order = format!(
        r#"{{"output":{},"metadata":{{"exit_code":0}}}}"#,
        serde_json::to_string("a\nb").unwrap()
    );
    assert_eq!(result_text(&[ContentBlock::text(&codex_order)]), "a\nb");
    assert_eq!(
        result_text(&[ContentBlock::text(r#"{"output":"a\nb","extra":1}"#)]),
        r#"{"output":"a\nb","extra":1}"#,
        "only the wrapper's own shape is unwrapped"
    );
}

/// `earlier` short exchanges, then an old exchange about a staging proxy (its prompt, and its
/// call's entry), a correction of it, two recent exchanges and a run about something else,
/// judged at its end. The old prompt, its call, the correction, and the pass's decisions.
fn staging_then_other_work(earlier: usize) -> (Log, String, String, String, Decisions) {
    let mut log = Log::default();
    history(&mut log, earlier);
    let old = log.user("configure the nginx reverse proxy for staging");
    let old_call = log.tool(
        "o1",
        "bash",
        json!({"command": "cat /etc/nginx/sites/staging.conf"}),
        &"proxy_pass http://upstream_staging;\n".repeat(300),
    );
    log.say("The proxy for staging is configured.");
    let fix = log.user("no, use the production certificate instead");
    log.tool(
        "o2",
        "bash",
        json!({"command": "cat /etc/ssl/prod_chain.pem"}),
        &"MIIBcertificatedata\n".repeat(400),
    );
    log.say("Switched to prod_chain.pem.");
    for i in 0..2 {
        log.user(&format!("recent question {i}"));
        log.say("recent answer");
    }
    log.user("write a unit test for parse_duration in src/time.rs");
    log.tool(
        "c1",
        "read",
        json!({"path": "src/time.rs"}),
        "fn parse_duration() {}",
    );
    log.say("Added the test for parse_duration.");
    let (_, d) = log.pass(Phase::RunEnd);
    (log, old, old_call, fix, d)
}

#[test]
fn unrelated_old_exchanges_are_omitted_with_a_stub_and_corrections_are_pinned() {
    let (log, old, old_call, fix, d) = staging_then_other_work(30);
    let r = Log::result_of(&d, &old);
    assert_eq!(r.outcome, Outcome::Omitted, "{r:?}");
    assert!(r.omitted.contains(&old_call));
    let stub = log.shown(&old).unwrap();
    assert!(stub.starts_with("[ctxd] Omitted an earlier exchange judged unrelated to the current work: \"configure the nginx reverse proxy for staging\""), "{stub}");
    assert_eq!(log.shown(&old_call), None);
    // The correction's exchange is never judged.
    assert!(d.results.iter().all(|r| r.entry_id != fix));
    assert!(log.shown(&fix).is_some());
    // recall brings the exchange back as a transcript.
    let branch = active_branch(&log.s);
    let pos = log
        .s
        .entries
        .iter()
        .position(|e| e.id.as_str() == old)
        .unwrap();
    let omitted = crate::recall::omitted_exchange(&log.s, &branch, pos);
    assert_eq!(omitted.len(), 3);
}

#[test]
fn pinned_outputs_are_never_pruned() {
    let mut log = Log::default();
    log.user("deploy it");
    let kept = log.tool(
        "c1",
        "deploy_log",
        json!({"target": "prod"}),
        &"deploy line\n".repeat(600),
    );
    log.say("Deployed.");
    let cfg = Config {
        exclude_tools: vec!["deploy_log".into()],
        ..Config::default()
    };
    let branch = active_branch(&log.s);
    let p = plan(&log.s, &branch, &cfg, Phase::RunEnd);
    let d = decide(&log.s, &p, &local::answer_all(&p), &cfg);
    let r = d.results.iter().find(|r| r.entry_id == kept).unwrap();
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Kept, "pinned:excluded-tool")
    );
    assert!(d.edits.is_empty());

    // Mid-run, an error the agent has not re-run is pinned.
    let mut log = Log::default();
    log.user("build it");
    log.call("", "c1", "bash", json!({"command": "make"}));
    let err = log.result_blocks(
        "c1",
        "bash",
        vec![ContentBlock::text("error: missing symbol\n".repeat(4_000))],
        true,
    );
    log.tool(
        "c2",
        "bash",
        json!({"command": "ls"}),
        &"z\n".repeat(40_000),
    );
    filler(&mut log, 60, |i| format!("true {i}"));
    let (_, d) = log.pass(Phase::MidRun);
    assert_eq!(Log::result_of(&d, &err).reason, "pinned:error");
}

#[test]
fn records_round_trip_and_savings_come_from_the_log() {
    let mut log = Log::default();
    log.user("where is the status badge rendered?");
    log.tool("c1", "grep", json!({"pattern": "status"}), &grep_output());
    log.say("In src/charlie.rs.");
    let (_, d) = log.pass(Phase::RunEnd);
    let record = log
        .s
        .entries
        .iter()
        .find_map(|e| Record::from_entry(&e.kind))
        .unwrap();
    assert_eq!(record.classifier, "local");
    assert_eq!(record.saved_chars, d.saved_chars);
    assert!(record.saved_chars > 3_000);
    let s = savings(&log.s, &active_branch(&log.s));
    assert_eq!(s.passes, 1);
    assert_eq!(s.lifetime_chars, record.saved_chars);
    assert_eq!(s.window_items, 1);
    assert!(s.window_chars > 3_000 && s.window_chars.abs_diff(record.saved_chars) < 10);
    // The record is an event any older reader understands.
    let json = serde_json::to_string(&record.to_entry()).unwrap();
    assert!(
        json.starts_with("{\"type\":\"event\",\"name\":\"ctxd.distill\""),
        "{json}"
    );
}

#[test]
fn missing_answers_keep_everything() {
    let mut log = Log::default();
    log.user("where is the status badge rendered?");
    log.tool("c1", "grep", json!({"pattern": "status"}), &grep_output());
    log.say("In src/charlie.rs.");
    let cfg = Config::default();
    let branch = active_branch(&log.s);
    let p = plan(&log.s, &branch, &cfg, Phase::RunEnd);
    let answers = vec![Err(Missing::Timeout); p.questions.len()];
    let d = decide(&log.s, &p, &answers, &cfg);
    assert!(d.edits.is_empty());
    assert_eq!(d.results[0].reason, "timeout");
}

/// A pass whose classifier timed out kept the run's outputs; the next run end asks about them
/// again (they are not in its run), and once answered they are not asked a third time.
#[test]
fn an_earlier_runs_output_left_without_an_answer_is_judged_at_the_next_run_end() {
    let mut log = Log::default();
    history(&mut log, 30);
    log.user("where is the status badge rendered?");
    let grep = log.tool("c1", "grep", json!({"pattern": "status"}), &grep_output());
    log.say("It is rendered in src/charlie.rs.");
    let d = log.pass_unanswered(Missing::Timeout);
    assert_eq!(Log::result_of(&d, &grep).reason, "timeout");

    log.user("now make the badge green");
    log.tool(
        "c2",
        "edit",
        json!({"path": "src/charlie.rs", "old_string": "red", "new_string": "green"}),
        "ok",
    );
    log.say("The badge in render_status_badge_charlie is green now.");
    let (plan2, d2) = log.pass(Phase::RunEnd);
    let item = plan2
        .items
        .iter()
        .find(|i| i.entry_id.as_str() == grep)
        .expect("the earlier output is judged again");
    assert_eq!(item.label, Log::result_of(&d, &grep).label);
    assert!(item.signals.age_turns >= 2, "{:?}", item.signals);
    let r = Log::result_of(&d2, &grep);
    assert_eq!(r.outcome, Outcome::Distilled, "{r:?}");
    let shown = log.shown(&grep).unwrap();
    assert!(
        shown.starts_with("[ctxd] Distilled output of grep"),
        "{shown}"
    );
    assert!(shown.contains("src/charlie.rs:30:"), "{shown}");

    log.user("thanks");
    log.say("You're welcome.");
    let (plan3, _) = log.pass(Phase::RunEnd);
    assert!(
        plan3.items.iter().all(|i| i.entry_id.as_str() != grep),
        "an answered output was asked again"
    );
}

/// An earlier run's output judged again is old: its edit rewrites the cache from further back,
/// so in a short session it waits ("deferred"), and is judged again until the rewrite pays off.
#[test]
fn an_earlier_runs_output_waits_for_the_cache_and_is_judged_again() {
    let mut log = Log::default();
    log.user("where is the status badge rendered?");
    let grep = log.tool("c1", "grep", json!({"pattern": "status"}), &grep_output());
    log.say("It is rendered in src/charlie.rs.");
    let d = log.pass_unanswered(Missing::Error);
    assert_eq!(Log::result_of(&d, &grep).reason, "error");
    log.user("and the badge's colour?");
    log.say("Red, set in render_status_badge_charlie.");
    let (_, d2) = log.pass(Phase::RunEnd);
    let r = Log::result_of(&d2, &grep);
    assert_eq!((r.outcome, r.reason.as_str()), (Outcome::Kept, "deferred"));
    assert_eq!(log.shown(&grep).unwrap(), grep_output());
    // Many turns later the one-time rewrite pays for itself.
    history(&mut log, 40);
    log.user("remind me where the badge is");
    log.say("src/charlie.rs, render_status_badge_charlie.");
    let (_, d3) = log.pass(Phase::RunEnd);
    let r = Log::result_of(&d3, &grep);
    assert_eq!(r.outcome, Outcome::Distilled, "{r:?}");
}

/// Outputs answered in their own run are never asked again at later run ends.
#[test]
fn an_earlier_runs_answered_output_is_not_judged_again() {
    let mut log = Log::default();
    log.user("where is the status badge rendered?");
    let grep = log.tool("c1", "grep", json!({"pattern": "status"}), &grep_output());
    log.say("I am not sure yet.");
    let (first, d) = log.pass(Phase::RunEnd);
    assert!(first.items.iter().any(|i| i.entry_id.as_str() == grep));
    assert_ne!(Log::result_of(&d, &grep).reason, "timeout");
    log.user("look again");
    log.say("Still not sure.");
    let (second, _) = log.pass(Phase::RunEnd);
    assert!(second.items.iter().all(|i| i.entry_id.as_str() != grep));
}

#[test]
fn a_read_the_question_asks_for_is_kept_whole_and_pins_its_exchange() {
    let mut log = Log::default();
    history(&mut log, 30);
    let asked = log.user("read docs/theme.md in full, then port the selector to the theme");
    let doc = log.tool(
        "d1",
        "read",
        json!({"path": "docs/theme.md"}),
        &source("theme", 120),
    );
    // Another read of the same run, which nobody asked for and nobody cites.
    let other = log.tool(
        "d2",
        "read",
        json!({"path": "src/other.rs"}),
        &source("other", 120),
    );
    log.say("Ported the selector.");
    let (plan, d) = log.pass(Phase::RunEnd);
    let item = plan
        .items
        .iter()
        .find(|i| i.entry_id.as_str() == doc)
        .unwrap();
    assert!(item.signals.requested);
    let r = Log::result_of(&d, &doc);
    assert_eq!(
        (r.outcome, r.reason.as_str()),
        (Outcome::Kept, "whole-needed")
    );
    assert_eq!(Log::result_of(&d, &other).outcome, Outcome::Removed);

    // Later runs about something else: the exchange that asked for the file is not judged,
    // while an unrelated one holding ctxd's own edit is (the seed's rule).
    let unrelated = log.user("configure the nginx reverse proxy for staging");
    let conf_text = "proxy_pass http://upstream_staging;\n".repeat(300)
        + &"worker_connections_limit 1024;\n".repeat(300);
    let conf = log.tool(
        "n1",
        "bash",
        json!({"command": "cat /etc/nginx/sites/staging.conf"}),
        &conf_text,
    );
    log.say("Configured the proxy for upstream_staging.");
    let (_, d) = log.pass(Phase::RunEnd);
    assert_eq!(Log::result_of(&d, &conf).outcome, Outcome::Distilled);
    for i in 0..3 {
        log.user(&format!("recent question {i}"));
        log.say("recent answer");
    }
    log.user("write a unit test for parse_duration in src/time.rs");
    log.tool(
        "t1",
        "read",
        json!({"path": "src/time.rs"}),
        "fn parse_duration() {}",
    );
    log.say("Added the test for parse_duration.");
    let (_, d) = log.pass(Phase::RunEnd);
    assert!(d.results.iter().all(|r| r.entry_id != asked), "{d:?}");
    assert!(log.shown(&doc).unwrap().contains("theme_value_120"));
    let r = Log::result_of(&d, &unrelated);
    assert_eq!(r.outcome, Outcome::Omitted, "{r:?}");
    assert!(r.omitted.contains(&conf));
}

#[test]
fn a_requested_read_an_edit_changed_in_part_stays_whole_but_a_rewrite_supersedes_it() {
    let run = |edit: Value| {
        let mut log = Log::default();
        log.user("read src/theme.rs and fix the border colour");
        let read = log.tool(
            "r1",
            "read",
            json!({"path": "src/theme.rs"}),
            &source("theme", 120),
        );
        log.tool("e1", "edit", edit, "ok");
        log.say("Fixed the border colour.");
        let (_, d) = log.pass(Phase::RunEnd);
        Log::result_of(&d, &read).outcome
    };
    let partly = json!({"path": "src/theme.rs", "old_string": "a", "new_string": "b"});
    assert_eq!(run(partly), Outcome::Kept);
    let rewrite = json!({"path": "src/theme.rs", "content": "fn main() {}"});
    assert_eq!(run(rewrite), Outcome::Removed);
}

/// Old items rewrite the cache from further back than the run's own edits: in a short session
/// that extra rewrite does not pay off, and they wait (`deferred`) for a later run end.
#[test]
fn old_items_wait_until_their_rewrite_pays_off() {
    let build = |earlier: usize| {
        let (_, old, _, _, d) = staging_then_other_work(earlier);
        (Log::result_of(&d, &old).clone(), d.edits.len())
    };
    let (r, edits) = build(0);
    assert_eq!((r.outcome, r.reason.as_str()), (Outcome::Kept, "deferred"));
    assert_eq!(edits, 0);
    // ~11,000 characters saved × 38 turns ≥ 11.5 × the ~19,000 rewritten from it on.
    let (r, edits) = build(30);
    assert_eq!(r.outcome, Outcome::Omitted, "{r:?}");
    assert!(edits > 0);
}
