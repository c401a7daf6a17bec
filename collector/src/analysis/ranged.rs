//! The funnel over a range a reader picks (issue 74.2): the tenants' and teams' pages over the
//! last 24 hours, 30 days or a custom from/to read the hour rollups the scheduled analysis
//! reads, through the same holdings and funnel — without interference pairs, findings or a
//! plan, which stay the scheduled analysis'. The work a request can cause is bounded: one
//! range is computed at a time (others wait for it), the newest is kept for five minutes, and
//! a range is at most the hour rollups' retention long.

use std::sync::Arc;
use std::time::{Duration, Instant};

use analytics::Funnel;
use model::rollup::{HOUR_MS, bucket_of};
use store::{Scope, Store};

use super::{LoadStats, Span, load_frame};

/// How long a computed range answers again.
const FRESH: Duration = Duration::from_secs(300);

/// The newest range's funnel, and the gate that lets one range be computed at a time.
#[derive(Debug, Default)]
pub struct Ranged {
    slot: tokio::sync::Mutex<Option<Kept>>,
}

#[derive(Debug)]
struct Kept {
    range: (i64, i64),
    at: Instant,
    funnel: Arc<Funnel>,
}

impl Ranged {
    /// The funnel over [from, to), widened to whole hours: the kept one when it is this
    /// range's and fresh, else computed (while the gate is held).
    pub async fn funnel(
        &self,
        store: &Store,
        cfg: &analytics::Config,
        from: i64,
        to: i64,
    ) -> anyhow::Result<Arc<Funnel>> {
        let range = (
            bucket_of(from, HOUR_MS),
            bucket_of(to - 1, HOUR_MS) + HOUR_MS,
        );
        let mut slot = self.slot.lock().await;
        if let Some(k) = slot.as_ref()
            && k.range == range
            && k.at.elapsed() < FRESH
        {
            return Ok(k.funnel.clone());
        }
        let funnel = Arc::new(compute(store, cfg, range.0, to.max(range.0 + 1)).await?);
        *slot = Some(Kept {
            range,
            at: Instant::now(),
            funnel: funnel.clone(),
        });
        Ok(funnel)
    }
}

/// Reads the fleet's inventory and hour rollups of [from, to) and makes its funnel, off the
/// async runtime.
async fn compute(
    store: &Store,
    cfg: &analytics::Config,
    from: i64,
    to: i64,
) -> anyhow::Result<Funnel> {
    let mut input = load_frame(store, Span::closed(from, to), &mut LoadStats::default()).await?;
    (input.gpu_hours, input.tenant_hours) = store
        .hour_series(Scope::Fleet, input.from_ms, input.to_ms)
        .await?;
    let cfg = cfg.clone();
    let funnel = tokio::task::spawn_blocking(move || {
        let holdings = analytics::holdings::holdings(&input);
        analytics::funnel::funnel(&input, &holdings, &cfg)
    })
    .await??;
    Ok(funnel)
}
