//! The context budget of the current window: a reserve, an early reminder at reserve + margin,
//! a final warning at reserve + [`WARNING_RUNWAY_TOKENS`], and `get_context_remaining`, which
//! counts down to the warning line (the runway below it is never shown to the model).
//!
//! All pure over the log and a token count. Reminders are drafts: the engine commits them at turn
//! end (before any reset drafts), discards them on abort, and each is written once per window:
//! the read of "already written" stops at the window's marker, so nothing carries over.

use crate::model::{EntryKind, Message, Role, Session};
use crate::offered::{ModelTools, RESET_TOOL};
use crate::tokens::{blocks_tokens, tool_def_tokens, TokenCounter};
use crate::view::{project_checked, ItemKind};
use crate::windows::latest_marker;

/// Tokens kept free: at `reserve` tokens left the window resets.
pub const DEFAULT_RESERVE_TOKENS: u64 = 16_384;
/// The early reminder fires at `reserve + margin` tokens left.
pub const DEFAULT_REMINDER_MARGIN_TOKENS: u64 = 24_576;
/// The final warning fires at `reserve + runway` tokens left.
pub const WARNING_RUNWAY_TOKENS: u64 = 12_288;

/// `injected` kind of the early reminder.
pub const GUIDANCE_KIND: &str = "ctxd/guidance";
/// `injected` kind of the final warning.
pub const WARNING_KIND: &str = "ctxd/warning";

/// The three lines of a window's budget, in tokens left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// At this many tokens left the window resets.
    pub reserve: u64,
    /// The early reminder fires at `reserve + reminder_margin` left.
    pub reminder_margin: u64,
    /// The final warning fires at `reserve + warning_runway` left.
    pub warning_runway: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            reserve: DEFAULT_RESERVE_TOKENS,
            reminder_margin: DEFAULT_REMINDER_MARGIN_TOKENS,
            warning_runway: WARNING_RUNWAY_TOKENS,
        }
    }
}

impl Thresholds {
    /// These thresholds for a window of `window` tokens: unchanged when the highest line (the
    /// reminder's, by default) lies within the upper half of the window; otherwise all three
    /// scaled down in proportion until it does. The seed's 16,384-token reserve is made for
    /// 200k windows: applied as is to an 8,192-token model it would reset every turn.
    pub fn fitted(self, window: u64) -> Self {
        let highest = self.reminder_line().max(self.warning_line());
        let room = window / 2;
        if highest <= room || highest == 0 {
            return self;
        }
        let scale = |v: u64| (u128::from(v) * u128::from(room) / u128::from(highest)) as u64;
        Self {
            reserve: scale(self.reserve),
            reminder_margin: scale(self.reminder_margin),
            warning_runway: scale(self.warning_runway),
        }
    }

    /// Tokens left at which the early reminder fires.
    pub fn reminder_line(&self) -> u64 {
        self.reserve + self.reminder_margin
    }
    /// Tokens left at which the final warning fires.
    pub fn warning_line(&self) -> u64 {
        self.reserve + self.warning_runway
    }
    /// Whether the window is due for a threshold reset.
    pub fn reset_due(&self, remaining: u64) -> bool {
        remaining <= self.reserve
    }
    /// What `get_context_remaining` reports: the countdown to the warning line.
    pub fn shown_remaining(&self, remaining: u64) -> u64 {
        remaining.saturating_sub(self.warning_line())
    }
}

/// The size of what the model sees of the current window: the latest provider usage recorded
/// in the window (after its marker; usage before it does not count) plus the estimate of the
/// items after it; with no usage in the window, the estimate of the whole projection. `None`
/// when the branch has no projection (a marker without boot).
pub fn window_tokens(
    session: &Session,
    branch: &[usize],
    counter: &dyn TokenCounter,
) -> Option<u64> {
    let projection = project_checked(session, branch).ok()?;
    let start = latest_marker(session, branch).map_or(0, |(i, _, _)| i);
    let usage = branch[start..].iter().rev().find_map(|&pos| {
        let u = match session.entries.get(pos).map(|e| &e.kind) {
            Some(EntryKind::Message(m)) => m.usage.as_ref(),
            Some(EntryKind::Usage { usage }) => Some(usage),
            _ => None,
        }?;
        (u.prompt_tokens() > 0).then(|| (pos, u.prompt_tokens() + u.output))
    });
    let item_tokens = |item: &crate::view::Item<'_>| match &item.kind {
        ItemKind::Message { content, .. } => blocks_tokens(counter, content),
        ItemKind::Summary { text, .. } => counter.count(text),
    };
    match usage {
        Some((at, tokens)) => Some(
            tokens
                + projection
                    .items
                    .iter()
                    .filter(|it| it.entry > at)
                    .map(item_tokens)
                    .sum::<u64>(),
        ),
        None => {
            let system = projection.system.map_or(0, |(_, t)| counter.count(t));
            let tools: u64 = projection.tools.map_or(0, |(_, ts)| {
                ts.iter().map(|t| tool_def_tokens(counter, t)).sum()
            });
            Some(system + tools + projection.items.iter().map(item_tokens).sum::<u64>())
        }
    }
}

/// Tokens left in a window of `context_window` tokens holding `tokens`.
pub fn remaining(context_window: u64, tokens: u64) -> u64 {
    context_window.saturating_sub(tokens)
}

/// Whether the current window already holds a message of `kind`.
pub fn window_has(session: &Session, branch: &[usize], kind: &str) -> bool {
    let start = latest_marker(session, branch).map_or(0, |(i, _, _)| i);
    branch[start..].iter().any(|&pos| {
        matches!(session.entries.get(pos).map(|e| &e.kind),
            Some(EntryKind::Message(m)) if m.injected.as_deref() == Some(kind))
    })
}

/// A reminder to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reminder {
    /// The early reminder, with the tokens left above the warning line frozen into its text.
    Guidance { left: u64 },
    /// The final warning.
    Warning,
}

impl Reminder {
    pub fn kind(&self) -> &'static str {
        match self {
            Reminder::Guidance { .. } => GUIDANCE_KIND,
            Reminder::Warning => WARNING_KIND,
        }
    }

    /// The reminder's text, naming only the tools in `tools`; `resets`: whether ctxd resets
    /// the window when it is full (else the text does not promise it).
    pub fn text(&self, tools: ModelTools, resets: bool) -> String {
        let checkpoint = "the goal, decisions, progress, what you learned, next steps";
        let body = match (self, tools.notes) {
            (Reminder::Guidance { left }, false) if !resets => format!(
                "This context window is nearly full: about {left} tokens left before the final \
                 warning. Keep your remaining steps small, and keep what must outlast this \
                 conversation in the workspace (files, commits)."
            ),
            (Reminder::Warning, false) if !resets => "This context window is almost full. \
                 Bring the current step to a point where it can be picked up again, and keep \
                 what must outlast this conversation in the workspace (files, commits)."
                .to_owned(),
            (Reminder::Guidance { left }, true) => {
                let ids = if tools.history {
                    ", and the window and item ids of the user requests still open"
                } else {
                    ""
                };
                let reset = if tools.reset {
                    format!(
                        " Then call {RESET_TOOL} yourself: whatever you do after the checkpoint \
                         is not in it."
                    )
                } else {
                    String::new()
                };
                format!(
                    "This context window is nearly full: about {left} tokens left before the \
                     final warning, and then the window resets with no last turn. Update your \
                     checkpoint note now: {checkpoint}{ids}. Mark replaced notes stale.{reset}"
                )
            }
            (Reminder::Warning, true) => {
                let reset = if tools.reset {
                    format!(" When it is written, call {RESET_TOOL}.")
                } else {
                    String::new()
                };
                format!(
                    "This context window is about to reset. Stop the current task and write (or \
                     revise) your checkpoint note now: {checkpoint}. Take the note and tool turns \
                     you need.{reset} Anything not in a note is lost with this window."
                )
            }
            (Reminder::Guidance { left }, false) => format!(
                "This context window is nearly full: about {left} tokens left before the final \
                 warning. When it is full, ctxd starts a new window: the conversation so far is \
                 replaced by a checkpoint of your recent user requests, and earlier tool output \
                 is no longer in front of you. Keep what must outlast this window in the \
                 workspace (files, commits), not only in this conversation."
            ),
            (Reminder::Warning, false) => "This context window is about to reset: the \
                 conversation so far will be replaced by a checkpoint of your recent user \
                 requests. Bring the current step to a point where it can be picked up again, \
                 and keep what must outlast this window in the workspace (files, commits)."
                .to_owned(),
        };
        format!("<context_window_guidance>\n{body}\n</context_window_guidance>")
    }

    /// The message to append.
    pub fn message(&self, tools: ModelTools, resets: bool) -> Message {
        Message::text(Role::User, self.text(tools, resets)).injected(self.kind())
    }
}

/// The reminder due now, if any: the final warning below the warning line (once per window;
/// it supersedes an unwritten reminder), else the early reminder below the reminder line (once
/// per window, and not after the warning).
pub fn due_reminder(
    session: &Session,
    branch: &[usize],
    remaining: u64,
    thresholds: &Thresholds,
) -> Option<Reminder> {
    if window_has(session, branch, WARNING_KIND) {
        return None;
    }
    if remaining <= thresholds.warning_line() {
        return Some(Reminder::Warning);
    }
    if remaining <= thresholds.reminder_line() && !window_has(session, branch, GUIDANCE_KIND) {
        return Some(Reminder::Guidance {
            left: remaining.saturating_sub(thresholds.warning_line()),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Usage;
    use crate::tokens::CharEstimate;
    use crate::tree::active_branch;

    fn push(s: &mut Session, kind: EntryKind) {
        s.push_linear(kind);
    }

    fn assistant_with_usage(prompt: u64) -> EntryKind {
        let mut m = Message::text(Role::Assistant, "ok");
        m.usage = Some(Usage {
            input: prompt,
            ..Usage::default()
        });
        EntryKind::Message(m)
    }

    #[test]
    fn lines_follow_the_seed() {
        let t = Thresholds::default();
        assert_eq!(t.reminder_line(), 16_384 + 24_576);
        assert_eq!(t.warning_line(), 16_384 + 12_288);
        assert!(t.reset_due(16_384));
        assert!(!t.reset_due(16_385));
        assert_eq!(t.shown_remaining(28_672 + 5), 5);
        assert_eq!(t.shown_remaining(100), 0);
    }

    #[test]
    fn small_windows_get_scaled_lines() {
        let t = Thresholds::default();
        assert_eq!(t.fitted(200_000), t);
        assert_eq!(t.fitted(128_000), t);
        let small = t.fitted(8_192);
        assert_eq!(small.reminder_line(), 4_096 - 1, "{small:?}");
        assert!(small.reserve > 1_000 && small.reserve < small.warning_line());
        assert!(small.warning_line() < small.reminder_line());
        // A turn's worth of context fits before the reset.
        assert!(!small.reset_due(4_000));
    }

    #[test]
    fn reminders_fire_once_per_window_and_not_across_windows() {
        let t = Thresholds::default();
        let mut s = Session::default();
        push(&mut s, EntryKind::Message(Message::text(Role::User, "hi")));
        let b = active_branch(&s);
        assert_eq!(due_reminder(&s, &b, 100_000, &t), None);
        assert_eq!(
            due_reminder(&s, &b, 40_000, &t),
            Some(Reminder::Guidance {
                left: 40_000 - 28_672
            })
        );
        // Committed: not again in this window.
        push(
            &mut s,
            EntryKind::Message(Reminder::Guidance { left: 1 }.message(ModelTools::ALL, true)),
        );
        let b = active_branch(&s);
        assert_eq!(due_reminder(&s, &b, 39_000, &t), None);
        // The warning still comes, once.
        assert_eq!(due_reminder(&s, &b, 20_000, &t), Some(Reminder::Warning));
        push(
            &mut s,
            EntryKind::Message(Reminder::Warning.message(ModelTools::ALL, true)),
        );
        let b = active_branch(&s);
        assert_eq!(due_reminder(&s, &b, 10_000, &t), None);
        // A new window: both may fire again.
        push(
            &mut s,
            EntryKind::WindowMarker {
                window_id: "w2".into(),
                reason: "requested".into(),
            },
        );
        let b = active_branch(&s);
        assert_eq!(due_reminder(&s, &b, 20_000, &t), Some(Reminder::Warning));
        assert!(!window_has(&s, &b, GUIDANCE_KIND));
    }

    #[test]
    fn warning_supersedes_an_unwritten_reminder() {
        let t = Thresholds::default();
        let s = Session::default();
        assert_eq!(due_reminder(&s, &[], 1_000, &t), Some(Reminder::Warning));
    }

    #[test]
    fn usage_before_the_marker_does_not_count() {
        let mut s = Session::default();
        push(&mut s, EntryKind::Message(Message::text(Role::User, "hi")));
        push(&mut s, assistant_with_usage(150_000));
        let b = active_branch(&s);
        // Usage (150,000) + nothing after it.
        assert_eq!(window_tokens(&s, &b, &CharEstimate), Some(150_000));
        push(
            &mut s,
            EntryKind::WindowMarker {
                window_id: "w2".into(),
                reason: "threshold".into(),
            },
        );
        let b = active_branch(&s);
        // Marker without boot: no projection, no count.
        assert_eq!(window_tokens(&s, &b, &CharEstimate), None);
        push(
            &mut s,
            EntryKind::WindowBoot {
                window_id: "w2".into(),
                message: Message::text(Role::User, "x".repeat(400)),
            },
        );
        let b = active_branch(&s);
        // The old usage is before the marker: the estimate of the boot alone.
        assert_eq!(window_tokens(&s, &b, &CharEstimate), Some(100));
        push(&mut s, assistant_with_usage(2_000));
        push(
            &mut s,
            EntryKind::Message(Message::text(Role::User, "y".repeat(40))),
        );
        let b = active_branch(&s);
        assert_eq!(window_tokens(&s, &b, &CharEstimate), Some(2_010));
    }
}
