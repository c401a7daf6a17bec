//! Stored weekly reports (migration 0006). One SQL text serves both backends.

use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

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

impl<DB: Db> Tables<DB> {
    /// Stores a report, replacing one of the same week and time zone.
    pub(crate) async fn save_report(&self, r: &super::reports::StoredReport) -> Result<()> {
        stmt::<DB>(&DB::DIALECT.numbered(
            "INSERT INTO reports (week, timezone, from_ms, to_ms, generated_ms, summary, data, html, csv) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (week, timezone) DO UPDATE SET from_ms = excluded.from_ms, to_ms = excluded.to_ms, generated_ms = excluded.generated_ms, summary = excluded.summary, data = excluded.data, html = excluded.html, csv = excluded.csv",
        ))
        .arg(&r.week)
        .arg(&r.timezone)
        .arg(r.from_ms)
        .arg(r.to_ms)
        .arg(r.generated_ms)
        .arg(&r.summary)
        .arg(&r.data)
        .arg(&r.html)
        .arg(&r.csv)
        .run(&self.write)
        .await?;
        Ok(())
    }

    /// Stored reports, newest week first, without their bodies.
    pub(crate) async fn reports(&self, limit: i64) -> Result<Vec<super::reports::StoredReport>> {
        let rows = stmt::<DB>(&DB::DIALECT.numbered(
            "SELECT week, timezone, from_ms, to_ms, generated_ms, summary FROM reports ORDER BY from_ms DESC, timezone LIMIT ?",
        ))
        .arg(limit)
        .all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(super::reports::StoredReport {
                    week: r.at(0)?,
                    timezone: r.at(1)?,
                    from_ms: r.at(2)?,
                    to_ms: r.at(3)?,
                    generated_ms: r.at(4)?,
                    summary: r.at(5)?,
                    data: String::new(),
                    html: String::new(),
                    csv: String::new(),
                })
            })
            .collect()
    }

    /// One stored report with its bodies.
    pub(crate) async fn report(
        &self,
        week: &str,
        timezone: &str,
    ) -> Result<Option<super::reports::StoredReport>> {
        let row = stmt::<DB>(&DB::DIALECT.numbered(
            "SELECT week, timezone, from_ms, to_ms, generated_ms, summary, data, html, csv FROM reports WHERE week = ? AND timezone = ?",
        ))
        .arg(week)
        .arg(timezone)
        .optional(&self.read)
        .await?;
        row.map(|r| {
            Ok(super::reports::StoredReport {
                week: r.at(0)?,
                timezone: r.at(1)?,
                from_ms: r.at(2)?,
                to_ms: r.at(3)?,
                generated_ms: r.at(4)?,
                summary: r.at(5)?,
                data: r.at(6)?,
                html: r.at(7)?,
                csv: r.at(8)?,
            })
        })
        .transpose()
    }
}
