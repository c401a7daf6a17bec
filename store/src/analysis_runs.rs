//! The stored analyses (`analysis_runs`), written once for both backends:
//! [`analysis_run_methods!`] expands into each backend's `impl` with its dialect's SQL.

/// A backend's stored-analysis methods: `$write`/`$read` name its pools, `$d` its dialect.
macro_rules! analysis_run_methods {
    ($write:ident, $read:ident, $d:expr) => {
        /// Stores an analysis (replacing one generated at the same instant) and keeps the
        /// newest `keep`.
        pub async fn save_analysis(
            &self,
            generated: i64,
            from: i64,
            to: i64,
            body: &str,
            keep: i64,
        ) -> Result<()> {
            let d = $d;
            let mut tx = self.$write.begin().await?;
            sqlx::query(&format!(
                "INSERT INTO analysis_runs (generated, range_from, range_to, body) VALUES ({}, {}, {}, {})
                 ON CONFLICT (generated) DO UPDATE SET range_from = excluded.range_from,
                    range_to = excluded.range_to, body = excluded.body",
                d.time_param(1),
                d.time_param(2),
                d.time_param(3),
                d.json_param(4)
            ))
            .bind(generated)
            .bind(from)
            .bind(to)
            .bind(body)
            .execute(&mut *tx)
            .await?;
            sqlx::query(&format!(
                "DELETE FROM analysis_runs WHERE generated NOT IN
                    (SELECT generated FROM analysis_runs ORDER BY generated DESC LIMIT {})",
                d.param(1)
            ))
            .bind(keep)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(())
        }

        pub async fn latest_analysis_ms(&self) -> Result<Option<i64>> {
            let sql = format!(
                "SELECT {} FROM analysis_runs",
                $d.epoch_ms("max(generated)")
            );
            Ok(sqlx::query_scalar(&sql).fetch_one(&self.$read).await?)
        }

        pub async fn latest_analysis(&self) -> Result<Option<String>> {
            let sql = format!(
                "SELECT {} FROM analysis_runs ORDER BY generated DESC LIMIT 1",
                $d.json_text("body")
            );
            Ok(sqlx::query_scalar(&sql).fetch_optional(&self.$read).await?)
        }
    };
}

pub(crate) use analysis_run_methods;
