//! What tool calls say about outputs: labels, superseded outputs, text a later edit quotes, and
//! user corrections (pinned).
//!
//! Tools are recognised by their arguments as much as by their names, so the rules work for
//! every agent: a read names a file (`path`, `file_path`, …) under a read-like name (or is a
//! shell `cat`/`head`/`tail`/`nl`/`sed -n` of one file), an edit names a file under an edit-like
//! name (or carries a `*** Update File:` patch), a command is a `command`/`cmd` argument.

use rustc_hash::FxHashSet as HashSet;

use serde_json::Value;

use super::run::Call;

const PATH_KEYS: &[&str] = &[
    "path",
    "file_path",
    "filePath",
    "file",
    "filename",
    "notebook_path",
];
const QUOTE_KEYS: &[&str] = &[
    "old_string",
    "old_str",
    "oldText",
    "old_text",
    "search",
    "old",
];
/// Quoted lines shorter than this (trimmed) are too common to pin a chunk.
const MIN_QUOTE_LINE: usize = 8;

fn str_arg<'a>(args: &'a Value, keys: &[&str]) -> Option<&'a str> {
    let obj = args.as_object()?;
    keys.iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str))
}

/// The shell command of a call, whitespace collapsed and a trailing `2>&1` dropped.
pub fn command(args: &Value) -> Option<String> {
    let raw = match args {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => match o.get("command").or_else(|| o.get("cmd")) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(a)) => Some(
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => None,
        },
        _ => None,
    }?;
    normalized(&raw)
}

/// `line` with its whitespace collapsed and a trailing `2>&1` dropped (`None`: empty).
fn normalized(line: &str) -> Option<String> {
    let mut norm = line.split_whitespace().collect::<Vec<_>>().join(" ");
    while let Some(s) = norm.strip_suffix("2>&1") {
        norm = s.trim_end().to_owned();
    }
    (!norm.is_empty()).then_some(norm)
}

/// The main argument of a call, for labels.
pub fn main_argument(args: &Value) -> Option<String> {
    if let Some(c) = command(args) {
        return Some(c);
    }
    str_arg(
        args,
        &[
            "path",
            "file_path",
            "filePath",
            "pattern",
            "query",
            "url",
            "file",
            "filename",
            "description",
        ],
    )
    .map(str::to_owned)
}

/// `name \`main argument\`` (the argument clipped to 80 characters).
pub fn label(name: &str, args: &Value) -> String {
    match main_argument(args) {
        Some(a) => {
            let one_line = a.split_whitespace().collect::<Vec<_>>().join(" ");
            let clipped = super::run::clip_head(&one_line, 80);
            let more = if clipped.len() < one_line.len() {
                "…"
            } else {
                ""
            };
            format!("{name} `{clipped}{more}`")
        }
        None => name.to_owned(),
    }
}

fn lower(name: &str) -> String {
    name.to_ascii_lowercase()
}

/// The command line a shell call runs, from its arguments: Claude Code and Pi (`command` as a
/// string), Codex `shell` / `local_shell` (`command` as an argv, `bash -lc SCRIPT` unwrapped;
/// `action.command` for `local_shell`), Codex `exec_command` (`cmd`).
pub fn command_of(arguments: &Value) -> Option<String> {
    let args = match arguments {
        // Freeform and stringified arguments.
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => return command_of(&v),
            _ => return Some(s.clone()),
        },
        Value::Object(o) => o,
        _ => return None,
    };
    let v = args
        .get("command")
        .or_else(|| args.get("cmd"))
        .or_else(|| args.get("action").and_then(|a| a.get("command")))?;
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let words: Option<Vec<&str>> = parts.iter().map(Value::as_str).collect();
            let words = words?;
            match words.as_slice() {
                [shell, flag, script]
                    if matches!(*shell, "bash" | "sh" | "zsh" | "/bin/bash" | "/bin/sh")
                        && matches!(*flag, "-c" | "-lc" | "-l" | "-ic") =>
                {
                    Some((*script).to_owned())
                }
                [] => None,
                // An argv: each word as its own (quoted when it needs it).
                words => Some(
                    words
                        .iter()
                        .map(|w| {
                            if w.chars()
                                .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+".contains(c))
                                && !w.is_empty()
                            {
                                (*w).to_owned()
                            } else {
                                format!("'{}'", w.replace('\'', "'\\''"))
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
            }
        }
        _ => None,
    }
}

/// The file a call reads, when it is a read.
pub fn read_path(name: &str, args: &Value) -> Option<String> {
    let n = lower(name);
    let sub = str_arg(args, &["command"]).unwrap_or_default();
    if n.contains("read") || n == "view" || (n.contains("editor") && sub == "view") {
        return str_arg(args, PATH_KEYS).map(normal_path);
    }
    let line = normalized(&command_of(args)?)?;
    // The `cd DIR && ` hops agents put before a read (`cd /testbed && cat
    // astropy/modeling/separable.py`): the read is what follows.
    let mut cmd = line.as_str();
    while let Some((hop, rest)) = cmd.split_once(" && ") {
        if !hop.starts_with("cd ") || hop.contains(['|', ';', '>', '&', '$', '`']) {
            break;
        }
        cmd = rest;
    }
    let mut words = cmd.split(' ');
    let first = words.next()?;
    if !matches!(first, "cat" | "head" | "tail" | "nl" | "sed" | "less") {
        return None;
    }
    if cmd.contains(['|', ';', '>', '&']) || (first == "sed" && !cmd.contains(" -n")) {
        return None;
    }
    let last = cmd.rsplit(' ').next()?;
    (last.contains('.') || last.contains('/')).then(|| normal_path(last))
}

/// The files a call changes, when it is an edit (or a patch).
pub fn edit_paths(name: &str, args: &Value) -> Vec<String> {
    let n = lower(name);
    let sub = str_arg(args, &["command"]).unwrap_or_default();
    let mut out = Vec::new();
    let edit_name = ["edit", "write", "replace", "patch", "create", "insert"]
        .iter()
        .any(|k| n.contains(k))
        || (n.contains("editor") && matches!(sub, "str_replace" | "create" | "insert"));
    if edit_name {
        if let Some(p) = str_arg(args, PATH_KEYS) {
            out.push(normal_path(p));
        }
    }
    for s in strings(args) {
        if !s.contains("*** ") {
            continue;
        }
        for line in s.lines() {
            for head in ["*** Update File: ", "*** Add File: ", "*** Delete File: "] {
                if let Some(p) = line.strip_prefix(head) {
                    out.push(normal_path(p.trim()));
                }
            }
        }
    }
    if let Some(cmd) = command(args) {
        if cmd.starts_with("sed -i") || cmd.contains(" sed -i") {
            if let Some(last) = cmd.rsplit(' ').next() {
                out.push(normal_path(last));
            }
        }
    }
    out
}

fn strings(v: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            Value::Object(o) => o.values().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(v, &mut out);
    out
}

fn normal_path(p: &str) -> String {
    p.trim()
        .trim_matches(['"', '\''])
        .trim_start_matches("./")
        .to_owned()
}

/// The same file: equal, or one ends with the other at a `/`.
pub fn same_path(a: &str, b: &str) -> bool {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    !short.is_empty()
        && long.ends_with(short)
        && (long.len() == short.len() || long.as_bytes()[long.len() - short.len() - 1] == b'/')
}

fn turns(n: usize) -> String {
    match n {
        0 => "in the same turn".to_owned(),
        1 => "1 turn later".to_owned(),
        n => format!("{n} turns later"),
    }
}

/// How [`superseded_by`] says a read was changed by a later edit that replaced text in it (not
/// a whole rewrite).
pub const PARTLY_PREFIX: &str = "part of this file was changed after this read";

/// What [`superseded_by`] reads of a call, worked out once per call: a pass compares every
/// output with every later call, and normalising the same commands again for each pair was a
/// tenth of `ctxd eval`'s time.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The file it reads.
    pub read: Option<String>,
    /// Its shell command, normalised ([`command`]).
    pub command: Option<String>,
    /// The files it changes.
    pub edits: Vec<String>,
    /// It replaces text in a file (quotes old text, or patches) rather than rewriting it.
    pub partial: bool,
    /// A hash of its arguments: two calls' arguments are compared only when their hashes
    /// agree (comparing the JSON trees of every pair of calls was a fifth of a pass).
    pub args_hash: u64,
}

impl Facts {
    pub fn of(call: &Call) -> Self {
        let partial = call.arguments.as_object().is_some_and(|o| {
            QUOTE_KEYS.iter().any(|k| o.contains_key(*k))
                || o.values()
                    .any(|v| v.as_str().is_some_and(|s| s.contains("*** Update File:")))
        });
        Facts {
            read: read_path(&call.name, &call.arguments),
            command: command(&call.arguments),
            edits: edit_paths(&call.name, &call.arguments),
            partial,
            args_hash: args_hash(&call.arguments),
        }
    }
}

/// A hash of a call's arguments (of their JSON text: a `Value`'s maps keep their keys in
/// order, so equal arguments print alike).
fn args_hash(arguments: &Value) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(arguments.to_string())
}

/// Why `call`'s output is out of date, judged from the calls after it (`later`, in order).
pub fn superseded_by<'a>(call: &Call, later: impl IntoIterator<Item = &'a Call>) -> Option<String> {
    let facts = Facts::of(call);
    let later: Vec<(&Call, Facts)> = later.into_iter().map(|l| (l, Facts::of(l))).collect();
    superseded_with(call, &facts, later.iter().map(|(l, f)| (*l, f)))
}

/// [`superseded_by`] with every call's [`Facts`] at hand.
pub fn superseded_with<'a>(
    call: &Call,
    facts: &Facts,
    later: impl IntoIterator<Item = (&'a Call, &'a Facts)>,
) -> Option<String> {
    for (l, lf) in later {
        // Worded only for the call that supersedes: a pass compares every output with every
        // later call, and formatting the distance for each pair was a tenth of a pass.
        let after = || turns(l.turn.saturating_sub(call.turn));
        if let Some(p) = &facts.read {
            if let Some(e) = lf.edits.iter().find(|e| same_path(e, p)) {
                let what = if lf.partial {
                    PARTLY_PREFIX
                } else {
                    "this file was changed after this read"
                };
                return Some(format!("{what} ({} {e}, {})", l.name, after()));
            }
        }
        if l.name == call.name && lf.args_hash == facts.args_hash && l.arguments == call.arguments {
            return Some(match (&facts.read, &facts.command) {
                (Some(_), _) => format!("the file was read again ({})", after()),
                (_, Some(_)) => format!("the command ran again ({})", after()),
                _ => format!("called again with the same arguments ({})", after()),
            });
        }
        if let (Some(c), Some(lc)) = (&facts.command, &lf.command) {
            if c == lc {
                return Some(format!("the command ran again ({})", after()));
            }
        }
    }
    None
}

/// File stems shorter than this are too common to say a question asks for the file.
const MIN_REQUESTED_STEM: usize = 5;
/// After a stem that is a plain word, what makes it name source code ("the footer sources").
const SOURCE_WORDS: &[&str] = &[
    "source",
    "sources",
    "file",
    "files",
    "code",
    "module",
    "component",
    "class",
];

/// The question names the file a call (`name`, `arguments`) reads: its path, its file name, or
/// its stem (the file name without extension, at least [`MIN_REQUESTED_STEM`] characters) as a
/// word: an identifier-like stem anywhere (`oauth-selector`), a plain word only before a word
/// that names code ("look into the footer sources" asks for `footer.ts`; "the proxy for
/// staging" does not ask for `staging.conf`). `question` is lowercase.
pub fn requested(question: &str, name: &str, arguments: &Value) -> bool {
    let Some(path) = read_path(name, arguments) else {
        return false;
    };
    let path = path.to_ascii_lowercase();
    let file = path.rsplit('/').next().unwrap_or(&path);
    if question.contains(&path) || (file.contains('.') && question.contains(file)) {
        return true;
    }
    let stem = file.split('.').next().unwrap_or(file);
    if stem.len() < MIN_REQUESTED_STEM {
        return false;
    }
    let plain = stem.bytes().all(|b| b.is_ascii_alphabetic());
    let found = word_ends(question, stem).any(|end| {
        !plain || {
            let next = question[end..]
                .trim_start()
                .split(|c: char| !c.is_ascii_alphabetic());
            next.into_iter()
                .next()
                .is_some_and(|w| SOURCE_WORDS.contains(&w))
        }
    });
    found
}

/// Where each occurrence of `word` in `text` between non-identifier characters ends.
fn word_ends<'a>(text: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    text.match_indices(word).filter_map(move |(at, _)| {
        let end = at + word.len();
        (!text[..at].chars().next_back().is_some_and(ident)
            && !text[end..].chars().next().is_some_and(ident))
        .then_some(end)
    })
}

/// The text later edits quote (old strings, a patch's removed and context lines), as trimmed
/// lines of at least [`MIN_QUOTE_LINE`] characters.
pub fn quoted_lines<'a>(later: impl IntoIterator<Item = &'a Call>) -> HashSet<String> {
    let mut out = HashSet::default();
    for l in later {
        if let Some(obj) = l.arguments.as_object() {
            for k in QUOTE_KEYS {
                if let Some(s) = obj.get(*k).and_then(Value::as_str) {
                    out.extend(
                        s.lines()
                            .map(str::trim)
                            .filter(|t| t.len() >= MIN_QUOTE_LINE)
                            .map(str::to_owned),
                    );
                }
            }
        }
        for s in strings(&l.arguments) {
            if !s.contains("*** Update File:") {
                continue;
            }
            for line in s.lines() {
                if line.starts_with("---") || line.starts_with("***") {
                    continue;
                }
                if let Some(rest) = line.strip_prefix('-').or_else(|| line.strip_prefix(' ')) {
                    let t = rest.trim();
                    if t.len() >= MIN_QUOTE_LINE {
                        out.insert(t.to_owned());
                    }
                }
            }
        }
    }
    out
}

/// A line of a read without the number the tool printed before it (`   12→`, `12\t`, `12:`,
/// `12|`), trimmed.
pub fn strip_line_number(line: &str) -> &str {
    let t = line.trim_start();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 {
        let rest = &t[digits..];
        for sep in ["→", "\t", ":", "|"] {
            if let Some(r) = rest.strip_prefix(sep) {
                return r.trim();
            }
        }
    }
    line.trim()
}

/// Some line of `text` is quoted by a later edit.
pub fn quotes_any(text: &str, quoted: &HashSet<String>) -> bool {
    !quoted.is_empty() && text.lines().any(|l| quoted.contains(strip_line_number(l)))
}

/// A prompt that corrects the agent ("no, …", "don't …", "that's wrong", "actually …"): its
/// exchange is pinned.
pub fn is_correction(prompt: &str) -> bool {
    let t = prompt.trim_start().to_ascii_lowercase();
    const STARTS: &[&str] = &[
        "no,",
        "no.",
        "no ",
        "nope",
        "don't",
        "do not",
        "dont ",
        "stop",
        "wrong",
        "that's wrong",
        "thats wrong",
        "that is wrong",
        "actually",
        "instead",
        "not what",
        "you didn't",
        "you did not",
        "why did you",
        "undo",
        "revert",
    ];
    STARTS.iter().any(|s| t.starts_with(s)) || t.contains("that's not what") || t == "no"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value, turn: usize) -> Call {
        Call {
            id: format!("c{turn}"),
            name: name.into(),
            arguments: args,
            turn,
            at: turn,
        }
    }

    #[test]
    fn a_read_is_superseded_by_an_edit_of_its_file() {
        let read = call("Read", json!({"file_path": "/repo/src/a.rs"}), 0);
        let other = call("Edit", json!({"file_path": "/repo/src/b.rs"}), 1);
        let edit = call(
            "Edit",
            json!({"file_path": "src/a.rs", "old_string": "x"}),
            3,
        );
        let why = superseded_by(&read, [&other, &edit]).unwrap();
        assert_eq!(
            why,
            "part of this file was changed after this read (Edit src/a.rs, 3 turns later)"
        );
        assert_eq!(superseded_by(&read, [&other]), None);
        let write = call("Write", json!({"file_path": "src/a.rs", "content": "x"}), 2);
        assert_eq!(
            superseded_by(&read, [&write]).unwrap(),
            "this file was changed after this read (Write src/a.rs, 2 turns later)"
        );
    }

    #[test]
    fn a_rerun_command_is_superseded() {
        let first = call("bash", json!({"command": "cargo  test 2>&1"}), 0);
        let again = call("bash", json!({"command": "cargo test"}), 2);
        assert_eq!(
            superseded_by(&first, [&again]).as_deref(),
            Some("the command ran again (2 turns later)")
        );
        let other = call("bash", json!({"command": "cargo build"}), 1);
        assert_eq!(superseded_by(&first, [&other]), None);
        let search = call("grep", json!({"pattern": "x"}), 0);
        let same = call("grep", json!({"pattern": "x"}), 1);
        assert!(superseded_by(&search, [&same])
            .unwrap()
            .contains("same arguments"));
    }

    #[test]
    fn shell_reads_and_patches() {
        assert_eq!(
            read_path("bash", &json!({"command": "cat src/lib.rs"})).as_deref(),
            Some("src/lib.rs")
        );
        assert_eq!(read_path("bash", &json!({"command": "cat a | wc"})), None);
        assert_eq!(
            read_path(
                "bash",
                &json!({"command": "cd /testbed && cat astropy/modeling/separable.py"})
            )
            .as_deref(),
            Some("astropy/modeling/separable.py")
        );
        assert_eq!(
            read_path(
                "shell",
                &json!({"command": ["bash", "-lc", "sed -n 1,80p src/a.rs"]})
            )
            .as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(
            read_path("bash", &json!({"command": "cd /t && cat a.py > b.py"})),
            None
        );
        assert_eq!(
            read_path(
                "bash",
                &json!({"command": "cd /t && pytest && cat log.txt"})
            ),
            None
        );
        let patch = json!({"input": "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-    let old_value = 1;\n+    let new = 2;\n*** End Patch"});
        assert_eq!(edit_paths("apply_patch", &patch), vec!["src/lib.rs"]);
        let q = quoted_lines([&call("apply_patch", patch, 1)]);
        assert!(q.contains("let old_value = 1;"));
    }

    #[test]
    fn line_numbers_are_stripped_for_quotes() {
        assert_eq!(strip_line_number("    12→    let a = 1;"), "let a = 1;");
        assert_eq!(strip_line_number("12\tfoo bar"), "foo bar");
        assert_eq!(strip_line_number("  plain"), "plain");
    }

    #[test]
    fn a_question_requests_the_files_it_names() {
        let read = |p: &str| json!({"path": p});
        let requested = |q: &str, args: &Value| requested(q, "read", args);
        let q = "read packages/coding-agent/docs/theme.md in full, then theme.ts, and then \
                 oauth-selector; also look into the footer sources";
        assert!(requested(q, &read("packages/coding-agent/docs/theme.md")));
        assert!(requested(q, &read("src/theme/theme.ts")));
        assert!(requested(q, &read("src/tui/oauth-selector.ts")));
        assert!(requested(q, &read("src/tui/footer.ts")));
        // Another file, a stem inside a longer word, a short stem, a command.
        assert!(!requested(q, &read("src/tui/theme-selector.ts")));
        assert!(!requested("the footers look off", &read("src/footer.ts")));
        assert!(!requested("fix main", &read("src/main.ts")));
        assert!(!requested(
            "configure the proxy for staging",
            &read("/etc/nginx/staging.conf")
        ));
        assert!(requested(
            "open the staging file",
            &read("/etc/nginx/staging.conf")
        ));
        assert!(!super::requested(
            "run cargo test",
            "bash",
            &json!({"command": "cargo test"})
        ));
    }

    #[test]
    fn corrections() {
        assert!(is_correction("No, use the other config file"));
        assert!(is_correction("don't touch the tests"));
        assert!(!is_correction("Now add a test for it"));
    }
}
