#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The core stays pure: no I/O, async, HTTP, SQL or tokenizer tables in its dependency tree.

use std::process::Command;

#[test]
fn core_depends_on_no_io_crates() {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "ctxd-core",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    let forbidden = [
        "tokio",
        "axum",
        "hyper",
        "reqwest",
        "rusqlite",
        "sqlx",
        "rmcp",
        "mio",
        "bpe-openai",
        "ratatui",
        "crossterm",
    ];
    for line in tree.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        assert!(!forbidden.contains(&name), "ctxd-core depends on {name}");
    }
    assert!(
        tree.contains("serde_json"),
        "cargo tree output unexpected: {tree}"
    );
}
