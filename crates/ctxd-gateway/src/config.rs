//! Gateway settings: defaults, overridden by an optional TOML file, overridden by flags and
//! environment variables (the CLI applies those). No file is needed to start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Everything `ctxd serve` needs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    /// Origin (and optional path prefix) of the Anthropic API; the client's path is appended.
    pub upstream_anthropic: String,
    /// Origin (and optional path prefix) of the OpenAI API.
    pub upstream_openai: String,
    pub store: PathBuf,
    /// Largest request body accepted (after decompression too).
    pub max_body_bytes: usize,
    pub connect_timeout: Duration,
    /// Longest wait for the upstream's response headers, and then between two chunks.
    pub read_timeout: Duration,
    /// Sessions kept indexed in memory (least recently used beyond this are dropped).
    pub cached_sessions: usize,
    /// Threads serving requests. One by default: a request costs the gateway well under a
    /// millisecond of CPU (about one at 1 MB bodies), and on few cores every hand-off between
    /// two workers (waking a parked one) costs more tail latency than the parallelism brings
    /// (measured: docs/benchmarks.md). Raise it for a gateway serving many busy agents at once.
    /// The store's writer and blocking reads have threads of their own.
    pub workers: usize,
}

impl Settings {
    pub fn new(store: PathBuf) -> Self {
        Settings {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            upstream_anthropic: "https://api.anthropic.com".into(),
            upstream_openai: "https://api.openai.com".into(),
            store,
            max_body_bytes: 64 * 1024 * 1024,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(600),
            cached_sessions: 256,
            workers: 1,
        }
    }

    /// Apply a TOML settings file over these settings.
    pub fn apply_file(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        let file: FileSettings = toml::from_str(&text)
            .map_err(|e| format!("config {}: {}", path.display(), e.message()))?;
        if let Some(listen) = file.listen {
            self.listen = listen
                .parse()
                .map_err(|e| format!("config {}: listen {listen:?}: {e}", path.display()))?;
        }
        if let Some(u) = file.upstream_anthropic {
            self.upstream_anthropic = u;
        }
        if let Some(u) = file.upstream_openai {
            self.upstream_openai = u;
        }
        if let Some(s) = file.store {
            self.store = s;
        }
        if let Some(n) = file.max_body_bytes {
            self.max_body_bytes = n;
        }
        if let Some(s) = file.connect_timeout {
            self.connect_timeout = Duration::from_secs(s);
        }
        if let Some(s) = file.read_timeout {
            self.read_timeout = Duration::from_secs(s);
        }
        if let Some(n) = file.cached_sessions {
            self.cached_sessions = n.max(1);
        }
        if let Some(n) = file.workers {
            self.workers = n;
        }
        Ok(())
    }

    /// Check the upstream URLs (trailing slashes removed) and the worker count.
    pub fn validate(&mut self) -> Result<(), String> {
        if !(1..=1024).contains(&self.workers) {
            return Err(format!("--workers {} must be 1 to 1024", self.workers));
        }
        for (name, url) in [
            ("upstream-anthropic", &mut self.upstream_anthropic),
            ("upstream-openai", &mut self.upstream_openai),
        ] {
            let parsed = reqwest::Url::parse(url)
                .map_err(|e| format!("--{name} {url:?} is not a URL: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(format!("--{name} {url:?} must be http or https"));
            }
            while url.ends_with('/') {
                url.pop();
            }
        }
        Ok(())
    }
}

/// The TOML file's shape: every field optional, unknown fields refused (a typo is an error,
/// not a silently ignored setting).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileSettings {
    listen: Option<String>,
    upstream_anthropic: Option<String>,
    upstream_openai: Option<String>,
    store: Option<PathBuf>,
    max_body_bytes: Option<usize>,
    /// Seconds, as `--connect-timeout` (`connect-timeout-secs` is the older name).
    #[serde(alias = "connect-timeout-secs")]
    connect_timeout: Option<u64>,
    /// Seconds, as `--read-timeout` (`read-timeout-secs` is the older name).
    #[serde(alias = "read-timeout-secs")]
    read_timeout: Option<u64>,
    cached_sessions: Option<usize>,
    workers: Option<usize>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_overrides_defaults_and_typos_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctxd.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9999\"\nupstream-openai = \"http://127.0.0.1:1/\"\nread-timeout-secs = 5\nworkers = 3\n",
        )
        .unwrap();
        let mut s = Settings::new("x.db".into());
        s.apply_file(&path).unwrap();
        s.validate().unwrap();
        assert_eq!(s.listen.port(), 9999);
        assert_eq!(s.upstream_openai, "http://127.0.0.1:1");
        assert_eq!(s.read_timeout, Duration::from_secs(5));
        assert_eq!(s.workers, 3);
        // The keys are the flags' names; the older `*-secs` names still read.
        std::fs::write(&path, "read-timeout = 7\nconnect-timeout = 2\n").unwrap();
        s.apply_file(&path).unwrap();
        assert_eq!(s.read_timeout, Duration::from_secs(7));
        assert_eq!(s.connect_timeout, Duration::from_secs(2));
        s.workers = 0;
        assert!(s.validate().unwrap_err().contains("workers"));
        s.workers = 1;
        std::fs::write(&path, "lisen = \"x\"\n").unwrap();
        assert!(s.apply_file(&path).unwrap_err().contains("lisen"));
        s.upstream_anthropic = "ftp://x".into();
        assert!(s.validate().is_err());
    }
}
