//! Undoing an ingest body's `Content-Encoding` within a decoded size limit.

use std::io::Read;

/// Why a body cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// The decoded body would exceed the limit (HTTP 413).
    TooLarge(String),
    /// Not a valid encoding of its kind (HTTP 400).
    Malformed(String),
    /// An encoding the collector does not speak (HTTP 415).
    Unsupported(String),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge(m) | BodyError::Malformed(m) | BodyError::Unsupported(m) => {
                f.write_str(m)
            }
        }
    }
}

/// Undoes `Content-Encoding` (`identity`, `gzip`), refusing anything that would grow past
/// `max` bytes; the work is bounded by `max` however the input is built. A gzip body is one
/// member with nothing after it.
pub fn decode(encoding: &str, bytes: &[u8], max: usize) -> Result<Vec<u8>, BodyError> {
    match encoding {
        "identity" => {
            if bytes.len() > max {
                return Err(BodyError::TooLarge(format!("batch exceeds {max} bytes")));
            }
            Ok(bytes.to_vec())
        }
        "gzip" | "x-gzip" => {
            let mut out = Vec::with_capacity(bytes.len().saturating_mul(8).min(max));
            // bufread over the slice, so what the member did not consume can be checked.
            let mut decoder =
                flate2::bufread::GzDecoder::new(bytes).take((max as u64).saturating_add(1));
            decoder.read_to_end(&mut out).map_err(|e| {
                BodyError::Malformed(format!("gzip body could not be decompressed: {e}"))
            })?;
            if out.len() > max {
                return Err(BodyError::TooLarge(format!(
                    "decompressed batch exceeds {max} bytes"
                )));
            }
            let rest = decoder.into_inner().into_inner();
            if !rest.is_empty() {
                return Err(BodyError::Malformed(format!(
                    "{} bytes follow the gzip member (a second member or trailing data); send one gzip member",
                    rest.len()
                )));
            }
            Ok(out)
        }
        other => Err(BodyError::Unsupported(format!(
            "Content-Encoding {other:?} is not supported; use gzip or none"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn gzip_is_bounded_and_single_member() {
        assert_eq!(decode("gzip", &gzip(b"{}"), 10).unwrap(), b"{}");
        let bomb = gzip(&vec![b' '; 1 << 20]);
        assert!(matches!(
            decode("gzip", &bomb, 1000),
            Err(BodyError::TooLarge(_))
        ));
        let mut two = gzip(b"{}");
        two.extend(gzip(b"{}"));
        assert!(matches!(
            decode("gzip", &two, 100),
            Err(BodyError::Malformed(_))
        ));
        assert!(matches!(
            decode("br", b"", 100),
            Err(BodyError::Unsupported(_))
        ));
        assert!(matches!(
            decode("identity", b"abc", 2),
            Err(BodyError::TooLarge(_))
        ));
    }
}
