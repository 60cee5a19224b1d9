//! `ctxd serve` as a child process: started on a free port in front of the mock, its address
//! read from the line it prints, its peak RSS read from /proc, stopped by its pid.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// How long the gateway may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Gateway {
    child: Child,
    pub base_url: String,
    log: PathBuf,
}

impl Gateway {
    /// Starts `bin serve` on `store` (a path or a URL), both upstreams pointing at
    /// `upstream`, with `serve`'s flags `extra`; its stderr goes to `dir/NAME.log`.
    pub fn start(
        bin: &Path,
        store: &std::ffi::OsStr,
        dir: &Path,
        name: &str,
        upstream: &str,
        extra: &[String],
    ) -> anyhow::Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let stderr =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(bin)
            .arg("--store")
            .arg(store)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args([
                "--upstream-anthropic",
                upstream,
                "--upstream-openai",
                upstream,
                "--upstream-gemini",
                upstream,
            ])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} serve", bin.display()))?;
        let Some(stdout) = child.stdout.take() else {
            bail!("the gateway's stdout is not piped");
        };
        // Reads stdout for good (a full pipe would block the gateway) and reports the address.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = listening_addr(&line) {
                    let _ = tx.send(addr);
                }
            }
        });
        let mut gateway = Self {
            child,
            base_url: String::new(),
            log,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while gateway.base_url.is_empty() {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(url) => gateway.base_url = url,
                Err(_) if !gateway.alive() => bail!(
                    "`{} serve` exited before listening{}",
                    bin.display(),
                    gateway.log_tail()
                ),
                Err(_) if Instant::now() > deadline => bail!(
                    "`{} serve` printed no \"listening on http://...\" line in {}s{}",
                    bin.display(),
                    START_TIMEOUT.as_secs(),
                    gateway.log_tail()
                ),
                Err(_) => {}
            }
        }
        Ok(gateway)
    }

    /// The gateway's peak resident memory so far (VmHWM), in MB.
    pub fn peak_rss_mb(&self) -> Option<f64> {
        self.vm_mb("VmHWM")
    }

    /// The gateway's resident memory now (VmRSS), in MB.
    pub fn rss_mb(&self) -> Option<f64> {
        self.vm_mb("VmRSS")
    }

    fn vm_mb(&self, field: &str) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        vm_kb(&status, field).map(|kb| kb as f64 / 1024.0)
    }

    /// The gateway's CPU seconds so far (user + system).
    pub fn cpu_seconds(&self) -> Option<f64> {
        super::cpu::process_seconds(self.child.id())
    }

    /// The end of the gateway's stderr, for an error message (the temp dir goes away).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(10)..].join("\n");
        if tail.is_empty() {
            String::new()
        } else {
            format!("; its stderr ends:\n{tail}")
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `http://ADDR` from a line ending in "listening on http://ADDR".
fn listening_addr(line: &str) -> Option<String> {
    let at = line.find("listening on ")?;
    let url = line[at + "listening on ".len()..]
        .split_whitespace()
        .next()?;
    url.starts_with("http://")
        .then(|| url.trim_end_matches('/').to_owned())
}

/// A `Vm*:   123 kB` field of /proc/PID/status.
fn vm_kb(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_address_line() {
        assert_eq!(
            listening_addr("ctxd serve: listening on http://127.0.0.1:40123").as_deref(),
            Some("http://127.0.0.1:40123")
        );
        assert_eq!(
            listening_addr("listening on http://127.0.0.1:1/ (store x)").as_deref(),
            Some("http://127.0.0.1:1")
        );
        assert_eq!(listening_addr("starting"), None);
        assert_eq!(listening_addr("listening on ftp://x"), None);
    }

    #[test]
    fn reads_vm_fields() {
        let status = "Name:\tctxd\nVmPeak:\t  100 kB\nVmHWM:\t   2048 kB\n";
        assert_eq!(vm_kb(status, "VmHWM"), Some(2048));
        assert_eq!(vm_kb(status, "VmRSS"), None);
    }
}
