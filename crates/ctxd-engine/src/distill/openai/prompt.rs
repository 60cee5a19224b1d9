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

/// What the agent did after an output: its later steps (text and call arguments), clipped;
/// the final answer is shown on its own.
fn later_steps(plan: &Plan, item: &Item) -> String {
    let steps: Vec<_> = plan
        .run
        .steps
        .get(item.later_from..)
        .unwrap_or_default()
        .iter()
        .filter(|s| plan.phase == Phase::MidRun || s.text.trim() != plan.run.answer.trim())
        .collect();
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
                let part = if item.signals.partly {
                    " (in part)"
                } else {
                    ""
                };
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ctxd_core::distill::{self, Config};
    use ctxd_core::model::{ContentBlock, EntryKind, Message, Role, Session};
    use ctxd_core::tree::active_branch;
    use expect_test::expect;
    use serde_json::json;

    use super::*;

    /// A run: a grep over three files, then an answer citing one of them.
    fn session() -> Session {
        let mut s = Session::default();
        let mut push = |kind: EntryKind| s.push_linear(kind);
        push(EntryKind::Message(Message::text(
            Role::User,
            "where is the badge rendered?",
        )));
        push(EntryKind::Message(Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: json!({"command": "rg -n badge src"}),
            }],
        )));
        let mut grep = String::new();
        for f in ["alpha", "bravo", "charlie"] {
            for k in 1..=30 {
                grep.push_str(&format!(
                    "src/{f}.rs:{}:    let badge = render_badge_{f}_{k}(item, &theme);\n",
                    k * 10
                ));
            }
        }
        push(EntryKind::Message(Message::new(
            Role::Tool,
            vec![ContentBlock::ToolResult {
                call_id: "c1".into(),
                tool_name: Some("bash".into()),
                content: vec![ContentBlock::text(grep)],
                is_error: false,
            }],
        )));
        push(EntryKind::Message(Message::text(
            Role::Assistant,
            "In src/bravo.rs (render_badge_bravo_3).",
        )));
        s
    }

    #[test]
    fn a_segment_request_reads_as_the_question_texts_name_it() {
        let s = session();
        let plan = distill::plan(&s, &active_branch(&s), &Config::default(), Phase::RunEnd);
        assert_eq!(plan.batches.len(), 1);
        let messages = batch(&plan, &plan.batches[0]).unwrap();
        assert_eq!(messages.len(), plan.batches[0].questions.len());
        // Shorten the chunks for the snapshot: first and last line of each.
        let short = |m: &str| -> String {
            let mut out = Vec::new();
            let mut in_chunk = Vec::new();
            for line in m.lines() {
                if line.starts_with("<chunk_") {
                    out.push(line.to_owned());
                    in_chunk.clear();
                    in_chunk.push(String::new());
                } else if line.starts_with("</chunk_") {
                    let body: Vec<String> = in_chunk.drain(1..).collect();
                    out.push(body[0].clone());
                    out.push(format!("[{} lines]", body.len()));
                    out.push(line.to_owned());
                    in_chunk.clear();
                } else if !in_chunk.is_empty() {
                    in_chunk.push(line.to_owned());
                } else {
                    out.push(line.to_owned());
                }
            }
            out.join("\n")
        };
        expect![[r#"
            situation: the agent's run just ended with final_answer. Decide what of its context the answer relies on, or a likely follow-up would need.

            <user_question>
            where is the badge rendered?
            </user_question>

            <final_answer>
            In src/bravo.rs (render_badge_bravo_3).
            </final_answer>

            <tool_output>
            call: bash `rg -n badge src`
            size: 6366 characters in 6 chunks; chunk_1 to chunk_6 shown
            <chunk_1 lines 1-28, src/alpha.rs>
            src/alpha.rs:10:    let badge = render_badge_alpha_1(item, &theme);
            [28 lines]
            </chunk_1>
            <chunk_2 lines 29-30, src/alpha.rs>
            src/alpha.rs:290:    let badge = render_badge_alpha_29(item, &theme);
            [2 lines]
            </chunk_2>
            <chunk_3 lines 31-58, src/bravo.rs>
            src/bravo.rs:10:    let badge = render_badge_bravo_1(item, &theme);
            [28 lines]
            </chunk_3>
            <chunk_4 lines 59-60, src/bravo.rs>
            src/bravo.rs:290:    let badge = render_badge_bravo_29(item, &theme);
            [2 lines]
            </chunk_4>
            <chunk_5 lines 61-87, src/charlie.rs>
            src/charlie.rs:10:    let badge = render_badge_charlie_1(item, &theme);
            [27 lines]
            </chunk_5>
            <chunk_6 lines 88-90, src/charlie.rs>
            src/charlie.rs:280:    let badge = render_badge_charlie_28(item, &theme);
            [3 lines]
            </chunk_6>
            </tool_output>

            Question: Which part of this output matters most for the work: one chunk, the whole output, or none of it?
            Options:
            A) chunk_1
            B) chunk_2
            C) chunk_3
            D) chunk_4
            E) chunk_5
            F) chunk_6
            G) whole
            H) none
            Answer with the letter of one option."#]].assert_eq(&short(&messages[1]));
        let last = messages.last().unwrap();
        let question = &last[last.find("Question:").unwrap()..];
        expect![[r#"
            Question: Does chunk_6 contain anything final_answer relies on, or that a likely follow-up would need?
            Answer Yes or No."#]].assert_eq(question);
        // Everything before the question is the same in every request of the batch.
        let prefix = &messages[0][..messages[0].find("Question:").unwrap()];
        assert!(messages.iter().all(|m| m.starts_with(prefix)));
    }

    #[test]
    fn too_many_options_cannot_be_lettered() {
        let q = Question {
            item: 0,
            target: Target::Whole,
            ask: Ask::Choice((0..53).map(|i| format!("o{i}")).collect()),
            text: "which?".into(),
        };
        assert_eq!(question(&q), Err(Unreadable::TooManyOptions(53)));
    }
}
