//! Secrets the collectors share (the session-signing key): made by whichever collector asks
//! first.

use crate::Store;
use crate::db::{Db, RowExt, StmtExt, Tables, stmt};
use crate::error::Result;

impl Store {
    /// The deployment's secret `name`: the stored one, or `fresh` stored now when there is
    /// none yet (the first collector to ask wins; every other one reads what it stored).
    pub async fn shared_secret(&self, name: &str, fresh: &[u8]) -> Result<Vec<u8>> {
        dispatch!(self, s => s.tables.shared_secret(name, fresh, model::time::now_ms()).await)
    }

    /// Replaces the deployment's secret `name` (rotation): what signed with the old one no
    /// longer verifies once the collectors read the new one.
    pub async fn replace_secret(&self, name: &str, value: &[u8]) -> Result<()> {
        dispatch!(self, s => s.tables.replace_secret(name, value, model::time::now_ms()).await)
    }
}

impl<DB: Db> Tables<DB> {
    async fn shared_secret(&self, name: &str, fresh: &[u8], now: i64) -> Result<Vec<u8>> {
        let d = DB::DIALECT;
        stmt::<DB>(&format!(
            "INSERT INTO secrets (name, value, created_ms) VALUES ({}, {}, {})
             ON CONFLICT (name) DO NOTHING",
            d.param(1),
            d.param(2),
            d.param(3)
        ))
        .arg(name)
        .arg(fresh)
        .arg(now)
        .run(&self.write)
        .await?;
        let sql = format!("SELECT value FROM secrets WHERE name = {}", d.param(1));
        let row = stmt::<DB>(&sql).arg(name).one(&self.write).await?;
        Ok(row.at(0)?)
    }

    async fn replace_secret(&self, name: &str, value: &[u8], now: i64) -> Result<()> {
        let d = DB::DIALECT;
        stmt::<DB>(&format!(
            "INSERT INTO secrets (name, value, created_ms) VALUES ({}, {}, {})
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, created_ms = excluded.created_ms",
            d.param(1),
            d.param(2),
            d.param(3)
        ))
        .arg(name)
        .arg(value)
        .arg(now)
        .run(&self.write)
        .await?;
        Ok(())
    }
}
