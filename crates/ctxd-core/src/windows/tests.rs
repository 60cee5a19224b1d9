use std::collections::BTreeMap;

use expect_test::expect;

use super::boot::relative_time;
use super::checkpoint::cap;
use super::*;
use crate::notes::{HomeScope, NoteRow, NotesSnapshot};
use crate::offered::ModelTools;
use crate::tree::active_branch;
use crate::view::project_checked;

fn push(s: &mut Session, kind: EntryKind) -> EntryId {
    let parent = s.entries.last().map(|e| e.id.clone());
    let id = EntryId::new(format!("e{}", s.entries.len()));
    s.entries.push(Entry {
        id: id.clone(),
        parent,
        timestamp: None,
        sidechain: false,
        kind,
    });
    id
}

fn user(text: &str) -> EntryKind {
    EntryKind::Message(Message::text(Role::User, text))
}

fn call(id: &str, name: &str) -> EntryKind {
    EntryKind::Message(Message::new(
        Role::Assistant,
        vec![ContentBlock::ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: serde_json::json!({}),
        }],
    ))
}

fn result(id: &str) -> EntryKind {
    EntryKind::Message(Message::new(
        Role::Tool,
        vec![ContentBlock::ToolResult {
            call_id: id.into(),
            tool_name: None,
            content: vec![ContentBlock::text("done")],
            is_error: false,
        }],
    ))
}

fn row(
    scope: HomeScope,
    address: &str,
    path: &str,
    body: &str,
    ago_s: i64,
    stale: bool,
) -> NoteRow {
    NoteRow {
        scope,
        address: address.into(),
        path: path.into(),
        body: body.into(),
        bytes: body.len(),
        lines: body.split('\n').count(),
        updated_at_ms: 1_000_000_000 - ago_s * 1000,
        stale,
    }
}

fn snapshot() -> NotesSnapshot {
    let mut homes = BTreeMap::new();
    homes.insert(
        HomeScope::Session,
        vec![
            row(
                HomeScope::Session,
                "MAP.md",
                "MAP.md",
                "session map is not resident",
                5,
                false,
            ),
            row(
                HomeScope::Session,
                "checkpoint.md",
                "checkpoint.md",
                "goal: ship\nnext: tests",
                30,
                false,
            ),
            row(HomeScope::Session, "old.md", "old.md", "obsolete", 90, true),
        ],
    );
    homes.insert(
        HomeScope::Project,
        vec![row(
            HomeScope::Project,
            "@project/MAP.md",
            "MAP.md",
            "# Project map\n- build: cargo",
            4000,
            false,
        )],
    );
    homes.insert(
        HomeScope::Human,
        vec![
            row(
                HomeScope::Human,
                "@human/MAP.md",
                "MAP.md",
                "# Human map",
                90_000,
                false,
            ),
            row(
                HomeScope::Human,
                "@human/prefs.md",
                "prefs.md",
                "short answers",
                7200,
                false,
            ),
        ],
    );
    homes.insert(
        HomeScope::Model,
        vec![row(
            HomeScope::Model,
            "@models/m1/MAP.md",
            "MAP.md",
            "stale model map",
            10,
            true,
        )],
    );
    NotesSnapshot {
        homes,
        unavailable: vec![HomeScope::Agent],
        opened_at_ms: 1_000_000_000,
    }
}

#[test]
fn boot_text() {
    let notes = snapshot();
    let text = render_boot(&BootData {
        agent: "pi",
        model: "claude-sonnet-4",
        first_window_id: "cw-1-root",
        current_window_id: "cw-1-2",
        previous_window_id: Some("cw-1-root"),
        reset_line: true,
        notes: &notes,
        checkpoint: Some(
            "Recent user requests (oldest first):\n- window cw-1-root, item e0:\nfix it",
        ),
        tools: ModelTools::ALL,
    });
    expect![[r#"
        Your context was reset: this is a new context window. What you did before is not in front of you any more; your notes and the session history are.

        <context_window>
        Agent: pi (model: claude-sonnet-4)
        First context window id: cw-1-root
        Current context window id: cw-1-2
        Previous context window id: cw-1-root
        </context_window>

        Notes live in five homes. A bare <vpath> is this session's; @project/<vpath> is this project's; @human/<vpath> belongs to the human, across projects; @self/<vpath> is your own agent home and @agents/<name>/<vpath> another agent's; @model/<vpath> is the current model's home and @models/<name>/<vpath> a named model's. @self and @model mean whoever is running now, and listings show the resolved names. There is no fallback from one home to another, and any other @ prefix, or an @ inside a path, is an error. Notes are not workspace files: use the file tools for those.

        The notes index is incomplete: @self could not be read while this window started; notes_list can try again.

        # Human map

        # Project map
        - build: cargo

        Your pocket holds 2 recent notes (newest first within each home; at most 5 from this session, 5 from @project, 5 from @human, 5 from @self, 3 from @model). Only names are shown here, never contents: read a note with notes_read.
        - checkpoint.md (2 lines, 22 bytes, updated 30s ago)
        - @human/prefs.md (1 line, 13 bytes, updated 2h ago)

        <checkpoint>
        Recent user requests (oldest first):
        - window cw-1-root, item e0:
        fix it
        </checkpoint>

        <context_window_protocol>
        Your working memory is this context window, and it does not last: when it fills up, or when you call new_context, a new window starts and only what was written down carries over. Two records outlive every window of this session: your notes (notes_write, notes_append, notes_read, notes_list, notes_search) and the session history, read-only (history_list_windows, history_list_items, history_read_item, history_search_contents).

        Keep a checkpoint note up to date while you work, not at the last moment: the goal, the decisions taken and why, progress, what you learned, next steps, and the window id and item id of each user request still open. History ids let you pull an exact item back instead of redoing the work.

        get_context_remaining tells you how much room is left before the window closes. When it reaches zero the window ends without a last turn. Once your checkpoint is written you may call new_context yourself; it takes effect after the current batch of tool calls. Mark notes that are no longer true as stale, or they will mislead the next window.
        </context_window_protocol>"#]]
    .assert_eq(&text);
    // Pocket lines are metadata only: no note body appears outside the resident maps.
    assert!(!text.contains("goal: ship"));
    assert!(!text.contains("short answers"));
    assert!(!text.contains("session map is not resident"));
    assert!(!text.contains("stale model map"));
}

#[test]
fn a_boot_without_tools_names_none() {
    let notes = snapshot();
    let text = render_boot(&BootData {
        agent: "pi",
        model: "claude-sonnet-4",
        first_window_id: "w_1",
        current_window_id: "w_2",
        previous_window_id: Some("w_1"),
        reset_line: true,
        notes: &notes,
        checkpoint: Some("Recent user requests (oldest first):\n- window w_1, item i_1:\nfix it"),
        tools: ModelTools::NONE,
    });
    assert_eq!(
        crate::offered::tool_like_words(&text),
        Vec::<&str>::new(),
        "{text}"
    );
    assert!(text.contains("checkpoint below carries your recent requests"));
    // Resident maps are content, shown; the pocket lists names only a notes tool could open.
    assert!(text.contains("- build: cargo"));
    assert!(!text.contains("Your pocket holds"));
}

#[test]
fn root_boot_has_no_reset_line_and_pocket_quotas_hold() {
    let mut homes = BTreeMap::new();
    homes.insert(
        HomeScope::Model,
        (0..6)
            .map(|i| {
                row(
                    HomeScope::Model,
                    &format!("@model/n{i}.md"),
                    &format!("n{i}.md"),
                    "x",
                    i,
                    false,
                )
            })
            .collect(),
    );
    let notes = NotesSnapshot {
        homes,
        unavailable: vec![],
        opened_at_ms: 1_000_000_000,
    };
    let text = render_boot(&BootData {
        agent: "a",
        model: "m",
        first_window_id: "r",
        current_window_id: "r",
        previous_window_id: None,
        reset_line: false,
        notes: &notes,
        checkpoint: None,
        tools: ModelTools::ALL,
    });
    assert!(!text.contains("was reset"));
    assert!(!text.contains("Previous context window id"));
    assert!(text.contains("@model/n2.md"));
    assert!(
        !text.contains("@model/n3.md"),
        "the model home has 3 pocket seats"
    );
    assert!(!text.contains("<checkpoint>"));
}

#[test]
fn relative_times() {
    assert_eq!(relative_time(0, 0), "0s ago");
    assert_eq!(relative_time(0, 59_000), "59s ago");
    assert_eq!(relative_time(0, 3_600_000), "1h ago");
    assert_eq!(relative_time(0, 2 * 86_400_000 + 5), "2d ago");
    assert_eq!(relative_time(120_000, 0), "in 2m");
}

#[test]
fn checkpoint_is_capped_at_36000_chars() {
    let mut s = Session::default();
    for i in 0..20 {
        push(&mut s, user(&format!("{i} {}", "é".repeat(5_000))));
    }
    let mut notes = NotesSnapshot::default();
    notes.homes.insert(
        HomeScope::Session,
        (0..5)
            .map(|i| {
                row(
                    HomeScope::Session,
                    &format!("n{i}.md"),
                    "p",
                    &"n".repeat(9_000),
                    i,
                    false,
                )
            })
            .collect(),
    );
    let b = active_branch(&s);
    let c = checkpoint(&s, &b, 7, &notes, CHECKPOINT_MAX_CHARS);
    assert_eq!(c.chars().count(), CHECKPOINT_MAX_CHARS);
    assert!(c.ends_with("[checkpoint cut here: it has a size limit]"));
    // A small model's window gets a smaller checkpoint.
    assert_eq!(checkpoint_limit(Some(200_000)), CHECKPOINT_MAX_CHARS);
    assert_eq!(checkpoint_limit(None), CHECKPOINT_MAX_CHARS);
    assert_eq!(checkpoint_limit(Some(8_192)), 6_144);
    let small = checkpoint(&s, &b, 7, &notes, checkpoint_limit(Some(8_192)));
    assert_eq!(small.chars().count(), 6_144);
    // Only the 8 most recent requests, each cut at 2,000 characters.
    let item = |id: &str| crate::history::item_id(crate::history::item_key(7, id));
    assert!(c.contains(&format!("item {}:", item("e12"))));
    assert!(!c.contains(&format!("item {}:", item("e11"))));
    // Under the cap: unchanged.
    assert_eq!(cap("short".into(), CHECKPOINT_MAX_CHARS), "short");
    let exact = "x".repeat(CHECKPOINT_MAX_CHARS);
    assert_eq!(cap(exact.clone(), CHECKPOINT_MAX_CHARS), exact);
}

#[test]
fn checkpoint_carries_requests_prior_context_and_notes() {
    let mut s = Session::default();
    push(&mut s, user("first request"));
    push(
        &mut s,
        EntryKind::Message(Message::text(Role::User, "injected reminder").injected("x")),
    );
    push(
        &mut s,
        EntryKind::WindowMarker {
            window_id: "w2".into(),
            reason: "requested".into(),
        },
    );
    push(
        &mut s,
        EntryKind::WindowBoot {
            window_id: "w2".into(),
            message: Message::text(
                Role::User,
                "boot\n\n<checkpoint>\nRecent user requests (oldest first):\nold stuff\n\nRecovery context of the previous window:\nvery old\n</checkpoint>\n\nprotocol",
            ),
        },
    );
    push(&mut s, user("second request"));
    let b = active_branch(&s);
    let c = checkpoint(&s, &b, 7, &snapshot(), CHECKPOINT_MAX_CHARS);
    expect![[r#"
        Recent user requests (oldest first):
        - window w_4f0314a99fa1cf9d, item i_f93acaf70c7f707a:
        first request
        - window w_0218e0ee7b7001e4, item i_3f133a34e0f7ae40:
        second request

        Recovery context of the previous window:
        Recent user requests (oldest first):
        old stuff

        Excerpts of this session's notes (newest first):
        --- MAP.md (1 lines) ---
        session map is not resident
        --- checkpoint.md (2 lines) ---
        goal: ship
        next: tests"#]]
    .assert_eq(&c);
}

#[test]
fn ids_are_opaque_and_stable() {
    assert_eq!(root_window_id("sess"), root_window_id("sess"));
    assert_ne!(root_window_id("a"), root_window_id("b"));
    let a = new_window_id("s", Some(&EntryId::new("x")));
    assert_eq!(a, new_window_id("s", Some(&EntryId::new("x"))));
    assert_ne!(a, new_window_id("s", Some(&EntryId::new("y"))));
    assert!(a.starts_with(&root_window_id("s")[..11]));
}

#[test]
fn reset_is_pending_after_the_batch_and_void_after_an_abort() {
    let mut s = Session::default();
    push(&mut s, user("go"));
    push(&mut s, call("c1", "new_context"));
    let b = active_branch(&s);
    assert_eq!(reset_requests(&s, &b), 1);
    assert!(!batch_complete(&s, &b));
    assert!(!reset_pending(&s, &b), "not before the batch's results");
    push(&mut s, result("c1"));
    let b = active_branch(&s);
    assert!(reset_pending(&s, &b));
    // An aborted turn drops the request.
    push(
        &mut s,
        EntryKind::Event {
            name: ABORT_EVENT.into(),
            detail: None,
        },
    );
    let b = active_branch(&s);
    assert!(!reset_pending(&s, &b));
    push(&mut s, call("c2", "wipe_memory"));
    push(&mut s, result("c2"));
    let b = active_branch(&s);
    assert!(reset_pending(&s, &b));
    // Committing the reset ends the request.
    let after = s.entries.last().map(|e| e.id.clone());
    let id = new_window_id("k", after.as_ref());
    for kind in reset_drafts(&id, ResetCause::Requested, "boot".into()) {
        push(&mut s, kind);
    }
    let b = active_branch(&s);
    assert!(!reset_pending(&s, &b));
    assert_eq!(current_window_id(&s, &b, "k"), id);
    let p = project_checked(&s, &b).unwrap();
    assert_eq!(p.items.len(), 1, "only the boot is shown");
    let ws = windows(&s, &b, "k");
    assert_eq!(ws.len(), 2);
    assert_eq!(ws[1].boot, Some(s.entries.len() - 1));
}

#[test]
fn overflow_recovery_once_per_failure_chain() {
    let mut s = Session::default();
    push(&mut s, user("go"));
    let b = active_branch(&s);
    assert!(overflow_recovery_allowed(&s, &b));
    for kind in reset_drafts("w2", ResetCause::Overflow, "boot".into()) {
        push(&mut s, kind);
    }
    let b = active_branch(&s);
    assert!(
        !overflow_recovery_allowed(&s, &b),
        "the chain already used its recovery"
    );
    let mut failed = Message::text(Role::Assistant, "");
    failed.stop_reason = Some("error".into());
    push(&mut s, EntryKind::Message(failed));
    let b = active_branch(&s);
    assert!(!overflow_recovery_allowed(&s, &b));
    push(
        &mut s,
        EntryKind::Message(Message::text(Role::Assistant, "fine")),
    );
    let b = active_branch(&s);
    assert!(
        overflow_recovery_allowed(&s, &b),
        "a success starts a new chain"
    );
}

#[test]
fn repair_only_when_nothing_but_metadata_follows() {
    let mut s = Session::default();
    push(&mut s, user("go"));
    let b = active_branch(&s);
    assert_eq!(repair_plan(&s, &b), Repair::NotNeeded);
    push(
        &mut s,
        EntryKind::WindowMarker {
            window_id: "w2".into(),
            reason: "requested".into(),
        },
    );
    push(
        &mut s,
        EntryKind::ModelChange {
            provider: None,
            model: "m".into(),
        },
    );
    let b = active_branch(&s);
    assert_eq!(
        repair_plan(&s, &b),
        Repair::AppendBoot {
            window_id: "w2".into(),
            marker: 1
        }
    );
    assert!(project_checked(&s, &b).is_err());
    // After the repair the branch projects.
    let mut repaired = s.clone();
    push(&mut repaired, repair_boot("w2", "boot".into()));
    let rb = active_branch(&repaired);
    assert_eq!(repair_plan(&repaired, &rb), Repair::NotNeeded);
    assert!(project_checked(&repaired, &rb).is_ok());
    // Later work after the marker: refuse.
    push(&mut s, user("more work"));
    let b = active_branch(&s);
    assert!(
        matches!(repair_plan(&s, &b), Repair::Refuse { ref window_id, .. } if window_id == "w2")
    );
}

#[test]
fn chained_drafts_have_stable_ids_and_parents() {
    let parent = EntryId::new("p");
    let a = chain(
        Some(&parent),
        reset_drafts("w", ResetCause::Manual, "b".into()),
        None,
    );
    let b = chain(
        Some(&parent),
        reset_drafts("w", ResetCause::Manual, "b".into()),
        None,
    );
    assert_eq!(a, b);
    assert_eq!(a[0].parent.as_ref(), Some(&parent));
    assert_eq!(a[1].parent.as_ref(), Some(&a[0].id));
    assert_ne!(a[0].id, a[1].id);
}

#[test]
fn iso_times() {
    assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(iso8601(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
}
