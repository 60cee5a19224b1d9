#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::model::{Entry, EntryId};

#[derive(Default)]
struct Log {
    s: Session,
}

impl Log {
    fn push(&mut self, kind: EntryKind) -> usize {
        let id = format!("e{}", self.s.entries.len());
        let parent = self.s.entries.last().map(|e| e.id.clone());
        self.s.entries.push(Entry {
            id: EntryId::new(id),
            parent,
            timestamp: None,
            sidechain: false,
            kind,
        });
        self.s.entries.len() - 1
    }
    fn user(&mut self, text: &str) -> usize {
        self.push(EntryKind::Message(Message::text(Role::User, text)))
    }
    /// A call and its result: (call, result) positions.
    fn tool(&mut self, n: usize) -> (usize, usize) {
        let id = format!("t{n}");
        let call = self.push(EntryKind::Message(Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: id.clone(),
                name: "bash".into(),
                arguments: serde_json::json!({"command": "ls"}),
            }],
        )));
        let result = self.push(EntryKind::Message(Message::new(
            Role::User,
            vec![ContentBlock::ToolResult {
                call_id: id,
                tool_name: None,
                content: vec![ContentBlock::text("x".repeat(1_000))],
                is_error: false,
            }],
        )));
        (call, result)
    }
    /// A tool round, then the record of a request (at `at_ms`) whose breakpoint was on its
    /// result: the result's position.
    fn cached_tool(&mut self, n: usize, at_ms: u64) -> usize {
        let (_, result) = self.tool(n);
        self.record(at_ms, &[result]);
        result
    }
    fn record(&mut self, at_ms: u64, marks: &[usize]) -> usize {
        let marks = marks
            .iter()
            .map(|&p| Mark {
                entry: self.s.entries[p].id.0.clone(),
                block: 0,
            })
            .collect();
        self.push(Record::new("claude-x", at_ms, 7, marks).to_entry())
    }
    fn edit(&mut self, target: usize) -> usize {
        let target = self.s.entries[target].id.clone();
        self.push(EntryKind::ContextEdit {
            target,
            replacement: Some(vec![ContentBlock::text("[ctxd] gone")]),
        })
    }
    fn branch(&self) -> Vec<usize> {
        (0..self.s.entries.len()).collect()
    }
    /// The upstream messages: every message on the branch, as branch indices.
    fn messages(&self) -> Vec<usize> {
        (0..self.s.entries.len())
            .filter(|&p| self.s.entries[p].kind.as_message().is_some())
            .collect()
    }
}

fn tail_only() -> ClientMarks {
    ClientMarks {
        tail: true,
        system: 1,
        tools: 1,
        ..ClientMarks::default()
    }
}

#[test]
fn the_factors_follow_from_the_prices() {
    assert!((Provider::Anthropic.factor() - 11.5).abs() < 1e-9);
    assert!((Provider::OpenAi.factor() - 3.0).abs() < 1e-9);
    // pending × turns ≥ factor × rewrite, at the boundary.
    assert!(pays_off(23, 1, 2, Provider::Anthropic));
    assert!(!pays_off(22, 1, 2, Provider::Anthropic));
    assert!(pays_off(3_000, 10, 10_000, Provider::OpenAi));
    assert!(!pays_off(2_999, 10, 10_000, Provider::OpenAi));
    // Nothing to rewrite: any saving pays; zero turns count as one.
    assert!(pays_off(1, 0, 0, Provider::Anthropic));
    assert!(pays_off(
        usize::MAX,
        usize::MAX,
        usize::MAX,
        Provider::Anthropic
    ));
    assert_eq!(Provider::of("gateway/messages", None), Provider::Anthropic);
    assert_eq!(
        Provider::of("gateway/responses", Some("o3")),
        Provider::OpenAi
    );
    assert_eq!(
        Provider::of("pi", Some("claude-sonnet-4-5")),
        Provider::Anthropic
    );
    assert_eq!(Provider::of("pi", None), Provider::Anthropic);
}

#[test]
fn records_round_trip_and_only_version_1_reads() {
    let r = Record::new(
        "m",
        5,
        9,
        vec![Mark {
            entry: "e1".into(),
            block: 2,
        }],
    );
    assert_eq!(Record::from_entry(&r.to_entry()), Some(r.clone()));
    let mut v2 = r;
    v2.v = 2;
    assert_eq!(Record::from_entry(&v2.to_entry()), None);
}

#[test]
fn the_ledger_keeps_entries_until_an_edit_at_or_before_them() {
    let mut log = Log::default();
    log.user("fix the build");
    let r1 = log.cached_tool(1, 1_000);
    let r2 = log.cached_tool(2, 2_000);
    let r3 = log.cached_tool(3, 3_000);
    let l = Ledger::read(&log.s, &log.branch());
    assert_eq!(l.written.len(), 3);
    assert_eq!(l.first_edit, None);
    // Read through: the latest request refreshed the earlier entries of its model and head.
    assert!(l.written.iter().all(|w| w.at_ms == 3_000));

    // An edit of the second result breaks the entries at and after it.
    log.edit(r2);
    let l = Ledger::read(&log.s, &log.branch());
    assert_eq!(l.written.iter().map(|w| w.at).collect::<Vec<_>>(), vec![r1]);
    assert_eq!(l.first_edit, Some(r2));
    assert_eq!(l.read_point_before(r2).map(|w| w.at), Some(r1));
    // Past the TTL, or for another model or head, nothing is trusted.
    assert_eq!(l.trusted("claude-x", 7, 3_000 + TTL_MS).count(), 1);
    assert_eq!(l.trusted("claude-x", 7, 3_001 + TTL_MS).count(), 0);
    assert_eq!(l.trusted("claude-y", 7, 3_000).count(), 0);
    assert_eq!(l.trusted("claude-x", 8, 3_000).count(), 0);

    // The next request's record clears the pending edit; a new window clears everything.
    log.record(4_000, &[r3]);
    let l = Ledger::read(&log.s, &log.branch());
    assert_eq!(l.first_edit, None);
    log.push(EntryKind::WindowMarker {
        window_id: "w".into(),
        reason: "test".into(),
    });
    assert!(Ledger::read(&log.s, &log.branch()).written.is_empty());
}

#[test]
fn an_edit_after_every_cached_prefix_breaks_nothing() {
    let mut log = Log::default();
    log.user("fix the build");
    log.cached_tool(1, 1_000);
    let (_, r2) = log.tool(2);
    log.edit(r2);
    let l = Ledger::read(&log.s, &log.branch());
    assert_eq!(l.first_edit, None);
    assert_eq!(l.written.len(), 1);
}

#[test]
fn without_edits_the_plan_is_the_tail_the_question_and_the_clients_head() {
    let mut log = Log::default();
    log.user("fix the build");
    for n in 0..3 {
        log.cached_tool(n, 1_000);
    }
    let messages = log.messages();
    let req = Request {
        messages: &messages,
        client: tail_only(),
        model: "claude-x",
        head: 7,
        now_ms: 2_000,
    };
    let p = plan(&log.s, &log.branch(), &req);
    let whys: Vec<Why> = p.marks.iter().map(|m| m.why).collect();
    assert_eq!(whys, vec![Why::Question, Why::Tail]);
    assert_eq!(p.marks[0].message, 0);
    assert_eq!(p.marks[1].message, messages.len() - 1);
    assert_eq!((p.system, p.tools), (1, 1));
    assert_eq!(p.count(), 4);
}

#[test]
fn a_client_that_asks_for_no_caching_gets_no_breakpoint() {
    let mut log = Log::default();
    log.user("fix the build");
    log.tool(1);
    let messages = log.messages();
    let req = Request {
        messages: &messages,
        client: ClientMarks::default(),
        model: "claude-x",
        head: 7,
        now_ms: 0,
    };
    assert_eq!(plan(&log.s, &log.branch(), &req), Plan::default());
}

#[test]
fn after_an_edit_the_read_point_and_the_write_anchor_come_before_the_clients_head() {
    let mut log = Log::default();
    log.user("fix the build");
    let mut results = Vec::new();
    for n in 0..6 {
        let r = log.cached_tool(n, 1_000 + n as u64);
        results.push(r);
    }
    log.edit(results[3]);
    log.edit(results[4]);
    let messages = log.messages();
    let client = ClientMarks {
        messages: vec![(3, 0), (messages.len() - 1, 0)],
        tail: true,
        system: 2,
        tools: 1,
    };
    let req = Request {
        messages: &messages,
        client,
        model: "claude-x",
        head: 7,
        now_ms: 2_000,
    };
    let p = plan(&log.s, &log.branch(), &req);
    let at = |why| p.marks.iter().find(|m| m.why == why).map(|m| m.message);
    let index = |pos: usize| messages.iter().position(|&b| b == pos).unwrap();
    assert_eq!(at(Why::Question), Some(0));
    assert_eq!(at(Why::Read), Some(index(results[2])));
    assert_eq!(at(Why::Write), Some(index(results[3])));
    assert_eq!(at(Why::Tail), Some(messages.len() - 1));
    assert_eq!(p.marks.len(), MAX_BREAKPOINTS);
    // The client's other breakpoints (an earlier message, the system prompt, the tools) went.
    assert_eq!(at(Why::Client), None);
    assert_eq!((p.system, p.tools), (0, 0));
    // The read point is where the entry was written.
    let read = p.marks.iter().find(|m| m.why == Why::Read).unwrap();
    assert_eq!(read.block, Some(0));
    // Ordered by message, each message once.
    assert!(p.marks.windows(2).all(|w| w[0].message < w[1].message));
}

#[test]
fn a_stale_entry_is_no_read_point() {
    let mut log = Log::default();
    log.user("fix the build");
    log.cached_tool(1, 1_000);
    let r2 = log.cached_tool(2, 1_000);
    log.edit(r2);
    log.tool(3);
    let messages = log.messages();
    let req = Request {
        messages: &messages,
        client: tail_only(),
        model: "claude-x",
        head: 7,
        now_ms: 1_001 + TTL_MS,
    };
    let p = plan(&log.s, &log.branch(), &req);
    assert!(p.marks.iter().all(|m| m.why != Why::Read), "{p:?}");
    assert!(p.marks.iter().any(|m| m.why == Why::Write));
    assert!(p.count() <= MAX_BREAKPOINTS);
}

#[test]
fn the_rewrite_starts_after_the_read_point_on_anthropic_and_at_the_edit_on_openai() {
    let mut log = Log::default();
    log.user("fix the build");
    let (c1, r1) = log.tool(1);
    log.record(1_000, &[r1]);
    let (c2, r2) = log.tool(2);
    log.record(2_000, &[r2]);
    let branch: Vec<usize> = vec![0, c1, r1, c2, r2];
    let chars = [10, 20, 1_000, 20, 1_000];
    let ledger = Ledger::read(&log.s, &log.branch());
    // An edit of the second result: Anthropic reads up to the first result's entry.
    assert_eq!(
        rewrite_chars(Provider::Anthropic, &ledger, &chars, &branch, 4),
        1_020
    );
    // Of the first: no entry before it, the whole context (without any record: from the
    // edit on).
    assert_eq!(
        rewrite_chars(Provider::Anthropic, &Ledger::default(), &chars, &branch, 2),
        2_020
    );
    assert_eq!(
        rewrite_chars(Provider::Anthropic, &ledger, &chars, &branch, 2),
        2_050
    );
    assert_eq!(
        rewrite_chars(Provider::OpenAi, &ledger, &chars, &branch, 2),
        2_020
    );
}
