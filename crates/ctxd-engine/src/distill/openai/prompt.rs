//! The words a logprob classifier sends: one chat request per question.
//!
//! A request is a system message (the same for every request) and one user message: the run's
//! context (`user_question`, `earlier_conversation`, `final_answer` at run end or
//! `agent_progress` mid-run: the names the core's question texts use), the item (a large
//! output's segment as `chunk_N` blocks, a small output, or an exchange), then the question.
//! Every question of a batch therefore shares its request's text up to the question, so a
//! server's prefix cache (OpenAI's, vLLM's, llama.cpp's) reads the shared part once.

use std::fmt::Write as _;
use std::ops::Range;

use ctxd_core::distill::run::{clip_head, clip_tail};
use ctxd_core::distill::{Ask, Batch, Item, ItemKind, Phase, Plan, Question, Target};

use super::probs::{label, Unreadable, MAX_OPTIONS};

pub const SYSTEM: &str = "You judge what a coding agent still needs in its context window. \
You are shown the agent's task, what it did, and one item from its context: a tool output or \
an earlier exchange. Answer the question at the end with a single token: Yes or No, or, when \
lettered options are listed, the letter of one option.";

/// Clip limits (characters).
const QUESTION_CHARS: usize = 4_000;
const ANSWER_CHARS: usize = 6_000;
const SMALL_OUTPUT_CHARS: usize = 4_000;
const STEP_CHARS: usize = 240;
/// Later steps listed: the first and last half of this many when there are more.
const MAX_STEPS: usize = 30;

/// The run's context: the same for every request of a pass.
pub fn context(plan: &Plan) -> String {
    let run = &plan.run;
    let mut out = String::new();
    match plan.phase {
        Phase::RunEnd => out.push_str(
            "situation: the agent's run just ended with final_answer. Decide what of its \
             context the answer relies on, or a likely follow-up would need.\n\n",
        ),
        Phase::MidRun => out.push_str(
            "situation: the agent is still working on user_question. The item below is the \
             output of an earlier call of this run.\n\n",
        ),
    }
    section(
        &mut out,
        "user_question",
        clip_head(&run.question, QUESTION_CHARS),
    );
    if !run.earlier.trim().is_empty() {
        section(&mut out, "earlier_conversation", &run.earlier);
    }
    match plan.phase {
        Phase::RunEnd => {
            section(
                &mut out,
                "final_answer",
                clip_tail(&run.answer, ANSWER_CHARS),
            );
            if !run.notes.trim().is_empty() {
                section(&mut out, "agent_notes", &run.notes);
            }
        }
        Phase::MidRun => {
            let mut progress = String::new();
            let _ = writeln!(
                progress,
                "latest_note: {}",
                clip_tail(&run.answer, ANSWER_CHARS)
            );
            if !run.notes.trim().is_empty() {
                let _ = writeln!(progress, "earlier_notes: {}", run.notes);
            }
            section(&mut out, "agent_progress", progress.trim_end());
        }
    }
    out
}

fn section(out: &mut String, name: &str, body: &str) {
    let _ = write!(out, "<{name}>\n{}\n</{name}>\n\n", body.trim_end());
}

/// What the agent did after an output: its later steps (text and call arguments), clipped.
fn later_steps(plan: &Plan, item: &Item) -> String {
    let steps = plan.run.steps.get(item.later_from..).unwrap_or_default();
    let mut out = String::new();
    let half = MAX_STEPS / 2;
    for (i, step) in steps.iter().enumerate() {
        if steps.len() > MAX_STEPS && i == half {
            let _ = writeln!(out, "[… {} steps …]", steps.len() - MAX_STEPS);
        }
        if steps.len() > MAX_STEPS && (half..steps.len() - half).contains(&i) {
            continue;
        }
        let text = step.text.split_whitespace().collect::<Vec<_>>().join(" ");
        let _ = writeln!(out, "- {}", clip_head(&text, STEP_CHARS));
    }
    out
}

/// The chunks a large output's batch shows: its focus question's segment.
fn segment(plan: &Plan, batch: &Batch, item: &Item) -> Range<usize> {
    let mut chunks: Option<Range<usize>> = None;
    for &q in &batch.questions {
        let r = match plan.questions[q].target {
            Target::Focus { first, count } => first..first + count,
            Target::Chunk(k) => k..k + 1,
            Target::Whole => continue,
        };
        chunks = Some(match chunks {
            Some(c) => c.start.min(r.start)..c.end.max(r.end),
            None => r,
        });
    }
    let all = 0..item.chunks.len();
    let r = chunks.unwrap_or(all);
    r.start.min(item.chunks.len())..r.end.min(item.chunks.len())
}

/// The item part of a request: what it is, its signals, its text.
pub fn item(plan: &Plan, batch: &Batch, item: &Item) -> String {
    let mut out = String::new();
    let tag = match item.kind {
        ItemKind::Exchange => "exchange",
        _ => "tool_output",
    };
    let _ = writeln!(out, "<{tag}>");
    match item.kind {
        ItemKind::Exchange => {
            let _ = writeln!(
                out,
                "size: {} messages, about {} tokens",
                item.messages,
                item.before_chars / 4
            );
            let _ = writeln!(out, "{}", item.text.trim_end());
        }
        ItemKind::Large | ItemKind::Small | ItemKind::Image => {
            let _ = writeln!(out, "call: {}", item.label);
            if item.signals.is_error {
                out.push_str("status: failed\n");
            }
            if let Some(s) = &item.signals.superseded {
                let part = if item.signals.partly { " (in part)" } else { "" };
                let _ = writeln!(out, "superseded{part}: {s}");
            }
            if item.signals.requested {
                out.push_str("requested: user_question asks for this output\n");
            }
            let later = later_steps(plan, item);
            if !later.is_empty() {
                let _ = write!(out, "later_steps:\n{later}");
            }
            if item.kind == ItemKind::Large {
                let seg = segment(plan, batch, item);
                let _ = writeln!(
                    out,
                    "size: {} characters in {} chunks; chunk_{} to chunk_{} shown",
                    item.before_chars,
                    item.chunks.len(),
                    seg.start + 1,
                    seg.end
                );
                for k in seg {
                    let c = &item.chunks[k];
                    let _ = write!(
                        out,
                        "<chunk_{} lines {}-{}",
                        k + 1,
                        c.first_line,
                        c.first_line + c.lines.saturating_sub(1)
                    );
                    if let Some(f) = &c.file {
                        let _ = write!(out, ", {f}");
                    }
                    let _ = writeln!(
                        out,
                        ">\n{}\n</chunk_{}>",
                        c.text(&item.text).trim_end_matches('\n'),
                        k + 1
                    );
                }
            } else {
                let _ = writeln!(out, "size: {} characters", item.before_chars);
                let text = clip_head(&item.text, SMALL_OUTPUT_CHARS);
                let _ = write!(out, "<output>\n{}\n", text.trim_end());
                if text.len() < item.text.len() {
                    let _ = writeln!(out, "[… {} more characters]", item.text.len() - text.len());
                }
                out.push_str("</output>\n");
            }
        }
    }
    let _ = write!(out, "</{tag}>\n\n");
    out
}

/// The question part: its text, the lettered options of a choice, and how to answer.
pub fn question(q: &Question) -> Result<String, Unreadable> {
    let mut out = format!("Question: {}\n", q.text.trim());
    match &q.ask {
        Ask::YesNo => out.push_str("Answer Yes or No."),
        Ask::Choice(options) => {
            if options.len() > MAX_OPTIONS {
                return Err(Unreadable::TooManyOptions(options.len()));
            }
            out.push_str("Options:\n");
            for (i, o) in options.iter().enumerate() {
                let _ = writeln!(out, "{}) {o}", label(i));
            }
            out.push_str("Answer with the letter of one option.");
        }
    }
    Ok(out)
}

/// The user message of each question of `batch`, in order.
pub fn batch(plan: &Plan, batch: &Batch) -> Result<Vec<String>, Unreadable> {
    let context = context(plan);
    let mut items: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::with_capacity(batch.questions.len());
    for &q in &batch.questions {
        let question = &plan.questions[q];
        let body = match items.iter().find(|(i, _)| *i == question.item) {
            Some((_, body)) => body,
            None => {
                let body = item(plan, batch, &plan.items[question.item]);
                items.push((question.item, body));
                &items[items.len() - 1].1
            }
        };
        let mut message = String::with_capacity(context.len() + body.len() + 512);
        message.push_str(&context);
        message.push_str(body);
        message.push_str(&self::question(question)?);
        out.push(message);
    }
    Ok(out)
}
