//! The context-size chart as inline SVG, drawn on the server: two lines over the turns (the
//! client's own conversation, what went upstream; both ctxd's estimate, so they compare:
//! the provider's own count is in the report's headline and drift), the window as a dashed line, resets and
//! client compactions as vertical marks. No script, so it renders before any JavaScript runs.

use maud::{html, Markup};

use super::page::Page;

const W: f64 = 960.0;
const H: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 36.0;

/// Tick values for an axis up to `max`: 1, 2 or 5 × a power of ten, about five of them.
fn ticks(max: f64) -> Vec<f64> {
    if max <= 0.0 {
        return vec![0.0];
    }
    let raw = max / 5.0;
    let pow = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(pow * 10.0);
    (0..)
        .map(|i| f64::from(i) * step)
        .take_while(|v| *v <= max * 1.0001)
        .collect()
}

/// `12.3k`, `1.2M`.
pub fn short(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.0}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// `v` with one decimal, as the chart's coordinates are written.
fn f1(v: f64) -> String {
    format!("{v:.1}")
}

/// The chart of `page`, an `<svg>` element sized by its container. Its shapes are closed by
/// end tags: an SVG element left open in HTML would take the next ones as its children.
pub fn render(page: &Page) -> Markup {
    let turns = &page.report.turns;
    let upstream: Vec<f64> = turns.iter().map(|t| t.estimate as f64).collect();
    let client: Vec<Option<f64>> = page
        .client_sizes
        .iter()
        .map(|c| c.map(|v| v as f64))
        .collect();
    let window = page.report.headline.window.map(|w| w as f64);
    let top = upstream
        .iter()
        .copied()
        .chain(client.iter().flatten().copied())
        .fold(0.0, f64::max);
    // The window only when it is near the data: a 1M window would flatten a 30k session.
    let show_window = window.filter(|w| *w <= top * 2.0);
    let max = show_window.unwrap_or(0.0).max(top).max(1.0) * 1.05;
    let n = turns.len().max(1);
    let x = |i: f64| LEFT + (W - LEFT - RIGHT) * if n > 1 { i / (n - 1) as f64 } else { 0.5 };
    let y = |v: f64| TOP + (H - TOP - BOTTOM) * (1.0 - v / max);
    let points = |series: &mut dyn Iterator<Item = (usize, f64)>| {
        series
            .map(|(i, v)| format!("{},{}", f1(x(i as f64)), f1(y(v))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let client_points = points(
        &mut client
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i, v))),
    );
    let upstream_points = points(&mut upstream.iter().copied().enumerate());
    html! {
        svg id="context-chart" class="chart" viewBox=(format!("0 0 {W} {H}"))
            preserveAspectRatio="none" role="img" aria-label="context size per turn" {
            @for t in ticks(max / 1.05) {
                line class="grid" x1=(LEFT) x2=(W - RIGHT) y1=(f1(y(t))) y2=(f1(y(t))) {}
                text class="tick" x=(LEFT - 6.0) y=(f1(y(t) + 4.0)) text-anchor="end" { (short(t)) }
            }
            @for t in ticks((n as f64 - 1.0).max(0.0)) {
                text class="tick" x=(f1(x(t))) y=(H - BOTTOM + 16.0) text-anchor="middle" {
                    (t as u64 + 1)
                }
            }
            text class="tick" x=(W - RIGHT) y=(H - 4.0) text-anchor="end" { "turn" }
            @if let Some(w) = show_window {
                line class="window" x1=(LEFT) x2=(W - RIGHT) y1=(f1(y(w))) y2=(f1(y(w))) {
                    title { "window: " (w as u64) " tokens" }
                }
            }
            @for m in &page.marks {
                // Between the last turn before it and the next one.
                @let xx = f1(x((m.after_turn as f64 - 0.5).max(0.0)));
                line class=(format!("mark {}", m.kind)) x1=(xx) x2=(xx) y1=(TOP) y2=(H - BOTTOM) {
                    title { (m.label) }
                }
            }
            polyline class="series client" points=(client_points) {}
            polyline class="series upstream" points=(upstream_points) {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(100.0), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(ticks(0.0), vec![0.0]);
        let t = ticks(173_000.0);
        assert_eq!(t[1], 50_000.0);
        assert!(*t.last().unwrap_or(&0.0) <= 173_000.0);
        assert_eq!(short(12_345.0), "12k");
        assert_eq!(short(1_500_000.0), "1.5M");
    }
}
