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
        .map_err(|e| anyhow::anyhow!("cannot open database {}: {e}", store::redact_url(&url)))?
        .with_pair_thresholds(analytics::pair_thresholds(&config.analytics.thresholds));
    Ok(store)
}

/// The store of a command that reads recorded history (analyze, report, labels): as
/// [`open_store`], but a SQLite database that does not exist is an error, not a new empty one,
/// so a mistyped `--data-dir` says so instead of leaving a directory and a database behind.
/// `db` says whether it is the demo's database ([`load_config_or_demo`]), which the error
/// then says how to make.
pub async fn open_history(db: &DbArgs, config: &Config) -> anyhow::Result<store::Store> {
    if let Some(path) = sqlite_file(&config.database_url())
        && !path.exists()
    {
        let make = if db.database_url.is_none() && db.config.is_none() {
            format!(
                "`gpulens demo --data-dir {}` records a demo history there",
                config.data_dir.display()
            )
        } else {
            "check the path (a collector creates its database when it starts)".to_owned()
        };
        anyhow::bail!(
            "no database at {}: {make}, or point --database-url (or --config) at a collector's database",
            path.display()
        );
    }
    open_store(config).await
}

/// The file a `sqlite://PATH[?options]` URL names; none for other databases and in-memory ones.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite://")?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
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
    let d = model::time::parse_duration(s)?;
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
    fn a_sqlite_url_names_its_file() {
        assert_eq!(
            sqlite_file("sqlite:///var/lib/gpulens/gpulens.db"),
            Some(PathBuf::from("/var/lib/gpulens/gpulens.db"))
        );
        assert_eq!(
            sqlite_file("sqlite://data/g.db?mode=rwc"),
            Some(PathBuf::from("data/g.db"))
        );
        assert_eq!(sqlite_file("sqlite://:memory:"), None);
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("postgres://u@h/db"), None);
    }

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
