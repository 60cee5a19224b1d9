//! Write facts (the seed's "Mechanism 4 — Writes → persistent facts"): the
//! content a write or edit tool call carries (a whole file, the old and new text of an edit, a
//! patch) stays in the model's context for the rest of the session, in the assistant message's
//! tool-call arguments. Once the write's result is in, [`plan`] strips that content and puts a
//! one-line fact in its place: `[Wrote src/model.py — CNN model, ~80 lines]`.
//!
//! **At the tail only.** A call is stripped only by the request that brings its result, and
//! only in the last assistant message of that request (the previous call's output, never a
//! cached input): everything before it is byte-identical to the previous request, and every
//! later request shows the same edit (it is an entry of the log, [`EntryKind::ArgsEdit`]). A
//! call in an earlier message is never stripped afterwards. Writes below
//! [`Settings::min_bytes`] pass through untouched, and so does a write whose result is an error
//! (the model may retry with the same content).
//!
//! **Where the fact is shown: in the stripped argument itself.** The placeholder that replaces
//! the content *is* the fact, followed by a note of where the content went (`[ctxd: the 2,345
//! chars written are in src/x.py, not repeated here]`). Of the ways to show it, this one:
//! - keeps the request valid on every API with nothing new: no extra message (a user message
//!   after tool results, or between a result and the next answer, is refused or reordered by
//!   some APIs), no change to the tool result's bytes (which go upstream as the client's own);
//!   the argument keeps its JSON type, so the tool's schema still holds;
//! - sits exactly where the prefix is allowed to change (the tail), one entry for both the strip
//!   and the fact, so no growing block and no second edit of the result that a later
//!   distillation edit of the same result would replace (latest edit wins);
//! - lives and goes with its call: the fact is shown as long as the call is (for the rest of
//!   the window), and dropped with it when pairing or a reset drops the call.
//!
//! The fact is the local heuristic (path, the file's first docstring/comment or first
//! meaningful line, line counts); no aux model is asked (nothing leaves the machine).
//!
//! Which calls are writes is data: [`WRITE_TOOLS`], one row per agent's tool and argument shape.

use serde_json::{Map, Value};

use crate::model::{ContentBlock, EditedArg, EntryId, EntryKind, Role, Session};
use crate::view::{project, Item, ItemKind};

/// The mechanism's settings (`--write-facts`, `--write-facts-min-bytes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    /// Writes carrying fewer bytes of content than this pass through untouched.
    pub min_bytes: usize,
}

/// The seed's `PI_CTX_WRITE_MIN_BYTES`.
pub const DEFAULT_MIN_BYTES: usize = 400;
/// The accepted range of [`Settings::min_bytes`].
pub const MIN_BYTES_RANGE: std::ops::RangeInclusive<usize> = 1..=10_000_000;

impl Default for Settings {
    fn default() -> Self {
        Self {
            enabled: true,
            min_bytes: DEFAULT_MIN_BYTES,
        }
    }
}

/// How a write tool's arguments carry what it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A whole file under `content`.
    Content { content: &'static str },
    /// One replacement: `old` → `new`.
    Replace {
        old: &'static str,
        new: &'static str,
    },
    /// A list of replacements under `edits`, each an object with `old` and `new`.
    Edits {
        edits: &'static str,
        old: &'static str,
        new: &'static str,
    },
    /// A notebook cell's new source under `source`.
    Cell { source: &'static str },
    /// A patch in the `apply_patch` format: the whole arguments as a string (a freeform tool's
    /// input), or under `key`.
    Patch { key: Option<&'static str> },
    /// A shell command array under `command` whose script runs `apply_patch` on a heredoc
    /// (Codex's older sessions).
    ShellPatch { command: &'static str },
}

/// One agent's write tool: its name, the argument naming the file, and its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteTool {
    pub name: &'static str,
    /// The argument holding the path (`None`: the shape names its files itself).
    pub path: Option<&'static str>,
    pub shape: Shape,
}

/// Every write tool ctxd knows, first match wins (a tool's name and its arguments' shape).
pub const WRITE_TOOLS: &[WriteTool] = &[
    // Claude Code.
    WriteTool {
        name: "Write",
        path: Some("file_path"),
        shape: Shape::Content { content: "content" },
    },
    WriteTool {
        name: "Edit",
        path: Some("file_path"),
        shape: Shape::Replace {
            old: "old_string",
            new: "new_string",
        },
    },
    WriteTool {
        name: "MultiEdit",
        path: Some("file_path"),
        shape: Shape::Edits {
            edits: "edits",
            old: "old_string",
            new: "new_string",
        },
    },
    WriteTool {
        name: "NotebookEdit",
        path: Some("notebook_path"),
        shape: Shape::Cell {
            source: "new_source",
        },
    },
    // Pi.
    WriteTool {
        name: "write",
        path: Some("path"),
        shape: Shape::Content { content: "content" },
    },
    WriteTool {
        name: "edit",
        path: Some("path"),
        shape: Shape::Replace {
            old: "oldText",
            new: "newText",
        },
    },
    WriteTool {
        name: "edit",
        path: Some("path"),
        shape: Shape::Edits {
            edits: "edits",
            old: "oldText",
            new: "newText",
        },
    },
    // Gemini CLI.
    WriteTool {
        name: "write_file",
        path: Some("file_path"),
        shape: Shape::Content { content: "content" },
    },
    WriteTool {
        name: "replace",
        path: Some("file_path"),
        shape: Shape::Replace {
            old: "old_string",
            new: "new_string",
        },
    },
    // Codex: the freeform tool, the function tool, and a shell heredoc.
    WriteTool {
        name: "apply_patch",
        path: None,
        shape: Shape::Patch { key: None },
    },
    WriteTool {
        name: "apply_patch",
        path: None,
        shape: Shape::Patch { key: Some("input") },
    },
    WriteTool {
        name: "shell",
        path: None,
        shape: Shape::ShellPatch { command: "command" },
    },
];

/// One write call stripped: its new arguments, what they replace, and the fact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stripped {
    pub call: String,
    pub arguments: Value,
    pub args: Vec<EditedArg>,
    /// Bytes of content the stripped arguments carried.
    pub bytes: usize,
    /// The fact line, e.g. `[Wrote src/x.py — the model, ~80 lines]`.
    pub fact: String,
}

/// The edit of one assistant message: the entry to append, and the facts it shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    pub target: EntryId,
    pub kind: EntryKind,
    pub calls: Vec<Stripped>,
}

/// The edits for the request whose new entries are `fresh` (positions in `session`) on the
/// branch `branch` (positions, root first): the write calls of the branch's last assistant
/// message whose results this request brings (see the module docs). Empty when disabled.
pub fn plan(
    session: &Session,
    branch: &[usize],
    fresh: &[usize],
    settings: &Settings,
) -> Vec<Draft> {
    if !settings.enabled || fresh.is_empty() {
        return Vec::new();
    }
    let projection = project(session, branch);
    let items = &projection.items;
    let (results, mut i) = trailing_results(items, fresh);
    let mut drafts = Vec::new();
    while i > 0 {
        let item = &items[i - 1];
        let ItemKind::Message {
            message,
            content,
            edited: false,
        } = &item.kind
        else {
            break;
        };
        if message.role != Role::Assistant {
            break;
        }
        i -= 1;
        if let Some(draft) = draft(session, item.entry, content, &results, settings) {
            drafts.push(draft);
        }
    }
    drafts.reverse();
    drafts
}

/// The trailing results, then the assistant message (one response, maybe over several
/// entries) before them: the results among `fresh` entries (call id, failed), and the index
/// after the assistant message's last item.
fn trailing_results<'a>(items: &[Item<'a>], fresh: &[usize]) -> (Vec<(&'a str, bool)>, usize) {
    let mut results: Vec<(&str, bool)> = Vec::new();
    let mut i = items.len();
    while i > 0 {
        let ItemKind::Message {
            message, content, ..
        } = &items[i - 1].kind
        else {
            break;
        };
        if message.role == Role::Assistant {
            break;
        }
        let carried: Vec<(&str, bool)> = content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult {
                    call_id,
                    content,
                    is_error,
                    ..
                } => Some((call_id.as_str(), *is_error || failed(content))),
                _ => None,
            })
            .collect();
        if carried.is_empty() {
            break;
        }
        if fresh.contains(&items[i - 1].entry) {
            results.extend(carried);
        }
        i -= 1;
    }
    (results, i)
}

/// The edit of the assistant message at `pos` (showing `content`): its write calls whose
/// results succeeded, stripped; `None` when none is large enough, or when the message is
/// signed over its calls.
fn draft(
    session: &Session,
    pos: usize,
    content: &[ContentBlock],
    results: &[(&str, bool)],
    settings: &Settings,
) -> Option<Draft> {
    if signs_a_call(content) {
        return None;
    }
    let mut stripped = Vec::new();
    for b in content.iter() {
        let ContentBlock::ToolCall {
            id,
            name,
            arguments,
        } = b
        else {
            continue;
        };
        if !results.iter().any(|&(c, err)| c == id && !err) {
            continue;
        }
        if let Some(s) = strip(id, name, arguments) {
            if s.bytes >= settings.min_bytes {
                stripped.push(s);
            }
        }
    }
    if stripped.is_empty() {
        return None;
    }
    let entry = session.entries.get(pos)?;
    let replacement = content
        .iter()
        .map(|b| match b {
            ContentBlock::ToolCall { id, name, .. } => {
                match stripped.iter().find(|s| &s.call == id) {
                    Some(s) => ContentBlock::ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: s.arguments.clone(),
                    },
                    None => b.clone(),
                }
            }
            _ => b.clone(),
        })
        .collect();
    let args = stripped.iter().flat_map(|s| s.args.clone()).collect();
    Some(Draft {
        target: entry.id.clone(),
        kind: EntryKind::ArgsEdit {
            target: entry.id.clone(),
            replacement,
            args,
        },
        calls: stripped,
    })
}

/// Whether a bare signature (a hidden thinking block with no text) comes right before a call:
/// Gemini's `thoughtSignature` sits on the call's own part, and the provider refuses the turn
/// of its current tool loop when the call no longer matches it. (Anthropic's redacted thinking
/// has the same shape; its calls then keep their arguments too, at the cost of a small saving.)
fn signs_a_call(content: &[ContentBlock]) -> bool {
    content.windows(2).any(|pair| {
        matches!(
            pair,
            [
                ContentBlock::Thinking {
                    thinking,
                    signature: Some(_),
                    redacted: true,
                },
                ContentBlock::ToolCall { .. },
            ] if thinking.is_empty()
        )
    })
}

/// Whether a result's text says the write failed (for tools that report failure in the text
/// rather than as an error).
fn failed(content: &[ContentBlock]) -> bool {
    let text: String = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let head = text.trim_start();
    const PREFIXES: [&str; 6] = [
        "<tool_use_error>",
        "Error",
        "error:",
        "Failed",
        "failed",
        "apply_patch verification failed",
    ];
    PREFIXES.iter().any(|p| head.starts_with(p))
        || head.contains("verification failed")
        || nonzero_exit(head)
}

/// A shell result reporting a nonzero exit code (`"exit_code":1`, `Exit code: 1`).
fn nonzero_exit(text: &str) -> bool {
    ["\"exit_code\":", "Exit code: ", "exit code "]
        .iter()
        .any(|marker| {
            text.match_indices(marker).any(|(at, m)| {
                let rest = text[at + m.len()..].trim_start();
                rest.starts_with(|c: char| c.is_ascii_digit()) && !rest.starts_with('0')
            })
        })
}

/// The stripped form of a call, when it is one of [`WRITE_TOOLS`].
pub fn strip(id: &str, name: &str, arguments: &Value) -> Option<Stripped> {
    WRITE_TOOLS
        .iter()
        .filter(|t| t.name == name)
        .find_map(|t| strip_as(t, id, arguments))
}

fn strip_as(tool: &WriteTool, id: &str, arguments: &Value) -> Option<Stripped> {
    if let Shape::Patch { key: None } = tool.shape {
        return strip_bare_patch(id, arguments);
    }
    let obj = arguments.as_object()?;
    let path = match tool.path {
        Some(key) => Some(obj.get(key)?.as_str()?),
        None => None,
    };
    let a = WriteArgs { id, obj, path };
    let mut out: Map<String, Value> = obj.clone();
    let (fact, bytes, args) = match tool.shape {
        Shape::Content { content } => a.content(&mut out, content)?,
        Shape::Replace { old, new } => a.replace(&mut out, old, new)?,
        Shape::Edits { edits, old, new } => a.edits(&mut out, edits, old, new)?,
        Shape::Cell { source } => a.cell(&mut out, source)?,
        Shape::Patch { key: Some(key) } => a.patch(&mut out, key)?,
        Shape::Patch { key: None } => return None,
        Shape::ShellPatch { command } => a.shell_patch(&mut out, command)?,
    };
    Some(Stripped {
        call: id.to_owned(),
        arguments: Value::Object(out),
        args,
        bytes,
        fact,
    })
}

/// A patch given as the whole arguments (a bare string).
fn strip_bare_patch(id: &str, arguments: &Value) -> Option<Stripped> {
    let patch = arguments.as_str()?;
    let fact = patch_fact(patch)?;
    Some(Stripped {
        call: id.to_owned(),
        arguments: Value::String(placeholder(&fact, patch, None)),
        args: vec![EditedArg {
            call: id.to_owned(),
            key: None,
        }],
        bytes: patch.len(),
        fact,
    })
}

/// What one shape's stripping gives: the fact, the bytes taken out, the arguments edited.
type ShapeStrip = (String, usize, Vec<EditedArg>);

/// A write call's object arguments, as each shape strips them (into a copy, `out`).
struct WriteArgs<'a> {
    id: &'a str,
    obj: &'a Map<String, Value>,
    /// The written file, when the tool names it.
    path: Option<&'a str>,
}

impl WriteArgs<'_> {
    fn file(&self) -> &str {
        self.path.unwrap_or("the file")
    }

    fn arg(&self, key: &str) -> EditedArg {
        EditedArg {
            call: self.id.to_owned(),
            key: Some(key.to_owned()),
        }
    }

    fn content(&self, out: &mut Map<String, Value>, content: &str) -> Option<ShapeStrip> {
        let file = self.file();
        let text = self.obj.get(content)?.as_str()?;
        let fact = match first_line(text) {
            Some(what) => format!("[Wrote {file} — {what}, ~{} lines]", lines(text)),
            None => format!("[Wrote {file}, ~{} lines]", lines(text)),
        };
        out.insert(
            content.to_owned(),
            Value::String(placeholder(&fact, text, self.path)),
        );
        Some((fact, text.len(), vec![self.arg(content)]))
    }

    fn replace(&self, out: &mut Map<String, Value>, old: &str, new: &str) -> Option<ShapeStrip> {
        let was = self.obj.get(old)?.as_str()?;
        let now = self.obj.get(new)?.as_str()?;
        let fact = format!(
            "[Edited {} — replaced {} with {}{}]",
            self.file(),
            count(lines(was), "line"),
            count(lines(now), "line"),
            changed_line(was, now).map_or_else(String::new, |l| format!(": {l}"))
        );
        out.insert(old.to_owned(), Value::String(replaced(was)));
        out.insert(
            new.to_owned(),
            Value::String(placeholder(&fact, now, self.path)),
        );
        Some((
            fact,
            was.len() + now.len(),
            vec![self.arg(old), self.arg(new)],
        ))
    }

    /// A list of edits, stripped to one edit holding them all.
    fn edits(
        &self,
        out: &mut Map<String, Value>,
        edits: &str,
        old: &str,
        new: &str,
    ) -> Option<ShapeStrip> {
        let list = self.obj.get(edits)?.as_array()?;
        let mut pairs = Vec::with_capacity(list.len());
        for e in list {
            pairs.push((e.get(old)?.as_str()?, e.get(new)?.as_str()?));
        }
        if pairs.is_empty() {
            return None;
        }
        let was: usize = pairs.iter().map(|(o, _)| lines(o)).sum();
        let now: usize = pairs.iter().map(|(_, n)| lines(n)).sum();
        let bytes: usize = pairs.iter().map(|(o, n)| o.len() + n.len()).sum();
        let fact = format!(
            "[Edited {} — {}, replaced {} with {}]",
            self.file(),
            count(pairs.len(), "edit"),
            count(was, "line"),
            count(now, "line")
        );
        let all_new: String = pairs.iter().map(|(_, n)| *n).collect::<Vec<_>>().join("\n");
        let all_old: String = pairs.iter().map(|(o, _)| *o).collect::<Vec<_>>().join("\n");
        let mut one = Map::new();
        one.insert(old.to_owned(), Value::String(replaced(&all_old)));
        one.insert(
            new.to_owned(),
            Value::String(placeholder(&fact, &all_new, self.path)),
        );
        out.insert(edits.to_owned(), Value::Array(vec![Value::Object(one)]));
        Some((fact, bytes, vec![self.arg(edits)]))
    }

    fn cell(&self, out: &mut Map<String, Value>, source: &str) -> Option<ShapeStrip> {
        let text = self.obj.get(source)?.as_str()?;
        let cell = self
            .obj
            .get("cell_id")
            .and_then(Value::as_str)
            .map_or_else(String::new, |c| format!(" cell {c},"));
        let fact = format!(
            "[Edited notebook {} —{cell} ~{} lines]",
            self.file(),
            lines(text)
        );
        out.insert(
            source.to_owned(),
            Value::String(placeholder(&fact, text, self.path)),
        );
        Some((fact, text.len(), vec![self.arg(source)]))
    }

    fn patch(&self, out: &mut Map<String, Value>, key: &str) -> Option<ShapeStrip> {
        let patch = self.obj.get(key)?.as_str()?;
        let fact = patch_fact(patch)?;
        out.insert(
            key.to_owned(),
            Value::String(placeholder(&fact, patch, None)),
        );
        Some((fact, patch.len(), vec![self.arg(key)]))
    }

    /// A shell command whose last word is an `apply_patch` script.
    fn shell_patch(&self, out: &mut Map<String, Value>, command: &str) -> Option<ShapeStrip> {
        let parts = self.obj.get(command)?.as_array()?;
        let (last, head) = parts.split_last()?;
        let script = last.as_str()?;
        if !script.trim_start().starts_with("apply_patch") {
            return None;
        }
        let fact = patch_fact(script)?;
        let mut kept = head.to_vec();
        kept.push(Value::String(placeholder(&fact, script, None)));
        out.insert(command.to_owned(), Value::Array(kept));
        Some((fact, script.len(), vec![self.arg(command)]))
    }
}

/// What replaces the content: the fact, then where the content went.
fn placeholder(fact: &str, content: &str, path: Option<&str>) -> String {
    let chars = thousands(content.chars().count());
    match path {
        Some(p) => format!("{fact} [ctxd: the {chars} chars written are in {p}, not repeated here]"),
        None => format!("{fact} [ctxd: the {chars}-char patch was applied; the files hold it, not repeated here]"),
    }
}

/// What replaces an edit's old text.
fn replaced(old: &str) -> String {
    format!(
        "[ctxd: {} chars replaced, not repeated here]",
        thousands(old.chars().count())
    )
}

fn thousands(n: usize) -> String {
    crate::text::thousands(n as u64)
}

fn lines(text: &str) -> usize {
    text.lines().count()
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The longest description a fact quotes.
const WHAT_CHARS: usize = 60;

fn clip(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= WHAT_CHARS {
        return text.to_owned();
    }
    let head: String = text.chars().take(WHAT_CHARS - 1).collect();
    format!("{}…", head.trim_end())
}

/// Markers that open a comment or docstring, longest first.
const COMMENT_OPENERS: [&str; 11] = [
    "<!--", "/**", "\"\"\"", "'''", "///", "//!", "/*", "//", "--", "#", "*",
];

/// The line a file's fact quotes: its first comment or docstring line with words in it, else
/// its first meaningful line (not an import, not punctuation alone).
pub fn first_line(text: &str) -> Option<String> {
    let mut first_code = None;
    for raw in text.lines().take(60) {
        let line = raw.trim();
        if line.is_empty() || line.starts_with("#!") {
            continue;
        }
        if let Some(opener) = COMMENT_OPENERS.iter().find(|o| line.starts_with(**o)) {
            let words = line[opener.len()..]
                .trim()
                .trim_end_matches("*/")
                .trim_end_matches("-->")
                .trim_end_matches("\"\"\"")
                .trim_end_matches("'''")
                .trim();
            // `#include`, `#[derive]`, `# -*- coding -*-`, a markdown heading's `#`: the
            // heading is words, the rest are code.
            let code_like = *opener == "#"
                && (words.starts_with('[')
                    || line.starts_with("#include")
                    || line.starts_with("#pragma")
                    || line.starts_with("#define")
                    || words.starts_with("-*-"));
            if !code_like && words.chars().filter(|c| c.is_alphabetic()).count() >= 3 {
                return Some(clip(words.trim_start_matches('#').trim()));
            }
            if !code_like {
                continue;
            }
        }
        const IMPORTS: [&str; 9] = [
            "import ", "from ", "use ", "package ", "require", "#include", "using ", "export *",
            "const {",
        ];
        if first_code.is_none()
            && !IMPORTS.iter().any(|p| line.starts_with(p))
            && line.chars().filter(|c| c.is_alphanumeric()).count() >= 3
        {
            first_code = Some(clip(line));
        }
    }
    first_code
}

/// The first line of `new` that `old` does not have, for an edit's fact.
fn changed_line(old: &str, new: &str) -> Option<String> {
    new.lines()
        .map(str::trim)
        .find(|l| l.chars().filter(|c| c.is_alphanumeric()).count() >= 3 && !old.contains(*l))
        .map(clip)
}

/// The fact of an `apply_patch` patch: the files added, updated, moved and deleted, with their
/// `+`/`-` line counts. `None` when the text is no patch.
pub fn patch_fact(patch: &str) -> Option<String> {
    struct File {
        verb: &'static str,
        path: String,
        added: usize,
        removed: usize,
    }
    let mut files: Vec<File> = Vec::new();
    let mut begun = false;
    for line in patch.lines() {
        let t = line.trim_end();
        if t.trim_start() == "*** Begin Patch" {
            begun = true;
            continue;
        }
        if !begun {
            continue;
        }
        if t == "*** End Patch" {
            break;
        }
        let header = [
            ("*** Add File: ", "added"),
            ("*** Update File: ", "updated"),
            ("*** Delete File: ", "deleted"),
        ]
        .iter()
        .find_map(|(p, verb)| t.strip_prefix(p).map(|path| (*verb, path)));
        if let Some((verb, path)) = header {
            files.push(File {
                verb,
                path: path.trim().to_owned(),
                added: 0,
                removed: 0,
            });
        } else if let Some(to) = t.strip_prefix("*** Move to: ") {
            if let Some(f) = files.last_mut() {
                f.verb = "moved";
                f.path = format!("{} to {}", f.path, to.trim());
            }
        } else if let Some(f) = files.last_mut() {
            if line.starts_with('+') {
                f.added += 1;
            } else if line.starts_with('-') {
                f.removed += 1;
            }
        }
    }
    if files.is_empty() {
        return None;
    }
    let listed: Vec<String> = files
        .iter()
        .map(|f| match f.verb {
            "deleted" => format!("deleted {}", f.path),
            "added" => format!("added {} (+{})", f.path, f.added),
            verb => format!("{verb} {} (+{} −{})", f.path, f.added, f.removed),
        })
        .collect();
    Some(format!("[Patched — {}]", listed.join(", ")))
}

#[cfg(test)]
mod tests;
