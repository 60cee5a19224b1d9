//! Choosing a format by content: the first lines' JSON keys, never the file name.

use std::io::BufRead;

use serde_json::{Map, Value};

use ctxd_core::model::WireApi;

use crate::error::ImportError;

/// A format ctxd can import.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Pi session JSONL (v1 linear, v2/v3 tree).
    Pi,
    /// Claude Code transcript JSONL (1.0.x and 2.x, and 2.x subagent files).
    ClaudeCode,
    /// Codex CLI rollout JSONL (current and legacy).
    Codex,
    /// SWE-agent `.traj` (one JSON document).
    SweAgent,
    /// mini-swe-agent `.traj.json` (one JSON document).
    MiniSweAgent,
    /// Gemini CLI chat recording: JSON (one document, up to 0.38) or JSONL (from 0.39).
    GeminiCli,
    /// One raw API request body (one JSON document).
    ApiRequest(WireApi),
    /// JSONL of captured requests (`{method, path, headers, body}` a line) or of bare bodies.
    CapturedRequests,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Pi => "pi",
            Format::ClaudeCode => "claude-code",
            Format::Codex => "codex",
            Format::SweAgent => "swe-agent",
            Format::MiniSweAgent => "mini-swe-agent",
            Format::GeminiCli => "gemini-cli",
            Format::ApiRequest(WireApi::AnthropicMessages) => "anthropic-messages request",
            Format::ApiRequest(WireApi::OpenaiChat) => "openai-chat request",
            Format::ApiRequest(WireApi::OpenaiResponses) => "openai-responses request",
            Format::ApiRequest(WireApi::GeminiGenerateContent) => "gemini request",
            Format::CapturedRequests => "captured requests",
        }
    }

    /// Whether the format is one JSON document rather than JSON lines. Gemini CLI writes
    /// either ([`Format::GeminiCli`] is both; `import_reader` tells them apart by the first
    /// line).
    pub fn is_document(self) -> bool {
        matches!(
            self,
            Format::SweAgent | Format::MiniSweAgent | Format::GeminiCli | Format::ApiRequest(_)
        )
    }
}

/// How many leading lines detection may look at when the first ones are corrupt.
const DETECT_LINES: usize = 16;
/// How much of the head is checked for binary content.
const BINARY_PROBE: usize = 8192;

/// The head of the input, read (and consumed) for detection. Import continues with
/// `head.chain(rest)`.
pub(crate) struct Head {
    pub bytes: Vec<u8>,
}

/// Read up to [`DETECT_LINES`] lines (or the whole input, if it is shorter).
pub(crate) fn peek_head<R: BufRead>(reader: &mut R) -> Result<Head, ImportError> {
    let mut bytes = Vec::new();
    let mut lines = 0;
    while lines < DETECT_LINES {
        let n = reader
            .read_until(b'\n', &mut bytes)
            .map_err(|error| ImportError::Io {
                path: String::from("<input>"),
                error,
            })?;
        if n == 0 {
            break;
        }
        lines += 1;
    }
    Ok(Head { bytes })
}

/// Detect the format of a file from its head (the first lines, or all of it).
pub fn detect(head: &[u8]) -> Result<Format, ImportError> {
    detect_head(head)?.ok_or_else(|| {
        ImportError::UnknownFormat("a JSON document ctxd could not recognise from its start".into())
    })
}

/// Like [`detect`], but `None` when the head is the start of one pretty-printed JSON document,
/// which must be read whole to be recognised.
pub(crate) fn detect_head(head: &[u8]) -> Result<Option<Format>, ImportError> {
    if head.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(ImportError::Empty);
    }
    check_text(head)?;
    let mut saw_json_line = false;
    for line in head.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(obj)) => {
                saw_json_line = true;
                if let Some(format) = detect_object(&obj) {
                    return Ok(Some(format));
                }
            }
            Ok(_) => saw_json_line = true,
            Err(_) => {}
        }
    }
    let first = head.trim_ascii_start().first().copied();
    if !saw_json_line && matches!(first, Some(b'{')) {
        // Possibly one pretty-printed document: the caller parses it whole.
        if let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(head) {
            if let Some(format) = detect_object(&obj) {
                return Ok(Some(format));
            }
            return Err(unknown_shape(&obj));
        }
        return Ok(None);
    }
    if saw_json_line {
        return Err(ImportError::UnknownFormat(
            "JSON, but not of any session or request shape ctxd reads".into(),
        ));
    }
    Err(ImportError::UnknownFormat("not JSON or JSON lines".into()))
}

/// Detect a pretty-printed document from the whole text (used when the head alone was not a
/// complete JSON value).
pub(crate) fn detect_document(doc: &Value) -> Result<Format, ImportError> {
    match doc {
        Value::Object(obj) => detect_object(obj)
            .filter(|f| f.is_document())
            .ok_or_else(|| unknown_shape(obj)),
        _ => Err(ImportError::UnknownFormat(
            "a JSON value that is not an object".into(),
        )),
    }
}

fn unknown_shape(obj: &Map<String, Value>) -> ImportError {
    let keys: Vec<&str> = obj.keys().take(6).map(String::as_str).collect();
    ImportError::UnknownFormat(format!("a JSON object with keys {}", keys.join(", ")))
}

fn check_text(head: &[u8]) -> Result<(), ImportError> {
    let probe = &head[..head.len().min(BINARY_PROBE)];
    if let Some(offset) = memchr::memchr(0, probe) {
        return Err(ImportError::Binary { offset });
    }
    if let Err(e) = std::str::from_utf8(probe) {
        // A multi-byte character cut by the probe's end is not binary.
        if e.error_len().is_some() {
            return Err(ImportError::Binary {
                offset: e.valid_up_to(),
            });
        }
    }
    Ok(())
}

fn str_of<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    obj.get(key).and_then(Value::as_str)
}

/// Recognise one JSON object: a line of a JSONL format or a whole document.
pub(crate) fn detect_object(obj: &Map<String, Value>) -> Option<Format> {
    let ty = str_of(obj, "type");
    // Pi: the header line, or (headerless copies) a message entry with Pi's role names.
    if ty == Some("session") && (obj.contains_key("cwd") || obj.contains_key("version")) {
        return Some(Format::Pi);
    }
    if ty == Some("message") && obj.get("message").is_some_and(Value::is_object) {
        return Some(Format::Pi);
    }
    // Codex: `{timestamp, type, payload}` lines, or the legacy bare meta / state lines.
    if obj.contains_key("payload")
        && matches!(
            ty,
            Some(
                "session_meta"
                    | "response_item"
                    | "event_msg"
                    | "turn_context"
                    | "compacted"
                    | "world_state"
            )
        )
    {
        return Some(Format::Codex);
    }
    if obj.contains_key("record_type")
        || (ty.is_none()
            && obj.contains_key("id")
            && obj.contains_key("timestamp")
            && (obj.contains_key("instructions") || obj.contains_key("git")))
    {
        return Some(Format::Codex);
    }
    // Claude Code: typed lines carrying its session bookkeeping.
    if matches!(
        ty,
        Some(
            "user"
                | "assistant"
                | "summary"
                | "system"
                | "progress"
                | "file-history-snapshot"
                | "queue-operation"
                | "attachment"
        )
    ) && (obj.contains_key("sessionId")
        || obj.contains_key("uuid")
        || obj.contains_key("leafUuid")
        || obj.contains_key("messageId"))
    {
        return Some(Format::ClaudeCode);
    }
    if let Some(format) = gemini_cli(obj, ty) {
        return Some(format);
    }
    // Trajectories.
    if obj.get("trajectory").is_some_and(Value::is_array)
        && (obj.contains_key("history")
            || obj.contains_key("info")
            || obj.contains_key("environment"))
    {
        return Some(Format::SweAgent);
    }
    if obj.get("messages").is_some_and(Value::is_array)
        && (str_of(obj, "trajectory_format").is_some_and(|f| f.starts_with("mini-swe-agent"))
            || (obj.get("info").is_some_and(Value::is_object) && !obj.contains_key("model")))
    {
        return Some(Format::MiniSweAgent);
    }
    // Captured requests: `{method, path, headers, body}`.
    if obj.contains_key("method") && obj.contains_key("path") && obj.contains_key("body") {
        return Some(Format::CapturedRequests);
    }
    api_of_body(obj).map(Format::ApiRequest)
}

/// Gemini CLI: the JSON layout's document (`sessionId` and `messages` of its types), or a
/// JSONL line: the header (`sessionId` + `projectHash`), a `$set` patch or a `$rewindTo`, or
/// a message record of a type only Gemini CLI writes (`gemini`).
fn gemini_cli(obj: &Map<String, Value>, ty: Option<&str>) -> Option<Format> {
    let session_id = str_of(obj, "sessionId").is_some();
    if let Some(messages) = obj.get("messages").and_then(Value::as_array) {
        let typed = messages.iter().take(8).any(|m| {
            str_of_value(m, "type").is_some_and(|t| crate::gemini_cli::MESSAGE_TYPES.contains(&t))
        });
        return (session_id && (typed || messages.is_empty() && obj.contains_key("projectHash")))
            .then_some(Format::GeminiCli);
    }
    let header = session_id && str_of(obj, "projectHash").is_some();
    let patch = obj.len() == 1
        && (obj.get("$set").is_some_and(Value::is_object) || str_of(obj, "$rewindTo").is_some());
    let record = ty == Some("gemini") && str_of(obj, "id").is_some();
    (header || patch || record).then_some(Format::GeminiCli)
}

/// Which wire API a request body is for, from its shape.
pub fn api_of_body(obj: &Map<String, Value>) -> Option<WireApi> {
    if obj.get("contents").is_some_and(Value::is_array) && !obj.contains_key("messages") {
        return Some(WireApi::GeminiGenerateContent);
    }
    if obj.get("input").is_some() && (obj.contains_key("model") || obj.contains_key("instructions"))
    {
        return Some(WireApi::OpenaiResponses);
    }
    let messages = obj.get("messages")?.as_array()?;
    if !obj.contains_key("model") && messages.is_empty() {
        return None;
    }
    if obj.contains_key("system")
        || obj.contains_key("anthropic_version")
        || obj
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| t.iter().any(|t| t.get("input_schema").is_some()))
    {
        return Some(WireApi::AnthropicMessages);
    }
    let mut anthropic_blocks = false;
    for m in messages {
        if let Some("system" | "developer" | "tool") = str_of_value(m, "role") {
            return Some(WireApi::OpenaiChat);
        }
        if m.get("tool_calls").is_some() {
            return Some(WireApi::OpenaiChat);
        }
        if let Some(blocks) = m.get("content").and_then(Value::as_array) {
            for b in blocks {
                match str_of_value(b, "type") {
                    Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking") => {
                        anthropic_blocks = true
                    }
                    Some("image") if b.get("source").is_some() => anthropic_blocks = true,
                    Some("image_url" | "input_audio") => return Some(WireApi::OpenaiChat),
                    _ => {}
                }
            }
        }
    }
    if anthropic_blocks || obj.contains_key("max_tokens") && !obj.contains_key("n") {
        // `max_tokens` is required by Anthropic and deprecated in Chat Completions.
        if anthropic_blocks || !obj.contains_key("max_completion_tokens") {
            return Some(WireApi::AnthropicMessages);
        }
    }
    Some(WireApi::OpenaiChat)
}

fn str_of_value<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(s: &str) -> Result<Format, ImportError> {
        detect(s.as_bytes())
    }

    #[test]
    fn recognises_each_format_by_its_first_line() {
        assert_eq!(
            fmt(r#"{"type":"session","id":"x","cwd":"/"}"#).ok(),
            Some(Format::Pi)
        );
        assert_eq!(
            fmt(r#"{"type":"user","sessionId":"s","uuid":"u","message":{}}"#).ok(),
            Some(Format::ClaudeCode)
        );
        assert_eq!(
            fmt(r#"{"timestamp":"t","type":"session_meta","payload":{}}"#).ok(),
            Some(Format::Codex)
        );
        assert_eq!(
            fmt(r#"{"model":"m","input":[]}"#).ok(),
            Some(Format::ApiRequest(WireApi::OpenaiResponses))
        );
        assert_eq!(
            fmt(r#"{"model":"m","system":"s","messages":[]}"#).ok(),
            Some(Format::ApiRequest(WireApi::AnthropicMessages))
        );
        assert_eq!(
            fmt(r#"{"model":"m","messages":[{"role":"system","content":"x"}]}"#).ok(),
            Some(Format::ApiRequest(WireApi::OpenaiChat))
        );
    }

    #[test]
    fn recognises_gemini_cli_in_both_layouts() {
        let header = r#"{"sessionId":"s","projectHash":"h","startTime":"t","lastUpdated":"t"}"#;
        assert_eq!(fmt(header).ok(), Some(Format::GeminiCli));
        assert_eq!(
            fmt(r#"{"$set":{"lastUpdated":"t"}}"#).ok(),
            Some(Format::GeminiCli)
        );
        assert_eq!(
            fmt(r#"{"id":"x","timestamp":"t","type":"gemini","content":""}"#).ok(),
            Some(Format::GeminiCli)
        );
        let doc = r#"{"sessionId":"s","projectHash":"h","messages":[{"id":"1","type":"user","content":"hi"}]}"#;
        assert_eq!(fmt(doc).ok(), Some(Format::GeminiCli));
        // Chat bodies with `messages` are not Gemini CLI's.
        assert_eq!(
            fmt(r#"{"messages":[{"role":"user","content":"x"}]}"#).ok(),
            Some(Format::ApiRequest(WireApi::OpenaiChat))
        );
    }

    #[test]
    fn a_corrupt_first_line_does_not_hide_the_format() {
        let head = "{\"type\":\"sess\n{\"type\":\"session\",\"id\":\"x\",\"cwd\":\"/\"}\n";
        assert_eq!(fmt(head).ok(), Some(Format::Pi));
    }

    #[test]
    fn bad_input_gets_a_clear_error() {
        assert!(matches!(fmt(""), Err(ImportError::Empty)));
        assert!(matches!(fmt("  \n"), Err(ImportError::Empty)));
        assert!(matches!(
            fmt("\x7fELF\0\0"),
            Err(ImportError::Binary { .. })
        ));
        assert!(matches!(fmt("hello"), Err(ImportError::UnknownFormat(_))));
        assert!(matches!(
            fmt(r#"{"a":1}"#),
            Err(ImportError::UnknownFormat(_))
        ));
        assert!(matches!(fmt("[1,2]"), Err(ImportError::UnknownFormat(_))));
    }
}
