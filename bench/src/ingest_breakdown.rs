//! `gpulens bench ingest --breakdown`: where the end-to-end phase's gap to raw COPY lies. Two
//! more phases per round, in this process and without HTTP, each storing the same rows again
//! under a cluster name of its own: the request bodies decoded, validated and stored through
//! the store's ingest (the collector's work on a batch, less the HTTP exchange on both ends),
//! then the already-decoded batches stored through the store's ingest alone (the claim, group
//! commit and COPY, less decoding and validation). Raw COPY minus the second is the storage
//! path's cost, the second minus the first the decoding's, the first minus end to end HTTP's.

use collector::config::IngestConfig;
use model::wire::v1::{Batch, Limits};
use store::Store;

use crate::fleet::Wire;
use crate::phase::{Measured, Phase, PhaseCpu, Profiled, by_worker, median, run_workers, timed};

/// The two in-process phases of one round, in [`PHASES`]' order: decode + store, store only.
pub(crate) type Breakdown = [Measured; 2];

/// The labels the phases print under, in [`Breakdown`]'s order.
pub(crate) const PHASES: [&str; 2] = ["decode + store, no HTTP:", "store only (decoded batches):"];

/// Runs both phases on `fresh(kind)`'s batches (the round's `rows` rows under a new cluster
/// name), encoded as `wire`, `concurrency` at a time, one worker per node as the other phases
/// do.
pub(crate) async fn run(
    store: &Store,
    fresh: impl Fn(&str) -> Vec<Batch>,
    wire: Wire,
    concurrency: usize,
    rows: usize,
    profiled: Profiled,
    checkpoints: &mut bool,
) -> anyhow::Result<Breakdown> {
    let bodies = wire.bodies(&fresh("decode"))?;
    let decode_and_store = timed(
        store,
        checkpoints,
        rows,
        |c| profiled.mark(Phase::DecodeAndStore, c),
        run_workers(by_worker(bodies, concurrency, |b| b.0.clone()), {
            let store = store.clone();
            move |(_, body): (String, Vec<u8>)| {
                let store = store.clone();
                async move {
                    let batch = decode_and_validate(wire, &body)?;
                    store_batch(&store, batch).await
                }
            }
        }),
    )
    .await?;
    let batches = fresh("stored");
    let store_only = timed(
        store,
        checkpoints,
        rows,
        |c| profiled.mark(Phase::StoreOnly, c),
        run_workers(by_worker(batches, concurrency, |b| b.node.clone()), {
            let store = store.clone();
            move |b: Batch| {
                let store = store.clone();
                async move { store_batch(&store, b).await }
            }
        }),
    )
    .await?;
    Ok([decode_and_store, store_only])
}

/// What the ingest handler does to a body before storing it: undo its compression and decode
/// it within the collector's default limits, then validate it as the handler does.
fn decode_and_validate(wire: Wire, body: &[u8]) -> anyhow::Result<Batch> {
    let config = IngestConfig::default();
    let format = wire.format();
    let raw = intake::body::decode(
        ingest_client::content_encoding(format),
        body,
        config.max_decoded_bytes,
    )
    .map_err(|e| anyhow::anyhow!("undoing the body's compression: {e:?}"))?;
    let batch = intake::batch::decode(format, &raw).map_err(anyhow::Error::msg)?;
    let limits = Limits {
        max_rows: config.max_rows,
        ..Limits::default()
    };
    batch.validate(&limits, model::time::now_ms())?;
    Ok(batch)
}

/// The store's ingest of one batch, received now, no teams configured (as the bench's
/// collector has none).
async fn store_batch(store: &Store, batch: Batch) -> anyhow::Result<()> {
    let no_team = |_: &model::Tenant| None;
    store
        .ingest(&batch, model::time::now_ms(), &no_team)
        .await?;
    Ok(())
}

/// One round's two phases, beside its raw COPY rate.
pub(crate) fn print_round(b: &Breakdown, copy_rate: f64) {
    for (label, (rate, cpu)) in PHASES.iter().zip(b) {
        eprintln!(
            "  {label:<30} {rate:.0} rows/s (ratio {:.2}){}",
            rate / copy_rate,
            match cpu {
                Some(c) => format!(
                    "; CPU-ms per 1,000 rows: this process {:.2}, machine {:.2} (busy {:.0} %)",
                    c.process,
                    c.machine,
                    c.busy * 100.0
                ),
                None => String::new(),
            }
        );
    }
}

/// The medians of both phases over the counted rounds, each against raw COPY's median.
pub(crate) fn print(breakdowns: &[Breakdown], copy_rate: f64) {
    if breakdowns.is_empty() {
        return;
    }
    for (i, label) in PHASES.iter().enumerate() {
        let rate = median(breakdowns.iter().map(|b| b[i].0).collect());
        let cpus: Vec<PhaseCpu> = breakdowns.iter().filter_map(|b| b[i].1).collect();
        let cpu = match cpus.is_empty() {
            true => String::new(),
            false => format!(
                "; CPU-ms per 1,000 rows: this process {:.2}, machine {:.2}",
                median(cpus.iter().map(|c| c.process).collect()),
                median(cpus.iter().map(|c| c.machine).collect())
            ),
        };
        println!(
            "  {label:<35} {rate:>10.0} rows/s (median), ratio {:.2}{cpu}",
            rate / copy_rate
        );
    }
}
