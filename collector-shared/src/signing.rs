//! Signatures and comparisons every feature that sends or checks a secret shares: HMAC-SHA256,
//! the `X-Gpulens-Signature` of webhook bodies (alerts and reports), and comparisons of
//! secrets in constant time.

use sha2::Sha256;

use crate::settings::Secret;

/// 32 bytes from the kernel's random source, for keys nobody configures.
pub fn random_key() -> anyhow::Result<[u8; 32]> {
    use std::io::Read;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .map_err(|e| anyhow::anyhow!("cannot read /dev/urandom for a session key: {e}"))?;
    Ok(key)
}

/// SHA-256 of `b`: how tokens are kept and compared (one length, whatever is sent).
pub fn sha256(b: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    Sha256::digest(b).into()
}

/// HMAC-SHA256 (RFC 2104).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// The `X-Gpulens-Signature` value for a body sent at `timestamp` (Unix seconds): the
/// HMAC-SHA256 of `"<timestamp>.<body>"`, hex, after `sha256=`.
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut msg = format!("{timestamp}.").into_bytes();
    msg.extend_from_slice(body);
    format!("sha256={}", hex(&hmac_sha256(secret.as_bytes(), &msg)))
}

/// `req` with the signature headers of `body` when there is a secret: `X-Gpulens-Timestamp`
/// (Unix seconds, now) and `X-Gpulens-Signature` ([`signature`]).
pub fn signed(
    req: reqwest::RequestBuilder,
    secret: Option<&Secret>,
    body: &str,
) -> reqwest::RequestBuilder {
    let Some(secret) = secret else {
        return req;
    };
    let ts = model::time::now_ms() / 1000;
    req.header("x-gpulens-timestamp", ts.to_string()).header(
        "x-gpulens-signature",
        signature(&secret.0, ts, body.as_bytes()),
    )
}

/// Lower-case hex of bytes.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of lower- or upper-case hex; `None` for anything else.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Compares secrets without leaking where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    // `subtle` compares in time independent of where the bytes differ (lengths are not secret).
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 1.
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        // Test case 2.
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // Test case 6: a key longer than the block.
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }
}
