//! Stored weekly reports (migration 0006). One SQL text serves both backends.

/// A report as stored.
#[derive(Debug, Clone)]
pub struct StoredReport {
    pub week: String,
    pub timezone: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub generated_ms: i64,
    pub summary: String,
    pub data: String,
    pub html: String,
    pub csv: String,
}

/// The report methods of a backend.
macro_rules! report_methods {
    ($write:ident, $read:ident, $sql:path) => {
        /// Stores a report, replacing one of the same week and time zone.
        pub async fn save_report(&self, r: &super::reports::StoredReport) -> Result<()> {
            sqlx::query(&$sql(
                "INSERT INTO reports (week, timezone, from_ms, to_ms, generated_ms, summary, data, html, csv) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (week, timezone) DO UPDATE SET from_ms = excluded.from_ms, to_ms = excluded.to_ms, generated_ms = excluded.generated_ms, summary = excluded.summary, data = excluded.data, html = excluded.html, csv = excluded.csv",
            ))
            .bind(&r.week)
            .bind(&r.timezone)
            .bind(r.from_ms)
            .bind(r.to_ms)
            .bind(r.generated_ms)
            .bind(&r.summary)
            .bind(&r.data)
            .bind(&r.html)
            .bind(&r.csv)
            .execute(&self.$write)
            .await?;
            Ok(())
        }

        /// Stored reports, newest week first, without their bodies.
        pub async fn reports(&self, limit: i64) -> Result<Vec<super::reports::StoredReport>> {
            let rows = sqlx::query(&$sql(
                "SELECT week, timezone, from_ms, to_ms, generated_ms, summary FROM reports ORDER BY from_ms DESC, timezone LIMIT ?",
            ))
            .bind(limit)
            .fetch_all(&self.$read)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(super::reports::StoredReport {
                        week: r.try_get(0)?,
                        timezone: r.try_get(1)?,
                        from_ms: r.try_get(2)?,
                        to_ms: r.try_get(3)?,
                        generated_ms: r.try_get(4)?,
                        summary: r.try_get(5)?,
                        data: String::new(),
                        html: String::new(),
                        csv: String::new(),
                    })
                })
                .collect()
        }

        /// One stored report with its bodies.
        pub async fn report(
            &self,
            week: &str,
            timezone: &str,
        ) -> Result<Option<super::reports::StoredReport>> {
            let row = sqlx::query(&$sql(
                "SELECT week, timezone, from_ms, to_ms, generated_ms, summary, data, html, csv FROM reports WHERE week = ? AND timezone = ?",
            ))
            .bind(week)
            .bind(timezone)
            .fetch_optional(&self.$read)
            .await?;
            row.map(|r| {
                Ok(super::reports::StoredReport {
                    week: r.try_get(0)?,
                    timezone: r.try_get(1)?,
                    from_ms: r.try_get(2)?,
                    to_ms: r.try_get(3)?,
                    generated_ms: r.try_get(4)?,
                    summary: r.try_get(5)?,
                    data: r.try_get(6)?,
                    html: r.try_get(7)?,
                    csv: r.try_get(8)?,
                })
            })
            .transpose()
        }
    };
}
pub(crate) use report_methods;
