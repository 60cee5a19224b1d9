//! What the tests of the binary share: `ctxd` run apart from the user's environment.
#![allow(dead_code, unused_imports, clippy::unwrap_used)]

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
    ctxd_test_support::isolated(Command::new(env!("CARGO_BIN_EXE_ctxd")), home)
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

pub use ctxd_test_support::{shared, succeed};

/// One HTTP/1.1 POST over a fresh connection; the whole response as text.
pub fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A response's status code and body (after the headers) from [`post`]'s text; a chunked body
/// is joined.
pub fn status_and_body(response: &str) -> (u16, String) {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (status, body.to_owned());
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    (status, out)
}

/// `ctxd serve` running as a child (killed when dropped, so a failed test leaves none).
pub struct Gateway {
    pub child: std::process::Child,
    pub addr: String,
}

impl Drop for Gateway {
    /// A failed test must not leave the gateway running (it holds the test's output pipes).
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `ctxd --store STORE serve` on an ephemeral port with both upstreams at `upstream` and
/// `args` after, once it listens.
pub fn serve(store: &Path, upstream: &str, args: &[&str]) -> Gateway {
    use std::io::BufRead;
    let mut child = ctxd()
        .args([
            "--store",
            store.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .args([
            "--upstream-anthropic",
            upstream,
            "--upstream-openai",
            upstream,
            "--upstream-gemini",
            upstream,
        ])
        .args(args)
        .env("CTXD_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit("http://").next().unwrap().to_owned();
    assert!(line.starts_with("ctxd serve: listening on"), "{line}");
    Gateway { child, addr }
}

/// SIGTERM and wait: the gateway's store is closed when this returns.
pub fn stop(gw: &mut Gateway) {
    let killed = Command::new("kill")
        .args(["-TERM", &gw.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(gw.child.wait().unwrap().success());
}
