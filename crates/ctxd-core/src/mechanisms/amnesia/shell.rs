//! Which shell commands only read: the commands a read-like shell call may run, decided by
//! parsing the command (never by its name alone), so a call that could write is never judged.
//!
//! A command reads when, after the harmless redirections (`2>/dev/null`, `>/dev/null`,
//! `2>&1`) are set aside, it has no other redirection, substitution, background job, heredoc
//! or process substitution, and every simple command of its pipelines and lists (`|`, `&&`,
//! `||`, `;`, newlines) is one of [`READERS`] (with `sed` only as `sed -n` without `-i`, `find`
//! without actions that run or delete, `git` only with a reading subcommand). Anything the
//! parser is unsure of (unbalanced quotes, variables assigned before a command) is not a read.

/// Commands that only read files or print what they are given.
pub const READERS: &[&str] = &[
    "cat", "head", "tail", "sed", "rg", "grep", "egrep", "fgrep", "ls", "find", "fd", "wc", "nl",
    "tree", "pwd", "cd", "file", "stat", "du", "sort", "uniq", "cut", "tr", "column", "git",
    "echo", "printf", "true", "basename", "dirname", "realpath", "less", "more", "bat", "jq",
];

/// `git` subcommands that only read.
const GIT_READS: &[&str] = &[
    "show",
    "log",
    "diff",
    "status",
    "grep",
    "ls-files",
    "blame",
    "rev-parse",
];

/// `find` arguments that run, delete or write.
const FIND_ACTIONS: &[&str] = &[
    "-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls",
];

/// Whether `command` (a shell command line) only reads.
pub fn is_read_only(command: &str) -> bool {
    let mut line = command.to_owned();
    for harmless in [
        "2>/dev/null",
        "2> /dev/null",
        ">/dev/null",
        "> /dev/null",
        "2>&1",
    ] {
        line = line.replace(harmless, " ");
    }
    let Some(segments) = split(&line) else {
        return false;
    };
    !segments.is_empty() && segments.iter().all(|words| simple_reads(words))
}

/// The simple commands of `line` as words, or `None` where a construct could write or run
/// something else (redirections, substitutions, background jobs, unbalanced quotes).
fn split(line: &str) -> Option<Vec<Vec<String>>> {
    let mut segments: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, words: &mut Vec<String>| {
        if *in_word {
            words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => word.push(ch),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        // Substitutions run inside double quotes.
                        '`' => return None,
                        '$' if chars.peek() == Some(&'(') => return None,
                        '\\' => word.push(chars.next()?),
                        ch => word.push(ch),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            '>' | '<' | '`' | '(' | ')' | '{' | '}' => return None,
            '$' if chars.peek() == Some(&'(') => return None,
            '|' | ';' | '\n' | '&' => {
                if c == '&' && chars.peek() != Some(&'&') {
                    return None; // a background job
                }
                if (c == '&' || c == '|') && chars.peek() == Some(&c) {
                    chars.next();
                }
                end_word(&mut word, &mut in_word, &mut words);
                if !words.is_empty() {
                    segments.push(std::mem::take(&mut words));
                }
            }
            c if c.is_whitespace() => end_word(&mut word, &mut in_word, &mut words),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut words);
    if !words.is_empty() {
        segments.push(words);
    }
    Some(segments)
}

fn simple_reads(words: &[String]) -> bool {
    let Some(first) = words.first() else {
        return true;
    };
    // `VAR=value cmd` changes what the command does; not judged.
    if first.contains('=') {
        return false;
    }
    let name = first.rsplit('/').next().unwrap_or(first);
    if !READERS.contains(&name) {
        return false;
    }
    let rest = &words[1..];
    match name {
        "sed" => {
            rest.iter()
                .any(|w| w == "-n" || w == "--quiet" || w == "--silent")
                && !rest.iter().any(|w| {
                    w.starts_with("-i")
                        || w.starts_with("--in-place")
                        || (w.starts_with('-')
                            && !w.starts_with("--")
                            && w.contains('i')
                            && w.len() <= 4)
                })
        }
        "find" | "fd" => !rest.iter().any(|w| {
            FIND_ACTIONS.contains(&w.as_str())
                || w == "-x"
                || w == "--exec"
                || w == "-X"
                || w == "--exec-batch"
        }),
        "git" => {
            rest.iter()
                .find(|w| !w.starts_with('-'))
                .is_some_and(|sub| GIT_READS.contains(&sub.as_str()))
                && !rest.iter().any(|w| {
                    w == "-D"
                        || w == "-d"
                        || w == "-m"
                        || w == "--output"
                        || w.starts_with("--output=")
                })
        }
        "sort" | "tree" => !rest.iter().any(|w| w == "-o" || w.starts_with("--output")),
        _ => true,
    }
}
