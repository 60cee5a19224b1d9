//! Google's `?key=` credential, moved into the `x-goog-api-key` header as a request arrives.
//! The API takes either; in the header it is never part of a path that a log line, a stored
//! record or an error message could carry, and tenancy reads it like any other key.

use axum::http::{HeaderMap, HeaderValue, Uri};

const HEADER: &str = "x-goog-api-key";

/// Whether the URI's query carries a `key`.
pub fn has_query_key(uri: &Uri) -> bool {
    query_pairs(uri).any(|(k, _)| k == "key")
}

fn query_pairs(uri: &Uri) -> impl Iterator<Item = (String, String)> + '_ {
    uri.query()
        .into_iter()
        .flat_map(|q| reqwest::Url::parse(&format!("http://h/?{q}")).ok())
        .flat_map(|u| {
            u.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect::<Vec<_>>()
        })
}

/// `uri` without its `key` query parameters; the first one becomes the `x-goog-api-key`
/// header unless the client sent that header too (then the header wins, as at Google).
pub fn key_from_query(uri: Uri, headers: &mut HeaderMap) -> Uri {
    let sent: Vec<(String, String)> = query_pairs(&uri).collect();
    if !sent.iter().any(|(k, _)| k == "key") {
        return uri;
    }
    let mut key = None;
    let Ok(mut kept) = reqwest::Url::parse("http://h/") else {
        return uri;
    };
    {
        let mut pairs = kept.query_pairs_mut();
        for (k, v) in sent {
            if k == "key" {
                key.get_or_insert(v);
            } else {
                pairs.append_pair(&k, &v);
            }
        }
    }
    if let Some(key) = key {
        if !headers.contains_key(HEADER) {
            if let Ok(value) = HeaderValue::from_str(&key) {
                let mut value = value;
                value.set_sensitive(true);
                headers.insert(HEADER, value);
            }
        }
    }
    let query = kept.query().filter(|q| !q.is_empty());
    let path_and_query = match query {
        Some(q) => format!("{}?{q}", uri.path()),
        None => uri.path().to_owned(),
    };
    let mut parts = uri.into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    Uri::from_parts(parts).unwrap_or_else(|_| Uri::from_static("/"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_query_key_becomes_the_header_and_leaves_the_path() {
        let mut headers = HeaderMap::new();
        let uri: Uri =
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=AIza%2Bsecret"
                .parse()
                .unwrap();
        let out = key_from_query(uri, &mut headers);
        assert_eq!(
            out.path_and_query().unwrap().as_str(),
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        );
        assert_eq!(headers[HEADER], "AIza+secret");
        assert!(headers[HEADER].is_sensitive());

        let mut headers = HeaderMap::new();
        headers.insert(HEADER, HeaderValue::from_static("from-header"));
        let out = key_from_query("/v1beta/models?key=q".parse().unwrap(), &mut headers);
        assert_eq!(out.path_and_query().unwrap().as_str(), "/v1beta/models");
        assert_eq!(headers[HEADER], "from-header");

        let untouched: Uri = "/v1beta/models/m:generateContent?alt=sse".parse().unwrap();
        assert_eq!(
            key_from_query(untouched.clone(), &mut HeaderMap::new()),
            untouched
        );
    }
}
