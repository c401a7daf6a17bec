//! The ingest stream (docs/ingest.md "The stream"): protocol v1 batches framed one after
//! another on one long-lived connection, each answered in turn, instead of one HTTP request
//! each. An agent asks for it with `GET /api/v1/ingest/stream`, `Connection: upgrade` and
//! `Upgrade: gpulens-ingest.v1` (its token in `Authorization`, as for a request); a collector
//! that offers it answers `101 Switching Protocols`, and from then on:
//!
//! - the agent sends **batch frames**: the length of the body (4 bytes, big-endian), one byte
//!   naming its encoding ([`Encoding`]), then the body, exactly what a `POST /api/v1/ingest`
//!   would carry with that `Content-Type` and `Content-Encoding`;
//! - the collector answers each, in order, with an **answer frame**: the length (4 bytes,
//!   big-endian), then a JSON object: `code`, the HTTP status the same body would have got as
//!   a request, and that request's answer (`status`, `seq`, `rows`, `last_seq`) or its `error`.
//!
//! One batch is in flight on a stream at a time: the agent sends the next frame once the
//! previous one is answered.

use super::Format;

/// The `Upgrade` token.
pub const UPGRADE: &str = "gpulens-ingest.v1";
/// Where an agent asks for a stream.
pub const PATH: &str = "/api/v1/ingest/stream";
/// A batch frame's header: the body's length, then its encoding.
pub const BATCH_HEADER: usize = 5;
/// An answer frame's header: the answer's length.
pub const ANSWER_HEADER: usize = 4;
/// The longest answer a collector sends; an agent refuses a longer one.
pub const MAX_ANSWER: usize = 64 * 1024;
/// The collector's answer header naming, in seconds, how long it keeps a stream open before
/// closing it between two frames (so a revoked credential stops within it); an agent starts
/// a new one before then.
pub const MAX_AGE_HEADER: &str = "gpulens-stream-max-age";

/// How a batch frame's body is encoded: the request's `Content-Type` and `Content-Encoding`
/// in one byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// JSON, not compressed (tag 0).
    Json,
    /// JSON, gzip (tag 1).
    JsonGzip,
    /// MessagePack, not compressed (tag 2).
    MessagePack,
    /// MessagePack, one snappy block (tag 3): what the gpulens agent sends.
    MessagePackSnappy,
}

impl Encoding {
    pub const ALL: [Encoding; 4] = [
        Encoding::Json,
        Encoding::JsonGzip,
        Encoding::MessagePack,
        Encoding::MessagePackSnappy,
    ];

    pub const fn tag(self) -> u8 {
        self as u8
    }

    pub fn from_tag(tag: u8) -> Option<Encoding> {
        Encoding::ALL.get(usize::from(tag)).copied()
    }

    pub const fn format(self) -> Format {
        match self {
            Encoding::Json | Encoding::JsonGzip => Format::Json,
            Encoding::MessagePack | Encoding::MessagePackSnappy => Format::MessagePack,
        }
    }

    /// The `Content-Encoding` a request with this body would carry.
    pub const fn content_encoding(self) -> &'static str {
        match self {
            Encoding::Json | Encoding::MessagePack => "identity",
            Encoding::JsonGzip => "gzip",
            Encoding::MessagePackSnappy => "snappy",
        }
    }

    /// The encoding of a body in `format` under `content_encoding`, where a frame can carry it.
    pub fn of(format: Format, content_encoding: &str) -> Option<Encoding> {
        Encoding::ALL
            .into_iter()
            .find(|e| e.format() == format && e.content_encoding() == content_encoding)
    }
}

/// A batch frame: `body` (at most 4 GiB − 1) behind its header.
pub fn batch_frame(encoding: Encoding, body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).expect("a batch frame's body fits in 4 GiB");
    let mut frame = Vec::with_capacity(BATCH_HEADER + body.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.push(encoding.tag());
    frame.extend_from_slice(body);
    frame
}

/// An answer frame holding `answer` (JSON, at most [`MAX_ANSWER`] bytes).
pub fn answer_frame(answer: &[u8]) -> Vec<u8> {
    debug_assert!(answer.len() <= MAX_ANSWER);
    let len = u32::try_from(answer.len()).expect("an answer is short");
    let mut frame = Vec::with_capacity(ANSWER_HEADER + answer.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(answer);
    frame
}

/// Why a batch frame's header is refused. Either way the stream cannot go on: what follows
/// the header is not known to be a frame's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// The body is longer than the collector takes (`[ingest] max_body_bytes`).
    TooLong { len: usize, max: usize },
    /// The encoding byte names no [`Encoding`].
    UnknownEncoding(u8),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::TooLong { len, max } => write!(
                f,
                "the frame's body is {len} bytes; the limit is {max} ([ingest] max_body_bytes)"
            ),
            HeaderError::UnknownEncoding(tag) => write!(
                f,
                "the frame's encoding byte is {tag}; it must be 0 (JSON), 1 (JSON, gzip), 2 \
                 (MessagePack) or 3 (MessagePack, snappy)"
            ),
        }
    }
}

/// A batch frame's header read: the body's encoding and length, within `max` bytes.
pub fn batch_header(
    header: [u8; BATCH_HEADER],
    max: usize,
) -> Result<(Encoding, usize), HeaderError> {
    let [a, b, c, d, tag] = header;
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len > max {
        return Err(HeaderError::TooLong { len, max });
    }
    let encoding = Encoding::from_tag(tag).ok_or(HeaderError::UnknownEncoding(tag))?;
    Ok((encoding, len))
}

/// The bodies of the batch frames `bytes` hold one after another, each with its encoding;
/// the first header refused (or a frame cut short, as [`HeaderError::TooLong`] of what is
/// left) ends it. What the collector's reader does, without the socket (fuzzed).
pub fn batch_frames(
    mut bytes: &[u8],
    max: usize,
) -> impl Iterator<Item = Result<(Encoding, &[u8]), HeaderError>> {
    let mut done = false;
    std::iter::from_fn(move || {
        if done || bytes.is_empty() {
            return None;
        }
        let Some((header, rest)) = bytes.split_first_chunk::<BATCH_HEADER>() else {
            done = true;
            return Some(Err(HeaderError::TooLong {
                len: BATCH_HEADER,
                max: bytes.len(),
            }));
        };
        let frame = batch_header(*header, max).and_then(|(encoding, len)| {
            match rest.split_at_checked(len) {
                Some((body, rest)) => {
                    bytes = rest;
                    Ok((encoding, body))
                }
                None => Err(HeaderError::TooLong {
                    len,
                    max: rest.len(),
                }),
            }
        });
        done = frame.is_err();
        Some(frame)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_name_each_encoding_once_and_nothing_else() {
        for e in Encoding::ALL {
            assert_eq!(Encoding::from_tag(e.tag()), Some(e));
            assert_eq!(Encoding::of(e.format(), e.content_encoding()), Some(e));
        }
        for tag in 4..=u8::MAX {
            assert_eq!(Encoding::from_tag(tag), None);
        }
        assert_eq!(Encoding::of(Format::Json, "snappy"), None);
    }

    #[test]
    fn frames_read_back_in_order_and_the_first_bad_header_ends_them() {
        let mut bytes = batch_frame(Encoding::MessagePackSnappy, b"abc");
        bytes.extend(batch_frame(Encoding::Json, b""));
        bytes.extend(batch_frame(Encoding::JsonGzip, b"{}"));
        let frames: Vec<_> = batch_frames(&bytes, 16).collect();
        assert_eq!(
            frames,
            vec![
                Ok((Encoding::MessagePackSnappy, &b"abc"[..])),
                Ok((Encoding::Json, &b""[..])),
                Ok((Encoding::JsonGzip, &b"{}"[..])),
            ]
        );
        // Longer than the limit: refused from its header, before any body byte is needed.
        let long = batch_frame(Encoding::Json, &[b' '; 17]);
        assert_eq!(
            batch_frames(&long[..BATCH_HEADER], 16).next(),
            Some(Err(HeaderError::TooLong { len: 17, max: 16 }))
        );
        // An unknown encoding ends the stream, and nothing after it is read.
        let mut bad = batch_frame(Encoding::Json, b"1");
        bad[4] = 9;
        bad.extend(batch_frame(Encoding::Json, b"2"));
        let frames: Vec<_> = batch_frames(&bad, 16).collect();
        assert_eq!(frames, vec![Err(HeaderError::UnknownEncoding(9))]);
        // Cut short anywhere: every whole frame before the cut, then one refusal unless the
        // cut falls between two frames.
        let ends = [8, 13, 20];
        for cut in 0..bytes.len() {
            let frames: Vec<_> = batch_frames(&bytes[..cut], 16).collect();
            let whole = ends.iter().filter(|e| **e <= cut).count();
            assert!(frames[..whole].iter().all(Result::is_ok), "{cut}");
            assert_eq!(
                frames.len(),
                whole + usize::from(!ends.contains(&cut) && cut > 0),
                "{cut}"
            );
        }
    }

    #[test]
    fn an_answer_frame_states_its_length() {
        let frame = answer_frame(br#"{"code":200}"#);
        assert_eq!(&frame[..ANSWER_HEADER], &12u32.to_be_bytes());
        assert_eq!(&frame[ANSWER_HEADER..], br#"{"code":200}"#);
    }
}
