//! The interactive report screen: `ctxd report FILE` on a terminal.
//!
//! Split so the screen can be tested without a terminal:
//! - [`app`]: the state (report, scroll offset, footer status) and what a key does to it;
//! - [`view`]: a pure `render(frame, &App)`, driven by the tests through ratatui's `TestBackend`;
//! - this module: the thin event loop and the terminal's set-up and restoration.
//!
//! The terminal (raw mode, alternate screen, cursor) is restored on every way out: a normal
//! quit, an error (the guard's `Drop`) and a panic (a hook that restores before the message is
//! printed, so the message lands on the normal screen).

mod app;
mod view;

#[cfg(test)]
mod tests;

use std::io::{self, Stdout};
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ctxd_core::report::Report;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::event::{self, Event, KeyEventKind};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::layout::Rect;
use ratatui::Terminal;

use app::{Action, App, Status};

/// Show `report` until the user quits; `r` calls `reload` and repaints with its result.
pub fn run(
    report: Report,
    title: &str,
    reload: impl Fn() -> anyhow::Result<Report>,
) -> anyhow::Result<()> {
    let mut app = App::new(report, title);
    let _hook = PanicHookGuard::install();
    let _screen = ScreenGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    terminal.clear()?;
    event_loop(&mut terminal, &mut app, &reload)
}

fn event_loop(
    terminal: &mut Terminal<CrosstermBackend<Stdout>>,
    app: &mut App,
    reload: &dyn Fn() -> anyhow::Result<Report>,
) -> anyhow::Result<()> {
    loop {
        terminal.draw(|frame| view::render(frame, app))?;
        let area = screen(terminal)?;
        match event::read()? {
            Event::Key(key) if key.kind != KeyEventKind::Release => match app.on_key(key, area) {
                Action::Quit => return Ok(()),
                Action::Reload => {
                    app.status = Some(Status::Info("re-reading the session…".into()));
                    terminal.draw(|frame| view::render(frame, app))?;
                    app.reloaded(reload(), area);
                }
                Action::None => {}
            },
            Event::Resize(..) => {
                let area = screen(terminal)?;
                app.clamp(area);
            }
            _ => {}
        }
    }
}

fn screen(terminal: &Terminal<CrosstermBackend<Stdout>>) -> io::Result<Rect> {
    let size = terminal.size()?;
    Ok(Rect::new(0, 0, size.width, size.height))
}

/// Whether the screen is up (raw mode, alternate screen), so it is restored exactly once.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Put the terminal back as we found it. Only the first call after [`ScreenGuard::enter`] acts:
/// leaving the alternate screen a second time would move the cursor back over what was printed
/// since (a panic's message, restored by the hook before the guard's drop runs).
fn restore_terminal() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let _ = execute!(io::stdout(), LeaveAlternateScreen, Show);
    }
}

/// Raw mode and the alternate screen, undone on drop.
struct ScreenGuard;

impl ScreenGuard {
    fn enter() -> io::Result<Self> {
        enable_raw_mode()?;
        // From here on, dropping the guard (also on the `?` below) restores the terminal.
        ACTIVE.store(true, Ordering::SeqCst);
        let guard = ScreenGuard;
        execute!(io::stdout(), EnterAlternateScreen, Hide)?;
        Ok(guard)
    }
}

impl Drop for ScreenGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

type Hook = Box<dyn Fn(&PanicHookInfo<'_>) + Sync + Send + 'static>;

/// A panic hook that restores the terminal before the previous hook prints the panic;
/// the previous hook is reinstated when the screen closes.
struct PanicHookGuard {
    previous: Arc<Hook>,
}

impl PanicHookGuard {
    fn install() -> Self {
        let previous: Arc<Hook> = Arc::new(std::panic::take_hook());
        let chained = Arc::clone(&previous);
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            chained(info);
        }));
        Self { previous }
    }
}

impl Drop for PanicHookGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Changing the hook while panicking aborts; leave ours (it only restores and chains).
            return;
        }
        let previous = Arc::clone(&self.previous);
        drop(std::panic::take_hook());
        std::panic::set_hook(Box::new(move |info| previous(info)));
    }
}
