//! What the tests of the binary share: `ctxd` run apart from the user's environment.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `ctxd` with an empty home of its own (one per test program): no `HOME`, `XDG_*`, `CTXD_*` or
/// `RUST_LOG` of the user's reaches it (a default store, an exported `CTXD_STORE`, a
/// `CTXD_LISTEN`...). `CTXD_SHARED`, where the test data is, passes.
pub fn ctxd() -> Command {
    ctxd_in(home())
}

/// `ctxd` with `home` as its `HOME` and nothing else of the user's environment.
pub fn ctxd_in(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ctxd"));
    for (key, _) in std::env::vars_os() {
        let Some(name) = key.to_str() else { continue };
        if name.starts_with("CTXD_") || name.starts_with("XDG_") || name == "RUST_LOG" {
            cmd.env_remove(&key);
        }
    }
    cmd.env("HOME", home);
    if let Some(shared) = std::env::var_os("CTXD_SHARED") {
        cmd.env("CTXD_SHARED", shared);
    }
    cmd
}

/// This test program's empty home.
pub fn home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| fresh_dir("home"))
}

/// A new empty directory under the system's temporary directory, named for this process.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ctxd-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Where `ctxd` keeps its default store under `home` (Linux: the XDG data directory).
pub fn default_store(home: &Path) -> PathBuf {
    home.join(".local/share/ctxd/ctxd.db")
}

/// `ctxd --store STORE ARGS...`, run; its output (success or not).
pub fn on_store(store: &str, args: &[&str]) -> std::process::Output {
    ctxd()
        .arg("--store")
        .arg(store)
        .args(args)
        .output()
        .unwrap()
}

/// Run `cmd`, which must succeed (its stderr is the failure message); its output.
pub fn succeed(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
