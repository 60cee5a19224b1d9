//! The upstream client: which provider a request goes to, and which headers cross. The client's
//! credentials go upstream untouched and are never stored or logged; hop-by-hop headers and
//! ctxd's own stay behind.

use axum::http::{HeaderMap, HeaderName, Method};
use bytes::Bytes;

use crate::api::Api;
use crate::config::Settings;

/// The provider endpoints and a pooled HTTP client.
pub struct Upstream {
    client: reqwest::Client,
    anthropic: String,
    openai: String,
    gemini: String,
    routes: Vec<crate::routes::Route>,
}

/// Where one request goes: a base URL, and the route's name when a route took it.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub base: &'a str,
    pub route: Option<&'a str>,
}

/// Headers that describe one connection or one body, not the request.
const HOP_BY_HOP: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

fn crosses(name: &HeaderName) -> bool {
    let n = name.as_str();
    !HOP_BY_HOP.contains(&n) && !n.starts_with("x-ctxd-")
}

impl Upstream {
    pub fn new(settings: &Settings) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.read_timeout)
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .tcp_nodelay(true)
            // Responses are relayed as they come: never decompressed or followed.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Upstream {
            client,
            anthropic: settings.upstream_anthropic.clone(),
            openai: settings.upstream_openai.clone(),
            gemini: settings.upstream_gemini.clone(),
            routes: settings.routes.clone(),
        })
    }

    /// Whether any route is configured: without one, no request's model needs reading.
    pub fn routed(&self) -> bool {
        !self.routes.is_empty()
    }

    /// Where a request of `api` naming `model` goes: the route that takes it, else the API's
    /// upstream.
    pub fn target(&self, api: Api, model: Option<&str>) -> Target<'_> {
        if let Some(route) = crate::routes::pick(&self.routes, api, model) {
            return Target {
                base: &route.upstream,
                route: Some(route.name()),
            };
        }
        let base = match api {
            Api::Anthropic => &self.anthropic,
            Api::Chat | Api::Responses => &self.openai,
            Api::Gemini => &self.gemini,
        };
        Target { base, route: None }
    }

    /// Send a request upstream, to `target`. `encoded` says whether `body` still carries the
    /// client's `content-encoding` (it does when passed through untouched; a rewritten body is
    /// plain).
    pub async fn send(
        &self,
        target: Target<'_>,
        method: Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Bytes,
        encoded: bool,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let url = format!("{}{}", target.base, path_and_query);
        let mut out = HeaderMap::with_capacity(headers.len());
        for (name, value) in headers {
            if !crosses(name) {
                continue;
            }
            // The gateway reads the response (to record it), so it asks for it uncompressed.
            if name == "accept-encoding" || (name == "content-encoding" && !encoded) {
                continue;
            }
            out.append(name.clone(), value.clone());
        }
        self.client
            .request(method, url)
            .headers(out)
            .body(body)
            .send()
            .await
    }
}

/// What went wrong with an upstream call, in words a user can act on: reqwest's own message
/// ("error sending request") names no cause, so the kind (connect, timeout, body) and the
/// innermost cause (connection refused, DNS, TLS) are added. The URL is left out: the client
/// need not learn where ctxd sends its requests.
pub fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "the response body failed"
    } else {
        "failed"
    };
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !causes.iter().any(|c: &String| c.contains(&text)) {
            causes.push(text);
        }
        source = cause.source();
    }
    // The innermost causes say the most (an io error's "Connection refused", a DNS lookup's
    // failure, a certificate's rejection): the last two at most.
    let tail: Vec<&str> = causes
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(String::as_str)
        .collect();
    if tail.is_empty() {
        format!("{kind}: {}", without_url(e))
    } else {
        format!("{kind}: {}", tail.join(": "))
    }
}

/// `e`'s message without its URL.
fn without_url(e: &reqwest::Error) -> String {
    let text = e.to_string();
    match e.url() {
        Some(url) => text.replace(&format!(" for url ({url})"), ""),
        None => text,
    }
}

/// Response headers to give the client: everything but hop-by-hop ones.
pub fn response_headers(upstream: &reqwest::header::HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(upstream.len());
    for (name, value) in upstream {
        if crosses(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn hop_by_hop_and_ctxd_headers_stay_behind() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("content-length", HeaderValue::from_static("3"));
        h.insert("connection", HeaderValue::from_static("close"));
        h.insert("x-ctxd-session", HeaderValue::from_static("s"));
        h.insert("request-id", HeaderValue::from_static("req_1"));
        let out = response_headers(&h);
        assert_eq!(out.len(), 1);
        assert!(out.contains_key("request-id"));
    }
}
