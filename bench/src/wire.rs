//! `gpulens bench wire`: what each batch encoding costs, per row, on the ingest benchmark's
//! fleet: the agent's encoding, the bytes sent, and the collector's two steps — undoing the
//! compression and decoding the batch — through the collector's own decoders (`intake`). No
//! database; alternating repetitions, medians.

use std::time::Instant;

use model::wire::v1::Batch;

use crate::fleet::{Wire, bench_scenario};
use crate::phase::median;

#[derive(Debug, clap::Args)]
pub struct WireBench {
    /// GPUs in the simulated fleet (8 per node, 8 processes per GPU), as `bench ingest`.
    #[arg(long, default_value_t = 256)]
    pub gpus: usize,
    /// Seconds of 1 Hz samples, one batch per node and second (what an agent sends).
    #[arg(long, default_value_t = 10)]
    pub seconds: usize,
    /// Alternating repetitions of each encoding; medians are reported.
    #[arg(long, default_value_t = 9)]
    pub reps: usize,
}

/// One repetition's cost of one encoding, in µs per row, and its size.
#[derive(Debug, Clone, Copy)]
struct Cost {
    encode: f64,
    bytes: f64,
    uncompress: f64,
    decode: f64,
}

fn measure(wire: Wire, batches: &[Batch], rows: usize) -> anyhow::Result<Cost> {
    let per_row = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / rows as f64;
    let format = wire.format();
    let encoding = ingest_client::content_encoding(format);
    let t = Instant::now();
    let bodies = batches
        .iter()
        .map(|b| wire.encode(b))
        .collect::<Result<Vec<_>, _>>()?;
    let encode = per_row(t);
    let bytes = bodies.iter().map(Vec::len).sum::<usize>() as f64 / rows as f64;
    let t = Instant::now();
    let raw = bodies
        .iter()
        .map(|b| intake::body::decode(encoding, b, usize::MAX).map_err(|e| anyhow::anyhow!("{e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let uncompress = per_row(t);
    let t = Instant::now();
    for r in &raw {
        let batch = intake::batch::decode(format, r).map_err(anyhow::Error::msg)?;
        std::hint::black_box(batch);
    }
    let decode = per_row(t);
    Ok(Cost {
        encode,
        bytes,
        uncompress,
        decode,
    })
}

pub fn wire(args: WireBench) -> anyhow::Result<()> {
    anyhow::ensure!(args.reps > 0, "--reps must be at least 1");
    let fleet = simulator::Fleet::new(bench_scenario(args.gpus));
    let start = model::time::now_ms() - (args.seconds as i64 + 120) * 1000;
    let batches: Vec<Batch> = (0..fleet.nodes.len())
        .flat_map(|node| {
            let fleet = &fleet;
            (0..args.seconds).map(move |s| {
                fleet.batch(
                    node,
                    "bench",
                    s as u64 + 1,
                    &[start + s as i64 * 1000],
                    1000,
                )
            })
        })
        .collect();
    let rows: usize = batches.iter().map(Batch::row_count).sum();
    let wires = [Wire::Json, Wire::MsgpackNamed, Wire::Msgpack];
    let mut costs: [Vec<Cost>; 3] = Default::default();
    for _ in 0..args.reps {
        for (i, wire) in wires.into_iter().enumerate() {
            costs[i].push(measure(wire, &batches, rows)?);
        }
    }
    println!(
        "wire benchmark: {} batches, {rows} rows, {} repetitions (medians, µs per row)",
        batches.len(),
        args.reps
    );
    println!(
        "  {:<37} {:>8} {:>10} {:>11} {:>8} {:>17}",
        "encoding", "encode", "bytes/row", "uncompress", "decode", "collector total"
    );
    let mut totals = Vec::new();
    for (name, c) in wires.iter().map(|w| w.label()).zip(&costs) {
        let m = |f: fn(&Cost) -> f64| median(c.iter().map(f).collect());
        let total = m(|c| c.uncompress + c.decode);
        totals.push(total);
        println!(
            "  {name:<37} {:>8.3} {:>10.1} {:>11.3} {:>8.3} {total:>17.3}",
            m(|c| c.encode),
            m(|c| c.bytes),
            m(|c| c.uncompress),
            m(|c| c.decode),
        );
    }
    println!(
        "  the collector's cost against JSON: MessagePack named {:.2}, compact {:.2}",
        totals[1] / totals[0],
        totals[2] / totals[0]
    );
    Ok(())
}
