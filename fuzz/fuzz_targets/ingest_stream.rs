//! The ingest stream's frames (`model::wire::v1::stream`) as the collector reads them off an
//! upgraded connection: each batch frame's header, then its body through the same decoders a
//! request's body goes through. Invariants: nothing panics; frames come out in order, each
//! within the body limit, and framed again they are exactly the bytes they were read from; the
//! first header refused ends the stream; every body decodes within the decoded-size limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use model::wire::v1::stream::{BATCH_HEADER, batch_frame, batch_frames};

const MAX_BODY: usize = 16 * 1024;
const MAX_DECODED: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    let mut read = 0;
    let mut refused = false;
    for frame in batch_frames(data, MAX_BODY) {
        assert!(!refused, "a frame after a refused header");
        let Ok((encoding, body)) = frame else {
            refused = true;
            continue;
        };
        assert!(body.len() <= MAX_BODY);
        let again = batch_frame(encoding, body);
        assert_eq!(
            &data[read..read + again.len()],
            &again[..],
            "a frame read is not the bytes it came from"
        );
        read += again.len();
        assert!(read >= BATCH_HEADER);
        let Ok(decoded) = intake::body::decode(encoding.content_encoding(), body, MAX_DECODED)
        else {
            continue;
        };
        assert!(decoded.len() <= MAX_DECODED);
        let _ = intake::batch::decode(encoding.format(), &decoded);
    }
    assert!(refused || read == data.len(), "bytes left unread without a refusal");
});
