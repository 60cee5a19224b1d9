//! The usage page (`/ui/usage`): tokens, cost and savings per day across the sessions a viewer
//! may see, filtered by project and agent, with an SVG of tokens sent against the whole
//! conversation; and where the budgets stand. The figures are `stats::daily`'s (the same
//! records `ctxd stats --by day` sums) and `Spending::states`.

use std::fmt::Write;

use ctxd_engine::Engine;
use ctxd_store::Backend;
use serde::Serialize;

use super::access::Viewer;
use super::html::{esc, num};
use super::UiError;
use crate::spending::{BudgetState, Spending};
use crate::stats::Day;

/// The page's data: the days, the filter's choices, the budgets.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Usage {
    pub days: Vec<Day>,
    /// Every project and agent among the viewer's sessions (the filter's options).
    pub projects: Vec<String>,
    pub agents: Vec<String>,
    pub project: Option<String>,
    pub agent: Option<String>,
    pub sessions: usize,
    pub budgets: Vec<BudgetState>,
}

/// How many of the most recent sessions the budgets' per-session and per-project counters are
/// read for.
const BUDGET_SESSIONS: usize = 50;

/// The usage of the viewer's sessions of `project` and `agent` (any when `None`).
pub fn usage(
    engine: &Engine<dyn Backend>,
    viewer: &Viewer,
    spending: &Spending,
    project: Option<String>,
    agent: Option<String>,
    now_ms: i64,
) -> Result<Usage, UiError> {
    let store = engine.store();
    let records = super::query::visible(store, viewer)?;
    let agent_of = |r: &ctxd_store::SessionRecord| r.meta.agent.map(|a| a.as_str().to_owned());
    let mut projects: Vec<String> = records.iter().filter_map(|r| r.meta.cwd.clone()).collect();
    let mut agents: Vec<String> = records.iter().filter_map(agent_of).collect();
    for list in [&mut projects, &mut agents] {
        list.sort();
        list.dedup();
    }
    let chosen: Vec<_> = records
        .iter()
        .filter(|r| {
            project
                .as_ref()
                .is_none_or(|p| r.meta.cwd.as_ref() == Some(p))
        })
        .filter(|r| {
            agent
                .as_ref()
                .is_none_or(|a| agent_of(r).as_ref() == Some(a))
        })
        .collect();
    let mut sessions = Vec::with_capacity(chosen.len());
    for r in &chosen {
        sessions.push(store.load(r.id)?);
    }
    let days = crate::stats::daily(&sessions, spending.prices());
    let subjects: Vec<_> = records
        .iter()
        .take(BUDGET_SESSIONS)
        .map(|r| ctxd_core::spend::Subject {
            tenant: &r.tenant,
            project: r.meta.cwd.as_deref(),
            session: &r.key,
        })
        .collect();
    let budgets = spending.states(store, &subjects, now_ms)?;
    Ok(Usage {
        days,
        projects,
        agents,
        project,
        agent,
        sessions: chosen.len(),
        budgets,
    })
}

/// The page's HTML fragment.
pub fn html(u: &Usage) -> String {
    let mut s = String::with_capacity(4096 + u.days.len() * 300);
    s.push_str(r#"<form id="usage-filter" class="toolbar">"#);
    select(
        &mut s,
        "project",
        "every project",
        &u.projects,
        u.project.as_deref(),
    );
    select(
        &mut s,
        "agent",
        "every agent",
        &u.agents,
        u.agent.as_deref(),
    );
    let _ = write!(
        s,
        r#"<span class="count" id="usage-sessions">{} sessions</span></form>"#,
        num(u.sessions as u64)
    );
    budgets(&mut s, &u.budgets);
    s.push_str("<h2>Per day (UTC)</h2>");
    if u.days.is_empty() {
        s.push_str(r#"<p class="empty" id="usage-empty">No request recorded yet.</p>"#);
        return s;
    }
    s.push_str(&chart(&u.days));
    s.push_str(
        r#"<table id="usage-days" class="grid"><thead><tr><th>day</th><th>requests</th><th>tokens sent</th><th>whole conversation</th><th>saved</th><th>saved at list price</th><th>billed tokens</th><th>billed cost</th></tr></thead><tbody>"#,
    );
    for d in u.days.iter().rev() {
        let t = &d.totals;
        let _ = write!(
            s,
            r#"<tr data-day="{day}"><td>{day}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>${:.2}</td><td>{}</td><td>${:.2}{}</td></tr>"#,
            num(t.requests),
            num(t.sent),
            num(t.whole),
            esc(&t.saved.to_string()),
            t.cost_saved_usd,
            num(d.billed_tokens),
            d.billed_usd,
            if d.unpriced_responses > 0 {
                format!(" (+{} unpriced)", d.unpriced_responses)
            } else {
                String::new()
            },
            day = esc(&d.day),
        );
    }
    s.push_str("</tbody></table>");
    s
}

fn select(s: &mut String, name: &str, any: &str, options: &[String], chosen: Option<&str>) {
    let _ = write!(
        s,
        r#"<label>{name} <select name="{name}" id="usage-{name}"><option value="">{any}</option>"#
    );
    for o in options {
        let selected = if Some(o.as_str()) == chosen {
            " selected"
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<option value="{v}"{selected}>{v}</option>"#,
            v = esc(o)
        );
    }
    s.push_str("</select></label>");
}

fn budgets(s: &mut String, states: &[BudgetState]) {
    if states.is_empty() {
        return;
    }
    s.push_str(
        r#"<h2>Budgets</h2><table id="usage-budgets" class="grid"><thead><tr><th>budget</th><th>of</th><th>used</th><th>limit</th><th>share</th><th>state</th></tr></thead><tbody>"#,
    );
    for b in states {
        let _ = write!(
            s,
            r#"<tr class="budget-{state}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}%</td><td>{state}</td></tr>"#,
            esc(&b.budget),
            esc(&b.whose),
            esc(&b.used),
            esc(&b.limit),
            (b.share * 100.0).min(999.0),
            state = b.state,
        );
    }
    s.push_str("</tbody></table>");
}

/// Bars per day: tokens sent (filled) inside the whole conversation (outlined).
fn chart(days: &[Day]) -> String {
    const W: f64 = 960.0;
    const H: f64 = 220.0;
    const LEFT: f64 = 64.0;
    const BOTTOM: f64 = 28.0;
    let top = days
        .iter()
        .map(|d| d.totals.whole.max(d.totals.sent))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let slot = (W - LEFT) / days.len() as f64;
    let bar = (slot * 0.7).max(1.0);
    let y = |v: u64| (H - BOTTOM) - (v as f64 / top) * (H - BOTTOM - 8.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg id="usage-chart" class="chart" viewBox="0 0 {W} {H}" role="img" aria-label="tokens sent and whole conversation per day">"#
    );
    let _ = write!(
        s,
        r#"<text x="4" y="14" class="axis">{}</text><text x="4" y="{}" class="axis">0</text>"#,
        super::chart::short(top),
        H - BOTTOM
    );
    for (i, d) in days.iter().enumerate() {
        let x = LEFT + i as f64 * slot + (slot - bar) / 2.0;
        let (whole, sent) = (d.totals.whole, d.totals.sent);
        let _ = write!(
            s,
            r#"<g><title>{day}: sent {sent} of {whole} tokens</title><rect class="whole" x="{x:.1}" y="{:.1}" width="{bar:.1}" height="{:.1}"/><rect class="sent" x="{x:.1}" y="{:.1}" width="{bar:.1}" height="{:.1}"/></g>"#,
            y(whole),
            (H - BOTTOM) - y(whole),
            y(sent),
            (H - BOTTOM) - y(sent),
            day = esc(&d.day),
            sent = num(sent),
            whole = num(whole),
        );
        if days.len() <= 31 {
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{}" class="axis">{}</text>"#,
                x,
                H - 8.0,
                esc(d.day.get(5..).unwrap_or(&d.day))
            );
        }
    }
    s.push_str("</svg>");
    s
}
