//! What every feature's settings section is made of: secrets that never print, and durations
//! written as humans write them ("15s", "7d"). Each feature's own section lives in its folder;
//! `config.rs` puts the sections together.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A secret string (token, database URL with password) whose `Debug` never shows it.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A duration in human form (`"15s"`, `"7d"`); errors say what was expected.
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "{s:?} is not a duration like \"15s\" or \"7d\": {e}"
        ))
    })
}
