//! The stored analyses (`analysis_runs`), written once for both backends in their dialect's
//! SQL.

use crate::db::{Db, StmtExt, Tables, stmt};
use crate::error::Result;

impl<DB: Db> Tables<DB> {
    /// Stores an analysis (replacing one generated at the same instant) and keeps the
    /// newest `keep`.
    pub(crate) async fn save_analysis(
        &self,
        generated: i64,
        from: i64,
        to: i64,
        body: &str,
        keep: i64,
    ) -> Result<()> {
        let d = DB::DIALECT;
        let mut tx = self.write.begin().await?;
        stmt::<DB>(&format!(
            "INSERT INTO analysis_runs (generated, range_from, range_to, body) VALUES ({}, {}, {}, {})
             ON CONFLICT (generated) DO UPDATE SET range_from = excluded.range_from,
                range_to = excluded.range_to, body = excluded.body",
            d.time_param(1),
            d.time_param(2),
            d.time_param(3),
            d.json_param(4)
        ))
        .arg(generated)
        .arg(from)
        .arg(to)
        .arg(body)
        .run(&mut tx)
        .await?;
        stmt::<DB>(&format!(
            "DELETE FROM analysis_runs WHERE generated NOT IN
                (SELECT generated FROM analysis_runs ORDER BY generated DESC LIMIT {})",
            d.param(1)
        ))
        .arg(keep)
        .run(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(crate) async fn latest_analysis_ms(&self) -> Result<Option<i64>> {
        let sql = format!(
            "SELECT {} FROM analysis_runs",
            DB::DIALECT.epoch_ms("max(generated)")
        );
        Ok(stmt::<DB>(&sql).scalar(&self.read).await?)
    }

    pub(crate) async fn latest_analysis(&self) -> Result<Option<String>> {
        let sql = format!(
            "SELECT {} FROM analysis_runs ORDER BY generated DESC LIMIT 1",
            DB::DIALECT.json_text("body")
        );
        Ok(stmt::<DB>(&sql).scalar_opt(&self.read).await?)
    }
}
