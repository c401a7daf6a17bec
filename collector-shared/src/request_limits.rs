//! The bounds the listener puts on every request before a handler sees it, apart from the
//! listener and admission code that enforce them so that the OpenAPI document can name them too.

/// The longest request target (path and query) served; a longer one is a JSON 414. (One past
/// hyper's read buffer, about 400 KiB of request head, is answered by hyper itself with a bare
/// 431 or 414 and the connection closed.)
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The largest body an anonymous request may send (a sign-in form is a few hundred bytes).
pub const ANONYMOUS_MAX_BODY: u64 = 16 * 1024;
