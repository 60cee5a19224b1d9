//! Who is looking at the dashboard, from a request's headers.
//!
//! On a loopback listener the local user sees every tenant. Beyond it a browser sends either
//! the operator token (`x-ctxd-admin-token`, every tenant), a ctxd tenant key (`x-ctxd-key`)
//! or an API key (`x-api-key` or `Authorization`): the last two find the tenant exactly as the
//! model routes do (`tenancy.rs`), so a key reaches the sessions it made and nothing else.
//! None is stored or logged: keys are hashed here and dropped, the token compared with the
//! hash of the configured one.

use axum::http::HeaderMap;

use super::error::UiError;
use crate::tenancy::{Tenancy, TenantError};

/// The header that carries the operator token.
pub const ADMIN_HEADER: &str = "x-ctxd-admin-token";

/// Whose sessions a request may read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Viewer {
    /// Every tenant (loopback, or the operator token).
    All,
    /// One tenant: the one the browser's key names.
    Tenant(String),
}

impl Viewer {
    /// Whether this viewer may read a session of `tenant`.
    pub fn may_read(&self, tenant: &str) -> bool {
        match self {
            Viewer::All => true,
            Viewer::Tenant(own) => own == tenant,
        }
    }
}

/// The rules of one gateway.
pub struct Access {
    /// A loopback listener: everything is visible.
    pub open: bool,
    /// BLAKE3 of the operator token, when one is configured.
    pub admin: Option<[u8; 32]>,
    /// How the model routes find tenants.
    pub tenancy: Tenancy,
    /// Keyless clients are served (they share the tenant of the empty credential).
    pub allow_keyless: bool,
}

impl Access {
    /// The viewer of a request, or why it may see nothing.
    pub fn viewer(&self, headers: &HeaderMap) -> Result<Viewer, UiError> {
        if let Some(token) = headers.get(ADMIN_HEADER) {
            let sent = blake3::hash(token.as_bytes());
            // `blake3::Hash` compares in constant time.
            return match self.admin {
                Some(admin) if sent == blake3::Hash::from(admin) => Ok(Viewer::All),
                Some(_) => Err(UiError::Forbidden("wrong operator token")),
                None => Err(UiError::Forbidden(
                    "no operator token is configured (--admin-token-env)",
                )),
            };
        }
        if self.open {
            return Ok(Viewer::All);
        }
        if !Tenancy::identifies(headers) && !self.allow_keyless {
            return Err(UiError::Unauthorized);
        }
        match self.tenancy.tenant(headers) {
            Ok(tenant) => Ok(Viewer::Tenant(tenant)),
            Err(TenantError::UnknownKey) => Err(UiError::Forbidden("unknown ctxd key")),
            Err(TenantError::KeyRequired) => Err(UiError::Unauthorized),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn access(open: bool) -> Access {
        Access {
            open,
            admin: Some(*blake3::hash(b"op-secret").as_bytes()),
            tenancy: Tenancy::new(
                crate::tenancy::TenancyMode::Auto,
                open,
                [3; 32],
                Default::default(),
            ),
            allow_keyless: false,
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn loopback_sees_all_and_beyond_it_a_key_sees_its_tenant() {
        assert_eq!(access(true).viewer(&HeaderMap::new()).unwrap(), Viewer::All);
        let closed = access(false);
        assert!(matches!(
            closed.viewer(&HeaderMap::new()),
            Err(UiError::Unauthorized)
        ));
        let a = closed.viewer(&headers(&[("x-api-key", "sk-a")])).unwrap();
        let b = closed
            .viewer(&headers(&[("authorization", "Bearer sk-b")]))
            .unwrap();
        assert_ne!(a, b);
        // The model routes' tenant of the same key.
        let same = crate::identity::tenant(&[3; 32], &headers(&[("authorization", "Bearer sk-a")]));
        assert_eq!(a, Viewer::Tenant(same.clone()));
        assert!(a.may_read(&same) && !b.may_read(&same));
    }

    #[test]
    fn the_operator_token_sees_all_and_a_wrong_one_nothing() {
        let closed = access(false);
        let op = headers(&[(ADMIN_HEADER, "op-secret")]);
        assert_eq!(closed.viewer(&op).unwrap(), Viewer::All);
        let wrong = headers(&[(ADMIN_HEADER, "guess"), ("x-api-key", "sk-a")]);
        assert!(matches!(closed.viewer(&wrong), Err(UiError::Forbidden(_))));
        let none = Access {
            admin: None,
            ..access(true)
        };
        assert!(matches!(none.viewer(&op), Err(UiError::Forbidden(_))));
    }
}
