//! The usage page (`/ui/usage`): per-day tokens, cost and savings across a viewer's sessions,
//! filtered by project and agent, equal to `stats::grouped` by day over the same sessions;
//! where the budgets stand; tenants kept apart beyond loopback.

use ctxd_core::spend::parse_budget;
use ctxd_gateway::stats::{grouped, GroupBy};
use ctxd_store::Store;
use serde_json::{json, Value};

use crate::support::{get, Rig};

async fn turn(rig: &Rig, key: &str, session: &str, project: &str, agent: &str) {
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 20,
        "messages": [{"role": "user", "content": format!("work in {project}")}]});
    let h = [
        ("x-api-key", key),
        ("x-ctxd-session", session),
        ("x-ctxd-project", project),
        ("user-agent", agent),
    ];
    let resp = rig
        .post("/v1/messages", &h, serde_json::to_vec(&body).unwrap())
        .await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
}

async fn usage(rig: &Rig, key: &str, query: &str) -> Value {
    let (status, body) = get(rig, &format!("/ui/api/usage{query}"), &[("x-api-key", key)]).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn requests(u: &Value) -> u64 {
    u["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["requests"].as_u64().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_per_day_filtered_by_project_with_budgets_and_tenants_apart() {
    let mut rig = Rig::with(ctxd_mock::Config::default(), |s| {
        s.listen = "0.0.0.0:0".parse().unwrap();
        s.budgets
            .push(parse_budget("tenant/total=1000000,warn=0.00001,soft").unwrap());
    })
    .await;
    turn(
        &rig,
        "sk-one",
        "one-a",
        "/p/a",
        "claude-cli/2.1.197 (external, cli)",
    )
    .await;
    turn(
        &rig,
        "sk-one",
        "one-a2",
        "/p/a",
        "codex_exec/0.171.0 (Debian)",
    )
    .await;
    turn(
        &rig,
        "sk-one",
        "one-b",
        "/p/b",
        "claude-cli/2.1.197 (external, cli)",
    )
    .await;
    turn(
        &rig,
        "sk-two",
        "two-a",
        "/p/a",
        "claude-cli/2.1.197 (external, cli)",
    )
    .await;

    let one = usage(&rig, "sk-one", "").await;
    assert_eq!(one["sessions"], 3, "{one}");
    assert_eq!(requests(&one), 3, "{one}");
    assert_eq!(one["projects"], json!(["/p/a", "/p/b"]));
    let day = &one["days"][0];
    assert!(day["day"].as_str().unwrap().len() == 10, "{day}");
    assert!(day["sent"].as_u64().unwrap() > 0 && day["billed_tokens"].as_u64().unwrap() > 0);
    assert!(day["billed_usd"].as_f64().unwrap() > 0.0, "{day}");
    // Filtered by project, then by project and agent.
    let b = usage(&rig, "sk-one", "?project=/p/b").await;
    assert_eq!((b["sessions"].as_u64(), requests(&b)), (Some(1), 1));
    assert_eq!(one["agents"], json!(["claude-code", "codex"]));
    let cc = usage(&rig, "sk-one", "?project=/p/a&agent=claude-code").await;
    assert_eq!((cc["sessions"].as_u64(), requests(&cc)), (Some(1), 1));
    // The budget's counter, past its soft limit.
    let budgets = one["budgets"].as_array().unwrap();
    assert!(
        budgets
            .iter()
            .any(|b| b["budget"] == "tenant/total" && b["state"] == "warning"),
        "{budgets:?}"
    );
    // The other tenant sees its own session and project only.
    let two = usage(&rig, "sk-two", "").await;
    assert_eq!((two["sessions"].as_u64(), requests(&two)), (Some(1), 1));
    assert_eq!(two["projects"], json!(["/p/a"]));
    let (status, html) = get(
        &rig,
        "/ui/frag/usage?project=/p/a",
        &[("x-api-key", "sk-one")],
    )
    .await;
    assert_eq!(status, 200);
    for id in ["usage-filter", "usage-chart", "usage-days", "usage-budgets"] {
        assert!(html.contains(&format!("id=\"{id}\"")), "{id}: {html}");
    }
    assert!(!html.contains("two-a"));
    let (status, _) = get(&rig, "/ui/api/usage", &[]).await;
    assert_eq!(status, 401, "beyond loopback a key is needed");

    // The same figures as `ctxd stats --by day` over the tenant's sessions.
    let stored = rig.stored().await;
    let mut tenant_one = stored
        .sessions()
        .into_iter()
        .filter(|s| s.key.starts_with("one-"))
        .collect::<Vec<_>>();
    tenant_one.sort_by_key(|s| s.id);
    let loaded: Vec<_> = tenant_one
        .iter()
        .map(|r| stored.0.load(r.id).unwrap())
        .collect();
    let by_day = grouped(GroupBy::Day, tenant_one.iter().zip(loaded.iter()));
    assert_eq!(by_day.groups.len(), 1);
    assert_eq!(day["day"], by_day.groups[0].key);
    assert_eq!(day["requests"], by_day.groups[0].totals.requests);
    assert_eq!(day["sent"], by_day.groups[0].totals.sent);
    assert_eq!(day["whole"], by_day.groups[0].totals.whole);
}
