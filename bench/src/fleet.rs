//! What the ingest benchmarks send: the simulated fleet and the batch encodings.

use model::wire::v1::{Batch, Format};

/// A batch encoding of the wire protocol, as `--wire` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wire {
    /// MessagePack in the compact layout (structs as arrays), snappy: what the agent sends.
    Msgpack,
    /// MessagePack with structs as maps keyed by field name, snappy: what most MessagePack
    /// libraries write.
    MsgpackNamed,
    /// JSON, gzip: what `curl` and scripts send, and the agent to a collector without
    /// MessagePack.
    Json,
}

impl Wire {
    pub(crate) fn format(self) -> Format {
        match self {
            Wire::Msgpack | Wire::MsgpackNamed => Format::MessagePack,
            Wire::Json => Format::Json,
        }
    }

    /// The encoding in words, for the benchmarks' reports.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Wire::Msgpack => "MessagePack, compact layout (snappy)",
            Wire::MsgpackNamed => "MessagePack, named layout (snappy)",
            Wire::Json => "JSON (gzip)",
        }
    }

    /// The body the gpulens client sends in this encoding.
    pub(crate) fn encode(self, batch: &Batch) -> Result<Vec<u8>, ingest_client::SendError> {
        match self {
            Wire::Msgpack => ingest_client::Client::encode(batch),
            Wire::MsgpackNamed => ingest_client::Client::encode_named(batch),
            Wire::Json => ingest_client::Client::encode_json(batch),
        }
    }

    /// Each batch's node and its body in this encoding, encoded before a phase starts, as an
    /// agent has its batches ready.
    pub(crate) fn bodies(
        self,
        batches: &[Batch],
    ) -> Result<Vec<(String, Vec<u8>)>, ingest_client::SendError> {
        batches
            .iter()
            .map(|b| Ok((b.node.clone(), self.encode(b)?)))
            .collect()
    }
}

/// A fleet of `gpus` GPUs, 8 per node, each time-sliced 8 ways with a busy tenant per replica.
pub(crate) fn bench_scenario(gpus: usize) -> simulator::Scenario {
    let nodes = gpus.div_ceil(8);
    let mut text = String::from("name = \"bench\"\ncluster = \"bench\"\nseed = 5\n");
    for n in 0..nodes {
        text.push_str(&format!(
            "[[nodes]]\nname = \"node-{n:04}\"\nmodel = \"H100-80GB\"\ngpus = 8\nsharing = \"time_slicing\"\nreplicas = 8\ndcgm = true\n"
        ));
        for g in 0..8 {
            for r in 0..8 {
                text.push_str(&format!(
                    "[[tenants]]\nname = \"t-{n}-{g}-{r}\"\nkind = \"pod\"\nnamespace = \"ns-{}\"\nnode = \"node-{n:04}\"\ndevices = [\"{g}::{r}\"]\npattern = \"steady_training\"\nintensity = 0.12\nmem_gib = 4\n",
                    r % 4
                ));
            }
        }
    }
    simulator::Scenario::from_toml(&text).expect("the benchmark scenario is valid")
}
