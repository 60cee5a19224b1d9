//! Who is asking: the tenant (a keyed hash of the client's credential, never the credential),
//! the session (the client's own hint, else a fingerprint of the conversation's start) and the
//! agent (from the user agent).

use axum::http::HeaderMap;
use ctxd_core::model::Agent;
use ctxd_engine::turn::hash;

use crate::api::Api;
use crate::request::ParsedRequest;

/// The tenant of a credential: 128 bits of BLAKE3 keyed with the store's secret, so the store
/// never holds anything from which the credential can be recovered or tested offline.
/// One credential is one tenant whichever header carries it: `x-api-key: K` and
/// `Authorization: Bearer K` hash the same `K`. Keyless clients share the tenant of the empty
/// credential (refused beyond loopback unless `allow-keyless`, see `handler.rs`).
pub fn tenant(key: &[u8; 32], headers: &HeaderMap) -> String {
    tenant_of(key, credential(headers).unwrap_or_default())
}

/// The tenant of the API key `credential` (what [`tenant`] finds in a request's headers): the
/// CLI acts as a person's own tenant with it.
pub fn tenant_of(key: &[u8; 32], credential: &[u8]) -> String {
    let digest = blake3::keyed_hash(key, credential.trim_ascii());
    format!("t-{}", &digest.to_hex()[..32])
}

/// The store setting holding the secret tenants are keyed with (made once, by the first
/// gateway or CLI command that needs it).
pub const TENANT_KEY_SETTING: &str = "gateway.tenant_key";

/// The store's tenant key, created when the store has none yet.
pub fn store_tenant_key<S: ctxd_store::Store + ?Sized>(store: &S) -> Result<[u8; 32], String> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| e.to_string())?;
    let stored = store
        .setting_or_insert(TENANT_KEY_SETTING, &key)
        .map_err(|e| e.to_string())?;
    if stored.len() == 32 {
        key.copy_from_slice(&stored);
    }
    Ok(key)
}

/// The client's API key: `x-api-key` (Anthropic) or `x-goog-api-key` (Gemini; a `?key=` is
/// moved there on arrival), else `Authorization` without its `Bearer` scheme; `None` when
/// none carries one.
pub fn credential(headers: &HeaderMap) -> Option<&[u8]> {
    fn trim(b: &[u8]) -> &[u8] {
        b.trim_ascii()
    }
    for name in ["x-api-key", "x-goog-api-key"] {
        if let Some(k) = headers.get(name).map(|v| trim(v.as_bytes())) {
            if !k.is_empty() {
                return Some(k);
            }
        }
    }
    let auth = trim(headers.get("authorization")?.as_bytes());
    let bare = match auth.get(..6) {
        Some(scheme)
            if scheme.eq_ignore_ascii_case(b"bearer")
                && auth.get(6).is_none_or(u8::is_ascii_whitespace) =>
        {
            trim(&auth[6..])
        }
        _ => auth,
    };
    (!bare.is_empty()).then_some(bare)
}

/// A header's text, trimmed, when it is present, non-empty and at most 256 bytes.
pub(crate) fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 256)
}

/// Where a session key came from (logged, and a hint for the agent name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySource {
    Explicit,
    ClaudeCode,
    Codex,
    PiHeader,
    PromptCacheKey,
    MetadataUserId,
    Fingerprint,
}

/// The session a client names in its headers, which take precedence over every hint in the
/// body (so it is known before the body is read).
pub fn header_session_key(headers: &HeaderMap) -> Option<(String, KeySource)> {
    if let Some(k) = header(headers, "x-ctxd-session") {
        return Some((k.to_owned(), KeySource::Explicit));
    }
    if let Some(k) = header(headers, "x-claude-code-session-id") {
        return Some((k.to_owned(), KeySource::ClaudeCode));
    }
    if let Some(k) = header(headers, "session-id").or_else(|| header(headers, "thread-id")) {
        return Some((k.to_owned(), KeySource::Codex));
    }
    header(headers, "session_id").map(|k| (k.to_owned(), KeySource::PiHeader))
}

/// The session key of a request. `start` gives the conversation's start (system prompt text and
/// first message hash), needed only when the client names no session.
pub fn session_key(
    headers: &HeaderMap,
    req: &ParsedRequest,
    start: impl FnOnce() -> (Option<String>, Option<hash::Hash>),
) -> (String, KeySource) {
    if let Some(named) = header_session_key(headers) {
        return named;
    }
    if let Some(k) = req.prompt_cache_key.as_deref().filter(|k| !k.is_empty()) {
        return (k.to_owned(), KeySource::PromptCacheKey);
    }
    if let Some(k) = req.metadata_user_id.as_deref().filter(|k| !k.is_empty()) {
        return (k.to_owned(), KeySource::MetadataUserId);
    }
    // No hint: the same system prompt and first message make the same conversation.
    let (system, first_message) = start();
    let mut h = blake3::Hasher::new();
    h.update(req.api.route().as_bytes());
    h.update(system.as_deref().unwrap_or("").as_bytes());
    h.update(&first_message.unwrap_or_default());
    (
        format!("fp-{}", &h.finalize().to_hex()[..24]),
        KeySource::Fingerprint,
    )
}

/// Pi's own system prompt opens with this; on its Anthropic provider nothing else tells Pi from
/// any client of the Anthropic JS SDK (no session hint, the SDK's stock user agent).
const PI_SYSTEM_MARK: &[u8] = b"operating inside pi, a coding agent harness";

/// How far into the system prompt's bytes the marks are looked for.
const SYSTEM_MARK_SPAN: usize = 512;

/// The agent behind a request: `x-ctxd-agent`, else the user agent, else the session hint,
/// else (a JS SDK client) the opening of its system prompt (`system`: its raw JSON bytes).
pub fn agent(
    headers: &HeaderMap,
    source: KeySource,
    system: Option<&[u8]>,
) -> (Option<Agent>, String) {
    if let Some(name) = header(headers, "x-ctxd-agent") {
        return (None, name.to_owned());
    }
    let ua = header(headers, "user-agent").unwrap_or("");
    if ua.starts_with("claude-cli/") || source == KeySource::ClaudeCode {
        return (Some(Agent::ClaudeCode), "claude-code".into());
    }
    if ua.starts_with("codex")
        || header(headers, "originator").is_some_and(|o| o.starts_with("codex"))
    {
        return (Some(Agent::Codex), "codex".into());
    }
    // `GeminiCLI/0.61.0/<model> (...)`, `GeminiCLI-tui/...` in its terminal UI.
    if ua.starts_with("GeminiCLI") {
        return (Some(Agent::GeminiCli), "gemini-cli".into());
    }
    // Pi talks through the official JS SDKs (Google's: `google-genai-sdk/1.52.0 gl-node/v20`)
    // and names its session in these hints (none on Gemini).
    let js_sdk =
        ua.contains("/JS ") || (ua.starts_with("google-genai-sdk/") && ua.contains(" gl-node/"));
    if js_sdk {
        let opening = system.map(|s| &s[..s.len().min(SYSTEM_MARK_SPAN)]);
        if matches!(source, KeySource::PiHeader | KeySource::PromptCacheKey)
            || opening.is_some_and(|o| memchr::memmem::find(o, PI_SYSTEM_MARK).is_some())
        {
            return (Some(Agent::Pi), "pi".into());
        }
    }
    (Some(Agent::Api), "sdk".into())
}

/// The API a route-less request (`/v1/models`, unknown paths) belongs to, from its headers.
pub fn api_of_headers(headers: &HeaderMap) -> Api {
    if headers.contains_key("x-goog-api-key") {
        Api::Gemini
    } else if headers.contains_key("x-api-key") || headers.contains_key("anthropic-version") {
        Api::Anthropic
    } else {
        Api::Chat
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn req(body: &[u8], api: Api) -> ParsedRequest {
        ParsedRequest::parse(api, body).unwrap()
    }

    #[test]
    fn tenants_differ_by_credential_and_hide_it() {
        let key = [7u8; 32];
        let mut a = HeaderMap::new();
        a.insert("x-api-key", HeaderValue::from_static("sk-ant-secret"));
        let mut b = HeaderMap::new();
        b.insert("authorization", HeaderValue::from_static("Bearer sk-other"));
        let (ta, tb) = (tenant(&key, &a), tenant(&key, &b));
        assert_ne!(ta, tb);
        assert!(!ta.contains("secret"));
        assert_eq!(ta, tenant(&key, &a), "stable");
        assert_ne!(ta, tenant(&[8u8; 32], &a), "keyed");
        // The same key in either header is one tenant.
        let mut c = HeaderMap::new();
        c.insert(
            "authorization",
            HeaderValue::from_static("bearer  sk-ant-secret"),
        );
        assert_eq!(ta, tenant(&key, &c));
        assert_eq!(credential(&c), Some(&b"sk-ant-secret"[..]));
        assert_eq!(credential(&HeaderMap::new()), None);
        let mut empty = HeaderMap::new();
        empty.insert("authorization", HeaderValue::from_static("Bearer "));
        assert_eq!(credential(&empty), None);
    }

    #[test]
    fn session_hints_in_order_of_trust() {
        let body = br#"{"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"u-1"}}"#;
        let r = req(body, Api::Anthropic);
        let mut h = HeaderMap::new();
        let none = || (None, None);
        assert_eq!(session_key(&h, &r, none).1, KeySource::MetadataUserId);
        h.insert("x-claude-code-session-id", HeaderValue::from_static("cc-1"));
        assert_eq!(
            session_key(&h, &r, none),
            ("cc-1".into(), KeySource::ClaudeCode)
        );
        h.insert("x-ctxd-session", HeaderValue::from_static("mine"));
        assert_eq!(session_key(&h, &r, none).0, "mine");
        let plain = req(br#"{"messages":[]}"#, Api::Chat);
        let (k1, s) = session_key(&HeaderMap::new(), &plain, || (None, Some([1; 16])));
        assert_eq!(s, KeySource::Fingerprint);
        assert_ne!(
            k1,
            session_key(&HeaderMap::new(), &plain, || (None, Some([2; 16]))).0
        );
    }

    #[test]
    fn agents_from_user_agents() {
        let mut h = HeaderMap::new();
        h.insert(
            "user-agent",
            HeaderValue::from_static("claude-cli/2.1.197 (external, sdk-cli)"),
        );
        assert_eq!(agent(&h, KeySource::ClaudeCode, None).1, "claude-code");
        h.insert(
            "user-agent",
            HeaderValue::from_static("codex_exec/0.171.0 (Debian)"),
        );
        assert_eq!(agent(&h, KeySource::Codex, None).1, "codex");
        h.insert(
            "user-agent",
            HeaderValue::from_static("GeminiCLI-tui/0.61.0/gemini-2.5-pro (linux; x64; terminal)"),
        );
        assert_eq!(
            agent(&h, KeySource::Fingerprint, None),
            (Some(Agent::GeminiCli), "gemini-cli".into())
        );
        h.insert("user-agent", HeaderValue::from_static("OpenAI/JS 6.26.0"));
        assert_eq!(agent(&h, KeySource::PiHeader, None).1, "pi");
        h.insert("user-agent", HeaderValue::from_static("OpenAI/Python 1.99"));
        assert_eq!(agent(&h, KeySource::Fingerprint, None).1, "sdk");
        // Pi on its Anthropic provider: the stock SDK user agent, no hint; its system prompt.
        let pi = br#"[{"type":"text","text":"You are an expert coding assistant operating inside pi, a coding agent harness. You help"#;
        h.insert(
            "user-agent",
            HeaderValue::from_static("Anthropic/JS 0.91.1"),
        );
        assert_eq!(agent(&h, KeySource::Fingerprint, Some(pi)).1, "pi");
        assert_eq!(
            agent(&h, KeySource::Fingerprint, Some(b"\"You are helpful\"")).1,
            "sdk"
        );
        assert_eq!(agent(&h, KeySource::Fingerprint, None).1, "sdk");
        // Only JS SDK clients are read this way (a Python script quoting Pi's prompt is an SDK).
        h.insert(
            "user-agent",
            HeaderValue::from_static("Anthropic/Python 0.60"),
        );
        assert_eq!(agent(&h, KeySource::Fingerprint, Some(pi)).1, "sdk");
        // Pi on its Google provider: Google's JS SDK, the prompt in `systemInstruction`.
        let pi_gemini = br#"{"role":"user","parts":[{"text":"You are an expert coding assistant operating inside pi, a coding agent harness."}]}"#;
        h.insert(
            "user-agent",
            HeaderValue::from_static("google-genai-sdk/1.52.0 gl-node/v20.20.2"),
        );
        assert_eq!(agent(&h, KeySource::Fingerprint, Some(pi_gemini)).1, "pi");
        h.insert(
            "user-agent",
            HeaderValue::from_static("google-genai-sdk/3.6.1 gl-python/3.11.7"),
        );
        assert_eq!(agent(&h, KeySource::Fingerprint, Some(pi_gemini)).1, "sdk");
    }
}
