//! Undoing an ingest body's `Content-Encoding` within a decoded size limit.

use std::cell::RefCell;

use flate2::{Decompress, FlushDecompress, Status};

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

/// Undoes `Content-Encoding` (`identity`, `gzip`, `snappy`), refusing anything that would
/// grow past `max` bytes; the work is bounded by `max` however the input is built. A gzip body
/// is one member with nothing after it; a snappy body is one block (the format Prometheus
/// remote write uses), its stated length checked before anything is allocated.
pub fn decode(encoding: &str, bytes: &[u8], max: usize) -> Result<Vec<u8>, BodyError> {
    match encoding {
        "identity" => {
            if bytes.len() > max {
                return Err(BodyError::TooLarge(format!("batch exceeds {max} bytes")));
            }
            Ok(bytes.to_vec())
        }
        "gzip" | "x-gzip" => gunzip(bytes, max),
        "snappy" => unsnappy(bytes, max),
        other => Err(BodyError::Unsupported(format!(
            "Content-Encoding {other:?} is not supported; use gzip, snappy or none"
        ))),
    }
}

/// One snappy block (no framing): a varint of the decoded length, then the data.
pub fn unsnappy(bytes: &[u8], max: usize) -> Result<Vec<u8>, BodyError> {
    let malformed = |e: snap::Error| {
        BodyError::Malformed(format!("snappy body could not be decompressed: {e}"))
    };
    let len = snap::raw::decompress_len(bytes).map_err(malformed)?;
    if len > max {
        return Err(BodyError::TooLarge(format!(
            "the body decompresses to {len} bytes; the limit is {max}"
        )));
    }
    snap::raw::Decoder::new()
        .decompress_vec(bytes)
        .map_err(malformed)
}

fn malformed(why: impl std::fmt::Display) -> BodyError {
    BodyError::Malformed(format!("gzip body could not be decompressed: {why}"))
}

thread_local! {
    /// One raw-deflate inflater per thread, reset for each body: its state and 32 KiB window
    /// are allocated once, not per request (it was a tenth of ingest's decoding time).
    static INFLATER: RefCell<Decompress> = RefCell::new(Decompress::new(false));
}

/// One gzip member (RFC 1952): header, raw deflate data, CRC-32 and length of the data, and
/// nothing after it.
fn gunzip(bytes: &[u8], max: usize) -> Result<Vec<u8>, BodyError> {
    let data = &bytes[gzip_header_len(bytes)?..];
    let (out, used) = INFLATER.with(|inflater| {
        let mut inflater = inflater.borrow_mut();
        inflater.reset(false);
        inflate(&mut inflater, data, max)
    })?;
    let trailer = &data[used..];
    let [c0, c1, c2, c3, n0, n1, n2, n3, ref rest @ ..] = *trailer else {
        return Err(malformed("the member ends before its CRC-32 and length"));
    };
    if crc32fast::hash(&out) != u32::from_le_bytes([c0, c1, c2, c3]) {
        return Err(malformed("CRC-32 mismatch (the data is corrupt)"));
    }
    if out.len() as u32 != u32::from_le_bytes([n0, n1, n2, n3]) {
        return Err(malformed(
            "the length in the trailer does not match the data",
        ));
    }
    if !rest.is_empty() {
        return Err(BodyError::Malformed(format!(
            "{} bytes follow the gzip member (a second member or trailing data); send one gzip member",
            rest.len()
        )));
    }
    Ok(out)
}

/// Inflates raw deflate `data` within `max` output bytes: the output and how many input bytes
/// the stream used. Each step either consumes input, fills output (at most `max` + 1 bytes)
/// or ends, so the work is bounded by the input and `max`.
fn inflate(
    inflater: &mut Decompress,
    data: &[u8],
    max: usize,
) -> Result<(Vec<u8>, usize), BodyError> {
    let too_large = || BodyError::TooLarge(format!("decompressed batch exceeds {max} bytes"));
    let limit = max.saturating_add(1);
    let mut out = Vec::with_capacity(data.len().saturating_mul(8).max(64).min(limit));
    loop {
        let (used, had) = (inflater.total_in() as usize, out.len());
        let status = inflater
            .decompress_vec(&data[used..], &mut out, FlushDecompress::Finish)
            .map_err(malformed)?;
        if out.len() > max {
            return Err(too_large());
        }
        match status {
            Status::StreamEnd => return Ok((out, inflater.total_in() as usize)),
            _ if out.len() == out.capacity() => {
                if out.capacity() >= limit {
                    return Err(too_large());
                }
                // Doubling, but never past `max` + 1 bytes: the memory a body may take.
                out.reserve_exact(out.capacity().min(limit - out.capacity()));
            }
            _ if inflater.total_in() as usize == used && out.len() == had => {
                return Err(malformed("the deflate data ends early"));
            }
            _ => {}
        }
    }
}

/// The length of a gzip member's header (RFC 1952 §2.3), checked: magic, deflate, no reserved
/// flags, and the optional extra field, name, comment and header CRC inside the body.
fn gzip_header_len(b: &[u8]) -> Result<usize, BodyError> {
    let short = || malformed("the gzip header is cut short");
    let [id1, id2, method, flags, ..] = *b else {
        return Err(short());
    };
    if (id1, id2) != (0x1f, 0x8b) {
        return Err(malformed("not gzip data (no 1f 8b magic)"));
    }
    if method != 8 {
        return Err(malformed(format!(
            "compression method {method} is not deflate (8)"
        )));
    }
    if flags & 0xe0 != 0 {
        return Err(malformed("reserved header flags are set"));
    }
    let mut at = 10;
    if b.len() < at {
        return Err(short());
    }
    if flags & 0x04 != 0 {
        let xlen = b.get(at..at + 2).ok_or_else(short)?;
        at += 2 + u16::from_le_bytes([xlen[0], xlen[1]]) as usize;
        if b.len() < at {
            return Err(short());
        }
    }
    for flag in [0x08, 0x10] {
        // FNAME, FCOMMENT: zero-terminated.
        if flags & flag != 0 {
            at += 1 + b[at..].iter().position(|&c| c == 0).ok_or_else(short)?;
        }
    }
    if flags & 0x02 != 0 {
        let crc = b.get(at..at + 2).ok_or_else(short)?;
        if u16::from_le_bytes([crc[0], crc[1]]) != crc32fast::hash(&b[..at]) as u16 {
            return Err(malformed("the header CRC does not match"));
        }
        at += 2;
    }
    Ok(at)
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
    fn gzip_round_trips_with_every_header_field_and_any_ratio() {
        let big: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 7).to_le_bytes())
            .collect();
        for data in [&b""[..], b"{}", &big, &vec![b'x'; 300_000]] {
            assert_eq!(decode("gzip", &gzip(data), 1 << 21).unwrap(), data);
            let mut full = flate2::GzBuilder::new()
                .extra(vec![1, 2, 3])
                .filename("batch.json")
                .comment("from a test")
                .write(Vec::new(), flate2::Compression::best());
            full.write_all(data).unwrap();
            let full = full.finish().unwrap();
            assert_eq!(decode("x-gzip", &full, 1 << 21).unwrap(), data);
        }
        // The same data twice through one thread's inflater: nothing of the first is left over.
        assert_eq!(decode("gzip", &gzip(b"abc"), 10).unwrap(), b"abc");
        assert_eq!(decode("gzip", &gzip(b"abc"), 10).unwrap(), b"abc");
    }

    #[test]
    fn a_header_crc_is_checked() {
        // FHCRC: the low 16 bits of the CRC-32 of the header before it.
        let body = gzip(b"{}");
        let mut with = body[..10].to_vec();
        with[3] |= 0x02;
        let crc = crc32fast::hash(&with) as u16;
        with.extend(crc.to_le_bytes());
        with.extend(&body[10..]);
        assert_eq!(decode("gzip", &with, 10).unwrap(), b"{}");
        let n = with.len();
        with[10] ^= 1;
        assert!(
            decode("gzip", &with, 10)
                .unwrap_err()
                .to_string()
                .contains("header CRC")
        );
        with[10] ^= 1;
        with[n - 4] ^= 1; // the length in the trailer
        assert!(
            decode("gzip", &with, 10)
                .unwrap_err()
                .to_string()
                .contains("length")
        );
    }

    #[test]
    fn every_cut_and_corruption_is_an_error_not_a_panic() {
        let body = gzip(
            &(0..5000u32)
                .flat_map(|i| i.to_le_bytes())
                .collect::<Vec<_>>(),
        );
        for cut in 0..body.len() {
            assert!(
                matches!(
                    decode("gzip", &body[..cut], 1 << 20),
                    Err(BodyError::Malformed(_))
                ),
                "cut at {cut}"
            );
        }
        let mut crc = body.clone();
        let n = crc.len();
        crc[n - 8] ^= 0xff;
        assert!(
            decode("gzip", &crc, 1 << 20)
                .unwrap_err()
                .to_string()
                .contains("CRC-32")
        );
        for (i, why) in [(0, "magic"), (2, "method"), (3, "reserved")] {
            let mut bad = body.clone();
            bad[i] = if i == 3 { 0x80 } else { 7 };
            assert!(
                decode("gzip", &bad, 1 << 20)
                    .unwrap_err()
                    .to_string()
                    .contains(why)
            );
        }
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
        // Exactly at the limit is fine; one byte over is not.
        assert_eq!(decode("gzip", &gzip(&[7; 4096]), 4096).unwrap().len(), 4096);
        assert!(matches!(
            decode("gzip", &gzip(&[7; 4097]), 4096),
            Err(BodyError::TooLarge(_))
        ));
    }
}
