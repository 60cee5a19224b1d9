#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The notes store: create/replace, append, versions, list order, search, rename, stale,
//! tenant isolation.

use ctxd_core::notes::{Direction, ListOrder, OrderBy, MAX_NOTE_BYTES};
use ctxd_store::{NotesStore, SqliteStore};

const H: &str = "session:s1";

mod common;
use common::each_backend;

#[test]
fn overwrite_and_delete_lose_nothing() {
    each_backend(|s| {
        let w1 = s
            .note_write("", H, "plan.md", "first\n", 10)
            .unwrap()
            .unwrap();
        assert!(!w1.replaced);
        assert_eq!((w1.meta.version, w1.meta.lines, w1.meta.bytes), (1, 1, 6));
        let w2 = s
            .note_write("", H, "plan.md", "second", 20)
            .unwrap()
            .unwrap();
        assert!(w2.replaced);
        assert_eq!(
            w2.meta.created_at_ms, 10,
            "a replace keeps the creation time"
        );
        assert_eq!(w2.meta.updated_at_ms, 20);
        let a = s
            .note_append("", H, "plan.md", "third", 30)
            .unwrap()
            .unwrap();
        assert_eq!(a.added_bytes, "\nthird".len());
        assert_eq!(
            s.note_read("", H, "plan.md").unwrap().unwrap().body,
            "second\nthird"
        );
        s.note_set_stale("", H, "plan.md", true, 35)
            .unwrap()
            .unwrap();
        assert!(s.note_delete("", H, "plan.md", 40).unwrap().is_some());
        assert!(s.note_read("", H, "plan.md").unwrap().is_none());
        assert!(s.note_delete("", H, "plan.md", 41).unwrap().is_none());

        // Every state is readable back from the versions.
        let body = |v| s.note_version_body("", H, "plan.md", v).unwrap();
        assert_eq!(body(1).as_deref(), Some("first\n"));
        assert_eq!(body(2).as_deref(), Some("second"));
        assert_eq!(body(3).as_deref(), Some("second\nthird"));
        assert_eq!(
            body(4).as_deref(),
            Some("second\nthird"),
            "stale keeps the body"
        );
        assert_eq!(body(5), None, "deleted");
        assert_eq!(body(6), None, "no such version");
        let ops: Vec<String> = s
            .note_versions("", H, "plan.md")
            .unwrap()
            .into_iter()
            .map(|v| v.op)
            .collect();
        assert_eq!(ops, ["write", "write", "append", "stale", "delete"]);

        // Written again after the delete: numbering continues.
        let again = s
            .note_append("", H, "plan.md", "reborn", 50)
            .unwrap()
            .unwrap();
        assert!(again.created);
        assert_eq!(again.meta.version, 6);
        assert_eq!(again.meta.created_at_ms, 50);
        assert_eq!(body(6).as_deref(), Some("reborn"));
    });
}

#[test]
fn size_limit_writes_nothing() {
    each_backend(|s| {
        let big = "x".repeat(MAX_NOTE_BYTES + 1);
        assert!(s.note_write("", H, "a", &big, 1).unwrap().is_err());
        assert!(s.note_read("", H, "a").unwrap().is_none());
        assert!(s.note_versions("", H, "a").unwrap().is_empty());

        let full = "x".repeat(MAX_NOTE_BYTES);
        s.note_write("", H, "a", &full, 1).unwrap().unwrap();
        let refused = s.note_append("", H, "a", "y", 2).unwrap().unwrap_err();
        assert!(refused.to_string().contains("1,000,002"), "{refused}"); // the joining newline counts;
        let note = s.note_read("", H, "a").unwrap().unwrap();
        assert_eq!((note.body.len(), note.meta.version), (MAX_NOTE_BYTES, 1));
        assert_eq!(s.note_versions("", H, "a").unwrap().len(), 1);
    });
}

#[test]
fn list_orders_prefixes_and_limits() {
    each_backend(|s| {
        s.note_write("", H, "b.md", "", 100).unwrap().unwrap();
        s.note_write("", H, "a.md", "", 200).unwrap().unwrap();
        s.note_write("", H, "plans/c.md", "", 300).unwrap().unwrap();
        s.note_append("", H, "b.md", "more", 400).unwrap().unwrap();
        s.note_write("", "session:other", "z.md", "", 500)
            .unwrap()
            .unwrap();
        let list = |by, direction, prefix: &str, limit| -> Vec<String> {
            s.note_list("", H, prefix, ListOrder { by, direction }, limit)
                .unwrap()
                .into_iter()
                .map(|m| m.path)
                .collect()
        };
        use Direction::*;
        use OrderBy::*;
        assert_eq!(
            list(Name, Ascending, "", 10),
            ["a.md", "b.md", "plans/c.md"]
        );
        assert_eq!(
            list(Name, Descending, "", 10),
            ["plans/c.md", "b.md", "a.md"]
        );
        assert_eq!(
            list(CreatedAt, Ascending, "", 10),
            ["b.md", "a.md", "plans/c.md"]
        );
        assert_eq!(
            list(UpdatedAt, Descending, "", 10),
            ["b.md", "plans/c.md", "a.md"]
        );
        assert_eq!(list(UpdatedAt, Descending, "", 1), ["b.md"]);
        assert_eq!(list(Name, Ascending, "pla", 10), ["plans/c.md"]);
        assert_eq!(list(Name, Ascending, "plans/", 10), ["plans/c.md"]);
        assert!(
            list(Name, Ascending, "%", 10).is_empty(),
            "no LIKE wildcards"
        );
        // The home snapshot: most recently updated first, with bodies.
        let home: Vec<(String, String)> = s
            .note_home("", H)
            .unwrap()
            .into_iter()
            .map(|n| (n.meta.path, n.body))
            .collect();
        assert_eq!(home[0], ("b.md".into(), "more".into()));
        assert_eq!(home.len(), 3);
    });
}

#[test]
fn search_is_literal_and_case_sensitive() {
    each_backend(|s| {
        s.note_write("", H, "a.md", "one\nTODO: x\n", 1)
            .unwrap()
            .unwrap();
        s.note_write("", H, "b.md", "todo lower\n50% done", 2)
            .unwrap()
            .unwrap();
        s.note_write("", H, "d/c.md", "TODO too", 3)
            .unwrap()
            .unwrap();
        let found = |q: &str, prefix: &str| -> Vec<String> {
            s.note_search("", H, prefix, q)
                .unwrap()
                .into_iter()
                .map(|n| n.meta.path)
                .collect()
        };
        assert_eq!(found("TODO", ""), ["a.md", "d/c.md"]);
        assert_eq!(found("TODO", "d/"), ["d/c.md"]);
        assert_eq!(found("50%", ""), ["b.md"]);
        assert_eq!(found("_", ""), Vec::<String>::new());
        assert!(found("", "").is_empty());
    });
}

#[test]
fn rename_moves_with_history_and_refuses_collisions() {
    each_backend(|s| {
        s.note_write("", H, "a.md", "body", 1).unwrap().unwrap();
        s.note_write("", H, "b.md", "other", 2).unwrap().unwrap();
        let exists = s
            .note_rename("", (H, "a.md"), (H, "b.md"), 3)
            .unwrap()
            .unwrap_err();
        assert!(exists.to_string().contains("already exists"));
        let missing = s
            .note_rename("", (H, "zz.md"), (H, "c.md"), 3)
            .unwrap()
            .unwrap_err();
        assert!(missing.to_string().contains("no note"));
        assert!(s
            .note_rename("", (H, "a.md"), (H, "a.md"), 3)
            .unwrap()
            .is_err());
        assert_eq!(s.note_read("", H, "b.md").unwrap().unwrap().body, "other");

        let moved = s
            .note_rename("", (H, "a.md"), ("project:p", "docs/a.md"), 4)
            .unwrap()
            .unwrap();
        assert_eq!(
            (moved.home.as_str(), moved.path.as_str()),
            ("project:p", "docs/a.md")
        );
        assert_eq!(moved.created_at_ms, 1);
        assert!(s.note_read("", H, "a.md").unwrap().is_none());
        assert_eq!(
            s.note_read("", "project:p", "docs/a.md")
                .unwrap()
                .unwrap()
                .body,
            "body"
        );
        // The old path's history still has its body; the new path records where it came from.
        assert_eq!(
            s.note_version_body("", H, "a.md", 1).unwrap().as_deref(),
            Some("body")
        );
        let v = s.note_versions("", "project:p", "docs/a.md").unwrap();
        assert_eq!(v[0].op, "rename_in");
        assert_eq!(v[0].other.as_deref(), Some("session:s1\ta.md"));
    });
}

#[test]
fn stale_flag_set_cleared_and_reset_by_writes() {
    each_backend(|s| {
        s.note_write("", H, "a.md", "x", 1).unwrap().unwrap();
        let m = s.note_set_stale("", H, "a.md", true, 5).unwrap().unwrap();
        assert!(m.stale);
        assert_eq!(
            m.updated_at_ms, 1,
            "marking stale is not an update of the text"
        );
        // Setting it again records nothing.
        s.note_set_stale("", H, "a.md", true, 6).unwrap().unwrap();
        assert_eq!(s.note_versions("", H, "a.md").unwrap().len(), 2);
        assert!(
            !s.note_set_stale("", H, "a.md", false, 7)
                .unwrap()
                .unwrap()
                .stale
        );
        s.note_set_stale("", H, "a.md", true, 8).unwrap().unwrap();
        let w = s.note_append("", H, "a.md", "y", 9).unwrap().unwrap();
        assert!(!w.meta.stale, "new text is fresh");
        assert!(s.note_set_stale("", H, "nope", true, 9).unwrap().is_none());
    });
}

#[test]
fn tenants_never_see_each_other() {
    each_backend(|s| {
        s.note_write("alice", "human", "secret.md", "alice's", 1)
            .unwrap()
            .unwrap();
        s.note_write("bob", "human", "secret.md", "bob's", 2)
            .unwrap()
            .unwrap();
        assert_eq!(
            s.note_read("alice", "human", "secret.md")
                .unwrap()
                .unwrap()
                .body,
            "alice's"
        );
        assert_eq!(
            s.note_read("bob", "human", "secret.md")
                .unwrap()
                .unwrap()
                .body,
            "bob's"
        );
        assert!(s.note_read("", "human", "secret.md").unwrap().is_none());
        let only = s
            .note_list("bob", "human", "", ListOrder::default(), 10)
            .unwrap();
        assert_eq!(only.len(), 1);
        assert_eq!(s.note_search("carol", "human", "", "'s").unwrap().len(), 0);
        assert!(s.note_home("carol", "human").unwrap().is_empty());
        // Bob cannot delete, rename or mark Alice's note, nor read her versions.
        assert!(s
            .note_delete("carol", "human", "secret.md", 3)
            .unwrap()
            .is_none());
        assert!(s
            .note_rename("carol", ("human", "secret.md"), ("human", "x"), 3)
            .unwrap()
            .is_err());
        assert!(s
            .note_set_stale("carol", "human", "secret.md", true, 3)
            .unwrap()
            .is_none());
        assert!(s
            .note_versions("carol", "human", "secret.md")
            .unwrap()
            .is_empty());
        assert_eq!(
            s.note_version_body("carol", "human", "secret.md", 1)
                .unwrap(),
            None
        );
        // A write by Bob made a version of Bob's only.
        assert_eq!(
            s.note_versions("alice", "human", "secret.md")
                .unwrap()
                .len(),
            1
        );
    });
}

#[test]
fn notes_survive_reopening_a_file_store() {
    let dir = std::env::temp_dir().join(format!("ctxd-notes-{}", std::process::id()));
    let path = dir.join("s.db");
    let _ = std::fs::remove_file(&path);
    {
        let s = SqliteStore::open(&path, ctxd_store::Durability::Full).unwrap();
        s.note_write("", H, "keep.md", "kept", 1).unwrap().unwrap();
    }
    let s = SqliteStore::open(&path, ctxd_store::Durability::Full).unwrap();
    assert_eq!(s.note_read("", H, "keep.md").unwrap().unwrap().body, "kept");
    assert_eq!(s.integrity_check().unwrap(), "ok");
    let _ = std::fs::remove_dir_all(&dir);
}
