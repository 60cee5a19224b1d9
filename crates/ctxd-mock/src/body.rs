//! Request bodies as the reply logic reads them: `content-encoding` undone (gzip, deflate,
//! zstd), with a size cap so a small compressed body cannot expand without bound.
//! The record keeps the raw bytes; only the reply logic sees decoded ones.

use std::borrow::Cow;
use std::io::Read;

use axum::http::header::CONTENT_ENCODING;
use axum::http::HeaderMap;

/// A body the server cannot read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("unsupported content-encoding {0:?}")]
    Unsupported(String),
    #[error("cannot decode the {encoding} body: {message}")]
    Corrupt { encoding: String, message: String },
    #[error("the decoded body is larger than {0} bytes")]
    TooLarge(usize),
}

/// The body with its `content-encoding` undone; borrowed when there is none.
pub(crate) fn decode<'a>(
    headers: &HeaderMap,
    raw: &'a [u8],
    limit: usize,
) -> Result<Cow<'a, [u8]>, DecodeError> {
    let encoding = match headers.get(CONTENT_ENCODING) {
        None => return Ok(Cow::Borrowed(raw)),
        Some(v) => String::from_utf8_lossy(v.as_bytes())
            .trim()
            .to_ascii_lowercase(),
    };
    let corrupt = |e: std::io::Error| DecodeError::Corrupt {
        encoding: encoding.clone(),
        message: e.to_string(),
    };
    let reader: Box<dyn Read + '_> = match encoding.as_str() {
        "" | "identity" => return Ok(Cow::Borrowed(raw)),
        "gzip" | "x-gzip" => Box::new(flate2::read::MultiGzDecoder::new(raw)),
        "deflate" => Box::new(flate2::read::ZlibDecoder::new(raw)),
        "zstd" => match ruzstd::decoding::StreamingDecoder::new(raw) {
            Ok(decoder) => Box::new(decoder),
            Err(e) => return Err(corrupt(std::io::Error::other(e.to_string()))),
        },
        _ => return Err(DecodeError::Unsupported(encoding)),
    };
    let mut out = Vec::with_capacity(raw.len().saturating_mul(4).min(limit));
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_end(&mut out).map_err(corrupt)?;
    if out.len() > limit {
        return Err(DecodeError::TooLarge(limit));
    }
    Ok(Cow::Owned(out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::io::Write;

    fn with_encoding(enc: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_ENCODING, HeaderValue::from_str(enc).unwrap());
        h
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn plain_bodies_are_borrowed() {
        let out = decode(&HeaderMap::new(), b"{}", 10).unwrap();
        assert!(matches!(out, Cow::Borrowed(b"{}")));
        assert!(matches!(
            decode(&with_encoding("identity"), b"{}", 10).unwrap(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn gzip_and_zstd_decode() {
        let data = br#"{"model":"m","messages":[]}"#;
        assert_eq!(
            &*decode(&with_encoding("gzip"), &gzip(data), 1000).unwrap(),
            data
        );
        let z = ruzstd::encoding::compress_to_vec(
            &data[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        assert_eq!(&*decode(&with_encoding("ZSTD"), &z, 1000).unwrap(), data);
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        assert!(matches!(
            decode(&with_encoding("gzip"), b"not gzip", 1000),
            Err(DecodeError::Corrupt { .. })
        ));
        assert!(matches!(
            decode(&with_encoding("zstd"), b"not zstd", 1000),
            Err(DecodeError::Corrupt { .. })
        ));
        assert_eq!(
            decode(&with_encoding("br"), b"x", 1000),
            Err(DecodeError::Unsupported("br".into()))
        );
        let bomb = gzip(&vec![b'a'; 10_000]);
        assert_eq!(
            decode(&with_encoding("gzip"), &bomb, 9_999),
            Err(DecodeError::TooLarge(9_999))
        );
        assert_eq!(
            decode(&with_encoding("gzip"), &bomb, 10_000).unwrap().len(),
            10_000
        );
    }
}
