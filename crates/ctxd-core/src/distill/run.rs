//! The run a pass judges: its span in the projection, its question, its answer and its steps.
//!
//! A run starts at the user prompt before the end of the projection. **Steering messages**
//! (user messages sent while the agent was working: the message before them, injected ones
//! aside, is a tool result or an assistant message with tool calls) do not start a run: the walk
//! goes on to the prompt before them, and they join the question, each after
//! [`STEERING_PREFIX`]. A prompt with only an image reads [`IMAGE_ONLY`], so an older question
//! is never reused.

use rustc_hash::FxHashMap as HashMap;

use crate::model::{ContentBlock, Message, Role};
use crate::view::{Item as ViewItem, ItemKind as ViewKind};

pub const STEERING_PREFIX: &str = "[The user added during the run]";
pub const IMAGE_ONLY: &str = "[the user sent only an image]";
/// Clip limits of the run's context (characters).
pub const NOTES_CHARS: usize = 2_000;
pub const EARLIER_PROMPT_CHARS: usize = 800;
pub const EARLIER_ANSWER_CHARS: usize = 1_200;
pub const EARLIER_EXCHANGES: usize = 3;

/// One tool call of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
    /// The run's turn (assistant message index from 0) that made it.
    pub turn: usize,
    /// Index of the projection item that carries it.
    pub at: usize,
}

/// What an assistant turn of the run says: its text and its calls' arguments, as text.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub turn: usize,
    /// Index of the projection item.
    pub at: usize,
    pub text: String,
}

/// The run a pass judges.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    /// Index in the projection of the run's prompt (`None`: no prompt; the run is everything).
    pub prompt: Option<usize>,
    /// The prompt's text, then each steering message after [`STEERING_PREFIX`].
    pub question: String,
    /// The last assistant text of the run.
    pub answer: String,
    /// Earlier assistant text of the run (clipped from the start to [`NOTES_CHARS`]).
    pub notes: String,
    /// Earlier conversation: the last exchanges before the run (prompt and last answer).
    pub earlier: String,
    /// Assistant turns in order.
    pub steps: Vec<Step>,
    /// Every call of the run, by id.
    pub calls: HashMap<String, Call>,
    /// Assistant messages in the run.
    pub turns: usize,
    /// The last assistant message has tool calls (the run is still going).
    pub open: bool,
}

/// Text blocks of a message, joined by newlines.
pub fn message_text(m: &Message) -> String {
    let mut out = String::new();
    for b in &m.content {
        if let ContentBlock::Text { text } = b {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
    }
    out
}

/// A prompt the user typed: a user message, not injected, carrying no tool result.
pub fn is_prompt(m: &Message) -> bool {
    m.role == Role::User
        && m.injected.is_none()
        && !m
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

pub fn has_results(blocks: &[ContentBlock]) -> bool {
    blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

pub fn has_calls(m: &Message, blocks: &[ContentBlock]) -> bool {
    m.role == Role::Assistant
        && blocks
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolCall { .. }))
}

/// The message an item shows and the content it shows, if it is a message.
pub fn shown<'a>(item: &ViewItem<'a>) -> Option<(&'a Message, &'a [ContentBlock])> {
    match &item.kind {
        ViewKind::Message {
            message, content, ..
        } => Some((message, content)),
        ViewKind::Summary { .. } => None,
    }
}

/// A prompt sent while the agent worked: the message before it (injected ones aside) carries
/// tool results or is an assistant message with calls.
pub fn is_steering(items: &[ViewItem<'_>], at: usize) -> bool {
    for item in items[..at].iter().rev() {
        let Some((m, content)) = shown(item) else {
            return false;
        };
        if m.injected.is_some() {
            continue;
        }
        return has_results(content) || has_calls(m, content);
    }
    false
}

/// The text a prompt contributes to a question (`content`: what the model sees of `_m`).
pub fn prompt_text(_m: &Message, content: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in content {
        if let ContentBlock::Text { text } = b {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
    }
    if out.trim().is_empty() {
        return IMAGE_ONLY.to_owned();
    }
    out
}

/// Index of the prompt that started the run the projection ends in.
pub fn find_run_start(items: &[ViewItem<'_>]) -> Option<usize> {
    (0..items.len())
        .rev()
        .find(|&i| shown(&items[i]).is_some_and(|(m, _)| is_prompt(m)) && !is_steering(items, i))
}

/// Clip to the last `max` characters (on a char boundary).
pub fn clip_tail(s: &str, max: usize) -> &str {
    let n = s.chars().count();
    if n <= max {
        return s;
    }
    let skip = n - max;
    let at = s.char_indices().nth(skip).map_or(s.len(), |(i, _)| i);
    &s[at..]
}

/// Clip to the first `max` characters (on a char boundary).
pub fn clip_head(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The text of a call's arguments: string values joined (a command, a path, a pattern), else
/// the JSON.
pub fn arguments_text(arguments: &serde_json::Value) -> String {
    let mut out = String::new();
    fn walk(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::String(s) => {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(s);
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            serde_json::Value::Object(o) => o.values().for_each(|v| walk(v, out)),
            serde_json::Value::Number(n) => {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(&n.to_string());
            }
            _ => {}
        }
    }
    walk(arguments, &mut out);
    out
}

/// Read the run the projection ends in.
pub fn collect(items: &[ViewItem<'_>]) -> Run {
    let prompt = find_run_start(items);
    let start = prompt.map_or(0, |p| p + 1);
    let mut run = Run {
        prompt,
        ..Run::default()
    };
    if let Some(p) = prompt {
        if let Some((m, c)) = shown(&items[p]) {
            run.question = prompt_text(m, c);
        }
    }
    let mut texts: Vec<String> = Vec::new();
    let mut last_assistant_has_calls = false;
    for (at, item) in items.iter().enumerate().skip(start) {
        let Some((m, content)) = shown(item) else {
            continue;
        };
        if m.role == Role::User && is_prompt(m) {
            // A steering message (the run's prompt is before `start`).
            run.question.push('\n');
            run.question.push_str(STEERING_PREFIX);
            run.question.push(' ');
            run.question.push_str(&prompt_text(m, content));
            continue;
        }
        if m.role != Role::Assistant {
            continue;
        }
        let turn = run.turns;
        run.turns += 1;
        let mut text = String::new();
        let mut own_text = String::new();
        last_assistant_has_calls = false;
        for b in content {
            match b {
                ContentBlock::Text { text: t } => {
                    own_text.push_str(t);
                    own_text.push('\n');
                }
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    last_assistant_has_calls = true;
                    // What the agent wrote, not what the model is shown: write facts strip a
                    // write's content from its arguments, but the text an edit quotes from a
                    // read is still what the agent cited.
                    let arguments = own_arguments(m, id).unwrap_or(arguments);
                    text.push_str(name);
                    text.push(' ');
                    text.push_str(&arguments_text(arguments));
                    text.push('\n');
                    run.calls.insert(
                        id.clone(),
                        Call {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: arguments.clone(),
                            turn,
                            at,
                        },
                    );
                }
                _ => {}
            }
        }
        if !own_text.trim().is_empty() {
            texts.push(own_text.trim_end().to_owned());
        }
        text.insert_str(0, &own_text);
        run.steps.push(Step { turn, at, text });
    }
    run.open = last_assistant_has_calls;
    if let Some(last) = texts.pop() {
        if run.open {
            texts.push(last);
        } else {
            run.answer = last;
        }
    }
    let notes = texts.join("\n");
    run.notes = clip_tail(&notes, NOTES_CHARS).to_owned();
    run.earlier = earlier(items, prompt.unwrap_or(0));
    run
}

/// The last few exchanges before `end`: each prompt and the last assistant text after it.
fn earlier(items: &[ViewItem<'_>], end: usize) -> String {
    let mut exchanges: Vec<(String, String)> = Vec::new();
    for item in &items[..end] {
        let Some((m, content)) = shown(item) else {
            continue;
        };
        if is_prompt(m) {
            exchanges.push((
                clip_head(&prompt_text(m, content), EARLIER_PROMPT_CHARS).to_owned(),
                String::new(),
            ));
        } else if m.role == Role::Assistant {
            let t = message_text_of(content);
            if let (Some(last), false) = (exchanges.last_mut(), t.trim().is_empty()) {
                last.1 = clip_head(&t, EARLIER_ANSWER_CHARS).to_owned();
            }
        }
    }
    let from = exchanges.len().saturating_sub(EARLIER_EXCHANGES);
    let mut out = String::new();
    for (p, a) in &exchanges[from..] {
        out.push_str("user: ");
        out.push_str(p);
        out.push('\n');
        if !a.is_empty() {
            out.push_str("assistant: ");
            out.push_str(a);
            out.push('\n');
        }
    }
    out
}

/// The arguments the agent gave call `id` in its own message `m` (before any edit).
fn own_arguments<'a>(m: &'a Message, id: &str) -> Option<&'a serde_json::Value> {
    m.content.iter().find_map(|b| match b {
        ContentBlock::ToolCall {
            id: own, arguments, ..
        } if own == id => Some(arguments),
        _ => None,
    })
}

fn message_text_of(content: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in content {
        if let ContentBlock::Text { text } = b {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
    }
    out
}
