#![allow(clippy::unwrap_used, clippy::expect_used)]

//! `ctxd stats` on the real binary, over a store holding request records as the gateway
//! writes them: the sums agree with what the log holds (`savings::record::totals`), per
//! session and over every tenant.

mod common;

use ctxd_core::model::{Entry, EntryKind, Message, Role, SessionMeta};
use ctxd_core::savings::{record, ByMechanism, Measure, Record};
use ctxd_store::{Durability, NewEntry, SqliteStore, Store};
use serde_json::Value;

fn entry(id: &str, parent: Option<&str>, kind: EntryKind) -> NewEntry {
    entry_on("2026-12-01", id, parent, kind)
}

fn entry_on(day: &str, id: &str, parent: Option<&str>, kind: EntryKind) -> NewEntry {
    NewEntry::new(Entry {
        timestamp: Some(format!("{day}T10:00:00Z")),
        ..ctxd_test_support::entry(id, parent, kind)
    })
}

/// A session of `requests` turns, each followed by its record (`saved` windows tokens).
fn store_session(store: &SqliteStore, tenant: &str, key: &str, requests: &[(u64, i64)]) {
    let meta = SessionMeta {
        model: Some("claude-sonnet-4-5".into()),
        ..SessionMeta::default()
    };
    store_session_on(store, (tenant, key, &meta), "2026-12-01", requests);
}

/// [`store_session`] with its meta, on `day`.
fn store_session_on(
    store: &SqliteStore,
    (tenant, key, meta): (&str, &str, &SessionMeta),
    day: &str,
    requests: &[(u64, i64)],
) {
    let rec = store.open_session(tenant, key, meta).unwrap();
    let mut batch = Vec::new();
    let mut parent: Option<String> = None;
    for (i, &(sent, saved)) in requests.iter().enumerate() {
        let (u, r) = (format!("u{i}"), format!("r{i}"));
        let m = Message::text(Role::User, format!("question {i}"));
        batch.push(entry_on(day, &u, parent.as_deref(), EntryKind::Message(m)));
        let measure = Measure {
            sent,
            whole: (sent as i64 + saved) as u64,
            saved: ByMechanism {
                windows: saved + 10,
                reminders: -10,
                ..ByMechanism::default()
            },
        };
        let kind = Record::new(&measure, Some("claude-sonnet-4-5")).to_entry();
        batch.push(entry_on(day, &r, Some(&u), kind));
        parent = Some(r);
    }
    store.append(rec.id, &batch, None).unwrap();
}

fn json(db: &str, args: &[&str]) -> Value {
    let out = common::succeed(
        common::ctxd()
            .arg("--store")
            .arg(db)
            .arg("stats")
            .args(args),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn stats_sums_the_records_of_every_session_and_lists_one_request_by_request() {
    let dir = common::fresh_dir("stats-cli");
    let db = dir.join("s.db");
    {
        let store = SqliteStore::open(&db, Durability::Normal).unwrap();
        store_session(
            &store,
            "tenant-a",
            "alpha",
            &[(1000, 0), (400, 5000), (500, 6000)],
        );
        store_session(&store, "tenant-b", "beta", &[(200, 50)]);
    }
    let db = db.to_str().unwrap();
    let all = json(db, &["--json"]);
    assert_eq!(all["sessions"].as_array().unwrap().len(), 2);
    let total = &all["total"];
    assert_eq!(total["requests"], 4);
    assert_eq!(total["sent"], 2100);
    assert_eq!(total["saved"], 11050);
    assert_eq!(total["saved_by"]["windows"], 11090);
    assert_eq!(total["saved_by"]["reminders"], -40);
    assert!((total["cost_saved_usd"].as_f64().unwrap() - 11050.0 * 3.0 / 1e6).abs() < 1e-9);

    // What the log holds, read by the core's function.
    let store = SqliteStore::open(std::path::Path::new(db), Durability::Normal).unwrap();
    for row in all["sessions"].as_array().unwrap() {
        let rec = store
            .find_session(
                row["tenant"].as_str().unwrap(),
                row["key"].as_str().unwrap(),
            )
            .unwrap()
            .unwrap();
        let t = record::totals(&store.load(rec.id).unwrap());
        assert_eq!(row["requests"].as_u64(), Some(t.requests));
        assert_eq!(row["sent"].as_u64(), Some(t.sent));
        assert_eq!(row["whole"].as_u64(), Some(t.whole));
        assert_eq!(row["saved"].as_i64(), Some(t.saved));
    }

    let one = json(db, &["alpha", "--json"]);
    let requests = one["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[1]["saved"], 5000);
    assert_eq!(requests[1]["saved_by"]["windows"], 5010);
    assert_eq!(one["session"]["requests"], 3);

    let text = common::succeed(common::ctxd().arg("--store").arg(db).arg("stats"));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("4 requests"), "{text}");
    assert!(
        text.contains("windows") && text.contains("reminders"),
        "{text}"
    );
}

/// The text table as people read it: the sessions in `ctxd sessions --stored`'s order (newest
/// first), keys whole at the end of the line (they were cut at 30 characters), a column only
/// for a mechanism that saved or spent something (all nine made ~160-column rows of zeros),
/// imported sessions (no request records: all zeros) counted instead of listed, and the
/// session's current model (the last) as `report` and `sessions` show it, not its first.
#[test]
fn stats_text_is_narrow_whole_and_in_the_sessions_order() {
    let dir = common::fresh_dir("stats-text");
    let db = dir.join("s.db");
    let long_key = "claude-code:0123456789abcdef0123456789abcdef-long";
    {
        let store = SqliteStore::open(&db, Durability::Normal).unwrap();
        store_session(&store, "tenant-a", "older", &[(1000, 500)]);
        store_session(&store, "tenant-a", long_key, &[(400, 50), (400, 60)]);
        // An import: entries, no request records.
        let rec = store
            .open_session("", "pi:imported", &SessionMeta::default())
            .unwrap();
        let m = Message::text(Role::User, "hello".to_owned());
        store
            .append(rec.id, &[entry("u0", None, EntryKind::Message(m))], None)
            .unwrap();
        // A session that switched models: its first in the meta, the last in its answers.
        let meta = SessionMeta {
            model: Some("claude-sonnet-4-5".into()),
            ..SessionMeta::default()
        };
        let rec = store.open_session("tenant-a", "switched", &meta).unwrap();
        let mut answer = Message::text(Role::Assistant, "ok".to_owned());
        answer.model = Some("claude-opus-4-1".into());
        let u = Message::text(Role::User, "q".to_owned());
        store
            .append(
                rec.id,
                &[
                    entry("u0", None, EntryKind::Message(u)),
                    entry("a0", Some("u0"), EntryKind::Message(answer)),
                ],
                None,
            )
            .unwrap();
    }
    let db = db.to_str().unwrap();
    let text =
        String::from_utf8(common::succeed(common::ctxd().args(["--store", db, "stats"])).stdout)
            .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("SENT") && lines[0].ends_with("KEY"),
        "{text}"
    );
    // Narrow up to the key (which is as long as it is).
    assert!(lines[0].chars().count() <= 80, "{text}");
    assert!(!lines[0].contains("distillation"), "{text}");
    assert!(
        text.contains("nothing saved or spent by: distillation"),
        "{text}"
    );
    assert!(lines.iter().any(|l| l.ends_with(long_key)), "{text}");
    assert!(!text.contains("pi:imported"), "{text}");
    assert!(
        text.contains("2 session(s) without request records"),
        "{text}"
    );
    // The same order as `sessions --stored`.
    let listed = String::from_utf8(
        common::succeed(common::ctxd().args(["--store", db, "sessions", "--json"])).stdout,
    )
    .unwrap();
    let order: Vec<String> = listed
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .filter(|k| k == "older" || k == long_key)
        .collect();
    let pos = |k: &str| {
        text.find(&format!("  {k}\n"))
            .unwrap_or_else(|| panic!("{k}: {text}"))
    };
    assert_eq!(order.len(), 2, "{listed}");
    assert!(pos(&order[0]) < pos(&order[1]), "{order:?}: {text}");
    // The switched session's model: the last, in stats as in sessions.
    let all = json(db, &["--json"]);
    let switched = all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["key"] == "switched")
        .unwrap();
    assert_eq!(switched["model"], "claude-opus-4-1", "{switched}");
    let row = listed
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["key"] == "switched")
        .unwrap();
    assert_eq!(row["model"], switched["model"]);
}

/// `--by`: every request summed by project, agent, model, tenant or day; the groups add up to
/// the total, days in order, the rest by tokens sent.
#[test]
fn stats_by_sums_every_request_by_one_attribute() {
    use ctxd_core::model::Agent;
    let dir = common::fresh_dir("stats-by");
    let db = dir.join("s.db");
    {
        let store = SqliteStore::open(&db, Durability::Normal).unwrap();
        let meta = |agent, cwd: Option<&str>| SessionMeta {
            agent: Some(agent),
            cwd: cwd.map(str::to_owned),
            model: Some("claude-sonnet-4-5".into()),
            ..SessionMeta::default()
        };
        let web = meta(Agent::ClaudeCode, Some("/src/web"));
        let api = meta(Agent::Codex, Some("/src/api"));
        let bare = meta(Agent::Pi, None);
        store_session_on(
            &store,
            ("t-a", "one", &web),
            "2026-12-01",
            &[(1000, 10), (500, 20)],
        );
        store_session_on(&store, ("t-a", "two", &web), "2026-12-03", &[(300, 30)]);
        store_session_on(&store, ("t-b", "three", &api), "2026-12-02", &[(2000, 40)]);
        store_session_on(&store, ("t-b", "four", &bare), "2026-12-03", &[(100, 50)]);
    }
    let db = db.to_str().unwrap();
    let groups = |by: &str| {
        let v = json(db, &["--by", by, "--json"]);
        assert_eq!(v["by"], by);
        assert_eq!(v["total"]["requests"], 5);
        assert_eq!(v["total"]["sent"], 3900);
        let groups: Vec<(String, u64, i64)> = v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let key = g["key"].as_str().unwrap().to_owned();
                (
                    key,
                    g["sent"].as_u64().unwrap(),
                    g["saved"].as_i64().unwrap(),
                )
            })
            .collect();
        let sent: u64 = groups.iter().map(|g| g.1).sum();
        assert_eq!(sent, 3900, "the groups add up: {groups:?}");
        groups
    };
    let g = |k: &str, sent, saved| (k.to_owned(), sent, saved);
    assert_eq!(
        groups("day"),
        [
            g("2026-12-01", 1500, 30),
            g("2026-12-02", 2000, 40),
            g("2026-12-03", 400, 80)
        ]
    );
    assert_eq!(
        groups("project"),
        [
            g("/src/api", 2000, 40),
            g("/src/web", 1800, 60),
            g("(unknown)", 100, 50)
        ]
    );
    assert_eq!(
        groups("agent"),
        [
            g("codex", 2000, 40),
            g("claude-code", 1800, 60),
            g("pi", 100, 50)
        ]
    );
    assert_eq!(groups("model"), [g("claude-sonnet-4-5", 3900, 150)]);
    assert_eq!(groups("tenant"), [g("t-b", 2100, 90), g("t-a", 1800, 60)]);

    let text = common::succeed(
        common::ctxd()
            .arg("--store")
            .arg(db)
            .args(["stats", "--by", "day"]),
    );
    let text = String::from_utf8(text.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("REQS") && lines[0].ends_with("DAY"),
        "{text}"
    );
    assert!(
        lines[1].ends_with("2026-12-01") && lines[3].ends_with("2026-12-03"),
        "{text}"
    );
    assert!(text.contains("5 requests"), "{text}");
    // A session and a grouping at once is refused.
    let out = common::ctxd()
        .arg("--store")
        .arg(db)
        .args(["stats", "one", "--by", "day"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
