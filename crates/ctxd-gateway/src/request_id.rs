//! Every response names its request in `x-ctxd-request-id`, and so does the handler's log span:
//! the client's own `x-request-id` when it sent a sane one (its logs and ctxd's then join), else
//! an id unique to this process start. tower-http sets it on the request and copies it to the
//! response; like every `x-ctxd-` header it never goes upstream.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::Router;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

pub(crate) const HEADER: HeaderName = HeaderName::from_static("x-ctxd-request-id");

/// Fresh ids: `ctxd-NONCE-N`, the nonce drawn at start so two runs' ids never collide.
#[derive(Clone)]
pub(crate) struct Ids {
    nonce: u32,
    next: Arc<AtomicU64>,
}

impl Ids {
    pub(crate) fn new(nonce: u32) -> Self {
        Self {
            nonce,
            next: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl MakeRequestId for Ids {
    fn make_request_id<B>(&mut self, request: &axum::http::Request<B>) -> Option<RequestId> {
        let id = match clients_id(request.headers()) {
            Some(id) => id.to_owned(),
            None => {
                let n = self.next.fetch_add(1, Ordering::Relaxed);
                format!("ctxd-{:08x}-{n}", self.nonce)
            }
        };
        HeaderValue::from_str(&id).ok().map(RequestId::new)
    }
}

/// The client's `x-request-id` when it is short and plain enough to go into a log line as is.
fn clients_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 64)
        .filter(|v| {
            v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
        })
}

/// The request's id, as the layers set it.
pub(crate) fn of(headers: &HeaderMap) -> &str {
    headers
        .get(&HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// `router` with ids on every request and response. A client's own `x-ctxd-request-id` is
/// dropped first: the header is ctxd's, and the id must pass the same rule as any other.
pub(crate) fn layer(router: Router, ids: Ids) -> Router {
    router
        .layer(PropagateRequestIdLayer::new(HEADER))
        .layer(SetRequestIdLayer::new(HEADER, ids))
        .layer(axum::middleware::map_request(drop_clients_header))
}

async fn drop_clients_header(mut request: Request) -> Request {
    request.headers_mut().remove(&HEADER);
    request
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn id_for(headers: &[(&str, &str)], ids: &mut Ids) -> String {
        let mut request = axum::http::Request::new(());
        for (k, v) in headers {
            request.headers_mut().insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let id = ids.make_request_id(&request).unwrap();
        id.header_value().to_str().unwrap().to_owned()
    }

    #[test]
    fn a_sane_client_id_is_kept_and_others_get_fresh_ones() {
        let mut ids = Ids::new(0xabc);
        assert_eq!(
            id_for(&[("x-request-id", "req_01:a.b-c")], &mut ids),
            "req_01:a.b-c"
        );
        assert_eq!(id_for(&[], &mut ids), "ctxd-00000abc-1");
        let long = "x".repeat(65);
        assert_eq!(
            id_for(&[("x-request-id", &long)], &mut ids),
            "ctxd-00000abc-2"
        );
        assert_eq!(
            id_for(&[("x-request-id", "a b")], &mut ids),
            "ctxd-00000abc-3"
        );
    }
}
