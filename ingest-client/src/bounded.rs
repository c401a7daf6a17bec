//! Answers from servers gpulens does not control (alert receivers, webhooks, slurmrestd, the
//! OpenID provider, dcgm-exporter, a collector seen from the agent) read within a byte budget
//! *while they arrive*: a body past the budget stops the read and is an error, so an endless
//! or oversized answer costs at most the budget in memory. Time is bounded by the request's
//! own total timeout (`RequestBuilder::timeout`), which covers the body as well; callers set it.

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the answer could not be read: {0}")]
    Read(String),
}

/// An error and its causes on one line (a client's error names its cause only in its source).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// The whole body of `resp`, at most `max` bytes; more is an error, found as soon as the
/// budget is passed (nothing past it is kept). A `Content-Length` over the budget fails
/// before any byte is read.
pub async fn body(mut resp: reqwest::Response, max: usize) -> Result<Vec<u8>, ReadError> {
    if resp
        .content_length()
        .is_some_and(|n| n > u64::try_from(max).unwrap_or(u64::MAX))
    {
        return Err(ReadError::TooLarge(max));
    }
    let mut out = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ReadError::Read(error_chain(&e)))?
    {
        if out.len() + chunk.len() > max {
            return Err(ReadError::TooLarge(max));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The first `max` bytes of `resp`'s body as one line of text for a log or an error message
/// (the rest is never read: the connection is dropped), control characters as spaces, cut at
/// a character boundary, `…` where it was cut. A body that cannot be read reads as empty.
pub async fn prefix(mut resp: reqwest::Response, max: usize) -> String {
    let mut out = Vec::new();
    let mut cut = false;
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = max - out.len();
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            cut = true;
            break;
        }
        out.extend_from_slice(&chunk);
        if out.len() == max {
            cut = true;
            break;
        }
    }
    one_line(&String::from_utf8_lossy(&out), max, cut)
}

/// `text` as one line of at most `max` bytes: control characters as spaces, trimmed, cut at
/// a character boundary with `…` where it was cut (or where `cut` says the source went on).
pub fn one_line(text: &str, max: usize, cut: bool) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 3);
    let mut cut = cut;
    for c in text.chars() {
        if out.len() + c.len_utf8() > max {
            cut = true;
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    let mut out = out.trim().to_owned();
    // A lossy decode of a prefix cut inside a character ends in U+FFFD: drop it.
    while cut && out.ends_with('\u{fffd}') {
        out.pop();
    }
    if cut {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_keeps_the_budget_and_says_where_it_cut() {
        assert_eq!(one_line("a\nb\tc", 100, false), "a b c");
        assert_eq!(one_line("héllo wörld", 6, false), "héllo…");
        let long = "x".repeat(10_000);
        let short = one_line(&long, 300, false);
        assert_eq!(short.len(), 300 + '…'.len_utf8());
        assert_eq!(one_line("abc", 3, true), "abc…");
        assert_eq!(one_line("ab\u{fffd}", 10, true), "ab…");
    }
}
