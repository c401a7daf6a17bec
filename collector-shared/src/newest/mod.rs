//! The newest stored analysis, parsed once per analysis and shared by its readers (the
//! dashboard, `/metrics`, the agents' label endpoint, alerting, the label actions), and the
//! format analyses are stored in ([`stored`]).

pub mod stored;

use analytics::Analysis;
use store::Store;

/// The newest stored analysis, parsed once per analysis and shared by its readers (the
/// dashboard, `/metrics`, the agents' label endpoint, alerting).
#[derive(Debug, Default)]
pub struct Newest {
    slot: std::sync::Mutex<Option<(i64, std::sync::Arc<Analysis>)>>,
}

/// Why the newest analysis cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum NewestError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("the stored analysis cannot be read: {0}")]
    Corrupt(String),
}

impl Newest {
    /// The newest stored analysis (`None` before the first), parsed only when a newer one was
    /// stored since the last call.
    pub async fn get(
        &self,
        store: &Store,
    ) -> Result<Option<std::sync::Arc<Analysis>>, NewestError> {
        let Some(at) = store.latest_analysis_ms().await? else {
            return Ok(None);
        };
        if let Some((cached, a)) = &*self.slot.lock().expect("newest analysis")
            && *cached == at
        {
            return Ok(Some(a.clone()));
        }
        let Some(body) = store.latest_analysis().await? else {
            return Ok(None);
        };
        let a: Analysis = tokio::task::spawn_blocking(move || stored::decode(&body))
            .await
            .map_err(|e| NewestError::Corrupt(e.to_string()))?
            .map_err(NewestError::Corrupt)?;
        let a = std::sync::Arc::new(a);
        *self.slot.lock().expect("newest analysis") = Some((at, a.clone()));
        Ok(Some(a))
    }
}
