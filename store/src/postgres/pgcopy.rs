//! PostgreSQL's binary COPY format, written by hand: the fastest way to load rows.
//! Layout: signature, flags, header extension, then per row a field count and per field a
//! length (-1 for NULL) and big-endian bytes; a trailer of -1.

use crate::raw::rows::Cells;

/// Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01).
const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// Signature, flags and header extension length.
const HEADER_LEN: usize = 19;

/// Builds one COPY payload.
#[derive(Debug)]
pub struct CopyWriter {
    buf: Vec<u8>,
    rows: u64,
}

impl CopyWriter {
    pub fn new() -> CopyWriter {
        let mut buf = Vec::with_capacity(4096);
        buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        buf.extend_from_slice(&0i32.to_be_bytes());
        buf.extend_from_slice(&0i32.to_be_bytes());
        debug_assert_eq!(buf.len(), HEADER_LEN);
        CopyWriter { buf, rows: 0 }
    }

    pub fn row(&mut self, fields: i16) -> &mut Self {
        self.rows += 1;
        self.buf.extend_from_slice(&fields.to_be_bytes());
        self
    }

    /// One field's length and bytes.
    fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf
            .extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        self.buf.extend_from_slice(bytes);
        self
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Adds `other`'s rows after this one's.
    pub fn append(&mut self, other: &CopyWriter) {
        self.buf.extend_from_slice(&other.buf[HEADER_LEN..]);
        self.rows += other.rows;
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
        self.buf
    }
}

impl Cells for CopyWriter {
    fn null(&mut self) -> &mut Self {
        self.buf.extend_from_slice(&(-1i32).to_be_bytes());
        self
    }

    fn text(&mut self, v: &str) -> &mut Self {
        self.field(v.as_bytes())
    }

    fn i32(&mut self, v: i32) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    fn i64(&mut self, v: i64) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    fn f32(&mut self, v: f32) -> &mut Self {
        self.field(&v.to_bits().to_be_bytes())
    }

    fn f64(&mut self, v: f64) -> &mut Self {
        self.field(&v.to_bits().to_be_bytes())
    }

    /// A timestamptz from Unix milliseconds.
    fn ts_ms(&mut self, ms: i64) -> &mut Self {
        self.i64(ms * 1000 - PG_EPOCH_OFFSET_US)
    }

    /// A bytea field.
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.field(v)
    }
}

/// Sends rows encoded for `statement`; returns the rows copied.
pub(crate) async fn copy(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    statement: &str,
    writer: CopyWriter,
) -> crate::error::Result<u64> {
    if writer.rows() == 0 {
        return Ok(0);
    }
    let mut sink = tx.copy_in_raw(statement).await?;
    sink.send(writer.finish()).await?;
    Ok(sink.finish().await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_format() {
        let mut w = CopyWriter::new();
        w.row(3).text("ab").opt_i32(None).ts_ms(946_684_800_000);
        let b = w.finish();
        assert_eq!(&b[..11], b"PGCOPY\n\xff\r\n\0");
        let body = &b[19..];
        assert_eq!(&body[..2], &3i16.to_be_bytes());
        assert_eq!(&body[2..6], &2i32.to_be_bytes());
        assert_eq!(&body[6..8], b"ab");
        assert_eq!(&body[8..12], &(-1i32).to_be_bytes());
        assert_eq!(&body[12..16], &8i32.to_be_bytes());
        assert_eq!(&body[16..24], &0i64.to_be_bytes());
        assert_eq!(&body[24..], &(-1i16).to_be_bytes());
    }
}
