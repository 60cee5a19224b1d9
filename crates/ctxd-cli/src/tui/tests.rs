//! The screen drawn on ratatui's `TestBackend`, from a small hand-made session.

use ctxd_core::model::{
    Agent, ContentBlock, Entry, EntryId, EntryKind, Message, Role, Session, SessionMeta, ToolDef,
    Usage,
};
use ctxd_core::report::{self, Category, Report};
use ctxd_core::tokens::CharEstimate;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::Color;
use ratatui::Terminal;

use super::app::{Action, App, Status};
use super::view::{self, category_color};

const LONG_TOOL: &str = "a_tool_with_a_remarkably_long_name_that_cannot_fit_anywhere";

fn session(turns: usize) -> Session {
    let mut kinds = vec![
        EntryKind::SystemPrompt {
            text: "You are a careful coding agent. ".repeat(40),
        },
        EntryKind::ToolDefs {
            tools: vec![
                ToolDef {
                    name: "bash".into(),
                    description: "Run a shell command".repeat(10),
                    schema: serde_json::json!({"type": "object"}),
                },
                ToolDef {
                    name: LONG_TOOL.into(),
                    description: "A tool whose name is long".into(),
                    schema: serde_json::json!({"type": "object"}),
                },
            ],
        },
    ];
    for i in 0..turns {
        kinds.push(EntryKind::Message(Message::text(
            Role::User,
            format!("please list the files of directory {i}"),
        )));
        let mut call = Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: format!("c{i}"),
                name: "bash".into(),
                arguments: serde_json::json!({"command": "ls -la"}),
            }],
        );
        call.usage = Some(Usage {
            input: 2_000 + 900 * i as u64,
            output: 40,
            ..Usage::default()
        });
        kinds.push(EntryKind::Message(call));
        kinds.push(EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: format!("c{i}"),
                tool_name: None,
                content: vec![ContentBlock::text("drwxr-xr-x src\n".repeat(200))],
                is_error: false,
            }],
        )));
    }
    kinds.push(EntryKind::Message(Message::text(
        Role::Assistant,
        "Here are the files.",
    )));
    let mut s = Session {
        meta: SessionMeta {
            id: Some("test-session-1".into()),
            agent: Some(Agent::Pi),
            model: Some("claude-sonnet-4-5".into()),
            format: "test".into(),
            ..SessionMeta::default()
        },
        ..Session::default()
    };
    for (i, kind) in kinds.into_iter().enumerate() {
        s.entries.push(Entry {
            id: EntryId(format!("e{i}")),
            parent: i.checked_sub(1).map(|p| EntryId(format!("e{p}"))),
            timestamp: None,
            sidechain: false,
            kind,
        });
    }
    s
}

fn report(turns: usize) -> Report {
    report::build(&session(turns), &CharEstimate, &report::Options::default())
}

fn app() -> App {
    App::new(report(6), "/tmp/session.jsonl")
}

fn draw(app: &App, width: u16, height: u16) -> Buffer {
    let mut terminal = match Terminal::new(TestBackend::new(width, height)) {
        Ok(t) => t,
        Err(e) => panic!("test backend: {e}"),
    };
    if let Err(e) = terminal.draw(|frame| view::render(frame, app)) {
        panic!("draw: {e}");
    }
    terminal.backend().buffer().clone()
}

fn rows(buf: &Buffer) -> Vec<String> {
    let area = buf.area;
    (0..area.height)
        .map(|y| {
            (0..area.width)
                .map(|x| buf.cell((x, y)).map_or(" ", |c| c.symbol()))
                .collect()
        })
        .collect()
}

fn screen_text(buf: &Buffer) -> String {
    rows(buf).join("\n")
}

fn row_with(buf: &Buffer, needle: &str) -> Option<u16> {
    rows(buf)
        .iter()
        .position(|r| r.contains(needle))
        .and_then(|y| u16::try_from(y).ok())
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn area(width: u16, height: u16) -> Rect {
    Rect::new(0, 0, width, height)
}

/// The style of the first filled bar cell of row `y`.
fn first_bar_cell_fg(buf: &Buffer, y: u16) -> Option<Color> {
    (0..buf.area.width)
        .filter_map(|x| buf.cell((x, y)))
        .find(|c| c.symbol() == "█")
        .and_then(|c| c.style().fg)
}

#[test]
fn headline_shows_tokens_window_percent_and_threshold() {
    let app = app();
    let h = &app.report.headline;
    let buf = draw(&app, 120, 40);
    let text = screen_text(&buf);
    let (Some(tokens), Some(window), Some(percent)) = (h.tokens, h.window, h.percent) else {
        panic!("the test session should have a full headline: {h:?}");
    };
    let expected = format!(
        "{:.1}% {} / {} tokens,",
        percent,
        report::text::tokens(tokens),
        report::text::tokens(window)
    );
    assert!(text.contains(&expected), "missing {expected:?} in\n{text}");
    assert!(text.contains("[provider]"), "{text}");
    assert!(text.contains("auto-compaction at"), "{text}");
    assert!(text.contains("headroom"), "{text}");
    // The header names the agent, the session, the model and the file.
    let header = &rows(&buf)[0..2].join("\n");
    for part in [
        "pi",
        "test-session-1",
        "claude-sonnet-4-5",
        "/tmp/session.jsonl",
    ] {
        assert!(header.contains(part), "header lacks {part}:\n{header}");
    }
}

#[test]
fn composition_rows_are_labelled_and_coloured_by_category() {
    let app = app();
    let buf = draw(&app, 120, 40);
    for (label, category) in [
        ("Tool results", Category::ToolResults),
        ("System prompt", Category::System),
        ("Tool definitions", Category::Tools),
        ("User messages", Category::User),
        ("Tool calls", Category::ToolCalls),
    ] {
        let Some(y) = row_with(&buf, label) else {
            panic!("no {label} row:\n{}", screen_text(&buf));
        };
        assert_eq!(
            first_bar_cell_fg(&buf, y),
            Some(category_color(category)),
            "{label}"
        );
    }
    // The palette itself: amber tool results, blue system prompt, one hue for the assistant's
    // rows, neutral for the rest.
    assert_eq!(category_color(Category::ToolResults), Color::Indexed(214));
    assert_eq!(category_color(Category::System), Color::Indexed(75));
    assert_eq!(
        category_color(Category::Thinking),
        category_color(Category::Assistant)
    );
    assert_eq!(
        category_color(Category::Injected),
        category_color(Category::Summaries)
    );
    // A child row (the tool results of `bash`) is indented under its parent and keeps the hue.
    let rows = rows(&buf);
    let Some(parent) = rows.iter().position(|r| r.contains("Tool results")) else {
        panic!("no Tool results row");
    };
    let child = &rows[parent + 1];
    assert!(child.starts_with("    bash"), "{child:?}");
    assert_eq!(
        first_bar_cell_fg(&buf, parent as u16 + 1),
        Some(category_color(Category::ToolResults))
    );
}

#[test]
fn largest_messages_share_the_table_and_its_colours() {
    let app = app();
    let buf = draw(&app, 120, 60);
    let Some(title) = row_with(&buf, "Largest messages") else {
        panic!("no largest messages:\n{}", screen_text(&buf));
    };
    let first = title + 1;
    let line = &rows(&buf)[usize::from(first)];
    assert!(line.contains("tool result: bash"), "{line:?}");
    assert_eq!(
        first_bar_cell_fg(&buf, first),
        Some(category_color(Category::ToolResults))
    );
}

#[test]
fn footer_shows_the_key_hints_at_every_size() {
    for (w, h) in [(40, 12), (80, 24), (120, 40), (200, 60)] {
        let buf = draw(&app(), w, h);
        let last = &rows(&buf)[usize::from(h - 1)];
        for hint in ["scroll", "r reload", "q quit"] {
            assert!(last.contains(hint), "{w}x{h}: footer {last:?} lacks {hint}");
        }
        if w >= 80 {
            assert!(last.contains("PgUp/PgDn page"), "{w}x{h}: {last:?}");
        }
    }
}

#[test]
fn every_size_renders_header_body_and_chart() {
    for (w, h) in [
        (40, 12),
        (80, 24),
        (120, 40),
        (200, 60),
        (20, 5),
        (1, 1),
        (3, 2),
    ] {
        let buf = draw(&app(), w, h);
        let text = screen_text(&buf);
        if h >= 5 {
            assert!(text.contains("ctxd"), "{w}x{h}:\n{text}");
            assert!(text.contains("Window"), "{w}x{h}:\n{text}");
        }
    }
    // Tall enough to show the whole body: the chart is drawn with its legend and axis.
    let buf = draw(&app(), 120, 80);
    let text = screen_text(&buf);
    assert!(text.contains("Context per turn"), "{text}");
    assert!(text.contains("── provider"), "{text}");
    assert!(text.contains("• estimate"), "{text}");
    assert!(
        text.chars().any(|c| ('\u{2801}'..='\u{28ff}').contains(&c)),
        "no braille plot:\n{text}"
    );
    assert!(text.contains("Billed  6 responses"), "{text}");
}

#[test]
fn a_short_terminal_keeps_the_footer() {
    for h in [3, 4, 6, 8] {
        let buf = draw(&app(), 60, h);
        let last = &rows(&buf)[usize::from(h - 1)];
        assert!(last.contains("q quit"), "60x{h}: {last:?}");
    }
}

#[test]
fn long_labels_are_clipped() {
    let app = app();
    let buf = draw(&app, 40, 40);
    // The long tool definition is a child of Tool definitions, clipped with an ellipsis and
    // followed by its bar in the same row.
    let Some(y) = row_with(&buf, "a_tool_with") else {
        panic!("no long tool row:\n{}", screen_text(&buf));
    };
    let line = &rows(&buf)[usize::from(y)];
    assert!(line.contains('…'), "{line:?}");
    assert!(!line.contains(LONG_TOOL), "{line:?}");
    assert_eq!(
        first_bar_cell_fg(&buf, y),
        Some(category_color(Category::Tools))
    );
}

#[test]
fn scrolling_moves_the_content_and_stops_at_the_ends() {
    let mut app = app();
    let size = area(80, 24);
    let before = rows(&draw(&app, 80, 24));
    // The first body line is the gauge.
    assert!(before[3].starts_with("Window"), "{:?}", before[3]);

    assert_eq!(app.on_key(key(KeyCode::Char('j')), size), Action::None);
    let after = rows(&draw(&app, 80, 24));
    assert_eq!(app.scroll, 1);
    assert_eq!(after[3], before[4], "j moves the body up one line");
    assert_eq!(after[0], before[0], "the header does not scroll");
    assert_eq!(after[23], before[23], "the footer does not scroll");

    app.on_key(key(KeyCode::Down), size);
    app.on_key(key(KeyCode::Up), size);
    app.on_key(key(KeyCode::Char('k')), size);
    assert_eq!(app.scroll, 0);
    app.on_key(key(KeyCode::Up), size);
    assert_eq!(app.scroll, 0, "no scrolling above the start");

    app.on_key(key(KeyCode::PageDown), size);
    let page = app.scroll;
    assert!(page > 10, "a page is most of the body: {page}");
    app.on_key(key(KeyCode::PageUp), size);
    assert_eq!(app.scroll, 0);

    app.on_key(key(KeyCode::Char('G')), size);
    let max = app.max_scroll(size);
    assert!(max > 0);
    assert_eq!(app.scroll, max);
    let end = screen_text(&draw(&app, 80, 24));
    assert!(end.contains("Billed"), "G shows the end:\n{end}");
    assert!(!end.contains("Window  "), "{end}");
    app.on_key(key(KeyCode::Char('j')), size);
    assert_eq!(app.scroll, max, "no scrolling past the end");
    app.on_key(key(KeyCode::Char('k')), size);
    assert_eq!(app.scroll, max - 1, "k right after G moves up");

    app.on_key(key(KeyCode::Home), size);
    assert_eq!(app.scroll, 0);
    app.on_key(key(KeyCode::End), size);
    assert_eq!(app.scroll, max);
    app.on_key(key(KeyCode::Char('g')), size);
    assert_eq!(app.scroll, 0);
}

#[test]
fn reload_failure_shows_in_the_footer_and_keeps_the_report() {
    let mut app = app();
    let size = area(80, 24);
    let tokens_before = app.report.headline.tokens;
    assert_eq!(app.on_key(key(KeyCode::Char('r')), size), Action::Reload);
    // A cause its parent already quotes is said once.
    let err = anyhow::Error::from(std::io::Error::other("the file is gone"))
        .context("boom: the file is gone")
        .context("reading /tmp/session.jsonl");
    app.reloaded(Err(err), size);
    assert!(matches!(app.status, Some(Status::Error(_))));
    let buf = draw(&app, 80, 24);
    let feedback = &rows(&buf)[22];
    assert!(
        feedback.contains("reload failed: reading /tmp/session.jsonl: boom: the file is gone"),
        "{feedback:?}"
    );
    let Some(x) = feedback.find("reload failed") else {
        panic!("{feedback:?}");
    };
    let fg = buf.cell((x as u16, 22)).and_then(|c| c.style().fg);
    assert_eq!(fg, Some(Color::LightRed), "the error is in red");
    let footer = &rows(&buf)[23];
    assert!(footer.contains("q quit"), "{footer:?}");
    assert!(!feedback.contains("gone: the file is gone"), "{feedback:?}");
    // On a terminal too short for a feedback line, it shares the hints' line.
    let buf = draw(&app, 80, 3);
    assert!(
        rows(&buf)[2].contains("reload failed: reading"),
        "{:?}",
        rows(&buf)
    );
    assert_eq!(app.report.headline.tokens, tokens_before);
    // The next key clears the feedback.
    app.on_key(key(KeyCode::Char('j')), size);
    let text = screen_text(&draw(&app, 80, 24));
    assert!(!text.contains("reload failed"), "{text}");
}

#[test]
fn reload_repaints_with_the_new_report() {
    let mut app = app();
    let size = area(80, 24);
    app.on_key(key(KeyCode::Char('G')), size);
    let text = screen_text(&draw(&app, 80, 24));
    assert!(text.contains("Billed  6 responses"), "{text}");
    // A shorter session: the scroll is clamped to the new end.
    app.reloaded(Ok(report(2)), size);
    assert!(app.scroll <= app.max_scroll(size));
    let buf = draw(&app, 80, 24);
    let text = screen_text(&buf);
    assert!(text.contains("Billed  2 responses"), "{text}");
    assert!(rows(&buf)[22].contains("reloaded: 3 turns"), "{text}");
}

#[test]
fn q_esc_and_ctrl_c_quit() {
    let mut app = app();
    let size = area(80, 24);
    assert_eq!(app.on_key(key(KeyCode::Char('q')), size), Action::Quit);
    assert_eq!(app.on_key(key(KeyCode::Esc), size), Action::Quit);
    assert_eq!(
        app.on_key(
            KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL),
            size
        ),
        Action::Quit
    );
    assert_eq!(app.on_key(key(KeyCode::Char('x')), size), Action::None);
}

#[test]
fn a_session_without_usage_or_turns_still_renders() {
    let mut s = session(0);
    s.meta.model = None;
    // No answer at all: no turns.
    s.entries.pop();
    let r = report::build(&s, &CharEstimate, &report::Options::default());
    let app = App::new(r, "empty");
    let text = screen_text(&draw(&app, 80, 40));
    assert!(text.contains("model window unknown"), "{text}");
    assert!(text.contains("no provider-reported usage"), "{text}");
    assert!(text.contains("no turns yet"), "{text}");
    assert!(text.contains("no usage recorded"), "{text}");
}

#[test]
fn the_chart_draws_the_threshold_when_it_fits() {
    let options = report::Options {
        window: Some(24_000),
        ..report::Options::default()
    };
    let r = report::build(&session(6), &CharEstimate, &options);
    let Some(th) = r.headline.threshold.as_ref().map(|t| t.tokens) else {
        panic!("a 24k window has a threshold");
    };
    let app = App::new(r, "small window");
    let buf = draw(&app, 100, 80);
    let text = screen_text(&buf);
    let legend = format!("── auto-compaction {}", report::text::tokens(th));
    assert!(text.contains(&legend), "{text}");
    let Some(title) = row_with(&buf, "Context per turn") else {
        panic!("no chart:\n{text}");
    };
    // Some braille cell below the title is drawn in the threshold's red.
    let red = (title + 1..buf.area.height)
        .flat_map(|y| (0..buf.area.width).map(move |x| (x, y)))
        .filter_map(|p| buf.cell(p))
        .any(|c| c.style().fg == Some(Color::Red) && c.symbol() != " ");
    assert!(red, "{text}");
}

#[test]
fn reload_errors_say_each_cause_once() {
    // As `ctxd report` wraps a missing file: the path, then a cause that quotes it.
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
    let err = anyhow::Error::from(io)
        .context("/tmp/x.jsonl: No such file or directory")
        .context("/tmp/x.jsonl");
    assert_eq!(
        super::app::error_text(&err),
        "/tmp/x.jsonl: No such file or directory"
    );
    let err = anyhow::anyhow!("disk on fire").context("reading /tmp/x.jsonl");
    assert_eq!(
        super::app::error_text(&err),
        "reading /tmp/x.jsonl: disk on fire"
    );
}

#[test]
fn left_out_messages_show_as_in_the_text_report() {
    let mut r = report(6);
    r.composition.unpaired = ctxd_core::report::Unpaired {
        count: 1,
        tokens: 12,
        entry_ids: vec!["e4".into()],
    };
    let line = ctxd_core::report::text::unpaired_line(&r.composition.unpaired).unwrap();
    assert!(
        line.starts_with("Left out, not counted: 1 message (12 tokens)"),
        "{line}"
    );
    assert!(ctxd_core::report::text::render(&r).contains(&line));
    let buf = draw(&App::new(r, "/tmp/session.jsonl"), 200, 60);
    let screen = screen_text(&buf);
    assert!(
        screen.contains("Left out, not counted: 1 message (12"),
        "{screen}"
    );
    assert!(screen.contains("e4"), "{screen}");
}
