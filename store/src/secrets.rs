//! Secrets the collectors share (the session-signing key): made by whichever collector asks
//! first, written once for both backends ([`secret_methods!`]).

/// A backend's secret methods: `$write` names its writing pool, `$d` its dialect.
macro_rules! secret_methods {
    ($write:ident, $d:expr) => {
        /// The secret `name`, made from `fresh` by whichever collector asks first.
        pub async fn shared_secret(&self, name: &str, fresh: &[u8], now: i64) -> Result<Vec<u8>> {
            let d = $d;
            sqlx::query(&format!(
                "INSERT INTO secrets (name, value, created_ms) VALUES ({}, {}, {})
                 ON CONFLICT (name) DO NOTHING",
                d.param(1),
                d.param(2),
                d.param(3)
            ))
            .bind(name)
            .bind(fresh)
            .bind(now)
            .execute(&self.$write)
            .await?;
            let sql = format!("SELECT value FROM secrets WHERE name = {}", d.param(1));
            Ok(sqlx::query_scalar(&sql)
                .bind(name)
                .fetch_one(&self.$write)
                .await?)
        }

        pub async fn replace_secret(&self, name: &str, value: &[u8], now: i64) -> Result<()> {
            let d = $d;
            sqlx::query(&format!(
                "INSERT INTO secrets (name, value, created_ms) VALUES ({}, {}, {})
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value, created_ms = excluded.created_ms",
                d.param(1),
                d.param(2),
                d.param(3)
            ))
            .bind(name)
            .bind(value)
            .bind(now)
            .execute(&self.$write)
            .await?;
            Ok(())
        }
    };
}

pub(crate) use secret_methods;
