#![allow(clippy::unwrap_used, clippy::expect_used)]

//! What the documents say against what is: README's minimum Rust version and every `ctxd serve`
//! flag and environment variable in its table; ARCHITECTURE.md's paths, code map and length.

mod common;

use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn version(v: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = v.split('.').map(|p| p.parse().unwrap()).collect();
    parts.resize(3, 0);
    parts
}

/// `rust-version` is the oldest toolchain the locked dependencies build with: not lower (the
/// build would fail), not higher (README would ask for more than needed). README says it too.
#[test]
fn rust_version_is_the_locked_dependencies_minimum() {
    // This machine's dependencies (the others may not be downloaded; no network here).
    let rustc = Command::new("rustc").arg("-vV").output().unwrap();
    let rustc = String::from_utf8(rustc.stdout).unwrap();
    let host = rustc
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = common::succeed(
        Command::new(cargo)
            .current_dir(repo())
            .args(["metadata", "--format-version", "1", "--locked", "--offline"])
            .args(["--filter-platform", host]),
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours = packages
        .iter()
        .find(|p| p["name"] == "ctxd-cli")
        .and_then(|p| p["rust_version"].as_str())
        .expect("ctxd-cli has a rust-version");
    let (needed, by) = packages
        .iter()
        .filter(|p| p["source"].is_string())
        .filter_map(|p| Some((version(p["rust_version"].as_str()?), p["name"].as_str()?)))
        .max()
        .unwrap();
    assert_eq!(
        version(ours),
        needed,
        "rust-version {ours}, but {by} needs {needed:?}"
    );
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let short = ours.trim_end_matches(".0");
    assert!(
        readme.contains(&format!("Rust {short} or newer")),
        "README names another Rust version than {short}"
    );
}

/// Every long flag and environment variable `ctxd serve --help` shows is in README.
#[test]
fn readme_lists_every_serve_flag_and_variable() {
    let out = common::ctxd().args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let mut seen = 0;
    for word in help.split(|c: char| c.is_whitespace() || "[],=".contains(c)) {
        let named = (word.starts_with("--") && word.len() > 2 && word != "--help")
            || word.starts_with("CTXD_");
        if named {
            seen += 1;
            assert!(readme.contains(word), "README does not mention {word}");
        }
    }
    assert!(seen > 15, "{help}");
    // The settings file's keys are named in the help, each once.
    assert!(
        help.contains("read-timeout,") && help.contains("cached-sessions"),
        "{help}"
    );
}

// ARCHITECTURE.md: a map a newcomer reads in minutes, so every path it names exists, its code
// map names files for every feature, and it carries no history (issue numbers) and stays short.
//
// Paths are the backticked spans that look like one: only letters, digits and `_-./`, not
// starting with `/` (a route such as `/ui`), and holding a `/` or ending in a file extension
// below. Outside the code map they are written from the repository's root. In the code map's
// table a column headed by a crate (`ctxd-core`) holds paths under that crate's `src/`; any
// other column (after the feature's name) holds paths from the root.

/// The most words ARCHITECTURE.md may hold (its target is about 2,000).
const ARCHITECTURE_WORDS: usize = 2_500;

fn architecture() -> String {
    std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap()
}

fn path_like(span: &str) -> bool {
    const EXTENSIONS: [&str; 5] = [".rs", ".md", ".sql", ".py", ".toml"];
    !span.is_empty()
        && !span.starts_with('/')
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        && (span.contains('/') || EXTENSIONS.iter().any(|e| span.ends_with(e)))
}

/// A line's backticked spans (the document keeps each span on one line).
fn spans(number: usize, line: &str) -> Vec<&str> {
    assert!(
        line.matches('`').count().is_multiple_of(2),
        "ARCHITECTURE.md line {number}: an odd number of backticks: {line}"
    );
    line.split('`').skip(1).step_by(2).collect()
}

/// The lines outside fenced blocks, numbered from 1.
fn prose(doc: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in doc.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// A row of the code map: the feature and each path it names, as written and as resolved.
struct Feature {
    line: usize,
    name: String,
    files: Vec<(String, std::path::PathBuf)>,
}

/// The code map: the first table after the `## Code map` heading. Returns its rows and the
/// numbers of its lines.
fn code_map(doc: &str) -> (Vec<Feature>, std::ops::RangeInclusive<usize>) {
    let lines = prose(doc);
    let heading = lines
        .iter()
        .position(|(_, l)| l.trim() == "## Code map")
        .expect("ARCHITECTURE.md has a `## Code map` section");
    let start = heading
        + lines[heading..]
            .iter()
            .position(|(_, l)| l.starts_with('|'))
            .expect("the code map is a table");
    let table: Vec<(usize, &str)> = lines[start..]
        .iter()
        .take_while(|(_, l)| l.starts_with('|'))
        .copied()
        .collect();
    assert!(table.len() > 2, "the code map has a header and rows");
    let bases: Vec<std::path::PathBuf> = cells(table[0].1)
        .iter()
        .map(|h| {
            let h = h.trim_matches('`');
            if h.starts_with("ctxd-") {
                assert!(
                    repo().join("crates").join(h).is_dir(),
                    "the code map's column {h} is no crate"
                );
                repo().join("crates").join(h).join("src")
            } else {
                repo().to_path_buf()
            }
        })
        .collect();
    let mut features = Vec::new();
    for &(line, text) in &table[2..] {
        let row = cells(text);
        assert_eq!(
            row.len(),
            bases.len(),
            "ARCHITECTURE.md line {line}: the row's cells do not match the header"
        );
        let mut files = Vec::new();
        for (cell, base) in row.iter().zip(&bases).skip(1) {
            for span in spans(line, cell) {
                assert!(
                    path_like(span),
                    "ARCHITECTURE.md line {line}: `{span}` in the code map is not a path"
                );
                files.push((span.to_string(), base.join(span)));
            }
        }
        features.push(Feature {
            line,
            name: row[0].to_string(),
            files,
        });
    }
    let range = table[0].0..=table[table.len() - 1].0;
    (features, range)
}

/// Every path ARCHITECTURE.md names exists: in its text from the root, in the code map from
/// the row's column.
#[test]
fn architecture_names_only_existing_paths() {
    let doc = architecture();
    let (features, table) = code_map(&doc);
    let mut missing = Vec::new();
    for (line, text) in prose(&doc) {
        if table.contains(&line) {
            continue;
        }
        for span in spans(line, text) {
            if path_like(span) && !repo().join(span).exists() {
                missing.push(format!("line {line}: {span}"));
            }
        }
    }
    for feature in &features {
        for (span, path) in &feature.files {
            if !path.exists() {
                missing.push(format!(
                    "line {}: {span} ({})",
                    feature.line,
                    path.display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The code map names at least one file for every feature, and each exists.
#[test]
fn architecture_code_map_names_files_for_every_feature() {
    let (features, _) = code_map(&architecture());
    assert!(features.len() >= 20, "the code map lists the features");
    for feature in &features {
        assert!(
            !feature.name.is_empty(),
            "ARCHITECTURE.md line {}: a row without a feature",
            feature.line
        );
        assert!(
            !feature.files.is_empty(),
            "ARCHITECTURE.md line {}: {} names no file",
            feature.line,
            feature.name
        );
        for (span, path) in &feature.files {
            assert!(
                path.exists(),
                "ARCHITECTURE.md line {}: {}: {span} does not exist ({})",
                feature.line,
                feature.name,
                path.display()
            );
        }
    }
}

/// ARCHITECTURE.md describes what is, not how it came to be: no issue numbers (`issue 12`,
/// `issues 14`, `#12`), and at most `ARCHITECTURE_WORDS` words.
#[test]
fn architecture_has_no_issue_numbers_and_stays_short() {
    let doc = architecture();
    let lower = doc.to_lowercase();
    for (at, _) in lower.match_indices("issue") {
        let rest = lower[at + "issue".len()..].trim_start_matches('s');
        let rest = rest.trim_start().trim_start_matches('#');
        assert!(
            !rest.starts_with(|c: char| c.is_ascii_digit()),
            "ARCHITECTURE.md cites an issue: {}",
            lower[at..].chars().take(20).collect::<String>()
        );
    }
    for (at, _) in doc.match_indices('#') {
        assert!(
            !doc[at + 1..].starts_with(|c: char| c.is_ascii_digit()),
            "ARCHITECTURE.md cites an issue or PR: {}",
            doc[at..].chars().take(12).collect::<String>()
        );
    }
    let words = doc.split_whitespace().count();
    assert!(
        words <= ARCHITECTURE_WORDS,
        "ARCHITECTURE.md has {words} words, more than {ARCHITECTURE_WORDS}"
    );
}

/// Links into ARCHITECTURE.md's sections from README.md and docs/ name a heading it has.
#[test]
fn links_to_architecture_sections_resolve() {
    let anchors: Vec<String> = architecture()
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || " -_".contains(*c))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect();
    let mut docs = vec![repo().join("README.md")];
    for entry in std::fs::read_dir(repo().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    for path in docs {
        let text = std::fs::read_to_string(&path).unwrap();
        for (at, link) in text.match_indices("ARCHITECTURE.md#") {
            let anchor: String = text[at + link.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || "-_".contains(*c))
                .collect();
            assert!(
                anchors.contains(&anchor),
                "{} links to ARCHITECTURE.md#{anchor}, which is no heading of it",
                path.display()
            );
        }
    }
}
