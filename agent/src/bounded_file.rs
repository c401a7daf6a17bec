//! Files whose size someone else decides — a container's `/etc/hosts`, the kernel's socket
//! tables — read only when they fit a bound.

use std::io::Read;
use std::path::Path;

/// The text of the file at `path` when it is at most `max` bytes; None when it is larger,
/// unreadable or not UTF-8. Never reads more than `max + 1` bytes.
pub fn text(path: &Path, max: u64) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(max + 1)
        .read_to_string(&mut text)
        .ok()?;
    (text.len() as u64 <= max).then_some(text)
}
