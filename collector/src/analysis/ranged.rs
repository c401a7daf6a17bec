//! What a reader computes over a range they pick: the funnel and each team's hours (the
//! tenants' and teams' lists and pages over the last 24 hours, 30 days or a custom from/to
//! read the hour rollups the scheduled analysis reads, through the same holdings and funnel,
//! without interference pairs, findings or a plan) and a whole analysis (the recommendations page's plan made from the range's
//! recorded demand, as the scheduled analysis makes it from its window). The work a request
//! can cause is bounded: one range of each is computed at a time (others wait for it), the
//! newest of each is kept for five minutes, and a range is at most the hour rollups'
//! retention and a month long (the pages check both).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use analytics::funnel::TeamHours;
use analytics::{Analysis, Funnel};
use model::rollup::{HOUR_MS, bucket_of};
use store::{Scope, Store};

use super::{LoadStats, Span, analyze_by_cluster, load_frame};

/// How long a computed range answers again.
const FRESH: Duration = Duration::from_secs(300);

/// The newest range's funnel and analysis, each behind a gate that lets one range be computed
/// at a time.
#[derive(Debug, Default)]
pub struct Ranged {
    usage: Slot<RangeUse>,
    analysis: Slot<Analysis>,
}

/// What was held and used over a range: its funnel, and each team's hours for its trend.
#[derive(Debug)]
pub struct RangeUse {
    pub funnel: Funnel,
    pub team_hours: BTreeMap<String, TeamHours>,
}

/// One kept result and its gate.
#[derive(Debug)]
struct Slot<T> {
    kept: tokio::sync::Mutex<Option<Kept<T>>>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            kept: tokio::sync::Mutex::new(None),
        }
    }
}

#[derive(Debug)]
struct Kept<T> {
    range: (i64, i64),
    at: Instant,
    value: Arc<T>,
}

impl<T> Slot<T> {
    /// The kept value when it is this range's and fresh, else `make`'s (while the gate is
    /// held, so a second reader of the same range waits and reuses it).
    async fn get<F>(&self, range: (i64, i64), make: F) -> anyhow::Result<Arc<T>>
    where
        F: Future<Output = anyhow::Result<T>>,
    {
        let mut kept = self.kept.lock().await;
        if let Some(k) = kept.as_ref()
            && k.range == range
            && k.at.elapsed() < FRESH
        {
            return Ok(k.value.clone());
        }
        let value = Arc::new(make.await?);
        *kept = Some(Kept {
            range,
            at: Instant::now(),
            value: value.clone(),
        });
        Ok(value)
    }
}

/// [from, to) widened to whole hours.
fn hours(from: i64, to: i64) -> (i64, i64) {
    (
        bucket_of(from, HOUR_MS),
        bucket_of(to - 1, HOUR_MS) + HOUR_MS,
    )
}

impl Ranged {
    /// The funnel and team hours over [from, to), widened to whole hours.
    pub async fn usage(
        &self,
        store: &Store,
        cfg: &analytics::Config,
        from: i64,
        to: i64,
    ) -> anyhow::Result<Arc<RangeUse>> {
        let range = hours(from, to);
        let end = to.max(range.0 + 1);
        self.usage
            .get(range, compute_usage(store, cfg, range.0, end))
            .await
    }

    /// The whole analysis of [from, to) from its first whole hour, judged at `to`: findings
    /// and the plan as the scheduled analysis would have made them from that window.
    pub async fn analysis(
        &self,
        store: &Store,
        cfg: &analytics::Config,
        from: i64,
        to: i64,
    ) -> anyhow::Result<Arc<Analysis>> {
        let range = hours(from, to);
        let span = Span::closed(range.0, to.max(range.0 + 1));
        self.analysis
            .get(range, async {
                analyze_by_cluster(store, cfg, span, &mut LoadStats::default()).await
            })
            .await
    }
}

/// Reads the fleet's inventory and hour rollups of [from, to) and makes its funnel and team
/// hours, off the async runtime.
async fn compute_usage(
    store: &Store,
    cfg: &analytics::Config,
    from: i64,
    to: i64,
) -> anyhow::Result<RangeUse> {
    let mut input = load_frame(store, Span::closed(from, to), &mut LoadStats::default()).await?;
    (input.gpu_hours, input.tenant_hours) = store
        .hour_series(Scope::Fleet, input.from_ms, input.to_ms)
        .await?;
    let cfg = cfg.clone();
    tokio::task::spawn_blocking(move || {
        let holdings = analytics::holdings::holdings(&input);
        Ok(RangeUse {
            funnel: analytics::funnel::funnel(&input, &holdings, &cfg)?,
            team_hours: analytics::funnel::team_hours(&input, &holdings),
        })
    })
    .await?
}
