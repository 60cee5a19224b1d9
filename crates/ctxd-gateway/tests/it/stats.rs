//! Accounting per mechanism: each managed request's headers, summed over a session, equal
//! what `GET /stats` reports, which equals what the log holds; beyond loopback a tenant sees
//! only its own sessions' figures.

use ctxd_core::savings::record;
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::support::{assert_json_error, chat, get, Conversation, Rig};

fn num(h: &HeaderMap, name: &str) -> i64 {
    h.get(name)
        .unwrap_or_else(|| panic!("no {name} in {h:?}"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// `windows=1,distillation=2,…` as (name, tokens).
fn saved_by(h: &HeaderMap) -> Vec<(String, i64)> {
    h.get("x-ctxd-tokens-saved-by")
        .unwrap()
        .to_str()
        .unwrap()
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_headers_sum_to_stats_which_is_the_log_and_tenants_see_their_own() {
    let mut rig = Rig::with(ctxd_mock::Config::default(), |s| {
        s.listen = "0.0.0.0:0".parse().unwrap();
    })
    .await;
    // ~187k tokens (the mock's bytes / 4) in a 200k window: past the reserve, so the turn
    // opens a window and the next requests are rewritten.
    let big = "lorem ipsum dolor sit amet ".repeat(750_000 / 27);
    let mut c = Conversation::new("sk-one", "stats-one");
    let mut all = vec![c.turn(&rig, &big).await];
    all.push(c.turn(&rig, "what now?").await);
    all.push(c.turn(&rig, "and then?").await);
    chat(&rig, "sk-two", "stats-two", "two's own words").await;

    let (mut sent, mut whole, mut saved) = (0, 0, 0);
    let mut by: Vec<(String, i64)> = Vec::new();
    for h in &all {
        let (s, w, d) = (
            num(h, "x-ctxd-tokens-sent"),
            num(h, "x-ctxd-tokens-whole"),
            num(h, "x-ctxd-tokens-saved"),
        );
        assert_eq!(w - s, d);
        let per = saved_by(h);
        assert_eq!(per.iter().map(|(_, v)| v).sum::<i64>(), d, "{per:?}");
        assert!(h.get("x-ctxd-cost-saved-usd").is_some());
        (sent, whole, saved) = (sent + s, whole + w, saved + d);
        if by.is_empty() {
            by = per;
        } else {
            for ((_, t), (_, v)) in by.iter_mut().zip(per) {
                *t += v;
            }
        }
    }
    assert_eq!(
        num(&all[0], "x-ctxd-tokens-saved"),
        0,
        "nothing to save yet"
    );
    let windows = by.iter().find(|(k, _)| k == "windows").unwrap().1;
    assert!(
        windows > 100_000,
        "the reset folded the big message: {by:?}"
    );

    let one = [("x-api-key", "sk-one")];
    let (status, body) = get(&rig, "/stats", &one).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let sessions = v["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{body}");
    assert_eq!(sessions[0]["key"], "stats-one");
    assert!(
        !body.contains("stats-two") && !body.contains("tenant"),
        "{body}"
    );
    let total = &v["total"];
    assert_eq!(total["requests"], 3);
    assert_eq!(total["sent"].as_i64(), Some(sent));
    assert_eq!(total["whole"].as_i64(), Some(whole));
    assert_eq!(total["saved"].as_i64(), Some(saved));
    for (k, t) in &by {
        assert_eq!(
            total["saved_by"][k].as_i64().unwrap_or(0),
            *t,
            "{k}: {total}"
        );
    }
    let id = sessions[0]["id"].as_i64().unwrap();
    let (status, body) = get(&rig, &format!("/stats/{id}"), &one).await;
    assert_eq!(status, 200, "{body}");
    let d: Value = serde_json::from_str(&body).unwrap();
    let requests = d["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 3);
    for (r, h) in requests.iter().zip(&all) {
        assert_eq!(r["sent"].as_i64(), Some(num(h, "x-ctxd-tokens-sent")));
        assert_eq!(r["saved"].as_i64(), Some(num(h, "x-ctxd-tokens-saved")));
    }

    // The other tenant: its own session only; the first one's is not found; no key, no data.
    let two = [("authorization", "Bearer sk-two")];
    let (_, body) = get(&rig, "/stats", &two).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1);
    assert_eq!(v["sessions"][0]["key"], "stats-two");
    assert_eq!(v["total"]["requests"], 1);
    assert!(!body.contains("stats-one"), "{body}");
    let (status, body) = get(&rig, &format!("/stats/{id}"), &two).await;
    assert_json_error(status, &body, 404);
    let (status, body) = get(&rig, "/stats", &[]).await;
    assert_json_error(status, &body, 401);

    // The metrics count the same requests.
    let (_, metrics) = get(&rig, "/metrics", &[]).await;
    assert!(
        metrics.contains(r#"ctxd_tokens_saved_total{mechanism="windows"}"#),
        "{metrics}"
    );

    // What the log holds.
    let stored = rig.stored().await;
    let rec = stored
        .sessions()
        .into_iter()
        .find(|r| r.key == "stats-one")
        .unwrap();
    let t = record::totals(&stored.load(&rec));
    assert_eq!(
        (t.requests, t.sent as i64, t.whole as i64),
        (3, sent, whole)
    );
    assert_eq!(t.saved, saved);
}

/// A new session records the project its first request works in (`x-ctxd-project`, or the
/// working directory the client states), which `ctxd stats --by project` groups by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_records_the_project_it_began_in() {
    let mut rig = Rig::start().await;
    let body = |text: &str| {
        serde_json::to_vec(
            &serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
            "system": "You are a coding agent.\nPrimary working directory: /src/web",
            "messages": [{"role": "user", "content": text}]}),
        )
        .unwrap()
    };
    let headers = |session| {
        [
            ("x-api-key", "sk-project"),
            ("anthropic-version", "2023-06-01"),
            ("x-ctxd-session", session),
        ]
    };
    let res = rig.post("/v1/messages", &headers("web"), body("hi")).await;
    assert_eq!(res.status(), 200);
    let mut named = headers("named").to_vec();
    named.push(("x-ctxd-project", "billing"));
    let res = rig.post("/v1/messages", &named, body("hi")).await;
    assert_eq!(res.status(), 200);
    let stored = rig.stored().await;
    let mut projects: Vec<(String, Option<String>)> = stored
        .sessions()
        .into_iter()
        .map(|r| (r.key.clone(), r.meta.cwd.clone()))
        .collect();
    projects.sort();
    assert_eq!(
        projects,
        [
            ("named".to_owned(), Some("billing".to_owned())),
            ("web".to_owned(), Some("/src/web".to_owned())),
        ]
    );
}
