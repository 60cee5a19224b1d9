//! The project a request works in, for `@project/` notes: the client's working directory where
//! the client states it, or the `x-ctxd-project` header, which wins.
//!
//! - Claude Code: `Primary working directory: /path` in its system prompt's environment block.
//! - Pi: `Current working directory: /path` in its system prompt.
//! - Codex: `<cwd>/path</cwd>` in the `environment_context` message at the start of its input.
//!
//! Read from the raw JSON bytes without parsing: these markers sit in the system prompt or the
//! first input items, so only the first [`SCAN_BYTES`] of each are looked at.

use axum::http::HeaderMap;
use memchr::memmem;

/// How much of the system prompt, and of the conversation's start, is searched.
pub const SCAN_BYTES: usize = 64 * 1024;

/// The longest project name taken from a request.
const MAX_PROJECT_BYTES: usize = 1024;

const LINE_MARKERS: [&[u8]; 2] = [
    b"Primary working directory: ",
    b"Current working directory: ",
];

/// The request's project: the header, else the working directory the system prompt or the
/// conversation's start states.
pub fn project(headers: &HeaderMap, system: Option<&[u8]>, conversation: &[u8]) -> Option<String> {
    if let Some(p) = headers
        .get("x-ctxd-project")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|p| !p.is_empty() && p.len() <= MAX_PROJECT_BYTES)
    {
        return Some(p.to_owned());
    }
    let system = system.map(head).unwrap_or_default();
    let conversation = head(conversation);
    for hay in [system, conversation] {
        for marker in LINE_MARKERS {
            if let Some(p) = after(hay, marker, |b| b == b'"' || b == b'\\') {
                return Some(p);
            }
        }
    }
    for hay in [conversation, system] {
        if let Some(p) = after(hay, b"<cwd>", |b| b == b'<' || b == b'"' || b == b'\\') {
            return Some(p);
        }
    }
    None
}

/// The first [`SCAN_BYTES`] of `bytes`.
fn head(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.len().min(SCAN_BYTES)]
}

/// The text after the first `marker` in `hay`, up to a byte `end` accepts (a JSON string's
/// quote, or an escape such as `\n`), trimmed; `None` when empty, too long or not UTF-8.
fn after(hay: &[u8], marker: &[u8], end: impl Fn(u8) -> bool) -> Option<String> {
    let start = memmem::find(hay, marker)? + marker.len();
    let rest = &hay[start..];
    let len = rest.iter().position(|&b| end(b)).unwrap_or(rest.len());
    let value = std::str::from_utf8(&rest[..len]).ok()?.trim();
    (!value.is_empty() && value.len() <= MAX_PROJECT_BYTES).then(|| value.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn each_clients_statement_is_read() {
        let h = HeaderMap::new();
        let claude =
            br##""Environment\nPrimary working directory: /home/me/repo\nIs a git repo: true""##;
        assert_eq!(
            project(&h, Some(claude), b"").as_deref(),
            Some("/home/me/repo")
        );
        let pi = br#""...\nCurrent working directory: /tmp/x y""#;
        assert_eq!(project(&h, Some(pi), b"").as_deref(), Some("/tmp/x y"));
        let codex = br#"[{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/srv/app</cwd>\n</environment_context>"}]}]"#;
        assert_eq!(project(&h, None, codex).as_deref(), Some("/srv/app"));
        assert_eq!(project(&h, Some(b"\"no directory here\""), b"[]"), None);
    }

    #[test]
    fn the_header_wins() {
        let mut h = HeaderMap::new();
        h.insert("x-ctxd-project", HeaderValue::from_static("ctxd"));
        let claude = br#""Primary working directory: /home/me/repo\n""#;
        assert_eq!(project(&h, Some(claude), b"").as_deref(), Some("ctxd"));
    }

    /// The requests the real clients sent (shared/clients/captured) all name their directory.
    #[test]
    fn captured_clients_name_their_working_directory() {
        let dir = ctxd_test_support::shared().join("clients/captured");
        let Ok(files) = std::fs::read_dir(&dir) else {
            panic!("no captured requests in {}", dir.display());
        };
        let mut seen = 0;
        for file in files {
            let path = file.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                let body = v.get("body").unwrap_or(&v);
                let system = body.get("system").or(body.get("instructions"));
                let system = system.map(|s| s.to_string());
                let conversation = body
                    .get("messages")
                    .or(body.get("input"))
                    .map(|c| c.to_string())
                    .unwrap_or_default();
                if conversation.is_empty() {
                    continue;
                }
                let got = project(
                    &HeaderMap::new(),
                    system.as_deref().map(str::as_bytes),
                    conversation.as_bytes(),
                );
                assert_eq!(
                    got.as_deref(),
                    Some("/tmp/clients/repo"),
                    "{}",
                    path.display()
                );
                seen += 1;
            }
        }
        assert!(seen >= 6, "{seen}");
    }
}
