//! Which tenant a request belongs to.
//!
//! A tenant owns sessions and notes; two tenants never see each other's. The credential a
//! client sends is a poor name for a person: Claude Code on a Pro/Max login and Codex on a
//! ChatGPT login send OAuth access tokens that are refreshed every few hours, and a tenant
//! keyed by the credential would start over at each refresh. So, in order:
//!
//! 1. `x-ctxd-key` (ctxd's own header, never forwarded upstream) names an operator-configured
//!    tenant (`[tenants]` in the config: a name and the BLAKE3 of its key, so the config holds
//!    no secret). An unknown key is refused, never silently a tenant of its own.
//! 2. Otherwise, by [`TenancyMode`]: on a loopback listener (`auto`) or always (`local`), one
//!    local tenant whatever the credential (the machine's user; the CLI's default too); beyond
//!    loopback (`auto`) or always (`credential`), the keyed hash of the credential; `named`
//!    refuses a request without a key.
//!
//! The credential itself is never stored or logged (see [`identity::tenant`]), and subscription
//! logins pass upstream untouched: only `x-ctxd-*` headers are held back (`upstream.rs`).

use std::collections::BTreeMap;

use axum::http::HeaderMap;

use crate::identity;

/// The header carrying a ctxd-side tenant key.
pub const KEY_HEADER: &str = "x-ctxd-key";

/// The tenant of the machine's own user: what a loopback gateway's clients share and what the
/// CLI acts as by default (`ctxd import`, `ctxd notes`).
pub const LOCAL_TENANT: &str = "";

/// How a request without `x-ctxd-key` finds its tenant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TenancyMode {
    /// `local` on a loopback listener, `credential` beyond it.
    #[default]
    Auto,
    /// One local tenant whatever the credential.
    Local,
    /// The keyed hash of the credential (tokens that rotate start a new tenant).
    Credential,
    /// Only operator-named tenants: a request without `x-ctxd-key` is refused.
    Named,
}

impl TenancyMode {
    pub const NAMES: &'static [&'static str] = &["auto", "local", "credential", "named"];

    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "local" => Ok(Self::Local),
            "credential" => Ok(Self::Credential),
            "named" => Ok(Self::Named),
            other => Err(format!(
                "tenancy {other:?}: expected one of {}",
                Self::NAMES.join(", ")
            )),
        }
    }

    /// What this mode comes to on a listener that is (or is not) loopback.
    fn on(self, loopback: bool) -> Self {
        match self {
            Self::Auto if loopback => Self::Local,
            Self::Auto => Self::Credential,
            m => m,
        }
    }
}

/// The operator's named tenants: name → BLAKE3 of its key.
pub type NamedTenants = BTreeMap<String, [u8; 32]>;

/// A tenant name: what may follow `name:` in a tenant id (and appear in logs and URLs).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tenant name {name:?}: 1 to 64 letters, digits, '-', '_', '.' or '@'"
        ))
    }
}

/// A `[tenants]` value: `"b3:<64 hex digits>"`, the BLAKE3 of the key (`ctxd tenant-key`
/// prints both).
pub fn parse_key_hash(value: &str) -> Result<[u8; 32], String> {
    let hex = value.trim().strip_prefix("b3:").ok_or_else(|| {
        "expected \"b3:\" and the key's BLAKE3 in hex (ctxd tenant-key NAME prints it)".to_owned()
    })?;
    blake3::Hash::from_hex(hex)
        .map(|h| *h.as_bytes())
        .map_err(|e| format!("b3:{hex}: {e}"))
}

/// The config value naming `key`: what `[tenants]` holds for it.
pub fn key_hash_value(key: &str) -> String {
    format!("b3:{}", blake3::hash(key.trim().as_bytes()).to_hex())
}

/// A fresh ctxd key: 32 random bytes in hex, after `ck-` (so it is told from a provider's key
/// at a glance).
pub fn new_key() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| e.to_string())?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("ck-{hex}"))
}

/// The tenant id of an operator-named tenant.
pub fn named_tenant(name: &str) -> String {
    format!("name:{name}")
}

/// Why a request has no tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantError {
    /// `x-ctxd-key` matches no configured tenant.
    UnknownKey,
    /// `tenancy = named` and no `x-ctxd-key` was sent.
    KeyRequired,
}

impl TenantError {
    pub fn message(self) -> &'static str {
        match self {
            Self::UnknownKey => {
                "ctxd: the x-ctxd-key sent names no tenant of this gateway (ask its operator for \
                 yours: `ctxd tenant-key NAME` makes one)"
            }
            Self::KeyRequired => {
                "ctxd: this gateway serves named tenants only: send your ctxd key in x-ctxd-key \
                 (its operator makes one with `ctxd tenant-key NAME`)"
            }
        }
    }
}

/// One gateway's rules for naming tenants.
#[derive(Clone, Debug)]
pub struct Tenancy {
    mode: TenancyMode,
    /// The store's secret the credential hash is keyed with.
    hash_key: [u8; 32],
    named: NamedTenants,
}

impl Tenancy {
    /// The rules for a listener that is (or is not) loopback.
    pub fn new(mode: TenancyMode, loopback: bool, hash_key: [u8; 32], named: NamedTenants) -> Self {
        Tenancy {
            mode: mode.on(loopback),
            hash_key,
            named,
        }
    }

    /// The tenant of a request.
    pub fn tenant(&self, headers: &HeaderMap) -> Result<String, TenantError> {
        if let Some(key) = identity::header(headers, KEY_HEADER) {
            let sent = blake3::hash(key.as_bytes());
            // `blake3::Hash` compares in constant time; every entry is compared.
            let found = self.named.iter().fold(None, |found, (name, hash)| {
                if sent == blake3::Hash::from(*hash) {
                    Some(name)
                } else {
                    found
                }
            });
            return found
                .map(|n| named_tenant(n))
                .ok_or(TenantError::UnknownKey);
        }
        match self.mode {
            TenancyMode::Local | TenancyMode::Auto => Ok(LOCAL_TENANT.to_owned()),
            TenancyMode::Credential => Ok(identity::tenant(&self.hash_key, headers)),
            TenancyMode::Named => Err(TenantError::KeyRequired),
        }
    }

    /// Whether a request identifies someone (a ctxd key or an API credential): beyond loopback
    /// a request that does not is refused unless the operator allows keyless clients.
    pub fn identifies(headers: &HeaderMap) -> bool {
        identity::header(headers, KEY_HEADER).is_some() || identity::credential(headers).is_some()
    }

    /// Whether every request shares one tenant (then there is nobody to keep apart).
    pub fn is_local(&self) -> bool {
        self.mode == TenancyMode::Local
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn named() -> NamedTenants {
        let mut n = NamedTenants::new();
        n.insert(
            "alice".into(),
            parse_key_hash(&key_hash_value("ck-alice")).unwrap(),
        );
        n.insert(
            "bob".into(),
            parse_key_hash(&key_hash_value("ck-bob")).unwrap(),
        );
        n
    }

    #[test]
    fn on_loopback_a_rotating_token_stays_one_local_tenant() {
        let t = Tenancy::new(TenancyMode::Auto, true, [1; 32], NamedTenants::new());
        let before = headers(&[("authorization", "Bearer sk-ant-oat01-first")]);
        let after = headers(&[("authorization", "Bearer sk-ant-oat01-refreshed")]);
        assert_eq!(t.tenant(&before).unwrap(), LOCAL_TENANT);
        assert_eq!(t.tenant(&after).unwrap(), LOCAL_TENANT);
        assert_eq!(t.tenant(&HeaderMap::new()).unwrap(), LOCAL_TENANT);
    }

    #[test]
    fn beyond_loopback_credentials_are_tenants_unless_a_ctxd_key_names_one() {
        let t = Tenancy::new(TenancyMode::Auto, false, [1; 32], named());
        let a = headers(&[("x-api-key", "sk-a")]);
        let b = headers(&[("x-api-key", "sk-b")]);
        assert_ne!(t.tenant(&a).unwrap(), t.tenant(&b).unwrap());
        assert_eq!(t.tenant(&a).unwrap(), identity::tenant(&[1; 32], &a));
        // Alice's key names her tenant whatever credential rides beside it.
        let alice1 = headers(&[("x-ctxd-key", "ck-alice"), ("x-api-key", "sk-1")]);
        let alice2 = headers(&[("x-ctxd-key", " ck-alice "), ("authorization", "Bearer t2")]);
        assert_eq!(t.tenant(&alice1).unwrap(), "name:alice");
        assert_eq!(t.tenant(&alice2).unwrap(), "name:alice");
        let bob = headers(&[("x-ctxd-key", "ck-bob"), ("x-api-key", "sk-1")]);
        assert_eq!(t.tenant(&bob).unwrap(), "name:bob");
        let wrong = headers(&[("x-ctxd-key", "ck-carol")]);
        assert_eq!(t.tenant(&wrong), Err(TenantError::UnknownKey));
    }

    #[test]
    fn named_mode_requires_a_key_and_explicit_modes_ignore_the_listener() {
        let t = Tenancy::new(TenancyMode::Named, true, [1; 32], named());
        assert_eq!(
            t.tenant(&headers(&[("x-api-key", "sk-a")])),
            Err(TenantError::KeyRequired)
        );
        let c = Tenancy::new(TenancyMode::Credential, true, [1; 32], named());
        assert_ne!(
            c.tenant(&headers(&[("x-api-key", "sk-a")])).unwrap(),
            LOCAL_TENANT
        );
        let l = Tenancy::new(TenancyMode::Local, false, [1; 32], named());
        assert!(l.is_local());
        assert_eq!(
            l.tenant(&headers(&[("x-api-key", "sk-a")])).unwrap(),
            LOCAL_TENANT
        );
    }

    #[test]
    fn names_and_key_hashes_are_checked() {
        assert!(check_name("team-a.b_c@x").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name(&"a".repeat(65)).is_err());
        assert!(parse_key_hash("deadbeef").is_err());
        assert!(parse_key_hash("b3:zz").is_err());
        let v = key_hash_value("k");
        assert_eq!(parse_key_hash(&v).unwrap(), *blake3::hash(b"k").as_bytes());
        assert_eq!(TenancyMode::parse("Named").unwrap(), TenancyMode::Named);
        assert!(TenancyMode::parse("open").is_err());
    }
}
