//! How a batch travels: its encoding, named by `Content-Type`. The collector takes both; the
//! gpulens agent sends MessagePack and falls back to JSON for a collector that refuses it.

/// An encoding of [`super::Batch`]: the same fields by the same names either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON (RFC 8259): what anyone can write with `curl`.
    Json,
    /// MessagePack: structs as maps keyed by field name (what `rmp_serde::to_vec_named` and
    /// most MessagePack libraries write) or as arrays of their fields in declaration order
    /// (the compact layout the gpulens agent sends, [`super::to_compact`]), unit enum values
    /// as their names. Undoing snappy and decoding cost the collector about 0.55–0.7 of what
    /// gzip and JSON cost, 0.37 in the compact layout (`gpulens bench wire`).
    MessagePack,
}

impl Format {
    /// Both, in the order the collector names them in its errors.
    pub const ALL: [Format; 2] = [Format::Json, Format::MessagePack];

    /// The `Content-Type` a sender sets.
    pub const fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::MessagePack => "application/msgpack",
        }
    }

    /// The format a `Content-Type` value names (parameters such as `; charset=utf-8` and the
    /// case are ignored; `application/vnd.msgpack` and `application/x-msgpack` name
    /// MessagePack too), or None.
    pub fn from_content_type(value: &str) -> Option<Format> {
        let essence = value.split(';').next().unwrap_or("").trim();
        let is = |name: &str| essence.eq_ignore_ascii_case(name);
        if is("application/json") {
            Some(Format::Json)
        } else if is("application/msgpack")
            || is("application/vnd.msgpack")
            || is("application/x-msgpack")
        {
            Some(Format::MessagePack)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Format;

    #[test]
    fn content_types_name_their_format_and_nothing_else() {
        for f in Format::ALL {
            assert_eq!(Format::from_content_type(f.content_type()), Some(f));
        }
        assert_eq!(
            Format::from_content_type("Application/JSON; charset=utf-8"),
            Some(Format::Json)
        );
        assert_eq!(
            Format::from_content_type("application/vnd.msgpack"),
            Some(Format::MessagePack)
        );
        for other in [
            "",
            "text/plain",
            "application/jsonx",
            "application/json-seq",
            "msgpack",
        ] {
            assert_eq!(Format::from_content_type(other), None, "{other}");
        }
    }
}
