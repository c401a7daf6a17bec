//! Time partitions: which tables are partitioned by day and by month, creating a partition,
//! and the range a partition's name covers.

use model::time::days_from_civil;
use sqlx::PgPool;

use crate::error::Result;
use crate::raw;

/// Tables partitioned by day (every raw table and the minute rollups), and by month.
pub(super) fn daily() -> impl Iterator<Item = &'static str> {
    raw::NAMES
        .into_iter()
        .chain(["gpu_rollup_1m", "tenant_rollup_1m"])
}
pub(super) const MONTHLY: [&str; 2] = ["gpu_rollup_1h", "tenant_rollup_1h"];

pub(super) async fn create_partition(
    pool: &PgPool,
    name: &str,
    parent: &str,
    from: &str,
    to: &str,
) -> Result<()> {
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS {name} PARTITION OF {parent} FOR VALUES FROM ('{from} 00:00:00+00') TO ('{to} 00:00:00+00')"
    );
    match sqlx::query(&sql).execute(pool).await {
        Ok(_) => Ok(()),
        // Another collector created it at the same moment.
        Err(sqlx::Error::Database(e))
            if matches!(e.code().as_deref(), Some("42P07") | Some("23505")) =>
        {
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// The end of the range a partition covers, from its name (`table_pYYYYMMDD` / `table_pYYYYMM`).
pub(super) fn partition_end_ms(table: &str, part: &str) -> Option<i64> {
    let suffix = part.strip_prefix(table)?.strip_prefix("_p")?;
    let num = |s: &str| s.parse::<i64>().ok();
    match suffix.len() {
        8 => Some(
            days_from_civil(num(&suffix[..4])?, num(&suffix[4..6])?, num(&suffix[6..])?)?
                * 86_400_000
                + 86_400_000,
        ),
        6 => {
            let (y, m) = (num(&suffix[..4])?, num(&suffix[4..])?);
            let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            Some(days_from_civil(y, m, 1)? * 86_400_000)
        }
        _ => None,
    }
}

/// (year, month, day) of the UTC day containing `ms`.
pub(super) fn civil(ms: i64) -> (i64, i64, i64) {
    model::time::civil_from_days(ms.div_euclid(86_400_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(1_795_219_200_000), (2026, 11, 21));
        assert_eq!(
            days_from_civil(2026, 11, 21).map(|d| d * 86_400_000),
            Some(1_795_219_200_000)
        );
        assert_eq!(
            partition_end_ms("gpu_samples", "gpu_samples_p20261121"),
            Some(1_795_305_600_000)
        );
        assert_eq!(
            partition_end_ms("gpu_rollup_1h", "gpu_rollup_1h_p202612"),
            days_from_civil(2027, 1, 1).map(|d| d * 86_400_000)
        );
        assert_eq!(partition_end_ms("gpu_samples", "gpu_samples_default"), None);
        assert_eq!(
            partition_end_ms("gpu_samples", "gpu_samples_p20261399"),
            None
        );
    }
}
