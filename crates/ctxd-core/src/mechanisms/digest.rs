//! Shell-output digests (the seed's "Mechanism 1 — Bash output interception").
//!
//! A shell tool's output above [`Config::min_tokens`] is replaced, on the request that first
//! carries it, by a digest: a [`ContentBlock::ToolResult`] with the same call id and error flag
//! whose text starts with [`DIGEST_PREFIX`]. The raw output stays in the log (the digest is a
//! `ContextEdit` recorded in the same batch as the result), so the model never sees it whole
//! and every later projection shows the same digest (the cache prefix stays stable).
//!
//! The digest, at most [`Config::max_tokens`]:
//! - **local** (the default, [`render_local`]): the header line (size, the `recall` call that
//!   shows the whole output or a part of it), the first and last lines, and between them the
//!   error and warning lines ([`signal_line`]) with their line numbers; for search hits the
//!   files the omitted lines are in (the distiller's grep-aware [`chunk_output`]);
//! - **a model's summary** ([`summary_prompt`], [`render_summary`]) when an OpenAI-compatible
//!   model is configured; on its failure or timeout, the **truncated tail**
//!   ([`render_fallback`], [`Config::fallback_bytes`]). Never the whole raw output.
//!
//! Which outputs: results of the agent's shell tools ([`ShellTools`], a table per agent), text
//! only (no images), not already ctxd's (a text starting with [`MARKER`]), at least
//! `min_tokens` by the injected counter, and only where the digest is smaller.
//!
//! Pointing back: where the model is offered `recall`, the header names the id `recall` takes
//! (the entry's history item id in the gateway, the entry id in an eval). Where it is not, the
//! text names no tool: it says the full output is kept by ctxd and suggests re-running the
//! command with a narrower filter (the digest's budget is the same: the tail already holds
//! what a command ends with).
//!
//! Distillation never judges a digested output again (its planner reads only outputs shown as
//! written); an old exchange holding one may still be omitted, as ctxd's own edit.

use std::collections::BTreeMap;

use crate::distill::chunk::chunk_output;
use crate::distill::render::{recall_call, short, MARKER};
use crate::distill::{base_line, result_text, run::clip_head, signals};
use crate::model::{ContentBlock, EntryId, EntryKind, Role, Session};
use crate::tokens::TokenCounter;

/// How every digest's text begins (after it, the tool and its command): what tells a digest
/// edit from other edits ([`is_digest`]), for the accounting.
pub const DIGEST_PREFIX: &str = "[ctxd] Digest of ";
/// Kept lines longer than this are clipped (with `…`).
const MAX_LINE_CHARS: usize = 400;
/// Characters of an output a summarizing model receives at most (head and tail kept).
pub const SUMMARY_INPUT_CHARS: usize = 48_000;

/// Which tools are shell tools, per agent (the gateway's agent names: `claude-code`, `codex`,
/// `pi`, ...); agents without a row use `other`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellTools {
    pub agents: BTreeMap<String, Vec<String>>,
    pub other: Vec<String>,
}

impl Default for ShellTools {
    fn default() -> Self {
        let row = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
        let mut agents = BTreeMap::new();
        // Claude Code: `Bash`, and `BashOutput` for a background shell's output.
        agents.insert("claude-code".to_owned(), row(&["Bash", "BashOutput"]));
        // Codex: `shell` (older), `exec_command` + `write_stdin` (unified exec), the
        // Responses API's `local_shell`, and `container.exec`.
        agents.insert(
            "codex".to_owned(),
            row(&[
                "shell",
                "exec_command",
                "write_stdin",
                "local_shell",
                "container.exec",
            ]),
        );
        agents.insert("pi".to_owned(), row(&["bash"]));
        Self {
            agents,
            other: row(&["bash", "Bash", "shell", "exec_command"]),
        }
    }
}

impl ShellTools {
    /// The shell tools of `agent` (`None`: an agent ctxd does not know).
    pub fn names_for(&self, agent: Option<&str>) -> &[String] {
        agent
            .and_then(|a| self.agents.get(a))
            .unwrap_or(&self.other)
    }

    pub fn is_shell(&self, agent: Option<&str>, tool: &str) -> bool {
        self.names_for(agent).iter().any(|n| n == tool)
    }
}

/// The digest's thresholds (the seed's `PI_CTX_BASH_*` defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Outputs of at least this many tokens are digested (`PI_CTX_BASH_MIN_TOKENS`).
    pub min_tokens: u64,
    /// The digest's cap (`PI_CTX_BASH_MAX_SUMMARY_TOKENS`).
    pub max_tokens: u64,
    /// The tail shown when the summarizing model fails (`PI_CTX_BASH_FALLBACK_BYTES`).
    pub fallback_bytes: usize,
    /// Lines kept from the start and the end (fewer when the cap asks).
    pub head_lines: usize,
    pub tail_lines: usize,
    /// Error and warning lines kept between them at most.
    pub max_signal_lines: usize,
    pub shell_tools: ShellTools,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            min_tokens: 2_000,
            max_tokens: 1_024,
            fallback_bytes: 3_000,
            head_lines: 15,
            tail_lines: 30,
            max_signal_lines: 30,
            shell_tools: ShellTools::default(),
        }
    }
}

/// One output to digest.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Position (in `session.entries`) of the message carrying the result.
    pub entry: usize,
    pub entry_id: EntryId,
    /// The result's block in the message.
    pub block: usize,
    pub tool: String,
    /// `Bash \`cargo test\``.
    pub label: String,
    /// The output's text.
    pub text: String,
    /// Its tokens by the injected counter.
    pub tokens: u64,
    pub is_error: bool,
    /// The line (0-based) of the entry's recalled text where the output starts.
    pub base_line: usize,
}

/// How the digest points back to the raw output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pointer {
    /// The model has `recall`: the id it takes.
    Recall(String),
    /// It has not: the text names no tool.
    NoRecall,
}

/// The shell outputs among the messages at `new` (positions of the request's new elements,
/// in order) worth a digest. `branch` is the active branch (positions, root first), where the
/// calls are looked up; `agent` the gateway's agent name.
pub fn candidates(
    session: &Session,
    branch: &[usize],
    new: &[usize],
    agent: Option<&str>,
    cfg: &Config,
    counter: &dyn TokenCounter,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    // A quick look first: most requests carry no large result.
    let large = |pos: usize| {
        session
            .entries
            .get(pos)
            .and_then(|e| e.kind.as_message())
            .is_some_and(|m| {
                m.role != Role::Assistant
                    && m.content.iter().any(|b| match b {
                        ContentBlock::ToolResult { content, .. } => {
                            text_bytes(content) as u64 >= cfg.min_tokens
                        }
                        _ => false,
                    })
            })
    };
    if !new.iter().any(|&p| large(p)) {
        return out;
    }
    for &pos in new {
        if !large(pos) {
            continue;
        }
        let Some(m) = session.entries[pos].kind.as_message() else {
            continue;
        };
        for (b, block) in m.content.iter().enumerate() {
            let ContentBlock::ToolResult {
                call_id,
                tool_name,
                content,
                is_error,
            } = block
            else {
                continue;
            };
            if text_bytes(content) < cfg.min_tokens as usize
                || content
                    .iter()
                    .any(|c| !matches!(c, ContentBlock::Text { .. }))
            {
                continue;
            }
            let call = find_call(session, branch, pos, call_id);
            let tool = call
                .map(|(n, _)| n.to_owned())
                .or_else(|| tool_name.clone())
                .unwrap_or_default();
            if !cfg.shell_tools.is_shell(agent, &tool) {
                continue;
            }
            // A file shown through the shell (`cat`, `sed -n`, `head`) is a read, not a log: its
            // lines are what the agent's next edit quotes, so distillation judges it by what
            // the work cites instead of a digest keeping its errors and ends.
            if call.is_some_and(|(name, args)| signals::read_path(name, args).is_some()) {
                continue;
            }
            let text = result_text(content);
            if text.trim_start().starts_with(MARKER) {
                continue;
            }
            let tokens = counter.count(&text);
            if tokens < cfg.min_tokens {
                continue;
            }
            let label = match call {
                Some((name, args)) => signals::label(name, args),
                None => tool.clone(),
            };
            out.push(Candidate {
                entry: pos,
                entry_id: session.entries[pos].id.clone(),
                block: b,
                tool,
                label,
                text,
                tokens,
                is_error: *is_error,
                base_line: base_line(m, b),
            });
        }
    }
    out
}

fn text_bytes(content: &[ContentBlock]) -> usize {
    content
        .iter()
        .map(|c| match c {
            ContentBlock::Text { text } => text.len(),
            _ => 0,
        })
        .sum()
}

/// The call answered by `call_id`, looked up backwards on the branch from `pos` (the call is
/// in the assistant message just before its result, or a few messages before for parallel
/// calls); the result's own request may carry it, so `pos` need not be on `branch` yet.
fn find_call<'a>(
    session: &'a Session,
    branch: &[usize],
    pos: usize,
    call_id: &str,
) -> Option<(&'a str, &'a serde_json::Value)> {
    let at = branch
        .iter()
        .rposition(|&p| p == pos)
        .unwrap_or(branch.len());
    branch[..at]
        .iter()
        .rev()
        .take(256)
        .filter_map(|&p| session.entries.get(p)?.kind.as_message())
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } if id == call_id => Some((name.as_str(), arguments)),
            _ => None,
        })
}

/// Words that make a line an error or warning line (whole words: `error_when` in a test's
/// name is not one; `TypeError` is, by its ending).
const SIGNAL_WORDS: [&str; 17] = [
    "error",
    "errors",
    "err",
    "warning",
    "warnings",
    "warn",
    "fail",
    "failed",
    "failure",
    "failures",
    "fatal",
    "panic",
    "panicked",
    "exception",
    "traceback",
    "denied",
    "assertion",
];

/// An error or warning line: what a digest keeps between the head and the tail.
pub fn signal_line(line: &str) -> bool {
    let l = clip_head(line.trim(), 300).to_ascii_lowercase();
    if l.is_empty() || l.ends_with("... ok") || (l.ends_with(" ok") && l.starts_with("test ")) {
        return false;
    }
    const QUIET: [&str; 8] = [
        "0 errors",
        "0 error",
        "no errors",
        "0 warnings",
        "0 failed",
        "no warnings",
        "0 failures",
        "error: 0",
    ];
    if QUIET.iter().any(|q| l.contains(q)) {
        return false;
    }
    const PHRASES: [&str; 5] = [
        "not found",
        "no such file",
        "cannot ",
        "segmentation fault",
        "permission denied",
    ];
    let original = clip_head(line.trim(), 300);
    let word = original
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| {
            let lw = w.to_ascii_lowercase();
            SIGNAL_WORDS.contains(&lw.as_str())
                || (!w.contains('_')
                    && w.len() > 5
                    && (w.ends_with("Error") || w.ends_with("Exception")))
        });
    word || PHRASES.iter().any(|p| l.contains(p)) || l.starts_with("e ") || l.starts_with("! ")
}

fn clipped(line: &str) -> String {
    let line = line.trim_end_matches('\r');
    let head = clip_head(line, MAX_LINE_CHARS);
    if head.len() < line.len() {
        format!("{head}…")
    } else {
        head.to_owned()
    }
}

fn header(c: &Candidate, lines: usize, what: &str, pointer: &Pointer) -> String {
    let error = if c.is_error {
        ", the tool reported an error"
    } else {
        ""
    };
    let back = match pointer {
        Pointer::Recall(id) => format!(
            " Full output: {} (\"offset\"/\"limit\" for lines, \"pattern\" for matching lines).",
            recall_call(id)
        ),
        Pointer::NoRecall => " The full output is kept by ctxd but not shown; to see more, run \
                              the command again with a narrower filter (grep, head, tail)."
            .to_owned(),
    };
    format!(
        "{DIGEST_PREFIX}{} ({} chars, {lines} lines, ~{} tokens{error}): {what}.{back}",
        c.label,
        short(c.text.len()),
        short(usize::try_from(c.tokens).unwrap_or(usize::MAX)),
    )
}

fn omitted_line(
    c: &Candidate,
    first: usize,
    count: usize,
    chars: usize,
    pointer: &Pointer,
) -> String {
    let range = if count == 1 {
        format!("line {first}")
    } else {
        format!("lines {first}-{}", first + count - 1)
    };
    match pointer {
        Pointer::Recall(id) => format!(
            "{MARKER} … {range} omitted ({} chars): recall({{\"entryId\":\"{id}\",\"offset\":{},\"limit\":{count}}})",
            short(chars),
            c.base_line + first
        ),
        Pointer::NoRecall => format!("{MARKER} … {range} omitted ({} chars)", short(chars)),
    }
}

/// The local digest: head, error and warning lines, tail, within `cfg.max_tokens`.
pub fn render_local(
    c: &Candidate,
    pointer: &Pointer,
    cfg: &Config,
    counter: &dyn TokenCounter,
) -> String {
    let lines: Vec<&str> = c.text.split('\n').collect();
    let n = lines.len();
    let (mut head, mut tail, mut signals) = (cfg.head_lines, cfg.tail_lines, cfg.max_signal_lines);
    loop {
        let text = layout(c, &lines, head, tail, signals, pointer);
        if counter.count(&text) <= cfg.max_tokens {
            return text;
        }
        if head + tail + signals <= 2 {
            // Even two lines are over the cap (very long lines): the header and the tail.
            return render_fallback(
                c,
                pointer,
                cfg.fallback_bytes.min(cfg.max_tokens as usize * 2),
            );
        }
        // Shrink the largest part first, the tail last.
        if signals > 0 && signals >= head {
            signals /= 2;
        } else if head > 2 {
            head = head * 2 / 3;
        } else {
            tail = tail * 2 / 3;
            signals /= 2;
        }
        if n <= head + tail {
            // All lines fit in the head and tail: the cap is what trims.
            head = head.min(n);
        }
    }
}

fn layout(
    c: &Candidate,
    lines: &[&str],
    head: usize,
    tail: usize,
    max_signals: usize,
    pointer: &Pointer,
) -> String {
    let n = lines.len();
    let head = head.min(n);
    let tail = tail.min(n - head);
    let middle = head..n - tail;
    let signal_at: Vec<usize> = middle.clone().filter(|&i| signal_line(lines[i])).collect();
    // Too many: the first and the last ones (a build's first error and its summary).
    let shown_signals: Vec<usize> = if signal_at.len() > max_signals {
        let first = max_signals.div_ceil(2);
        let last = max_signals - first;
        signal_at[..first]
            .iter()
            .chain(&signal_at[signal_at.len() - last..])
            .copied()
            .collect()
    } else {
        signal_at.clone()
    };
    let what = if middle.is_empty() {
        "every line, long lines clipped".to_owned()
    } else if signal_at.is_empty() {
        format!("the first {head} and last {tail} lines, verbatim")
    } else if shown_signals.len() < signal_at.len() {
        format!(
            "the first {head} and last {tail} lines and {} of the {} error/warning lines between them, verbatim",
            shown_signals.len(),
            signal_at.len()
        )
    } else {
        format!(
            "the first {head} and last {tail} lines and the {} error/warning lines between them, verbatim",
            signal_at.len()
        )
    };
    let mut out = header(c, n, &what, pointer);
    let mut push = |s: &str| {
        out.push('\n');
        out.push_str(s);
    };
    for line in &lines[..head] {
        push(&clipped(line));
    }
    if !middle.is_empty() {
        // Runs of omitted lines between the kept ones.
        let mut at = middle.start;
        let mut kept = shown_signals.iter().copied().peekable();
        while at < middle.end {
            let until = kept.peek().copied().unwrap_or(middle.end);
            if until > at {
                let chars: usize = lines[at..until].iter().map(|l| l.len() + 1).sum();
                let mut line = omitted_line(c, at + 1, until - at, chars, pointer);
                if let Some(files) = grep_files(&lines[at..until]) {
                    line.push_str(&format!("; hits in {files}"));
                }
                push(&line);
            }
            if let Some(k) = kept.next() {
                push(&clipped(lines[k]));
                at = k + 1;
            } else {
                at = middle.end;
            }
        }
    }
    for line in &lines[n - tail..] {
        push(&clipped(line));
    }
    out
}

/// For omitted search hits, the files they are in (the distiller's grep-aware chunks).
fn grep_files(lines: &[&str]) -> Option<String> {
    let text = lines.join("\n");
    let chunks = chunk_output(&text);
    let mut files: Vec<(&str, usize)> = Vec::new();
    for ch in &chunks {
        let f = ch.file.as_deref()?;
        match files.last_mut() {
            Some((last, n)) if *last == f => *n += ch.lines,
            _ => files.push((f, ch.lines)),
        }
    }
    if files.is_empty() {
        return None;
    }
    let listed: Vec<String> = files
        .iter()
        .take(8)
        .map(|(f, n)| format!("{} ({n})", clip_head(f, 80)))
        .collect();
    let more = if files.len() > 8 {
        format!(" and {} more files", files.len() - 8)
    } else {
        String::new()
    };
    Some(format!("{}{more}", listed.join(", ")))
}

/// The failure path: the header and the output's last `bytes` bytes (from a line start when
/// one is near).
pub fn render_fallback(c: &Candidate, pointer: &Pointer, bytes: usize) -> String {
    let text = c.text.as_str();
    let mut start = text.len().saturating_sub(bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    if let Some(nl) = text[start..].find('\n') {
        if nl < 400 && start > 0 {
            start += nl + 1;
        }
    }
    let tail = &text[start..];
    let tail_lines = tail.split('\n').count();
    let lines = text.split('\n').count();
    let mut out = header(
        c,
        lines,
        &format!(
            "only its last {} (the summary was not available)",
            short(tail.len())
        ),
        pointer,
    );
    let omitted = lines - tail_lines;
    if omitted > 0 {
        out.push('\n');
        out.push_str(&omitted_line(c, 1, omitted, start, pointer));
    }
    out.push('\n');
    out.push_str(tail);
    out
}

/// What a summarizing model is asked: the system prompt and the user message (the command and
/// its output, the middle left out beyond [`SUMMARY_INPUT_CHARS`]).
pub fn summary_prompt(c: &Candidate, cfg: &Config) -> (String, String) {
    let system = format!(
        "You digest the output of a shell command for a coding agent that will not see the \
         output itself. In at most {} tokens, state what the command did and its result \
         (success or failure, counts, totals), then quote verbatim every error and warning \
         that matters, with file paths and line numbers, and the lines the agent most likely \
         needs next. No preamble, no advice.",
        cfg.max_tokens
    );
    let text = c.text.as_str();
    let body = if text.len() <= SUMMARY_INPUT_CHARS {
        text.to_owned()
    } else {
        let head = clip_head(text, SUMMARY_INPUT_CHARS / 4);
        let tail = crate::distill::run::clip_tail(text, SUMMARY_INPUT_CHARS * 3 / 4);
        format!(
            "{head}\n[… {} characters left out …]\n{tail}",
            text.len() - head.len() - tail.len()
        )
    };
    let user = format!("Command: {}\nOutput:\n{body}", c.label);
    (system, user)
}

/// A model's summary as the digest: the header and the summary (clipped to the cap's bytes,
/// four a token).
pub fn render_summary(
    c: &Candidate,
    summary: &str,
    model: &str,
    pointer: &Pointer,
    cfg: &Config,
) -> String {
    let lines = c.text.split('\n').count();
    let max = usize::try_from(cfg.max_tokens)
        .unwrap_or(usize::MAX)
        .saturating_mul(4);
    let s = summary.trim();
    let body = clip_head(s, max);
    let more = if body.len() < s.len() { "…" } else { "" };
    format!(
        "{}\n{body}{more}",
        header(c, lines, &format!("a summary by {model}"), pointer)
    )
}

/// The edits that put `digests` (a candidate and its text) in place: one
/// [`EntryKind::ContextEdit`] per message, its other blocks as they are.
pub fn drafts(session: &Session, digests: &[(Candidate, String)]) -> Vec<EntryKind> {
    let mut by_entry: BTreeMap<usize, Vec<(usize, &str)>> = BTreeMap::new();
    for (c, text) in digests {
        by_entry
            .entry(c.entry)
            .or_default()
            .push((c.block, text.as_str()));
    }
    let mut out = Vec::new();
    for (pos, blocks) in by_entry {
        let Some(m) = session.entries.get(pos).and_then(|e| e.kind.as_message()) else {
            continue;
        };
        let mut content = m.content.clone();
        for (b, text) in blocks {
            if let Some(ContentBlock::ToolResult { content: c, .. }) = content.get_mut(b) {
                *c = vec![ContentBlock::text(text)];
            }
        }
        out.push(EntryKind::ContextEdit {
            target: session.entries[pos].id.clone(),
            replacement: Some(content),
        });
    }
    out
}

/// Whether `content` (an edit's replacement) holds a digest: the edit is the digests'.
pub fn is_digest(content: &[ContentBlock]) -> bool {
    content.iter().any(|b| match b {
        ContentBlock::ToolResult { content, .. } => content.first().is_some_and(
            |c| matches!(c, ContentBlock::Text { text } if text.starts_with(DIGEST_PREFIX)),
        ),
        _ => false,
    })
}

/// Whether the entry `kind` is a digest's edit.
pub fn is_digest_edit(kind: &EntryKind) -> bool {
    matches!(kind, EntryKind::ContextEdit { replacement: Some(c), .. } if is_digest(c))
}

#[cfg(test)]
mod tests;
