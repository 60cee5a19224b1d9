//! The pure drawing of the screen: `render(frame, &App)`.
//!
//! The screen is a fixed header (agent, session, model, file), a scrolling body and a fixed
//! footer (key hints and feedback). The body is laid out as lines plus one chart, drawn into an
//! off-screen buffer as tall as the whole body, and the visible rows are copied to the frame: so
//! scrolling is a row offset, and a chart half scrolled out of view is cut, not squashed.
//!
//! Colour follows the seed's "table is a chart": a category has one hue wherever it appears
//! (composition rows, their children, the largest messages); the window gauge's colour is the
//! only verdict. Every coloured fact is also written out, so the screen reads without colour.

use ctxd_core::report::text::{bar, plural, tokens};
use ctxd_core::report::{Category, Headline, Report};
use ratatui::buffer::Buffer;
use ratatui::layout::{Alignment, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Chart, Dataset, GraphType, Paragraph, Scrollbar, ScrollbarOrientation,
    ScrollbarState, StatefulWidget, Widget,
};
use ratatui::Frame;

use super::app::{App, Status};

/// Rows of the per-turn chart (its axes and labels included).
const CHART_HEIGHT: usize = 12;
/// Cells of the window gauge and of a table row's bar.
const GAUGE_CELLS: usize = 10;
const ROW_CELLS: usize = 8;
/// Width of the token and percent columns of a table row.
const TOKENS_W: usize = 6;
const PERCENT_W: usize = 6;

/// The hue of a category, the same wherever the category appears.
pub(crate) fn category_color(category: Category) -> Color {
    match category {
        Category::System => Color::Indexed(75), // blue
        Category::Tools => Color::Indexed(141), // purple
        Category::User => Color::Indexed(211),  // pink
        Category::Assistant | Category::Thinking | Category::ToolCalls => Color::Indexed(114), // green
        Category::ToolResults | Category::Images => Color::Indexed(214), // amber
        Category::Injected | Category::Summaries => Color::Indexed(250), // neutral gray
    }
}

/// The empty cells of a bar.
const EMPTY: Color = Color::Indexed(239);
/// Secondary text: notes, units, sources.
const FAINT: Color = Color::Indexed(246);
/// The per-turn chart's series (not categories: they take no category hue).
const PROVIDER: Color = Color::Cyan;
const ESTIMATE: Color = Color::White;
const THRESHOLD: Color = Color::Red;

fn faint() -> Style {
    Style::new().fg(FAINT)
}

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// The three bands of the screen.
pub(crate) struct Areas {
    pub header: Rect,
    pub body: Rect,
    pub footer: Rect,
}

/// Split the screen: the footer always keeps its line (and takes a second one for feedback
/// when there is room), the header shrinks to one line on a short terminal, and the body gets
/// what is left (possibly nothing).
pub(crate) fn areas(area: Rect, status: bool) -> Areas {
    let footer_h = if status && area.height >= 4 {
        2
    } else {
        area.height.min(1)
    };
    let rest = area.height - footer_h;
    let header_h = if rest >= 10 { 3 } else { rest.min(1) };
    let body_h = rest - header_h;
    Areas {
        header: Rect::new(area.x, area.y, area.width, header_h),
        body: Rect::new(area.x, area.y + header_h, area.width, body_h),
        footer: Rect::new(area.x, area.y + rest, area.width, footer_h),
    }
}

/// The body's text width: the last column is the scrollbar's.
pub(crate) fn content_width(body: Rect) -> usize {
    usize::from(body.width.saturating_sub(1))
}

/// How many lines the body takes at `width`.
pub(crate) fn body_height(report: &Report, width: usize) -> usize {
    sections(report, width).iter().map(Section::height).sum()
}

pub(crate) fn render(frame: &mut Frame<'_>, app: &App) {
    let area = frame.area();
    if area.width == 0 || area.height == 0 {
        return;
    }
    let areas = areas(area, app.status.is_some());
    let buf = frame.buffer_mut();
    render_header(app, areas.header, buf);
    render_body(app, areas.body, buf);
    render_footer(app, areas.footer, buf);
}

fn render_header(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let s = &app.report.session;
    let mut first = vec![
        Span::styled(" ctxd report ", bold().add_modifier(Modifier::REVERSED)),
        Span::raw(" "),
        Span::styled(s.agent.map_or("unknown agent", |a| a.as_str()), bold()),
        Span::styled("  session ", faint()),
        Span::raw(s.id.as_deref().unwrap_or("-").to_owned()),
        Span::styled("  model ", faint()),
        Span::raw(s.model.as_deref().unwrap_or("unknown").to_owned()),
    ];
    if let Some(turn) = s.at_turn {
        first.push(Span::styled(format!("  at turn {turn}"), bold()));
    }
    let mut second = vec![
        Span::styled(" file ", faint()),
        Span::raw(ctxd_core::report::sanitize(&app.title, 200)),
        Span::styled(
            format!(
                "  {} · {} · {}",
                s.format,
                plural(s.turn_count, "turn", "turns"),
                plural(s.entries, "entry", "entries")
            ),
            faint(),
        ),
    ];
    if let Some(title) = &s.title {
        second.push(Span::styled("  · ", faint()));
        second.push(Span::raw(ctxd_core::report::sanitize(title, 60)));
    }
    let mut lines = vec![Line::from(first)];
    if area.height >= 3 {
        lines.push(Line::from(second));
        Paragraph::new(lines)
            .block(
                Block::new()
                    .borders(Borders::BOTTOM)
                    .border_style(Style::new().fg(EMPTY)),
            )
            .render(area, buf);
    } else {
        Paragraph::new(lines).render(area, buf);
    }
}

fn render_footer(app: &App, area: Rect, buf: &mut Buffer) {
    if area.height == 0 {
        return;
    }
    let width = usize::from(area.width);
    let mut spans = Vec::new();
    let mut hints_area = area;
    if let Some(status) = &app.status {
        let (text, style) = match status {
            Status::Info(t) => (t.as_str(), Style::new().fg(Color::Cyan)),
            Status::Error(t) => (
                t.as_str(),
                Style::new()
                    .fg(Color::LightRed)
                    .add_modifier(Modifier::BOLD),
            ),
        };
        if area.height >= 2 {
            // The feedback gets a line of its own above the hints.
            let line = Rect::new(area.x, area.y, area.width, 1);
            Paragraph::new(Line::styled(clip_pad(text, width, false), style)).render(line, buf);
            hints_area = Rect::new(area.x, area.y + area.height - 1, area.width, 1);
        } else {
            spans.push(Span::styled(clip_pad(text, width * 3 / 5, false), style));
            spans.push(Span::raw("  "));
        }
    }
    let full: [(&str, &str); 5] = [
        ("↑↓/jk", "scroll"),
        ("PgUp/PgDn", "page"),
        ("g/G", "top/end"),
        ("r", "reload"),
        ("q", "quit"),
    ];
    let short: [(&str, &str); 4] = [
        ("jk", "scroll"),
        ("g/G", "ends"),
        ("r", "reload"),
        ("q", "quit"),
    ];
    let used: usize = spans.iter().map(Span::width).sum();
    let hints_w: usize = full.iter().map(|(k, d)| k.len() + d.len() + 3).sum();
    let hints: &[(&str, &str)] = if used + hints_w <= width {
        &full
    } else {
        &short
    };
    for (key, what) in hints {
        spans.push(Span::styled(*key, bold()));
        spans.push(Span::raw(" "));
        spans.push(Span::styled(*what, faint()));
        spans.push(Span::raw("  "));
    }
    Paragraph::new(Line::from(spans)).render(hints_area, buf);
}

fn render_body(app: &App, area: Rect, buf: &mut Buffer) {
    let width = content_width(area);
    if width == 0 || area.height == 0 {
        return;
    }
    let sections = sections(&app.report, width);
    let total: usize = sections.iter().map(Section::height).sum();
    let total_h = u16::try_from(total).unwrap_or(u16::MAX);
    let view_h = usize::from(area.height);
    let max = total.saturating_sub(view_h);
    let scroll = app.scroll.min(max);

    // Draw the whole body off screen, then copy the visible rows.
    let w = width as u16;
    let mut body = Buffer::empty(Rect::new(0, 0, w, total_h.max(1)));
    let mut y: u16 = 0;
    for section in &sections {
        match section {
            Section::Lines(lines) => {
                for line in lines {
                    if y >= total_h {
                        break;
                    }
                    body.set_line(0, y, line, w);
                    y = y.saturating_add(1);
                }
            }
            Section::Chart => {
                let h = (CHART_HEIGHT as u16).min(total_h.saturating_sub(y));
                render_chart(&app.report, Rect::new(0, y, w, h), &mut body);
                y = y.saturating_add(h);
            }
        }
    }
    for row in 0..area.height {
        let Ok(src_y) = u16::try_from(scroll + usize::from(row)) else {
            break;
        };
        if src_y >= total_h {
            break;
        }
        for x in 0..w {
            if let (Some(src), Some(dst)) = (
                body.cell((x, src_y)),
                buf.cell_mut((area.x + x, area.y + row)),
            ) {
                *dst = src.clone();
            }
        }
    }
    if max > 0 {
        let mut state = ScrollbarState::new(max + 1)
            .position(scroll)
            .viewport_content_length(view_h);
        Scrollbar::new(ScrollbarOrientation::VerticalRight)
            .begin_symbol(None)
            .end_symbol(None)
            .thumb_style(Style::new().fg(FAINT))
            .track_style(Style::new().fg(EMPTY))
            .render(area, buf, &mut state);
    }
}

/// A piece of the body.
enum Section {
    Lines(Vec<Line<'static>>),
    /// The per-turn chart, [`CHART_HEIGHT`] rows.
    Chart,
}

impl Section {
    fn height(&self) -> usize {
        match self {
            Section::Lines(lines) => lines.len(),
            Section::Chart => CHART_HEIGHT,
        }
    }
}

fn sections(r: &Report, width: usize) -> Vec<Section> {
    let blank = || Section::Lines(vec![Line::raw("")]);
    let mut out = vec![
        Section::Lines(gauge(r, width)),
        blank(),
        Section::Lines(composition(r, width)),
        blank(),
        Section::Lines(drift(r, width)),
        blank(),
        Section::Lines(compactions(r, width)),
        blank(),
        Section::Lines(largest(r, width)),
        blank(),
    ];
    out.push(Section::Lines(chart_title(r, width)));
    if !r.turns.is_empty() {
        out.push(Section::Chart);
    }
    out.push(blank());
    out.push(Section::Lines(billed(r, width)));
    out
}

/// The gauge's colour: the screen's only verdict.
fn verdict(h: &Headline) -> Color {
    if h.tokens.is_none() {
        return FAINT;
    }
    let window = h.window.unwrap_or(0) as f64;
    match (h.headroom, h.percent) {
        (Some(room), _) if room < 0 => Color::Red,
        (Some(room), _) if (room as f64) < window * 0.1 => Color::LightRed,
        (None, Some(p)) if p >= 100.0 => Color::Red,
        (None, Some(p)) if p >= 85.0 => Color::LightRed,
        _ => Color::Cyan,
    }
}

fn gauge(r: &Report, width: usize) -> Vec<Line<'static>> {
    let h = &r.headline;
    let color = verdict(h);
    let pct = h.percent.unwrap_or(0.0);
    let label = || vec![Span::styled("Window  ", bold())];
    let mut gauge = bar_spans(pct, GAUGE_CELLS, color);
    let mut lines = match (h.tokens, h.window) {
        (Some(t), Some(w)) => {
            gauge.push(Span::styled(format!(" {pct:.1}%"), bold().fg(color)));
            flow(
                label(),
                vec![
                    gauge,
                    vec![Span::raw(format!("{} / {} tokens,", tokens(t), tokens(w)))],
                    vec![Span::raw(format!("{} free", signed(h.free.unwrap_or(0))))],
                    vec![Span::styled(format!("[{}]", h.source), faint())],
                ],
                8,
                width,
            )
        }
        (Some(t), None) => flow(
            label(),
            vec![
                vec![Span::styled(format!("{} tokens", tokens(t)), bold())],
                vec![Span::styled("(model window unknown)", faint())],
                vec![Span::styled(format!("[{}]", h.source), faint())],
            ],
            8,
            width,
        ),
        (None, _) => {
            gauge.push(Span::styled(" total pending:", bold()));
            let mut segments = vec![gauge];
            segments.extend(words(
                &format!(
                    "compacted since the last reported usage (estimate {})",
                    tokens(r.composition.total)
                ),
                faint(),
            ));
            flow(label(), segments, 8, width)
        }
    };
    let indent = || vec![Span::raw(" ".repeat(8))];
    match (&h.threshold, h.headroom) {
        (Some(th), Some(room)) => {
            let mut segments = vec![vec![Span::raw(format!(
                "auto-compaction at {}",
                tokens(th.tokens)
            ))]];
            segments.extend(words(&format!("({})", th.rule), faint()));
            segments.push(vec![Span::styled(
                format!("headroom {}", signed(room)),
                Style::new().fg(color),
            )]);
            lines.extend(flow(indent(), segments, 8, width));
        }
        _ => lines.extend(flow(
            indent(),
            words("no automatic compaction threshold known", faint()),
            8,
            width,
        )),
    }
    lines
}

fn composition(r: &Report, width: usize) -> Vec<Line<'static>> {
    let mut segments = words("ctxd estimate,", faint());
    segments.push(vec![Span::styled(format!("{}:", r.tokenizer), faint())]);
    segments.push(vec![Span::styled(
        format!("{} tokens", tokens(r.composition.total)),
        faint(),
    )]);
    let mut lines = flow(
        vec![Span::styled("Composition  ", bold())],
        segments,
        2,
        width,
    );
    for row in r.composition.rows.iter().filter(|row| row.tokens > 0) {
        lines.push(table_row(
            width,
            2,
            Span::styled(row.label.clone(), bold()),
            row.percent,
            row.tokens,
            row.category,
            None,
        ));
        for child in &row.children {
            lines.push(table_row(
                width,
                4,
                Span::raw(child.label.clone()),
                child.percent,
                child.tokens,
                child.category,
                None,
            ));
        }
    }
    if let Some(line) = ctxd_core::report::text::unpaired_line(&r.composition.unpaired) {
        lines.extend(flow(vec![Span::raw("  ")], words(&line, faint()), 4, width));
    }
    lines
}

fn largest(r: &Report, width: usize) -> Vec<Line<'static>> {
    let mut lines = vec![Line::from(vec![
        Span::styled("Largest messages", bold()),
        Span::styled(format!("  top {}", r.largest.len()), faint()),
    ])];
    if r.largest.is_empty() {
        lines.push(Line::styled("  none", faint()));
    }
    let total = r.composition.total;
    for l in &r.largest {
        let percent = if total == 0 {
            0.0
        } else {
            l.tokens as f64 * 100.0 / total as f64
        };
        let label = if l.descriptor.is_empty() {
            l.role.clone()
        } else {
            format!("{}: {}", l.role, l.descriptor)
        };
        lines.push(table_row(
            width,
            2,
            Span::raw(label),
            percent,
            l.tokens,
            l.category,
            Some(&l.entry_id),
        ));
    }
    lines
}

/// The label column's width (indent included) at `width`.
fn label_column(width: usize) -> usize {
    let fixed = 1 + ROW_CELLS + 1 + TOKENS_W + 1 + PERCENT_W;
    width.saturating_sub(fixed).clamp(10, 50)
}

/// One row of the composition table (and of the largest messages, which share it):
/// label, a bar and the percent in the category's hue, tokens.
fn table_row(
    width: usize,
    indent: usize,
    label: Span<'static>,
    percent: f64,
    tok: u64,
    category: Category,
    note: Option<&str>,
) -> Line<'static> {
    let color = category_color(category);
    let label_w = label_column(width).saturating_sub(indent);
    let mut spans = vec![
        Span::raw(" ".repeat(indent)),
        Span::styled(clip_pad(&label.content, label_w, true), label.style),
        Span::raw(" "),
    ];
    spans.extend(bar_spans(percent, ROW_CELLS, color));
    spans.push(Span::raw(format!(" {:>w$}", tokens(tok), w = TOKENS_W)));
    spans.push(Span::styled(
        format!(" {:>w$}", format!("{percent:.1}%"), w = PERCENT_W),
        Style::new().fg(color),
    ));
    if let Some(note) = note {
        spans.push(Span::styled(format!("  {note}"), faint()));
    }
    Line::from(spans)
}

fn drift(r: &Report, width: usize) -> Vec<Line<'static>> {
    let label = || vec![Span::styled("Drift   ", bold())];
    let mut lines = match &r.drift {
        Some(d) => {
            let mut segments = vec![
                vec![Span::raw(format!("provider {}", tokens(d.provider_tokens)))],
                vec![Span::raw("vs")],
                vec![Span::raw(format!("estimate {}:", tokens(d.estimate)))],
            ];
            segments.extend(words(&d.note, faint()));
            flow(label(), segments, 8, width)
        }
        None => flow(
            label(),
            words("no provider-reported usage to compare with", faint()),
            8,
            width,
        ),
    };
    if let Some(c) = &r.calibration {
        let text = format!(
            "fit over {} turns: provider ≈ {:.3} × estimate {} {} → {} now",
            c.samples,
            c.scale,
            if c.overhead < 0.0 { "-" } else { "+" },
            tokens(c.overhead.abs() as u64),
            tokens(c.calibrated_tokens)
        );
        lines.extend(flow(
            vec![Span::raw(" ".repeat(8))],
            words(&text, Style::new()),
            8,
            width,
        ));
    }
    lines
}

fn compactions(r: &Report, width: usize) -> Vec<Line<'static>> {
    let c = &r.compactions;
    let mut lines = vec![Line::from(vec![
        Span::styled("Compactions  ", bold()),
        Span::raw(c.count.to_string()),
    ])];
    for p in &c.history {
        let mut segments = vec![
            vec![Span::styled(
                p.timestamp.clone().unwrap_or_else(|| "-".into()),
                faint(),
            )],
            vec![Span::styled(format!("{}:", p.entry_id), faint())],
            vec![Span::raw(format!(
                "{} → {}",
                tokens(p.estimate_before),
                tokens(p.estimate_after)
            ))],
            vec![Span::raw(format!("(summary {})", tokens(p.summary_tokens)))],
        ];
        if let Some(t) = p.tokens_before_reported {
            segments.extend(words(
                &format!("agent reported {} before", tokens(t)),
                faint(),
            ));
        }
        lines.extend(flow(vec![Span::raw("  ")], segments, 4, width));
    }
    lines
}

fn billed(r: &Report, width: usize) -> Vec<Line<'static>> {
    let b = &r.billed;
    let label = vec![Span::styled("Billed  ", bold())];
    if b.source == "none" {
        return flow(label, words("no usage recorded", faint()), 8, width);
    }
    let mut segments = vec![
        vec![Span::raw(format!("{} responses:", b.responses))],
        vec![Span::raw(format!("input {},", tokens(b.input)))],
        vec![Span::raw(format!("output {},", tokens(b.output)))],
        vec![Span::raw(format!("cache read {},", tokens(b.cache_read)))],
        vec![Span::raw(format!("cache write {}", tokens(b.cache_write)))],
    ];
    if b.source == "totals" {
        segments.push(vec![Span::styled("(session totals)", faint())]);
    }
    flow(label, segments, 8, width)
}

/// The threshold line is drawn on the chart only when it does not flatten the curve.
fn chart_threshold(r: &Report) -> Option<u64> {
    let peak = r
        .turns
        .iter()
        .map(|t| t.provider.unwrap_or(t.estimate))
        .max()?;
    r.headline
        .threshold
        .as_ref()
        .map(|t| t.tokens)
        .filter(|&t| t > 0 && t <= peak.saturating_mul(2))
}

fn chart_title(r: &Report, width: usize) -> Vec<Line<'static>> {
    let label = vec![Span::styled("Context per turn  ", bold())];
    if r.turns.is_empty() {
        return flow(label, words("no turns yet", faint()), 2, width);
    }
    let n = r.turns.len();
    let mut segments = words(&format!("{}:", plural(n, "turn", "turns")), faint());
    // The headline's figure when it differs from the last prompt (as the text report's "now").
    let last = r.turns.last().map(|t| t.provider.unwrap_or(t.estimate));
    if let Some(now) = r
        .headline
        .tokens
        .filter(|&h| r.session.at_turn.is_none() && Some(h) != last)
    {
        segments.extend(words(&format!("now {} ·", tokens(now)), faint()));
    }
    // The legend, in words as well as colours (the chart's own legend would cover the curve).
    if r.turns.iter().any(|t| t.provider.is_some()) {
        segments.push(vec![
            Span::styled("── ", Style::new().fg(PROVIDER)),
            Span::raw("provider"),
        ]);
    }
    if r.turns.iter().any(|t| t.provider.is_none()) {
        segments.push(vec![
            Span::styled("• ", Style::new().fg(ESTIMATE)),
            Span::raw("estimate (no usage reported)"),
        ]);
    }
    match (&r.headline.threshold, chart_threshold(r)) {
        (_, Some(t)) => segments.push(vec![
            Span::styled("── ", Style::new().fg(THRESHOLD)),
            Span::raw(format!("auto-compaction {}", tokens(t))),
        ]),
        (Some(th), None) => segments.extend(words(
            &format!(
                "(auto-compaction at {} is off the scale)",
                tokens(th.tokens)
            ),
            faint(),
        )),
        (None, None) => {}
    }
    flow(label, segments, 2, width)
}

fn render_chart(r: &Report, area: Rect, buf: &mut Buffer) {
    let (Some(first), Some(last)) = (r.turns.first(), r.turns.last()) else {
        return;
    };
    let provider: Vec<(f64, f64)> = r
        .turns
        .iter()
        .filter_map(|t| t.provider.map(|p| (t.turn as f64, p as f64)))
        .collect();
    let estimate: Vec<(f64, f64)> = r
        .turns
        .iter()
        .filter(|t| t.provider.is_none())
        .map(|t| (t.turn as f64, t.estimate as f64))
        .collect();
    let peak = r
        .turns
        .iter()
        .map(|t| t.provider.unwrap_or(t.estimate))
        .max()
        .unwrap_or(0);
    let threshold = chart_threshold(r);
    let top = (peak.max(threshold.unwrap_or(0)) as f64 * 1.05).max(1.0);
    // A single turn sits in the middle of the axis.
    let (x0, x1) = if last.turn > first.turn {
        (first.turn as f64, last.turn as f64)
    } else {
        (first.turn as f64 - 1.0, first.turn as f64 + 1.0)
    };
    let threshold_line: Vec<(f64, f64)> = threshold
        .map(|t| vec![(x0, t as f64), (x1, t as f64)])
        .unwrap_or_default();

    let mut datasets = Vec::new();
    if threshold.is_some() {
        datasets.push(
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(THRESHOLD))
                .data(&threshold_line),
        );
    }
    if !estimate.is_empty() {
        datasets.push(
            Dataset::default()
                .marker(Marker::Dot)
                .graph_type(GraphType::Scatter)
                .style(Style::new().fg(ESTIMATE))
                .data(&estimate),
        );
    }
    if !provider.is_empty() {
        datasets.push(
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(PROVIDER))
                .data(&provider),
        );
    }
    let axis_style = Style::new().fg(FAINT);
    let x_labels = if last.turn > first.turn + 1 {
        vec![
            first.turn.to_string(),
            ((first.turn + last.turn) / 2).to_string(),
            last.turn.to_string(),
        ]
    } else if last.turn > first.turn {
        vec![first.turn.to_string(), last.turn.to_string()]
    } else {
        vec![String::new(), first.turn.to_string(), String::new()]
    };
    Chart::new(datasets)
        .x_axis(
            Axis::default()
                .title("turn")
                .style(axis_style)
                .bounds([x0, x1])
                .labels(x_labels)
                .labels_alignment(Alignment::Right),
        )
        .y_axis(
            Axis::default()
                .style(axis_style)
                .bounds([0.0, top])
                .labels([
                    "0".to_owned(),
                    tokens((top / 2.0) as u64),
                    tokens(top as u64),
                ]),
        )
        .legend_position(None)
        .render(area, buf);
}

/// `text`'s words as flow segments, all in `style`.
fn words(text: &str, style: Style) -> Vec<Vec<Span<'static>>> {
    text.split_whitespace()
        .map(|w| vec![Span::styled(w.to_owned(), style)])
        .collect()
}

/// Lay out `segments` after `prefix`, separated by a space, breaking between segments so no
/// line is wider than `width`; continuation lines start with `indent` spaces. A segment wider
/// than a line is left to be clipped.
fn flow(
    prefix: Vec<Span<'static>>,
    segments: Vec<Vec<Span<'static>>>,
    indent: usize,
    width: usize,
) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let mut line_w: usize = prefix.iter().map(Span::width).sum();
    let mut line = prefix;
    let mut filled = false;
    for segment in segments {
        let w: usize = segment.iter().map(Span::width).sum();
        if filled && line_w + 1 + w > width {
            lines.push(Line::from(std::mem::take(&mut line)));
            line.push(Span::raw(" ".repeat(indent)));
            line_w = indent;
            filled = false;
        }
        if filled {
            line.push(Span::raw(" "));
            line_w += 1;
        }
        line_w += w;
        line.extend(segment);
        filled = true;
    }
    lines.push(Line::from(line));
    lines
}

/// A bar of `cells` cells for `percent` (the text report's rounding), filled cells in `color`.
fn bar_spans(percent: f64, cells: usize, color: Color) -> Vec<Span<'static>> {
    let text = bar(percent, cells);
    let filled = text.chars().filter(|&c| c == '█').count();
    vec![
        Span::styled("█".repeat(filled), Style::new().fg(color)),
        Span::styled("░".repeat(cells - filled), Style::new().fg(EMPTY)),
    ]
}

fn signed(n: i64) -> String {
    if n < 0 {
        format!("-{}", tokens(n.unsigned_abs()))
    } else {
        tokens(n as u64)
    }
}

fn str_width(s: &str) -> usize {
    Span::raw(s).width()
}

/// `text` fitted to `width` display columns: clipped with `…` when longer, padded with spaces
/// when `pad` and shorter.
fn clip_pad(text: &str, width: usize, pad: bool) -> String {
    let mut out = String::new();
    let mut used = 0;
    if str_width(text) <= width {
        out.push_str(text);
        used = str_width(text);
    } else if width > 0 {
        let mut buf = [0u8; 4];
        for ch in text.chars() {
            let w = str_width(ch.encode_utf8(&mut buf));
            if used + w + 1 > width {
                break;
            }
            out.push(ch);
            used += w;
        }
        out.push('…');
        used += 1;
    }
    if pad {
        out.push_str(&" ".repeat(width.saturating_sub(used)));
    }
    out
}
