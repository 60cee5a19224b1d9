//! The HTML fragments the pages' script places, as maud templates: every value spliced into
//! one is escaped by construction (sessions are untrusted text: a tool output may hold any
//! markup).

use ctxd_core::report::Row as CompRow;
use ctxd_engine::history::SearchPage;
use maud::{html, Markup};

use super::chart;
use super::page::{Page, Pruned, Saving};
use super::query::{Note, Sort, SORT_KEYS};
use super::summary::{Row, Summary};

/// What a page shows for a value it does not have.
const NONE: &str = "–";

fn opt(v: Option<&str>) -> &str {
    v.unwrap_or(NONE)
}

/// `1,234,567`.
pub fn num(n: u64) -> String {
    ctxd_core::text::thousands(n)
}

/// [`num`] with a sign when negative.
fn signed_num(n: i64) -> String {
    if n < 0 {
        format!("-{}", num(n.unsigned_abs()))
    } else {
        num(n.unsigned_abs())
    }
}

fn money(usd: Option<f64>) -> String {
    match usd {
        Some(v) if v >= 0.01 => format!("${v:.2}"),
        Some(v) if v > 0.0 => format!("${v:.4}"),
        Some(_) => "$0".to_owned(),
        None => NONE.to_owned(),
    }
}

/// [`when`] of a time that may be missing.
fn opt_when(ts: Option<&str>) -> String {
    ts.map_or_else(|| NONE.to_owned(), when)
}

/// `2026-12-01T21:04:58.123Z` → `2026-12-01 21:04:58`.
fn when(ts: &str) -> String {
    let t = ts.replace('T', " ");
    t.get(..19).unwrap_or(&t).to_owned()
}

/// `width:12%`, a bar's fill, with `decimals` places.
fn width(percent: f64, decimals: usize) -> String {
    format!("width:{:.*}%", decimals, percent.clamp(0.0, 100.0))
}

const COLUMNS: [&str; 11] = [
    "session",
    "agent",
    "project",
    "model",
    "started",
    "last active",
    "turns",
    "context now / window",
    "windows",
    "tokens saved",
    "cost saved",
];

/// The gateway's readiness above the sessions: a line saying it serves and stores requests, or
/// why it does not (what `/readyz` says).
pub(crate) fn readiness(r: &crate::server::Readiness) -> Markup {
    html! {
        @if r.ready {
            p class="ready" id="readiness" data-ready="true" {
                "Ready: requests are served and stored."
            }
        } @else {
            p class="not-ready" id="readiness" data-ready="false" {
                "Not ready: " (r.reasons.join("; ")) "."
            }
        }
    }
}

/// The sessions table.
pub fn sessions(rows: &[Row], sort: Sort, total: usize) -> Markup {
    html! {
        p class="count" id="session-count" data-shown=(rows.len()) data-total=(total) {
            (num(rows.len() as u64)) " of " (num(total as u64)) " sessions"
        }
        table id="sessions" class="grid" {
            thead {
                tr {
                    @for (label, key) in COLUMNS.iter().zip(SORT_KEYS) {
                        (column_head(label, key, sort))
                    }
                }
            }
            tbody {
                @for r in rows {
                    (session_row(r))
                }
                @if rows.is_empty() {
                    tr {
                        td colspan=(COLUMNS.len()) class="empty" {
                            "No sessions" (if total > 0 { " match the filter" } else { " yet" }) "."
                        }
                    }
                }
            }
        }
    }
}

/// A column's head: its sort key, and an arrow when the table is sorted by it.
fn column_head(label: &str, key: &str, sort: Sort) -> Markup {
    let (aria, arrow) = match (sort.key == key, sort.desc) {
        (false, _) => ("none", ""),
        (true, true) => ("descending", " ▾"),
        (true, false) => ("ascending", " ▴"),
    };
    html! {
        th data-sort=(key) tabindex="0" aria-sort=(aria) { (label) (arrow) }
    }
}

fn session_row(r: &Row) -> Markup {
    let name = r.title.as_deref().unwrap_or(&r.key);
    let model = r
        .summary
        .as_ref()
        .and_then(|m| m.model.as_deref())
        .or(r.model.as_deref());
    html! {
        tr data-id=(r.id) {
            td class="name" {
                a href=(format!("/ui/session/{}", r.id)) { (chars(name, 60)) }
                span class="key" { (chars(&r.key, 40)) }
                @match r.tenant.as_deref() {
                    Some("") => span class="key" { "local (imported or keyless)" },
                    Some(t) => span class="key" { "tenant " (chars(t, 12)) },
                    None => {}
                }
            }
            td { (opt(r.agent.as_deref())) }
            td class="path" { (opt(r.project.as_deref())) }
            td { (opt(model)) }
            td { (when(&r.started)) }
            td { (when(&r.last_active)) }
            @match &r.summary {
                Some(m) => (summary_cells(m)),
                None => td class="n pending" colspan="5" { "reading the log…" },
            }
        }
    }
}

/// A row's figures, once its session has been summarised.
fn summary_cells(m: &Summary) -> Markup {
    let ctx = m.context_tokens.map_or("pending".to_owned(), num);
    let win = m.window.map_or("?".to_owned(), num);
    html! {
        td class="n" { (num(m.turns as u64)) }
        td class="n ctx" {
            span class="bar" { i style=(width(m.percent.unwrap_or(0.0), 0)) {} }
            (ctx) " / " (win)
        }
        td class="n" { (m.windows_opened) }
        td class="n" { (num(m.saved_tokens)) }
        td class="n" { (money(m.saved_usd)) }
    }
}

/// At most `n` characters of `text`, with an ellipsis when cut.
fn chars(text: &str, n: usize) -> String {
    let mut it = text.chars();
    let head: String = it.by_ref().take(n).collect();
    if it.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

fn composition_rows(rows: &[CompRow], depth: usize) -> Markup {
    html! {
        @for r in rows {
            tr class=(format!("depth{}", depth.min(2))) {
                td { (r.label) }
                td class="n" { (num(r.tokens)) }
                td class="n" { (format!("{:.1}%", r.percent)) }
                td { span class="bar" { i style=(width(r.percent, 1)) {} } }
            }
            (composition_rows(&r.children, depth + 1))
        }
    }
}

/// The session page below its title.
pub fn session(page: &Page, notes: &[Note], built_ms: f64) -> Markup {
    html! {
        (session_head(page))
        (cards(page))
        section id="chart-section" {
            h2 { "Context size per turn" }
            (legend())
            @if page.report.turns.is_empty() {
                p class="empty" { "No turns yet." }
            }
            (chart::render(page))
        }
        div class="two" {
            (composition(page))
            (savings(&page.savings))
        }
        (pruned(&page.pruned))
        section {
            h2 { "History" }
            form id="search" {
                input name="q" type="search"
                    placeholder="search this session's history (words, any case)"
                    maxlength="500" required;
                " "
                button { "search" }
            }
            div id="hits" {}
        }
        (notes_section(notes))
        p class="note" id="built" {
            "Built by the server in " (format!("{built_ms:.1}"))
            " ms from the store; the numbers are "
            code { "ctxd report --json " (page.key) }
            "'s."
        }
    }
}

/// The title and the line of names under it.
fn session_head(page: &Page) -> Markup {
    let s = &page.report.session;
    let title = s.title.as_deref().unwrap_or(&page.key);
    html! {
        h1 id="session-title" { (chars(title, 120)) }
        p class="key" {
            (page.key) " · " (opt(s.agent.map(|a| a.as_str()))) " · " (opt(s.model.as_deref()))
            " · " (opt(s.cwd.as_deref())) " · started " (opt_when(s.started_at.as_deref()))
        }
    }
}

fn cards(page: &Page) -> Markup {
    let m = &page.summary;
    let used = m
        .percent
        .map(|p| format!(" · {p:.1}% used"))
        .unwrap_or_default();
    html! {
        div class="cards" id="summary-cards" {
            div class="card" {
                b { (m.context_tokens.map_or("pending".into(), num)) }
                span { "context now (" (page.report.headline.source) ")" }
            }
            div class="card" {
                b { (m.window.map_or("?".into(), num)) }
                span { "window" (used) }
            }
            div class="card" { b { (num(m.turns as u64)) } span { "turns" } }
            div class="card" { b { (m.windows_opened) } span { "windows opened" } }
            div class="card" {
                b { (num(m.saved_tokens)) }
                span { "tokens saved · " (money(m.saved_usd)) }
            }
        }
    }
}

fn legend() -> Markup {
    html! {
        div class="legend" {
            span class="sw client" {} "the client's conversation "
            span class="sw upstream" {} "sent upstream (both: ctxd's estimate) "
            span class="sw window" {} "window "
            span class="sw reset" {} "reset "
            span class="sw compaction" {} "client compaction"
        }
    }
}

fn composition(page: &Page) -> Markup {
    let r = &page.report;
    html! {
        section id="composition-section" {
            h2 { "The window now" }
            table id="composition" class="grid" {
                thead { tr { th { "part" } th { "tokens" } th { "share" } th {} } }
                tbody {
                    (composition_rows(&r.composition.rows, 0))
                    tr class="total" {
                        td { "total (ctxd's estimate)" }
                        td class="n" { (num(r.composition.total)) }
                        td {}
                        td {}
                    }
                }
            }
            @if let Some(d) = &r.drift {
                p class="note" { "provider's count " (num(d.provider_tokens)) ": " (d.note) }
            }
        }
    }
}

fn savings(savings: &[Saving]) -> Markup {
    html! {
        section id="savings-section" {
            h2 { "Savings" }
            table id="savings" class="grid" {
                thead { tr { th { "mechanism" } th { "items" } th { "tokens" } th { "cost" } } }
                tbody {
                    @for sv in savings {
                        tr title=(sv.basis) {
                            td { (sv.mechanism) }
                            td class="n" { (sv.items) }
                            td class="n" { (signed_num(sv.tokens)) }
                            td class="n" { (money(sv.usd)) }
                        }
                    }
                    @if savings.is_empty() {
                        tr {
                            td colspan="4" class="empty" {
                                "The log records no savings: no distillation pass and no reset "
                                "on this branch."
                            }
                        }
                    }
                }
            }
            p class="note" { "Cost: tokens at the model's list price of uncached input." }
        }
    }
}

fn pruned(pruned: &[Pruned]) -> Markup {
    html! {
        section id="pruned-section" {
            h2 { "Pruned items " small { "(" (pruned.len()) ")" } }
            @if pruned.is_empty() {
                p class="empty" { "Nothing pruned on this branch." }
            } @else {
                table id="pruned" class="grid" {
                    thead {
                        tr {
                            th { "item" } th { "what" } th { "outcome" }
                            th { "chars before → after" } th { "why" } th {}
                        }
                    }
                    tbody {
                        @for p in pruned {
                            tr {
                                td { (chars(&p.label, 80)) span class="key" { (p.entry_id) } }
                                td { (p.kind) }
                                td { (p.outcome) }
                                td class="n" {
                                    (num(p.before_chars as u64)) " → " (num(p.after_chars as u64))
                                }
                                td { (chars(&p.reason, 60)) }
                                td { button class="raw" data-entry=(p.entry_id) { "raw" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn notes_section(notes: &[Note]) -> Markup {
    html! {
        section {
            h2 { "Notes " small { "(" (notes.len()) ")" } }
            @if notes.is_empty() {
                p class="empty" { "No notes in this session's homes." }
            }
            @for n in notes {
                details class="note" {
                    summary {
                        (n.address) " "
                        span class="key" { (n.lines) " lines · " (num(n.bytes as u64)) " bytes" }
                    }
                    pre { (n.text) }
                }
            }
        }
    }
}

/// How old the copy of a session page is: a growing session's page is rebuilt at most once
/// per refresh interval, its copy served in between.
pub fn age(age: std::time::Duration) -> Markup {
    html! {
        @if !age.is_zero() {
            p class="note" id="age" { "Built " (format!("{:.1}", age.as_secs_f64())) " s ago." }
        }
    }
}

/// History search hits.
pub fn hits(page: &SearchPage) -> Markup {
    html! {
        @if page.hits.is_empty() {
            p class="empty" { "No matches." }
        } @else {
            ol class="hits" {
                @for h in &page.hits {
                    li {
                        span class="key" {
                            (h.role) " · " (h.kind) " · " (opt_when(h.timestamp.as_deref()))
                        }
                        " "
                        button class="raw" data-entry=(h.entry_id) { "raw" }
                        pre { (h.excerpt) }
                    }
                }
            }
            @if page.more {
                p class="note" { "More matches: refine the words." }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers_names_and_times() {
        assert_eq!(num(1_234_567), "1,234,567");
        assert_eq!(num(12), "12");
        assert_eq!(chars("abcdef", 3), "abc…");
        assert_eq!(when("2026-12-01T21:04:58.123Z"), "2026-12-01 21:04:58");
    }

    #[test]
    fn a_spliced_value_is_escaped() {
        let page = SearchPage {
            query: String::new(),
            mode: Default::default(),
            hits: vec![ctxd_engine::history::SearchHit {
                item_id: String::new(),
                window_id: String::new(),
                entry_id: r#"e" onclick="x"#.into(),
                kind: "<b>".into(),
                role: "user".into(),
                timestamp: None,
                excerpt: r#"<script>alert("x")</script> & 'y'"#.into(),
                score: None,
            }],
            more: false,
        };
        let out = hits(&page).into_string();
        assert!(
            out.contains(r#"data-entry="e&quot; onclick=&quot;x""#),
            "{out}"
        );
        assert!(out.contains("&lt;b&gt;"), "{out}");
        assert!(
            out.contains("<pre>&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; 'y'</pre>"),
            "{out}"
        );
    }
}
