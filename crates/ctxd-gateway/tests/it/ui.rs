//! The dashboard at `/ui`: tenants kept apart beyond loopback (no page or JSON answer names
//! another tenant's session), the operator token, bad input answered with a JSON error, the
//! report's numbers equal to `ctxd report --json`'s, a growing session's page rebuilt at most
//! once per refresh interval, and a 2,000-turn session's page built within its budget.

use std::time::{Duration, Instant};

use ctxd_core::distill::record::{ItemResult, Outcome, Record, Usage};
use ctxd_core::distill::{ItemKind, Phase};
use ctxd_core::model::{ContentBlock, Entry, EntryId, EntryKind, Message, Role, SessionMeta};
use ctxd_store::{Durability, NewEntry, SqliteStore, Store};
use serde_json::{json, Value};

use crate::support::{assert_json_error, chat, get, Conversation, Rig};
use ctxd_core::spend::parse_budget;
use ctxd_gateway::config::ToolsSetting;
use ctxd_mock::{Part, Reply};

const ADMIN_ENV: &str = "CTXD_TEST_UI_ADMIN_TOKEN";
const ADMIN: &str = "op-token-7f3a";

fn session_ids(body: &str) -> Vec<(i64, String)> {
    let v: Value = serde_json::from_str(body).unwrap();
    v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_i64().unwrap(),
                s["key"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_beyond_loopback_a_tenant_sees_only_its_own_sessions() {
    std::env::set_var(ADMIN_ENV, ADMIN);
    let rig = Rig::with(ctxd_mock::Config::default(), |s| {
        s.listen = "0.0.0.0:0".parse().unwrap();
        s.admin_token_env = Some(ADMIN_ENV.into());
    })
    .await;
    chat(&rig, "sk-one", "alpha-of-one", "one's secret plan").await;
    chat(&rig, "sk-two", "beta-of-two", "two's private words").await;
    let one = [("x-api-key", "sk-one")];
    let two = [("authorization", "Bearer sk-two")];

    // The shell carries no data and needs no key; every data path does.
    let (status, shell) = get(&rig, "/ui/", &[]).await;
    assert_eq!(status, 200);
    assert!(shell.contains(r#"data-open="false""#));
    assert!(!shell.contains("alpha-of-one") && !shell.contains("beta-of-two"));
    for path in ["/ui/api/sessions", "/ui/frag/sessions", "/ui/api/session/1"] {
        let (status, body) = get(&rig, path, &[]).await;
        assert_json_error(status, &body, 401);
    }

    let (status, body) = get(&rig, "/ui/api/sessions", &one).await;
    assert_eq!(status, 200, "{body}");
    let mine = session_ids(&body);
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].1, "alpha-of-one");
    assert!(
        !body.contains("beta-of-two") && !body.contains("tenant"),
        "{body}"
    );
    let (_, frag) = get(&rig, "/ui/frag/sessions", &one).await;
    assert!(frag.contains("alpha-of-one") && !frag.contains("beta-of-two"));
    // The gateway's readiness, as `/readyz` says it, above the sessions.
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ready"]["ready"], true, "{body}");
    assert!(
        frag.contains(r#"id="readiness" data-ready="true""#),
        "{frag}"
    );

    let (_, body) = get(&rig, "/ui/api/sessions", &two).await;
    let theirs = session_ids(&body);
    assert_eq!(theirs.len(), 1);
    assert_eq!(theirs[0].1, "beta-of-two");
    let other = theirs[0].0;

    // Every path to the other tenant's session answers as for an unknown one.
    for path in [
        format!("/ui/api/session/{other}"),
        format!("/ui/frag/session/{other}"),
        format!("/ui/api/session/{other}/recall?entry=x"),
        format!("/ui/frag/session/{other}/search?q=private"),
    ] {
        let (status, body) = get(&rig, &path, &one).await;
        assert_json_error(status, &body, 404);
        assert!(
            !body.contains("private") && !body.contains("beta"),
            "{body}"
        );
    }
    let (status, page) = get(&rig, &format!("/ui/frag/session/{}", mine[0].0), &one).await;
    assert_eq!(status, 200);
    assert!(page.contains("alpha-of-one") && page.contains("context-chart"));

    // The operator sees both; a wrong token sees nothing, even with a key.
    let (status, body) = get(&rig, "/ui/api/sessions", &[("x-ctxd-admin-token", ADMIN)]).await;
    assert_eq!(status, 200);
    assert_eq!(session_ids(&body).len(), 2);
    let (status, body) = get(
        &rig,
        "/ui/api/sessions",
        &[("x-ctxd-admin-token", "guess"), ("x-api-key", "sk-one")],
    )
    .await;
    assert_json_error(status, &body, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_on_loopback_shows_everything_escaped_and_refuses_bad_input_in_json() {
    let mut rig = Rig::start().await;
    chat(&rig, "sk-one", "<b>one</b>", "<script>alert(1)</script>").await;
    chat(&rig, "sk-two", "two", "hello").await;

    let (status, body) = get(&rig, "/ui/api/sessions", &[]).await;
    assert_eq!(status, 200);
    let all = session_ids(&body);
    assert_eq!(all.len(), 2, "loopback: every tenant");
    let (_, frag) = get(&rig, "/ui/frag/sessions", &[]).await;
    assert!(frag.contains("&lt;b&gt;one&lt;/b&gt;") && !frag.contains("<b>one"));
    let id = all.iter().find(|s| s.1 == "<b>one</b>").unwrap().0;
    let (status, page) = get(&rig, &format!("/ui/frag/session/{id}"), &[]).await;
    assert_eq!(status, 200);
    assert!(!page.contains("<b>one") && !page.contains("<script>"));
    let (status, hits) = get(&rig, &format!("/ui/frag/session/{id}/search?q=alert"), &[]).await;
    assert_eq!(status, 200, "{hits}");
    assert!(
        hits.contains("alert") && !hits.contains("<script>"),
        "{hits}"
    );

    for (path, want) in [
        ("/ui/api/sessions?sort=nope", 400),
        ("/ui/api/sessions?dir=up", 400),
        ("/ui/api/session/abc", 400),
        ("/ui/api/session/-3", 400),
        ("/ui/session/abc", 400),
        ("/ui/api/session/999999", 404),
        ("/ui/nope", 404),
        ("/ui/assets/nope.js", 404),
    ] {
        let (status, body) = get(&rig, path, &[]).await;
        assert_json_error(status, &body, want);
    }
    let long = "x".repeat(300);
    let (status, body) = get(&rig, &format!("/ui/api/sessions?q={long}"), &[]).await;
    assert_json_error(status, &body, 400);
    let (status, body) = get(&rig, &format!("/ui/api/session/{id}/recall"), &[]).await;
    assert_json_error(status, &body, 400);
    let (status, body) = get(
        &rig,
        &format!("/ui/api/session/{id}/recall?entry=nope"),
        &[],
    )
    .await;
    assert_json_error(status, &body, 400);
    let (status, body) = get(&rig, &format!("/ui/frag/session/{id}/search?q="), &[]).await;
    assert_json_error(status, &body, 400);

    // The report is `ctxd report --json`'s: the same function, the same counter.
    let (_, body) = get(&rig, &format!("/ui/api/session/{id}"), &[]).await;
    let page: Value = serde_json::from_str(&body).unwrap();
    let stored = rig.stored().await;
    let session = stored.0.load(id).unwrap();
    let counter = ctxd_tokens::for_session(&session);
    let report = ctxd_core::report::build(&session, &counter, &Default::default());
    assert_eq!(page["report"], serde_json::to_value(&report).unwrap());
}

/// Markup, quotes and ampersands: what a session's key, project, messages and notes may hold.
const NASTY: &str = r#"<script>alert(1)</script> "quoted" & 'a'"#;
/// [`NASTY`] as a page shows it (its apostrophes are harmless in text and double-quoted
/// attributes, so they are left as they are or escaped alike).
const NASTY_SHOWN: &str = "&lt;script&gt;alert(1)&lt;/script&gt; &quot;quoted&quot; &amp; ";

/// A gateway on loopback with one session whose key, project, first message and note are
/// [`NASTY`], and a budget (so the usage page has its table): the rig and the session's id.
async fn nasty_rig() -> (Rig, i64) {
    let rig = Rig::with(ctxd_mock::Config::default(), |s| {
        s.management.tools = ToolsSetting::All;
        s.budgets
            .push(parse_budget("tenant/total=1000000,warn=0.00001,soft").unwrap());
    })
    .await;
    let script = rig.mock.script();
    script.push(Reply::parts(vec![Part::ToolCall {
        name: "notes_write".into(),
        args: json!({"path": "plan.md", "text": NASTY}),
    }]));
    script.push(Reply::text("noted"));
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 200,
        "messages": [{"role": "user", "content": NASTY}],
        "tools": [{"name": "bash", "description": "run a command",
                   "input_schema": {"type": "object", "properties": {}}}]});
    let h = [
        ("x-api-key", "sk-one"),
        ("x-ctxd-session", NASTY),
        ("x-ctxd-project", NASTY),
        ("user-agent", "claude-cli/2.1.197 (external, cli)"),
    ];
    let resp = rig
        .post("/v1/messages", &h, serde_json::to_vec(&body).unwrap())
        .await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let (_, list) = get(&rig, "/ui/api/sessions", &[]).await;
    let id = session_ids(&list)[0].0;
    (rig, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_markup_in_names_and_notes_is_escaped_on_every_page() {
    let (rig, id) = nasty_rig().await;
    let (_, api) = get(&rig, "/ui/api/usage", &[]).await;
    assert!(api.contains("alert(1)"), "the project is listed: {api}");
    for path in [
        "/ui/frag/sessions".to_owned(),
        format!("/ui/frag/session/{id}"),
        "/ui/frag/usage".to_owned(),
        format!("/ui/frag/session/{id}/search?q=alert"),
    ] {
        let (status, html) = get(&rig, &path, &[]).await;
        assert_eq!(status, 200, "{path}: {html}");
        assert!(
            html.contains(NASTY_SHOWN),
            "{path} shows it escaped: {html}"
        );
        assert!(
            !html.contains("<script") && !html.contains(r#""quoted""#),
            "{path}: {html}"
        );
    }
    // The note's text, the session's key and its project on the session page; the project
    // among the usage filter's options.
    let (_, page) = get(&rig, &format!("/ui/frag/session/{id}"), &[]).await;
    assert!(page.matches(NASTY_SHOWN).count() >= 4, "{page}");
    assert!(page.contains(&format!("<pre>{NASTY_SHOWN}")), "{page}");
    let (_, usage) = get(&rig, "/ui/frag/usage", &[]).await;
    assert!(
        usage.contains(&format!(r#"<option value="{NASTY_SHOWN}"#)),
        "{usage}"
    );
}

/// A session page's turns and its copy's age (`x-ctxd-age-ms`).
async fn page_turns(rig: &Rig, id: i64) -> (u64, u64) {
    let resp = rig
        .client
        .get(rig.url(&format!("/ui/api/session/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let age = resp.headers()["x-ctxd-age-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let page: Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    (
        page["report"]["session"]["turn_count"].as_u64().unwrap(),
        age,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_a_growing_session_is_rebuilt_at_most_once_per_refresh_interval() {
    for refresh in [Duration::from_secs(600), Duration::ZERO] {
        let rig = Rig::with(ctxd_mock::Config::default(), |s| s.ui_refresh = refresh).await;
        let mut talk = Conversation::new("sk-one", "growing");
        talk.turn(&rig, "first question").await;
        let (_, body) = get(&rig, "/ui/api/sessions", &[]).await;
        let id = session_ids(&body)[0].0;
        let (turns, age) = page_turns(&rig, id).await;
        assert_eq!((turns, age), (1, 0), "built for this request");
        talk.turn(&rig, "second question").await;

        let (now, _) = page_turns(&rig, id).await;
        let (_, frag) = get(&rig, &format!("/ui/frag/session/{id}"), &[]).await;
        let (_, body) = get(&rig, "/ui/api/sessions", &[]).await;
        let row = &serde_json::from_str::<Value>(&body).unwrap()["sessions"][0];
        if refresh.is_zero() {
            // Every change rebuilds, the row's figures too.
            assert_eq!(now, 2);
            assert_eq!(row["summary"]["turns"], 2);
        } else {
            // The copy, with its age; the row lists the new entries at once, its figures
            // (from the page just built) within the interval.
            assert_eq!(now, 1, "the copy is served within the interval");
            assert!(frag.contains(r#"id="age""#), "{frag}");
            assert_eq!(row["summary"]["turns"], 1);
        }
        assert!(row["entries"].as_u64().unwrap() >= 4, "{row}");
    }
}

fn msg(id: &str, parent: Option<&str>, kind: EntryKind) -> NewEntry {
    NewEntry::new(Entry {
        id: EntryId::new(id),
        parent: parent.map(EntryId::new),
        timestamp: Some("2026-12-01T10:00:00Z".into()),
        sidechain: false,
        kind,
    })
}

/// A 2,000-turn tool loop stored as the gateway stores one: each turn an assistant tool call
/// with usage and a ~1.5 KB result, a window reset every 500 turns, a distillation record with
/// its edit every 50.
fn store_long_session(path: &std::path::Path, turns: usize) -> i64 {
    let store = SqliteStore::open(path, Durability::Normal).unwrap();
    let meta = SessionMeta {
        agent: Some(ctxd_core::model::Agent::Pi),
        model: Some("claude-sonnet-4-5".into()),
        cwd: Some("/src/app".into()),
        ..SessionMeta::default()
    };
    let rec = store.open_session("", "long-2000", &meta).unwrap();
    let mut batch = vec![msg(
        "u0",
        None,
        EntryKind::Message(Message::text(Role::User, "fix the failing tests")),
    )];
    let mut parent = "u0".to_owned();
    let mut size = 2_000u64;
    for t in 0..turns {
        let (call, result) = (format!("a{t}"), format!("r{t}"));
        let mut assistant = Message::text(Role::Assistant, "");
        assistant.content = vec![ContentBlock::ToolCall {
            id: format!("c{t}"),
            name: "bash".into(),
            arguments: json!({"command": format!("cat src/file_{t}.rs")}),
        }];
        assistant.model = Some("claude-sonnet-4-5".into());
        assistant.response_id = Some(format!("resp{t}"));
        size += 450;
        assistant.usage = Some(ctxd_core::model::Usage {
            input: size,
            output: 40,
            ..Default::default()
        });
        batch.push(msg(&call, Some(&parent), EntryKind::Message(assistant)));
        let body: String = (0..30)
            .map(|l| format!("line {l} of file_{t}: fn item_{l}() {{ let x = {l} * {t}; }}\n"))
            .collect();
        let mut res = Message::text(Role::User, "");
        res.content = vec![ContentBlock::ToolResult {
            call_id: format!("c{t}"),
            tool_name: None,
            content: vec![ContentBlock::Text { text: body.clone() }],
            is_error: false,
        }];
        res.role = Role::Tool;
        batch.push(msg(&result, Some(&call), EntryKind::Message(res)));
        parent = result.clone();
        if t % 50 == 49 {
            let edit = format!("e{t}");
            batch.push(msg(
                &edit,
                Some(&parent),
                EntryKind::ContextEdit {
                    target: EntryId::new(&result),
                    replacement: Some(vec![ContentBlock::ToolResult {
                        call_id: format!("c{t}"),
                        tool_name: None,
                        content: vec![ContentBlock::Text {
                            text: format!("[ctxd] Removed output of cat src/file_{t}.rs"),
                        }],
                        is_error: false,
                    }]),
                },
            ));
            let record = Record {
                v: 1,
                phase: Phase::MidRun,
                classifier: "local".into(),
                saved_chars: body.len(),
                usage: Usage::default(),
                timed_out: false,
                results: vec![ItemResult {
                    kind: ItemKind::Small,
                    entry_id: result.clone(),
                    tool: "bash".into(),
                    label: format!("cat src/file_{t}.rs"),
                    outcome: Outcome::Removed,
                    reason: "superseded".into(),
                    before_chars: body.len(),
                    after_chars: 40,
                    trace: vec![],
                    omitted: vec![],
                }],
            };
            let ev = format!("d{t}");
            batch.push(msg(&ev, Some(&edit), record.to_entry()));
            parent = ev;
        }
        if t % 500 == 499 {
            let (marker, boot) = (format!("w{t}"), format!("b{t}"));
            let wid = format!("win{t}");
            batch.push(msg(
                &marker,
                Some(&parent),
                EntryKind::WindowMarker {
                    window_id: wid.clone(),
                    reason: "threshold".into(),
                },
            ));
            batch.push(msg(
                &boot,
                Some(&marker),
                EntryKind::WindowBoot {
                    window_id: wid,
                    message: Message::text(Role::User, "checkpoint: fix the failing tests")
                        .injected(ctxd_core::windows::BOOT_KIND),
                },
            ));
            parent = boot;
            size = 3_000;
        }
    }
    store.append(rec.id, &batch, None).unwrap();
    rec.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_a_2000_turn_session_page_is_built_within_budget() {
    let rig = Rig::start().await;
    let id = store_long_session(&rig.store_path, 2_000);
    // The process's first count loads the BPE tables (once per process, ~0.4 s): the gateway
    // runs in this process, so load them here and measure the page's own cost, cold.
    use ctxd_core::tokens::TokenCounter;
    assert!(ctxd_tokens::Tokenizer::ClaudeEstimate.count("warm up the tables") > 0);

    let start = Instant::now();
    let resp = rig
        .client
        .get(rig.url(&format!("/ui/frag/session/{id}")))
        .send()
        .await
        .unwrap();
    let wall = start.elapsed();
    assert_eq!(resp.status(), 200);
    let timing = resp.headers()["server-timing"].to_str().unwrap().to_owned();
    let metric = |name: &str| -> f64 {
        timing
            .split(", ")
            .find_map(|m| m.strip_prefix(name)?.strip_prefix(";dur="))
            .unwrap_or_else(|| panic!("no {name} in {timing:?}"))
            .parse()
            .unwrap()
    };
    let (built, cpu) = (metric("build"), metric("build-cpu"));
    let html = resp.text().await.unwrap();
    eprintln!(
        "2,000-turn session page: built in {built:.1} ms ({cpu:.1} ms of CPU), {wall:?} end to end, {} KB",
        html.len() / 1024
    );
    // The chart has both series and the three resets; the pruned list every record's item.
    assert!(
        html.contains(r#"class="series upstream""#) && html.contains(r#"class="series client""#)
    );
    assert_eq!(html.matches(r#"class="mark reset""#).count(), 4);
    assert_eq!(html.matches(r#"class="raw" data-entry="r"#).count(), 40);
    // Release builds (what ships, what `.ci/run`'s browser step runs) meet the 200 ms budget;
    // unoptimised test builds are several times slower, so they only get a sanity bound. The
    // bound is on the build's CPU time: its wall time at the dashboard's lowest priority is
    // the machine's load (60 s beside three busy processes on two cores).
    let budget = if cfg!(debug_assertions) {
        30_000.0
    } else {
        200.0
    };
    assert!(
        cpu < budget,
        "built with {cpu} ms of CPU (budget {budget} ms)"
    );
    assert!(
        cpu <= built + 1.0,
        "CPU {cpu} ms beyond the wall time {built} ms"
    );

    let (_, body) = get(&rig, &format!("/ui/api/session/{id}"), &[]).await;
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["report"]["session"]["turn_count"], 2_000);
    let savings = page["savings"].as_array().unwrap();
    let small = savings
        .iter()
        .find(|s| s["mechanism"] == "small tool outputs removed")
        .unwrap();
    assert_eq!(small["items"], 40);
    assert!(savings
        .iter()
        .any(|s| s["mechanism"] == "context windows (resets)"));
    // The client's own conversation keeps growing across resets; what went upstream does not.
    let client = page["client_sizes"].as_array().unwrap();
    let upstream = page["report"]["turns"].as_array().unwrap();
    let last = |v: &Value| v.as_u64().unwrap();
    assert!(last(&client[1_999]) > 3 * last(&upstream[1_999]["estimate"]));

    // The raw content of a pruned item, through recall.
    let (status, body) = get(&rig, &format!("/ui/api/session/{id}/recall?entry=r49"), &[]).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(v["text"].as_str().unwrap().contains("line 29 of file_49"));
}
