//! The record of received requests: in memory for the library, as JSON for `/_mock/requests`
//! and the `--log` file.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::request::Parts;
use axum::http::HeaderMap;
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::body::{self, DecodeError};
use crate::config::Recording;
use crate::error::MockError;

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// Path and query, as sent (`/v1/messages?beta=true`).
    pub path: String,
    pub headers: HeaderMap,
    /// The body exactly as received (still compressed if it was); empty under
    /// [`Recording::Meta`].
    pub body: Bytes,
    /// The length of the body as received.
    pub body_len: usize,
    /// Seconds since the epoch when the body had arrived.
    pub received_at: f64,
    /// The strict-mode rule that refused the request (the reply's `x-mock-refused` header), if
    /// one did. Set once the reply is ready, so not in the `--log` file (written on arrival).
    pub refused: Option<String>,
    /// The reply's HTTP status, once it is ready (a stream may still fail or be cut after it).
    pub status: Option<u16>,
    /// The usage a complete reply reported (none for errors, failing and truncated streams):
    /// what the client was billed for this request.
    pub usage: Option<ReplyUsage>,
    /// Arrival number: finds the entry again to note a refusal.
    seq: u64,
}

/// The token counts of one reply, as its body reports them (Anthropic's fields; OpenAI's
/// have no cache writes and count cache reads inside their prompt tokens).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyUsage {
    /// Input tokens outside the cache.
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl ReplyUsage {
    /// `"input output cache_read cache_write"`.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        let mut n = s.split(' ').map(|t| t.parse::<u64>().ok());
        Some(Self {
            input: n.next()??,
            output: n.next()??,
            cache_read: n.next()??,
            cache_write: n.next()??,
        })
    }
}

impl Recorded {
    /// A header's value, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A query parameter's value as sent (not percent-decoded): Gemini's `?key=`, `alt`.
    pub fn query(&self, name: &str) -> Option<&str> {
        let (_, query) = self.path.split_once('?')?;
        query.split('&').find_map(|kv| match kv.split_once('=') {
            Some((k, v)) if k == name => Some(v),
            None if kv == name => Some(""),
            _ => None,
        })
    }

    /// The path without the query.
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or(&self.path)
    }

    /// The body with its `content-encoding` undone.
    pub fn decoded_body(&self) -> Result<Vec<u8>, DecodeError> {
        body::decode(&self.headers, &self.body, usize::MAX).map(|b| b.into_owned())
    }

    /// The decoded body as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.decoded_body().ok()?).ok()
    }

    /// The `/_mock/requests` form: headers as an object (repeated ones joined by ", "), the
    /// body as UTF-8 text when it is, else base64.
    pub fn to_json(&self) -> Value {
        let mut headers = Map::new();
        for (name, value) in &self.headers {
            let value = String::from_utf8_lossy(value.as_bytes());
            match headers.get_mut(name.as_str()) {
                Some(Value::String(prev)) => {
                    prev.push_str(", ");
                    prev.push_str(&value);
                }
                _ => {
                    headers.insert(name.as_str().to_owned(), Value::String(value.into_owned()));
                }
            }
        }
        let (body, encoding) = match std::str::from_utf8(&self.body) {
            Ok(text) => (text.to_owned(), "utf8"),
            Err(_) => (
                base64::engine::general_purpose::STANDARD.encode(&self.body),
                "base64",
            ),
        };
        json!({
            "ts": self.received_at,
            "method": self.method,
            "path": self.path,
            "headers": headers,
            "body_len": self.body_len,
            "body": body,
            "body_encoding": encoding,
            "refused": self.refused,
            "status": self.status,
        })
    }
}

/// Keeps requests per [`Recording`] and feeds the optional log thread.
#[derive(Debug)]
pub(crate) struct Recorder {
    mode: Recording,
    kept: Mutex<Vec<Recorded>>,
    log: Option<Sender<Vec<u8>>>,
    next_seq: AtomicU64,
}

impl Recorder {
    pub(crate) fn new(mode: Recording, log: Option<&Path>) -> Result<Self, MockError> {
        let log = match log {
            None => None,
            Some(path) => Some(spawn_log_writer(path)?),
        };
        Ok(Self {
            mode,
            kept: Mutex::new(Vec::new()),
            log,
            next_seq: AtomicU64::new(0),
        })
    }

    /// Records a request; returns its arrival number for [`Recorder::note_refused`].
    pub(crate) fn push(&self, parts: &Parts, body: &Bytes) -> u64 {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        if self.mode == Recording::Off && self.log.is_none() {
            return seq;
        }
        let rec = Recorded {
            method: parts.method.as_str().to_owned(),
            path: parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
            headers: parts.headers.clone(),
            body: body.clone(),
            body_len: body.len(),
            received_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            refused: None,
            status: None,
            usage: None,
            seq,
        };
        if let Some(log) = &self.log {
            let mut line = rec.to_json().to_string().into_bytes();
            line.push(b'\n');
            // A send fails only when the writer thread died (disk error): the log stops there.
            let _ = log.send(line);
        }
        match self.mode {
            Recording::Full => lock(&self.kept).push(rec),
            Recording::Meta => lock(&self.kept).push(Recorded {
                body: Bytes::new(),
                ..rec
            }),
            Recording::Off => {}
        }
        seq
    }

    /// Notes on request `seq` (if still kept) the rule that refused it.
    pub(crate) fn note_refused(&self, seq: u64, rule: &str) {
        let mut kept = lock(&self.kept);
        if let Some(rec) = kept.iter_mut().rev().find(|r| r.seq == seq) {
            rec.refused = Some(rule.to_owned());
        }
    }

    /// Notes on request `seq` (if still kept) its reply's status and usage.
    pub(crate) fn note_reply(&self, seq: u64, status: u16, usage: Option<ReplyUsage>) {
        let mut kept = lock(&self.kept);
        if let Some(rec) = kept.iter_mut().rev().find(|r| r.seq == seq) {
            rec.status = Some(status);
            rec.usage = usage;
        }
    }

    pub(crate) fn all(&self) -> Vec<Recorded> {
        lock(&self.kept).clone()
    }

    pub(crate) fn clear(&self) {
        lock(&self.kept).clear();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes log lines on a thread of its own so a slow disk never stalls a reply; flushes
/// whenever the queue is empty so readers see each request soon after it arrived.
fn spawn_log_writer(path: &Path) -> Result<Sender<Vec<u8>>, MockError> {
    let log_err = |source| MockError::Log {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(log_err)?;
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::Builder::new()
        .name("ctxd-mock-log".into())
        .spawn(move || {
            let mut out = std::io::BufWriter::new(file);
            while let Ok(line) = rx.recv() {
                if out.write_all(&line).is_err() {
                    return;
                }
                while let Ok(line) = rx.try_recv() {
                    if out.write_all(&line).is_err() {
                        return;
                    }
                }
                if out.flush().is_err() {
                    return;
                }
            }
        })
        .map_err(log_err)?;
    Ok(tx)
}
