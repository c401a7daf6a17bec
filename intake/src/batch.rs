//! An ingest body, its `Content-Encoding` undone, as a protocol v1 batch: JSON or MessagePack
//! (`model::wire::v1::Format`). Decoding is all a batch gets here; its domain checks are
//! `Batch::validate`. The work is bounded by the bytes: every length a MessagePack body states
//! is checked against what is left of it before anything is read, and the shape being decoded
//! (the batch's types, not the input) sets how deep it goes.

use model::wire::v1::{Batch, Format};

/// The batch `bytes` hold, or why not in words for a 400 answer.
pub fn decode(format: Format, bytes: &[u8]) -> Result<Batch, String> {
    match format {
        Format::Json => {
            // JSON is UTF-8 (RFC 8259 §8.1). Checked once for the whole body, the decoder need
            // not check each string again.
            let text =
                std::str::from_utf8(bytes).map_err(|e| format!("batch is not UTF-8 text: {e}"))?;
            serde_json::from_str(text)
                .map_err(|e| format!("batch is not valid JSON for protocol v1: {e}"))
        }
        Format::MessagePack => rmp_serde::from_slice(bytes)
            .map_err(|e| format!("batch is not valid MessagePack for protocol v1: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/ingest.md's example, with a MIG GPU, a process and an event beside it.
    const EXAMPLE: &str = r#"{
        "version": 1, "cluster": "lab", "node": "ws-01", "agent_id": "a-1", "seq": 7,
        "agent_version": "0.1.0", "interval_ms": 1000,
        "inventory": [{"uuid": "GPU-0b7e1d2a", "index": 0, "model": "NVIDIA H100 80GB HBM3",
            "memory_total_bytes": 85899345920, "pci_bus_id": null, "mig_enabled": true,
            "sharing": "mig", "replicas": 1,
            "mig_instances": [{"gi_id": 1, "ci_id": 0, "profile": "3g.40gb", "placement_start": 0,
                "placement_size": 4, "memory_total_bytes": 42949672960, "compute_slices": 3,
                "uuid": "MIG-5c1f"}]}],
        "tenants": [{"key": "host/1001", "kind": "host_user", "user": "alice", "uid": 1001}],
        "snapshots": [{"ts": 1795219200000,
            "gpus": [{"gpu_uuid": "GPU-0b7e1d2a", "gpu_util": 0.87, "mem_used_bytes": 21474836480,
                "power_w": 251.5, "temp_c": 61, "energy_j": 1234567.25, "sm_active": 0.5}],
            "mig": [{"gpu_uuid": "GPU-0b7e1d2a", "gi_id": 1, "ci_id": 0, "sm_active": 0.25}],
            "processes": [{"gpu_uuid": "GPU-0b7e1d2a", "pid": 4242, "start_time": 1795218600000,
                "kind": "mps", "gi_id": 1, "ci_id": 0, "tenant": "host/1001", "sm_util": 0.85}],
            "allocations": [{"gpu_uuid": "GPU-0b7e1d2a", "tenant": "host/1001", "gi_id": 1,
                "ci_id": 0, "share": 1.0}],
            "events": [{"gpu_uuid": "GPU-0b7e1d2a", "ts": 1795219199000, "kind": "xid",
                "code": 79, "message": "fallen off the bus"}]}]
    }"#;

    pub(super) fn example() -> Batch {
        decode(Format::Json, EXAMPLE.as_bytes()).unwrap()
    }

    #[test]
    fn a_batch_decodes_the_same_from_json_and_from_messagepack() {
        let batch = example();
        let packed = rmp_serde::to_vec_named(&batch).unwrap();
        assert_eq!(decode(Format::MessagePack, &packed).unwrap(), batch);
        // MessagePack written by another library: the same maps, keys in another order.
        let value: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        let reordered = rmp_serde::to_vec_named(&value).unwrap();
        assert_eq!(decode(Format::MessagePack, &reordered).unwrap(), batch);
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_refused_in_either_format() {
        let mut value: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        value["snapshots"][0]["gpus"][0]["gpu_utilisation"] = 0.5.into();
        let e = decode(
            Format::MessagePack,
            &rmp_serde::to_vec_named(&value).unwrap(),
        );
        assert!(e.unwrap_err().contains("gpu_utilisation"));
        let mut value: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        value["seq"] = "seven".into();
        let e = decode(
            Format::MessagePack,
            &rmp_serde::to_vec_named(&value).unwrap(),
        );
        assert!(e.unwrap_err().starts_with("batch is not valid MessagePack"));
        assert!(
            decode(Format::Json, b"\xff{}")
                .unwrap_err()
                .contains("UTF-8")
        );
    }

    #[test]
    fn stated_lengths_past_the_end_cost_nothing() {
        // An array of 2^32-1 snapshots, a string of 2^32-1 bytes: refused, nothing reserved.
        for body in [
            &b"\x81\xa9snapshots\xdd\xff\xff\xff\xff"[..],
            &b"\x81\xa7cluster\xdb\xff\xff\xff\xff"[..],
        ] {
            assert!(decode(Format::MessagePack, body).is_err());
        }
        // Every prefix of a real body is refused, none panics.
        let packed = rmp_serde::to_vec_named(&example()).unwrap();
        for n in 0..packed.len() {
            assert!(decode(Format::MessagePack, &packed[..n]).is_err(), "{n}");
        }
    }
}

#[cfg(test)]
mod compact {
    //! The compact layout (`model::wire::v1::to_compact`, structs as arrays) through the
    //! collector's one MessagePack decoder.

    use super::*;
    use model::wire::v1::{Snapshot, to_compact};
    use model::{GpuSample, Tenant};

    fn both_ways(batch: &Batch) -> Vec<u8> {
        let compact = to_compact(batch).unwrap();
        assert_eq!(&decode(Format::MessagePack, &compact).unwrap(), batch);
        compact
    }

    #[test]
    fn a_compact_body_decodes_to_the_same_batch_in_fewer_bytes() {
        let batch = super::tests::example();
        let compact = both_ways(&batch);
        let named = rmp_serde::to_vec_named(&batch).unwrap();
        assert!(
            compact.len() * 3 < named.len() * 2,
            "{} against {}",
            compact.len(),
            named.len()
        );
        // Every prefix is refused, as for the named layout.
        for n in 0..compact.len() {
            assert!(decode(Format::MessagePack, &compact[..n]).is_err(), "{n}");
        }
        // One element too many is refused as an unknown field is: no struct takes more.
        let mut longer = compact.clone();
        longer[0] += 1;
        longer.push(0xc0);
        assert!(decode(Format::MessagePack, &longer).is_err());
    }

    #[test]
    fn optional_fields_left_out_at_the_end_are_not_written_and_read_as_absent() {
        let only_uuid = GpuSample {
            gpu_uuid: "GPU-1".into(),
            ..GpuSample::default()
        };
        assert_eq!(to_compact(&only_uuid).unwrap(), b"\x91\xa5GPU-1");
        let last_only = GpuSample {
            gr_engine_active: Some(0.5),
            ..only_uuid.clone()
        };
        let bytes = to_compact(&last_only).unwrap();
        // 26 fields: the 24 between the first and the last are nils.
        assert_eq!(&bytes[..3], b"\xdc\x00\x1a");
        assert_eq!(bytes.iter().filter(|b| **b == 0xc0).count(), 24);
        let mut batch = super::tests::example();
        batch.inventory = None;
        batch.agent_version = None;
        batch.tenants = vec![Tenant::host_user(0, None)];
        batch.snapshots[0].gpus = vec![only_uuid, last_only];
        batch.snapshots.push(Snapshot::default());
        both_ways(&batch);
    }

    #[test]
    fn every_length_and_integer_form_decodes() {
        let mut batch = super::tests::example();
        for len in [0, 31, 32, 255, 256, 65_535, 65_536] {
            batch.cluster = "c".repeat(len);
            both_ways(&batch);
        }
        for seq in [0, 127, 128, 255, 256, 65_535, 65_536, 1 << 32, u64::MAX] {
            batch.seq = seq;
            both_ways(&batch);
        }
        for ts in [
            -1,
            -32,
            -33,
            -128,
            -129,
            -32_768,
            -32_769,
            i32::MIN.into(),
            i64::from(i32::MIN) - 1,
            i64::MIN,
            i64::MAX,
        ] {
            batch.snapshots[0].ts = ts;
            both_ways(&batch);
        }
        for n in [15, 16, 65_536] {
            batch.snapshots = vec![Snapshot::default(); n];
            both_ways(&batch);
        }
    }
}

#[cfg(test)]
mod seeds {
    /// The fuzz target's MessagePack seeds (fuzz/seeds/ingest_batch/), named and compact, decode
    /// to its JSON seed's batch: the fuzzer starts from bodies that reach validation.
    #[test]
    fn the_fuzz_seeds_hold_one_batch() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/ingest_batch/");
        let read = |name: &str| std::fs::read(format!("{dir}{name}")).unwrap();
        let body = |seed: Vec<u8>| {
            let (encoding, format) = match seed[0] & 7 {
                0 => ("identity", super::Format::Json),
                1 => ("gzip", super::Format::Json),
                4 => ("identity", super::Format::MessagePack),
                6 => ("snappy", super::Format::MessagePack),
                other => panic!("first byte {other}"),
            };
            let bytes = crate::body::decode(encoding, &seed[1..], 1 << 20).unwrap();
            super::decode(format, &bytes).unwrap()
        };
        let json = body(read("identity.json"));
        assert_eq!(body(read("gzip.bin")), json);
        assert_eq!(body(read("msgpack.bin")), json);
        assert_eq!(body(read("msgpack_snappy.bin")), json);
        assert_eq!(body(read("compact.bin")), json);
        assert_eq!(body(read("compact_snappy.bin")), json);
        // The stream target's seeds: frames, each holding the same batch.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/ingest_stream/");
        for (name, frames) in [("two_compact.bin", 2), ("every_encoding.bin", 4)] {
            let seed = std::fs::read(format!("{dir}{name}")).unwrap();
            let bodies: Vec<_> = model::wire::v1::stream::batch_frames(&seed, 1 << 20)
                .map(|f| f.unwrap())
                .collect();
            assert_eq!(bodies.len(), frames, "{name}");
            for (encoding, body) in bodies {
                let bytes =
                    crate::body::decode(encoding.content_encoding(), body, 1 << 20).unwrap();
                assert_eq!(
                    super::decode(encoding.format(), &bytes).unwrap(),
                    json,
                    "{name}"
                );
            }
        }
    }
}
