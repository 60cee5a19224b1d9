//! The report as plain text, for pipes, logs and non-terminal output.

use std::fmt::Write;

use super::Report;

/// Compact token figure: `812`, `5.1k`, `1.20M`.
pub fn tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1_000.0),
        _ => format!("{:.2}M", n as f64 / 1_000_000.0),
    }
}

fn signed(n: i64) -> String {
    if n < 0 {
        format!("-{}", tokens(n.unsigned_abs()))
    } else {
        tokens(n as u64)
    }
}

/// A bar of `cells` cells for `percent`, rounded to the nearest cell; a non-zero share always
/// gets one cell.
pub fn bar(percent: f64, cells: usize) -> String {
    let filled = if percent <= 0.0 {
        0
    } else {
        ((percent / 100.0 * cells as f64).round() as usize).clamp(1, cells)
    };
    format!("{}{}", "█".repeat(filled), "░".repeat(cells - filled))
}

/// `1 turn`, `2 turns`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What the pairing rule left out of the composition, in one line (the text report and the
/// TUI both print it); `None` when nothing was.
pub fn unpaired_line(u: &super::Unpaired) -> Option<String> {
    if u.count == 0 {
        return None;
    }
    let ids: Vec<String> = u
        .entry_ids
        .iter()
        .map(|id| super::sanitize(id, 40))
        .collect();
    Some(format!(
        "Left out, not counted: {} ({} tokens) with a tool call and no result, or a result and \
         no call: {}{}",
        plural(u.count, "message", "messages"),
        tokens(u.tokens),
        ids.join(", "),
        if u.count > ids.len() { ", …" } else { "" }
    ))
}

/// Render the whole report.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_report(&mut out, r);
    out
}

/// The sections in order, each followed by a blank line except the last.
fn write_report(out: &mut String, r: &Report) -> std::fmt::Result {
    write_session(out, r)?;
    write_window(out, r)?;
    write_composition(out, r)?;
    write_drift(out, r)?;
    write_compactions(out, r)?;
    write_largest(out, r)?;
    write_turns(out, r)?;
    write_billed(out, r)?;
    write_savings(out, r)
}

fn write_session(out: &mut String, r: &Report) -> std::fmt::Result {
    let s = &r.session;
    let agent = s.agent.map_or("unknown", |a| a.as_str());
    writeln!(
        out,
        "Context report: {} session {} ({})",
        agent,
        s.id.as_deref().unwrap_or("-"),
        s.format
    )?;
    if let Some(title) = &s.title {
        writeln!(out, "  title: {}", super::sanitize(title, 80))?;
    }
    writeln!(
        out,
        "  model: {}   entries: {} ({} on the branch, {} subagent)   turns: {}{}",
        s.model.as_deref().unwrap_or("unknown"),
        s.entries,
        s.branch_entries,
        s.sidechain_entries,
        s.turn_count,
        s.at_turn
            .map_or(String::new(), |t| format!("   at turn {t}")),
    )?;
    writeln!(out)
}

/// The headline's fill of the window, the compaction threshold, and the context-window reset.
fn write_window(out: &mut String, r: &Report) -> std::fmt::Result {
    let h = &r.headline;
    match (h.tokens, h.window) {
        (Some(t), Some(w)) => writeln!(
            out,
            "Window  {} {} / {} tokens ({:.1}%), {} free   [{}]",
            bar(h.percent.unwrap_or(0.0), 10),
            tokens(t),
            tokens(w),
            h.percent.unwrap_or(0.0),
            signed(h.free.unwrap_or(0)),
            h.source
        )?,
        (Some(t), None) => writeln!(
            out,
            "Window  {} tokens (model window unknown)   [{}]",
            tokens(t),
            h.source
        )?,
        (None, _) => writeln!(
            out,
            "Window  total pending: compacted since the last reported usage (estimate {})",
            tokens(r.composition.total)
        )?,
    }
    match (&h.threshold, h.headroom) {
        (Some(th), Some(room)) => writeln!(
            out,
            "        auto-compaction at {} ({}), headroom {}",
            tokens(th.tokens),
            th.rule,
            signed(room)
        )?,
        _ => writeln!(out, "        no automatic compaction threshold known")?,
    }
    if let Some(w) = &r.context_window {
        write_context_window(out, w)?;
    }
    writeln!(out)
}

fn write_context_window(out: &mut String, w: &super::ContextWindow) -> std::fmt::Result {
    match &w.boot_entry_id {
        Some(boot) => writeln!(
            out,
            "Reset   in context window {} (marker {}, boot {})",
            super::sanitize(&w.window_id, 40),
            super::sanitize(&w.marker_entry_id, 40),
            super::sanitize(boot, 40)
        ),
        None => {
            writeln!(
                out,
                "BROKEN  context window {}: its marker {} has no boot after it. The gateway \
                 refuses to send this branch; the composition below is the raw history.",
                super::sanitize(&w.window_id, 40),
                super::sanitize(&w.marker_entry_id, 40)
            )?;
            if let Some(note) = &w.note {
                writeln!(out, "        {}", super::sanitize(note, 200))?;
            }
            Ok(())
        }
    }
}

fn write_composition(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(
        out,
        "Composition (ctxd estimate, {}: {} tokens)",
        r.tokenizer,
        tokens(r.composition.total)
    )?;
    for row in &r.composition.rows {
        if row.tokens == 0 {
            continue;
        }
        writeln!(
            out,
            "  {:<22} {} {:>7} {:>5.1}%",
            row.label,
            bar(row.percent, 8),
            tokens(row.tokens),
            row.percent
        )?;
        for child in &row.children {
            writeln!(
                out,
                "    {:<20} {:>16} {:>5.1}%",
                child.label,
                tokens(child.tokens),
                child.percent
            )?;
        }
    }
    if let Some(line) = unpaired_line(&r.composition.unpaired) {
        writeln!(out, "  {line}")?;
    }
    writeln!(out)
}

fn write_drift(out: &mut String, r: &Report) -> std::fmt::Result {
    match &r.drift {
        Some(d) => writeln!(
            out,
            "Drift   provider {} vs estimate {}: {}",
            tokens(d.provider_tokens),
            tokens(d.estimate),
            d.note
        )?,
        None => writeln!(out, "Drift   no provider-reported usage to compare with")?,
    }
    if let Some(c) = &r.calibration {
        writeln!(
            out,
            "        fit over {}: provider ≈ {:.3} × estimate {} {} → {} now",
            plural(c.samples, "turn", "turns"),
            c.scale,
            if c.overhead < 0.0 { "-" } else { "+" },
            tokens(c.overhead.abs() as u64),
            tokens(c.calibrated_tokens)
        )?;
    }
    writeln!(out)
}

fn write_compactions(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "Compactions: {}", r.compactions.count)?;
    for c in &r.compactions.history {
        writeln!(
            out,
            "  {} {}: {} → {} (summary {}){}",
            c.timestamp.as_deref().unwrap_or("-"),
            c.entry_id,
            tokens(c.estimate_before),
            tokens(c.estimate_after),
            tokens(c.summary_tokens),
            c.tokens_before_reported.map_or(String::new(), |t| format!(
                ", agent reported {} before",
                tokens(t)
            ))
        )?;
    }
    writeln!(out)
}

fn write_largest(out: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(out, "Largest messages")?;
    for l in &r.largest {
        writeln!(
            out,
            "  {:>7}  {:<9} {:<40}  {}",
            tokens(l.tokens),
            l.role,
            l.descriptor,
            l.entry_id
        )?;
    }
    writeln!(out)
}

/// The prompt per turn as bars against the peak, at most about 24 rows; nothing without turns.
fn write_turns(out: &mut String, r: &Report) -> std::fmt::Result {
    if r.turns.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "Context per turn ({}: the prompt as sent)",
        plural(r.turns.len(), "turn", "turns")
    )?;
    // The headline's figure closes the table when it differs from the last prompt (it adds
    // what came after it: the last answer, a pending message), so the two agree.
    let last = r.turns.last().map(|t| t.provider.unwrap_or(t.estimate));
    let now = r
        .headline
        .tokens
        .filter(|&h| r.session.at_turn.is_none() && Some(h) != last);
    let peak = r
        .turns
        .iter()
        .map(|t| t.provider.unwrap_or(t.estimate))
        .chain(now)
        .max()
        .unwrap_or(1)
        .max(1);
    let step = r.turns.len().div_ceil(24).max(1);
    for t in r.turns.iter().step_by(step) {
        let v = t.provider.unwrap_or(t.estimate);
        writeln!(
            out,
            "  turn {:>5} {:>7} {} {}",
            t.turn,
            tokens(v),
            bar(v as f64 * 100.0 / peak as f64, 30),
            if t.provider.is_some() {
                ""
            } else {
                "(estimate)"
            }
        )?;
    }
    if let Some(h) = now {
        writeln!(
            out,
            "  now        {:>7} {} (the headline: the last prompt and what came after it)",
            tokens(h),
            bar(h as f64 * 100.0 / peak as f64, 30),
        )?;
    }
    writeln!(out)
}

fn write_billed(out: &mut String, r: &Report) -> std::fmt::Result {
    let b = &r.billed;
    match b.source {
        "none" => writeln!(out, "Billed  no usage recorded"),
        _ => writeln!(
            out,
            "Billed  {}: input {}, output {}, cache read {}, cache write {}{}",
            plural(b.responses, "response", "responses"),
            tokens(b.input),
            tokens(b.output),
            tokens(b.cache_read),
            tokens(b.cache_write),
            if b.source == "totals" {
                " (session totals)"
            } else {
                ""
            }
        ),
    }
}

/// The gateway's savings, when the session went through it.
fn write_savings(out: &mut String, r: &Report) -> std::fmt::Result {
    let Some(s) = &r.savings else {
        return Ok(());
    };
    let by: Vec<String> = s
        .saved_by
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(m, v)| format!("{} {}", m.name(), signed(v)))
        .collect();
    writeln!(
        out,
        "Savings {}: sent {} of {}, saved {}{}{} (estimated, 4 bytes a token)",
        plural(s.requests as usize, "managed request", "managed requests"),
        tokens(s.sent),
        tokens(s.whole),
        signed(s.saved),
        if by.is_empty() {
            String::new()
        } else {
            format!(" ({})", by.join(", "))
        },
        if s.requests > s.unpriced {
            format!(", ${:.4} at list input price", s.cost_saved_usd)
        } else {
            String::new()
        }
    )
}
