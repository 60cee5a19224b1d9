//! Small helpers shared by the importers.

use base64::Engine;
use serde_json::Value;

use ctxd_core::model::Image;

/// How much base64 is decoded to find an image's pixel size (JPEG can put its size after EXIF).
const HEADER_B64_CHARS: usize = 1 << 16;

/// An image from base64 data, with its pixel size read from the header when it can be.
pub fn image_from_base64(media_type: Option<&str>, data: &str) -> Image {
    let (width, height) = pixel_size(data).map_or((None, None), |(w, h)| (Some(w), Some(h)));
    Image {
        media_type: media_type.map(str::to_owned),
        width,
        height,
        data: Some(data.to_owned()),
        url: None,
    }
}

/// An image given by URL; a `data:` URL is decoded like inline base64.
pub fn image_from_url(url: &str) -> Image {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((meta, data)) = rest.split_once(',') {
            let media_type = meta.split(';').next().filter(|m| !m.is_empty());
            return image_from_base64(media_type, data);
        }
    }
    Image {
        url: Some(url.to_owned()),
        ..Image::default()
    }
}

/// Width and height from the first bytes of a base64 image (PNG, JPEG, GIF, WebP, ...).
pub fn pixel_size(data: &str) -> Option<(u32, u32)> {
    let mut end = data.len().min(HEADER_B64_CHARS);
    end -= end % 4;
    let prefix = data.get(..end)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(prefix)
        .ok()?;
    let size = imagesize::blob_size(&bytes).ok()?;
    Some((
        u32::try_from(size.width).ok()?,
        u32::try_from(size.height).ok()?,
    ))
}

/// A string field of a JSON object.
pub fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// A string field, owned.
pub fn string_field(v: &Value, key: &str) -> Option<String> {
    str_field(v, key).map(str::to_owned)
}

/// A non-negative integer field (also accepts floats and numeric strings, as some agents write).
pub fn u64_field(v: &Value, key: &str) -> Option<u64> {
    match v.get(key)? {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(|f| f.max(0.0) as u64)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Arguments that arrive as a JSON string (OpenAI function calls): parsed when they are JSON,
/// kept as the string otherwise.
pub fn parse_arguments(arguments: &Value) -> Value {
    match arguments {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
        other => other.clone(),
    }
}

/// An ISO-8601 UTC time (`2025-11-20T23:33:01.544Z`) from Unix milliseconds, for formats that
/// write epoch numbers (Pi message timestamps, mini-swe-agent `extra.timestamp`, captures).
/// `None` before the epoch or absurdly far after it.
pub fn iso_from_unix_millis(ms: i64) -> Option<String> {
    (0..253_402_300_800_000)
        .contains(&ms)
        .then(|| ctxd_core::windows::iso8601(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_png_size_from_base64() {
        // A 3x2 PNG header (signature + IHDR).
        let png: Vec<u8> = [
            &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a][..],
            &[
                0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0, 0, 3, 0, 0, 0, 2, 8, 6, 0, 0, 0,
            ],
            &[0, 0, 0, 0],
        ]
        .concat();
        let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
        assert_eq!(pixel_size(&b64), Some((3, 2)));
        let img = image_from_url(&format!("data:image/png;base64,{b64}"));
        assert_eq!((img.width, img.height), (Some(3), Some(2)));
        assert_eq!(img.media_type.as_deref(), Some("image/png"));
        assert_eq!(pixel_size("not base64!"), None);
    }

    #[test]
    fn unix_millis_to_iso() {
        assert_eq!(
            iso_from_unix_millis(1_763_681_581_544).as_deref(),
            Some("2025-11-20T23:33:01.544Z")
        );
        assert_eq!(
            iso_from_unix_millis(0).as_deref(),
            Some("1970-01-01T00:00:00.000Z")
        );
        assert_eq!(
            iso_from_unix_millis(951_825_600_000).as_deref(),
            Some("2000-02-29T12:00:00.000Z")
        );
        assert_eq!(iso_from_unix_millis(-1), None);
        assert_eq!(iso_from_unix_millis(i64::MAX), None);
    }
}
