//! Rows encoded for binary COPY: the batch's samples for the raw tables, in the order of the
//! group commit's COPY statements.

use model::wire::v1::Batch;

use super::group_commit::COPIES;
use super::pgcopy::CopyWriter;
use crate::raw;

/// Encodes one row per item for `statement` (`COPY t (columns) FROM STDIN …`), `write`
/// filling each row's fields; the field count follows from the column list. Synchronous, so
/// that nothing borrowed by the iterator lives across the send's await.
pub(super) fn prepare<T>(
    statement: &str,
    items: impl IntoIterator<Item = T>,
    mut write: impl FnMut(&mut CopyWriter, T),
) -> CopyWriter {
    let fields = statement
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map_or(1, |(cols, _)| cols.matches(',').count() + 1) as i16;
    let mut writer = CopyWriter::new();
    for item in items {
        writer.row(fields);
        write(&mut writer, item);
    }
    writer
}

/// The batch's sample rows, encoded for the raw tables in the order of [`COPIES`] (that of
/// `raw::rows::of`), each row's fields in the order of its table's columns.
pub(super) fn sample_rows(b: &Batch) -> [CopyWriter; raw::rows::COUNT] {
    std::array::from_fn(|table| {
        prepare(&COPIES[table], raw::rows::of(b, table), |w, row| {
            raw::rows::write(w, b, &row)
        })
    })
}
