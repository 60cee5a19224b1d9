//! The usage page (`/ui/usage`): tokens, cost and savings per day across the sessions a viewer
//! may see, filtered by project and agent, with an SVG of tokens sent against the whole
//! conversation; and where the budgets stand. The figures are `stats::daily`'s (the same
//! records `ctxd stats --by day` sums) and `Spending::states`.

use ctxd_engine::Engine;
use ctxd_store::Backend;
use maud::{html, Markup};
use serde::Serialize;

use super::access::Viewer;
use super::html::num;
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
pub fn html(u: &Usage) -> Markup {
    html! {
        form id="usage-filter" class="toolbar" {
            (select("project", "every project", &u.projects, u.project.as_deref()))
            (select("agent", "every agent", &u.agents, u.agent.as_deref()))
            span class="count" id="usage-sessions" { (num(u.sessions as u64)) " sessions" }
        }
        (budgets(&u.budgets))
        h2 { "Per day (UTC)" }
        @if u.days.is_empty() {
            p class="empty" id="usage-empty" { "No request recorded yet." }
        } @else {
            (chart(&u.days))
            (days(&u.days))
        }
    }
}

/// The days' table, the latest first.
fn days(days: &[Day]) -> Markup {
    html! {
        table id="usage-days" class="grid" {
            thead {
                tr {
                    th { "day" } th { "requests" } th { "tokens sent" } th { "whole conversation" }
                    th { "saved" } th { "saved at list price" } th { "billed tokens" }
                    th { "billed cost" }
                }
            }
            tbody {
                @for d in days.iter().rev() {
                    tr data-day=(d.day) {
                        td { (d.day) }
                        td { (num(d.totals.requests)) }
                        td { (num(d.totals.sent)) }
                        td { (num(d.totals.whole)) }
                        td { (d.totals.saved) }
                        td { (format!("${:.2}", d.totals.cost_saved_usd)) }
                        td { (num(d.billed_tokens)) }
                        td {
                            (format!("${:.2}", d.billed_usd))
                            @if d.unpriced_responses > 0 {
                                " (+" (d.unpriced_responses) " unpriced)"
                            }
                        }
                    }
                }
            }
        }
    }
}

fn select(name: &str, any: &str, options: &[String], chosen: Option<&str>) -> Markup {
    html! {
        label {
            (name) " "
            select name=(name) id=(format!("usage-{name}")) {
                option value="" { (any) }
                @for o in options {
                    option value=(o) selected[Some(o.as_str()) == chosen] { (o) }
                }
            }
        }
    }
}

fn budgets(states: &[BudgetState]) -> Markup {
    html! {
        @if !states.is_empty() {
            h2 { "Budgets" }
            table id="usage-budgets" class="grid" {
                thead {
                    tr {
                        th { "budget" } th { "of" } th { "used" } th { "limit" } th { "share" }
                        th { "state" }
                    }
                }
                tbody {
                    @for b in states {
                        tr class=(format!("budget-{}", b.state)) {
                            td { (b.budget) }
                            td { (b.whose) }
                            td { (b.used) }
                            td { (b.limit) }
                            td { (format!("{:.0}%", (b.share * 100.0).min(999.0))) }
                            td { (b.state) }
                        }
                    }
                }
            }
        }
    }
}

/// Bars per day: tokens sent (filled) inside the whole conversation (outlined).
fn chart(days: &[Day]) -> Markup {
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
    let bar_width = (slot * 0.7).max(1.0);
    let f1 = |v: f64| format!("{v:.1}");
    let bar = f1(bar_width);
    let x = |i: usize| LEFT + i as f64 * slot + (slot - bar_width) / 2.0;
    let y = |v: u64| (H - BOTTOM) - (v as f64 / top) * (H - BOTTOM - 8.0);
    html! {
        svg id="usage-chart" class="chart" viewBox=(format!("0 0 {W} {H}")) role="img"
            aria-label="tokens sent and whole conversation per day" {
            text x="4" y="14" class="axis" { (super::chart::short(top)) }
            text x="4" y=(H - BOTTOM) class="axis" { "0" }
            @for (i, d) in days.iter().enumerate() {
                @let (whole, sent) = (d.totals.whole, d.totals.sent);
                g {
                    title { (d.day) ": sent " (num(sent)) " of " (num(whole)) " tokens" }
                    rect class="whole" x=(f1(x(i))) y=(f1(y(whole))) width=(bar)
                        height=(f1((H - BOTTOM) - y(whole))) {}
                    rect class="sent" x=(f1(x(i))) y=(f1(y(sent))) width=(bar)
                        height=(f1((H - BOTTOM) - y(sent))) {}
                }
                @if days.len() <= 31 {
                    text x=(f1(x(i))) y=(H - 8.0) class="axis" {
                        (d.day.get(5..).unwrap_or(&d.day))
                    }
                }
            }
        }
    }
}
