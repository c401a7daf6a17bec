//! What a command opens before its work: the configuration (file, flags, or the demo's) and
//! the store it names.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{Config, Secret};

#[derive(Debug, clap::Args)]
pub struct DbArgs {
    /// Configuration file (TOML; see gpulens.example.toml).
    #[arg(long, env = "GPULENS_CONFIG")]
    pub config: Option<PathBuf>,
    /// postgres://USER:PASS@HOST/DB or sqlite://PATH; overrides the config file.
    #[arg(long, env = "GPULENS_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

/// The configuration from `--config` (or the defaults), with `--database-url` over it.
pub fn load_config(db: &DbArgs) -> anyhow::Result<Config> {
    let mut config = match &db.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(url) = &db.database_url {
        config.database_url = Some(Secret(url.clone()));
    }
    Ok(config)
}

/// The store the configuration names, creating the SQLite data directory when needed.
pub async fn open_store(config: &Config) -> anyhow::Result<store::Store> {
    let url = config.database_url();
    if url.starts_with("sqlite://") {
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create data directory {}: {e}",
                config.data_dir.display()
            )
        })?;
    }
    let store = store::Store::connect(&url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open database {}: {e}", store::redact_url(&url)))?;
    Ok(store)
}

/// The configuration, or, with neither --database-url nor --config, the demo's database in
/// `demo_dir`, so commands run right after `gpulens demo` just work.
pub fn load_config_or_demo(db: &DbArgs, demo_dir: &std::path::Path) -> anyhow::Result<Config> {
    let mut config = load_config(db)?;
    if db.database_url.is_none() && db.config.is_none() {
        config.data_dir = demo_dir.to_owned();
    }
    Ok(config)
}

/// An analysis window as `--since` takes it: a duration (`7d`, `36h`) of at least an hour.
pub fn analysis_window(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_secs(3600) {
        return Err(format!(
            "{s} is shorter than an hour: the analysis reads hour rollups (try 1h or 7d)"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_analysis_window_is_at_least_an_hour() {
        assert_eq!(analysis_window("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(analysis_window("1h"), Ok(Duration::from_secs(3600)));
        assert!(
            analysis_window("59m")
                .unwrap_err()
                .contains("shorter than an hour")
        );
        assert!(analysis_window("0s").is_err());
        assert!(analysis_window("-1h").is_err());
    }
}
