#![allow(clippy::unwrap_used, clippy::expect_used)]

//! What README says against what is: the minimum Rust version, and every `ctxd serve` flag
//! and environment variable in its table.

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
