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

/// This test program's empty home: a directory in cargo's scratch space for tests
/// (`CARGO_TARGET_TMPDIR`), one per test program, emptied when the program starts. Not a
/// temporary directory, which a static could never remove: every run left one in /tmp.
pub fn home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let program = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("home-{program}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// A new empty directory of a test's own, removed with its contents when dropped (also when the
/// test fails): nothing is left in the system's temporary directory.
pub struct TestDir(tempfile::TempDir);

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<std::ffi::OsStr> for TestDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.path().as_os_str()
    }
}

/// A [`TestDir`] whose name starts with `ctxd-test-{name}-`.
pub fn fresh_dir(name: &str) -> TestDir {
    TestDir(
        tempfile::Builder::new()
            .prefix(&format!("ctxd-test-{name}-"))
            .tempdir()
            .unwrap(),
    )
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
