//! The screen's state and what each key does to it. No terminal here: the tests drive it.

use ctxd_core::report::{sanitize, Report};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;

use super::view;

pub(crate) struct App {
    pub report: Report,
    /// The file the report was read from, shown in the header.
    pub title: String,
    /// The first body line shown.
    pub scroll: usize,
    /// Feedback shown in the footer until the next key.
    pub status: Option<Status>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Info(String),
    Error(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    None,
    Quit,
    /// Re-read the session: the caller runs the reload and hands the result to [`App::reloaded`].
    Reload,
}

impl App {
    pub fn new(report: Report, title: &str) -> Self {
        Self {
            report,
            title: title.to_owned(),
            scroll: 0,
            status: None,
        }
    }

    /// The furthest the body can scroll on a screen of `area`.
    pub fn max_scroll(&self, area: Rect) -> usize {
        let body = view::areas(area, self.status.is_some()).body;
        view::body_height(&self.report, view::content_width(body))
            .saturating_sub(usize::from(body.height))
    }

    pub fn clamp(&mut self, area: Rect) {
        self.scroll = self.scroll.min(self.max_scroll(area));
    }

    /// Apply a key on a screen of `area` (the scroll stops at the last page of it).
    pub fn on_key(&mut self, key: KeyEvent, area: Rect) -> Action {
        // Feedback lasts until the next key; without it the body is back to full height.
        self.status = None;
        let page = usize::from(view::areas(area, false).body.height)
            .saturating_sub(1)
            .max(1);
        let max = self.max_scroll(area);
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                return Action::Quit
            }
            KeyCode::Char('r') => return Action::Reload,
            KeyCode::Down | KeyCode::Char('j') => self.scroll = self.scroll.saturating_add(1),
            KeyCode::Up | KeyCode::Char('k') => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::PageDown | KeyCode::Char(' ') => {
                self.scroll = self.scroll.saturating_add(page)
            }
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(page),
            KeyCode::Home | KeyCode::Char('g') => self.scroll = 0,
            KeyCode::End | KeyCode::Char('G') => self.scroll = max,
            _ => {}
        }
        self.scroll = self.scroll.min(max);
        Action::None
    }

    /// Take a reload's result: a new report repaints; an error is shown and the old report stays.
    pub fn reloaded(&mut self, result: anyhow::Result<Report>, area: Rect) {
        match result {
            Ok(report) => {
                self.status = Some(Status::Info(format!(
                    "reloaded: {} turns, {} entries",
                    report.session.turn_count, report.session.entries
                )));
                self.report = report;
                self.clamp(area);
            }
            Err(err) => {
                self.status = Some(Status::Error(format!(
                    "reload failed: {}",
                    sanitize(&error_text(&err), 200)
                )));
            }
        }
    }
}

/// An error and its causes on one line, saying each thing once: a cause its parent already
/// quotes is left out, and a cause that quotes its parent replaces it.
pub(crate) fn error_text(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if text.contains(&out) {
            out = text;
        } else {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}
