//! The HTML fragments the pages' script places: every text from a session goes through
//! [`esc`] (sessions are untrusted text: a tool output may hold any markup).

use std::fmt::Write;

use ctxd_core::report::Row as CompRow;
use ctxd_engine::history::SearchPage;

use super::chart;
use super::page::Page;
use super::query::{Note, Sort, SORT_KEYS};
use super::summary::Row;

/// `text` safe inside an element and inside a quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn opt(v: Option<&str>) -> String {
    v.map_or_else(|| "–".to_owned(), esc)
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
        None => "–".to_owned(),
    }
}

/// [`when`] of a time that may be missing.
fn opt_when(ts: Option<&str>) -> String {
    ts.map_or_else(|| "–".to_owned(), when)
}

/// `2026-12-01T21:04:58.123Z` → `2026-12-01 21:04:58`.
fn when(ts: &str) -> String {
    let t = ts.replace('T', " ");
    esc(t.get(..19).unwrap_or(&t))
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

/// The sessions table.
/// The gateway's readiness above the sessions: a line saying it serves and stores requests, or
/// why it does not (what `/readyz` says).
pub(crate) fn readiness(r: &crate::server::Readiness) -> String {
    if r.ready {
        return r#"<p class="ready" id="readiness" data-ready="true">Ready: requests are served and stored.</p>"#.to_owned();
    }
    let reasons: Vec<String> = r.reasons.iter().map(|x| esc(x)).collect();
    format!(
        r#"<p class="not-ready" id="readiness" data-ready="false">Not ready: {}.</p>"#,
        reasons.join("; ")
    )
}

pub fn sessions(rows: &[Row], sort: Sort, total: usize) -> String {
    let mut s = String::with_capacity(512 + rows.len() * 600);
    let _ = write!(
        s,
        r#"<p class="count" id="session-count" data-shown="{}" data-total="{total}">{} of {} sessions</p>"#,
        rows.len(),
        num(rows.len() as u64),
        num(total as u64)
    );
    s.push_str(r#"<table id="sessions" class="grid"><thead><tr>"#);
    for (label, key) in COLUMNS.iter().zip(SORT_KEYS) {
        let arrow = if sort.key == key {
            if sort.desc {
                " ▾"
            } else {
                " ▴"
            }
        } else {
            ""
        };
        let _ = write!(
            s,
            r#"<th data-sort="{key}" tabindex="0" aria-sort="{}">{label}{arrow}</th>"#,
            match (sort.key == key, sort.desc) {
                (false, _) => "none",
                (true, true) => "descending",
                (true, false) => "ascending",
            }
        );
    }
    s.push_str("</tr></thead><tbody>");
    for r in rows {
        let name = r.title.as_deref().unwrap_or(&r.key);
        let _ = write!(
            s,
            r#"<tr data-id="{}"><td class="name"><a href="/ui/session/{}">{}</a><span class="key">{}</span>"#,
            r.id,
            r.id,
            esc(&chars(name, 60)),
            esc(&chars(&r.key, 40)),
        );
        match r.tenant.as_deref() {
            Some("") => s.push_str(r#"<span class="key">local (imported or keyless)</span>"#),
            Some(t) => {
                let _ = write!(
                    s,
                    r#"<span class="key">tenant {}</span>"#,
                    esc(&chars(t, 12))
                );
            }
            None => {}
        }
        let model = r
            .summary
            .as_ref()
            .and_then(|m| m.model.as_deref())
            .or(r.model.as_deref());
        let _ = write!(
            s,
            r#"</td><td>{}</td><td class="path">{}</td><td>{}</td><td>{}</td><td>{}</td>"#,
            opt(r.agent.as_deref()),
            opt(r.project.as_deref()),
            opt(model),
            when(&r.started),
            when(&r.last_active),
        );
        match &r.summary {
            Some(m) => {
                let ctx = m.context_tokens.map_or("pending".to_owned(), num);
                let win = m.window.map_or("?".to_owned(), num);
                let pct = m.percent.unwrap_or(0.0).clamp(0.0, 100.0);
                let _ = write!(
                    s,
                    r#"<td class="n">{}</td><td class="n ctx"><span class="bar"><i style="width:{pct:.0}%"></i></span>{ctx} / {win}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td>"#,
                    num(m.turns as u64),
                    m.windows_opened,
                    num(m.saved_tokens),
                    money(m.saved_usd),
                );
            }
            None => s.push_str(r#"<td class="n pending" colspan="5">reading the log…</td>"#),
        }
        s.push_str("</tr>");
    }
    if rows.is_empty() {
        let _ = write!(
            s,
            r#"<tr><td colspan="{}" class="empty">No sessions{}.</td></tr>"#,
            COLUMNS.len(),
            if total > 0 {
                " match the filter"
            } else {
                " yet"
            }
        );
    }
    s.push_str("</tbody></table>");
    s
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

fn composition_rows(s: &mut String, rows: &[CompRow], depth: usize) {
    for r in rows {
        let _ = write!(
            s,
            r#"<tr class="depth{}"><td>{}</td><td class="n">{}</td><td class="n">{:.1}%</td><td><span class="bar"><i style="width:{:.1}%"></i></span></td></tr>"#,
            depth.min(2),
            esc(&r.label),
            num(r.tokens),
            r.percent,
            r.percent.clamp(0.0, 100.0)
        );
        composition_rows(s, &r.children, depth + 1);
    }
}

/// The session page below its title.
pub fn session(page: &Page, notes: &[Note], built_ms: f64) -> String {
    let r = &page.report;
    let m = &page.summary;
    let mut s = String::with_capacity(16_384 + r.turns.len() * 40);
    let title = r.session.title.as_deref().unwrap_or(&page.key);
    let _ = write!(
        s,
        r#"<h1 id="session-title">{}</h1><p class="key">{} · {} · {} · {} · started {} </p>"#,
        esc(&chars(title, 120)),
        esc(&page.key),
        opt(r.session.agent.map(|a| a.as_str())),
        opt(r.session.model.as_deref()),
        opt(r.session.cwd.as_deref()),
        opt_when(r.session.started_at.as_deref()),
    );
    let _ = write!(
        s,
        r#"<div class="cards" id="summary-cards"><div class="card"><b>{}</b><span>context now ({})</span></div><div class="card"><b>{}</b><span>window{}</span></div><div class="card"><b>{}</b><span>turns</span></div><div class="card"><b>{}</b><span>windows opened</span></div><div class="card"><b>{}</b><span>tokens saved · {}</span></div></div>"#,
        m.context_tokens.map_or("pending".into(), num),
        r.headline.source,
        m.window.map_or("?".into(), num),
        m.percent
            .map(|p| format!(" · {p:.1}% used"))
            .unwrap_or_default(),
        num(m.turns as u64),
        m.windows_opened,
        num(m.saved_tokens),
        money(m.saved_usd),
    );
    s.push_str(r#"<section id="chart-section"><h2>Context size per turn</h2><div class="legend"><span class="sw client"></span>the client's conversation <span class="sw upstream"></span>sent upstream (both: ctxd's estimate) <span class="sw window"></span>window <span class="sw reset"></span>reset <span class="sw compaction"></span>client compaction</div>"#);
    if r.turns.is_empty() {
        s.push_str(r#"<p class="empty">No turns yet.</p>"#);
    }
    s.push_str(&chart::render(page));
    s.push_str("</section>");

    s.push_str(r#"<div class="two"><section id="composition-section"><h2>The window now</h2><table id="composition" class="grid"><thead><tr><th>part</th><th>tokens</th><th>share</th><th></th></tr></thead><tbody>"#);
    composition_rows(&mut s, &r.composition.rows, 0);
    let _ = write!(
        s,
        r#"<tr class="total"><td>total (ctxd's estimate)</td><td class="n">{}</td><td></td><td></td></tr></tbody></table>"#,
        num(r.composition.total)
    );
    if let Some(d) = &r.drift {
        let _ = write!(
            s,
            r#"<p class="note">provider's count {}: {}</p>"#,
            num(d.provider_tokens),
            esc(&d.note)
        );
    }
    s.push_str("</section>");

    s.push_str(r#"<section id="savings-section"><h2>Savings</h2><table id="savings" class="grid"><thead><tr><th>mechanism</th><th>items</th><th>tokens</th><th>cost</th></tr></thead><tbody>"#);
    for sv in &page.savings {
        let _ = write!(
            s,
            r#"<tr title="{}"><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>"#,
            esc(sv.basis),
            esc(&sv.mechanism),
            sv.items,
            signed_num(sv.tokens),
            money(sv.usd)
        );
    }
    if page.savings.is_empty() {
        s.push_str(r#"<tr><td colspan="4" class="empty">The log records no savings: no distillation pass and no reset on this branch.</td></tr>"#);
    }
    s.push_str(r#"</tbody></table><p class="note">Cost: tokens at the model's list price of uncached input.</p></section></div>"#);

    let _ = write!(
        s,
        r#"<section id="pruned-section"><h2>Pruned items <small>({})</small></h2>"#,
        page.pruned.len()
    );
    if page.pruned.is_empty() {
        s.push_str(r#"<p class="empty">Nothing pruned on this branch.</p>"#);
    } else {
        s.push_str(r#"<table id="pruned" class="grid"><thead><tr><th>item</th><th>what</th><th>outcome</th><th>chars before → after</th><th>why</th><th></th></tr></thead><tbody>"#);
        for p in &page.pruned {
            let _ = write!(
                s,
                r#"<tr><td>{}<span class="key">{}</span></td><td>{}</td><td>{}</td><td class="n">{} → {}</td><td>{}</td><td><button class="raw" data-entry="{}">raw</button></td></tr>"#,
                esc(&chars(&p.label, 80)),
                esc(&p.entry_id),
                esc(p.kind),
                p.outcome,
                num(p.before_chars as u64),
                num(p.after_chars as u64),
                esc(&chars(&p.reason, 60)),
                esc(&p.entry_id),
            );
        }
        s.push_str("</tbody></table>");
    }
    s.push_str("</section>");

    s.push_str(r#"<section><h2>History</h2><form id="search"><input name="q" type="search" placeholder="search this session's history (words, any case)" maxlength="500" required> <button>search</button></form><div id="hits"></div></section>"#);

    let _ = write!(
        s,
        r#"<section><h2>Notes <small>({})</small></h2>"#,
        notes.len()
    );
    if notes.is_empty() {
        s.push_str(r#"<p class="empty">No notes in this session's homes.</p>"#);
    }
    for n in notes {
        let _ = write!(
            s,
            r#"<details class="note"><summary>{} <span class="key">{} lines · {} bytes</span></summary><pre>{}</pre></details>"#,
            esc(&n.address),
            n.lines,
            num(n.bytes as u64),
            esc(&n.text)
        );
    }
    let _ = write!(
        s,
        r#"</section><p class="note" id="built">Built by the server in {built_ms:.1} ms from the store; the numbers are <code>ctxd report --json {}</code>'s.</p>"#,
        esc(&page.key)
    );
    s
}

/// How old the copy of a session page is: a growing session's page is rebuilt at most once
/// per refresh interval, its copy served in between.
pub fn age(age: std::time::Duration) -> String {
    if age.is_zero() {
        return String::new();
    }
    format!(
        r#"<p class="note" id="age">Built {:.1} s ago.</p>"#,
        age.as_secs_f64()
    )
}

/// History search hits.
pub fn hits(page: &SearchPage) -> String {
    let mut s = String::new();
    if page.hits.is_empty() {
        return r#"<p class="empty">No matches.</p>"#.to_owned();
    }
    s.push_str(r#"<ol class="hits">"#);
    for h in &page.hits {
        let _ = write!(
            s,
            r#"<li><span class="key">{} · {} · {}</span> <button class="raw" data-entry="{}">raw</button><pre>{}</pre></li>"#,
            esc(&h.role),
            esc(&h.kind),
            opt_when(h.timestamp.as_deref()),
            esc(&h.entry_id),
            esc(&h.excerpt)
        );
    }
    s.push_str("</ol>");
    if page.more {
        s.push_str(r#"<p class="note">More matches: refine the words.</p>"#);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(num(1_234_567), "1,234,567");
        assert_eq!(num(12), "12");
        assert_eq!(chars("abcdef", 3), "abc…");
        assert_eq!(when("2026-12-01T21:04:58.123Z"), "2026-12-01 21:04:58");
    }
}
