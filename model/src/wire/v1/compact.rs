//! The compact MessagePack layout: every struct an array of its fields in declaration order
//! instead of a map keyed by field name. The same batch in about two thirds of the bytes
//! (five sixths after snappy), decoded in a little over half the time, since no key is
//! written, checked as UTF-8 or matched (docs/PERFORMANCE.md, "the compact MessagePack
//! layout").
//!
//! A collector's MessagePack decoder takes both layouts under the one `Content-Type`: a
//! struct given as an array is read field by field in declaration order. The rules a writer
//! keeps:
//! - an optional field left out of the named layout is written as nil in its place;
//! - optional fields at the end of a struct may be left out (so a struct that gains a field at
//!   its end still takes arrays written before, and a writer with the new field empty is read
//!   by a collector that does not know it yet); never elsewhere;
//! - a field's position is part of the protocol: fields are only ever added at the end of a
//!   struct (`compact_layout_field_order_is_the_wire_contract` below pins them), and a new
//!   field is an `Option` (a list too: `Option<Vec<_>>`) with `#[serde(default,
//!   skip_serializing_if = "Option::is_none")]`, so that arrays written before it read, and a
//!   writer that leaves it out writes arrays a collector without it reads. (A list written
//!   even when empty, as the snapshots' are, would make every array one longer.)
//!
//! Everything else is as in the named layout: unit enum values as their names, integers in
//! their smallest form, `f32` readings as 32-bit floats. The writer knows only the shapes the
//! wire protocol's types have (structs, lists, options, numbers, strings, unit enum values); any
//! other is an error, not a guess.

use serde::ser::{self, Impossible, Serialize};

/// `value` in the compact layout.
pub fn to_compact(value: &(impl Serialize + ?Sized)) -> Result<Vec<u8>, CompactError> {
    let mut w = Writer {
        out: Vec::with_capacity(1024),
    };
    value.serialize(&mut w)?;
    Ok(w.out)
}

/// A value the layout cannot carry (none of the wire protocol's types; a reason in words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not encodable in the compact MessagePack layout: {0}")]
pub struct CompactError(String);

impl ser::Error for CompactError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CompactError(msg.to_string())
    }
}

fn unsupported<T>(what: &str) -> Result<T, CompactError> {
    Err(CompactError(format!("{what} (not in the wire protocol)")))
}

struct Writer {
    out: Vec<u8>,
}

/// A length as MessagePack states it (32 bits).
fn length(n: usize) -> Result<u32, CompactError> {
    u32::try_from(n).map_err(|_| CompactError(format!("length {n} past 2³²")))
}

/// An error of `rmp::encode`, which writing into memory never meets (lengths are checked by
/// [`length`] first); an error rather than a panic all the same.
fn wrote<E: std::fmt::Display>(e: E) -> CompactError {
    CompactError(e.to_string())
}

impl Writer {
    fn nil(&mut self) -> Result<(), CompactError> {
        rmp::encode::write_nil(&mut self.out).map_err(wrote)
    }
}

/// A struct being written: its header replaces 3 reserved bytes at the end, once the number
/// of fields written (trailing left-out ones not counted) is known.
struct Fields<'a> {
    w: &'a mut Writer,
    /// Where the 3 bytes reserved for the header start (an array of up to 65,535 fields).
    start: usize,
    written: usize,
    /// Fields left out since the last one written: nils if another field follows.
    left_out: usize,
}

impl ser::SerializeStruct for Fields<'_> {
    type Ok = ();
    type Error = CompactError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        _key: &'static str,
        value: &T,
    ) -> Result<(), CompactError> {
        for _ in 0..self.left_out {
            self.w.nil()?;
        }
        self.written += std::mem::take(&mut self.left_out) + 1;
        value.serialize(&mut *self.w)
    }

    fn skip_field(&mut self, _key: &'static str) -> Result<(), CompactError> {
        self.left_out += 1;
        Ok(())
    }

    fn end(self) -> Result<(), CompactError> {
        let mut header = [0; 3];
        let mut free = &mut header[..];
        rmp::encode::write_array_len(&mut free, length(self.written)?).map_err(wrote)?;
        let used = 3 - free.len();
        self.w
            .out
            .splice(self.start..self.start + 3, header[..used].iter().copied());
        Ok(())
    }
}

/// A sequence whose length was written up front.
struct Elements<'a> {
    w: &'a mut Writer,
}

impl ser::SerializeSeq for Elements<'_> {
    type Ok = ();
    type Error = CompactError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), CompactError> {
        value.serialize(&mut *self.w)
    }

    fn end(self) -> Result<(), CompactError> {
        Ok(())
    }
}

impl<'a> ser::Serializer for &'a mut Writer {
    type Ok = ();
    type Error = CompactError;
    type SerializeSeq = Elements<'a>;
    type SerializeTuple = Impossible<(), CompactError>;
    type SerializeTupleStruct = Impossible<(), CompactError>;
    type SerializeTupleVariant = Impossible<(), CompactError>;
    type SerializeMap = Impossible<(), CompactError>;
    type SerializeStruct = Fields<'a>;
    type SerializeStructVariant = Impossible<(), CompactError>;

    fn serialize_bool(self, v: bool) -> Result<(), CompactError> {
        rmp::encode::write_bool(&mut self.out, v).map_err(wrote)
    }

    fn serialize_i8(self, v: i8) -> Result<(), CompactError> {
        self.serialize_i64(v.into())
    }

    fn serialize_i16(self, v: i16) -> Result<(), CompactError> {
        self.serialize_i64(v.into())
    }

    fn serialize_i32(self, v: i32) -> Result<(), CompactError> {
        self.serialize_i64(v.into())
    }

    fn serialize_i64(self, v: i64) -> Result<(), CompactError> {
        rmp::encode::write_sint(&mut self.out, v).map_err(wrote)?;
        Ok(())
    }

    fn serialize_u8(self, v: u8) -> Result<(), CompactError> {
        self.serialize_u64(v.into())
    }

    fn serialize_u16(self, v: u16) -> Result<(), CompactError> {
        self.serialize_u64(v.into())
    }

    fn serialize_u32(self, v: u32) -> Result<(), CompactError> {
        self.serialize_u64(v.into())
    }

    fn serialize_u64(self, v: u64) -> Result<(), CompactError> {
        rmp::encode::write_uint(&mut self.out, v).map_err(wrote)?;
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<(), CompactError> {
        rmp::encode::write_f32(&mut self.out, v).map_err(wrote)
    }

    fn serialize_f64(self, v: f64) -> Result<(), CompactError> {
        rmp::encode::write_f64(&mut self.out, v).map_err(wrote)
    }

    fn serialize_char(self, v: char) -> Result<(), CompactError> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(self, v: &str) -> Result<(), CompactError> {
        rmp::encode::write_str_len(&mut self.out, length(v.len())?).map_err(wrote)?;
        self.out.extend_from_slice(v.as_bytes());
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), CompactError> {
        rmp::encode::write_bin_len(&mut self.out, length(v.len())?).map_err(wrote)?;
        self.out.extend_from_slice(v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), CompactError> {
        self.nil()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), CompactError> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), CompactError> {
        self.nil()
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), CompactError> {
        self.serialize_unit()
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<(), CompactError> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<(), CompactError> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        _value: &T,
    ) -> Result<(), CompactError> {
        unsupported(&format!("the enum value {name}::{variant} with data"))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Elements<'a>, CompactError> {
        let Some(len) = len else {
            return unsupported("a sequence of unknown length");
        };
        rmp::encode::write_array_len(&mut self.out, length(len)?).map_err(wrote)?;
        Ok(Elements { w: self })
    }

    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, CompactError> {
        unsupported("a tuple")
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, CompactError> {
        unsupported(&format!("the tuple struct {name}"))
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, CompactError> {
        unsupported(&format!("the enum value {name}::{variant} with data"))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, CompactError> {
        unsupported("a map")
    }

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Fields<'a>, CompactError> {
        let start = self.out.len();
        self.out.extend_from_slice(&[0; 3]);
        Ok(Fields {
            w: self,
            start,
            written: 0,
            left_out: 0,
        })
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, CompactError> {
        unsupported(&format!("the enum value {name}::{variant} with data"))
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::to_compact;
    use crate::wire::v1::tests::field_names;
    use crate::wire::v1::{Batch, Snapshot};
    use crate::{
        Allocation, GpuEvent, GpuInfo, GpuSample, MigInstanceInfo, MigSample, ProcessSample, Tenant,
    };

    /// Each wire struct's fields in the order protocol v1 sends them in the compact layout.
    const PINNED: [(&str, &[&str]); 10] = [
        (
            "Batch",
            &[
                "version",
                "cluster",
                "node",
                "agent_id",
                "seq",
                "agent_version",
                "interval_ms",
                "inventory",
                "tenants",
                "snapshots",
            ],
        ),
        (
            "Snapshot",
            &["ts", "gpus", "mig", "processes", "allocations", "events"],
        ),
        (
            "GpuInfo",
            &[
                "uuid",
                "index",
                "model",
                "memory_total_bytes",
                "pci_bus_id",
                "mig_enabled",
                "sharing",
                "replicas",
                "mig_instances",
            ],
        ),
        (
            "MigInstanceInfo",
            &[
                "gi_id",
                "ci_id",
                "profile",
                "placement_start",
                "placement_size",
                "memory_total_bytes",
                "compute_slices",
                "uuid",
            ],
        ),
        (
            "Tenant",
            &[
                "key",
                "kind",
                "namespace",
                "pod",
                "container",
                "pod_uid",
                "job_id",
                "user",
                "account",
                "uid",
            ],
        ),
        (
            "GpuSample",
            &[
                "gpu_uuid",
                "gpu_util",
                "mem_util",
                "mem_used_bytes",
                "mem_total_bytes",
                "power_w",
                "energy_j",
                "temp_c",
                "sm_clock_mhz",
                "mem_clock_mhz",
                "throttle_reasons",
                "pcie_rx_bytes_per_s",
                "pcie_tx_bytes_per_s",
                "nvlink_rx_bytes_per_s",
                "nvlink_tx_bytes_per_s",
                "ecc_corrected",
                "ecc_uncorrected",
                "retired_pages",
                "remapped_rows",
                "enc_util",
                "dec_util",
                "sm_active",
                "sm_occupancy",
                "dram_active",
                "tensor_active",
                "gr_engine_active",
            ],
        ),
        (
            "MigSample",
            &[
                "gpu_uuid",
                "gi_id",
                "ci_id",
                "mem_used_bytes",
                "mem_total_bytes",
                "sm_active",
                "sm_occupancy",
                "dram_active",
                "tensor_active",
                "gr_engine_active",
            ],
        ),
        (
            "ProcessSample",
            &[
                "gpu_uuid",
                "pid",
                "start_time",
                "kind",
                "gi_id",
                "ci_id",
                "tenant",
                "sm_util",
                "mem_util",
                "enc_util",
                "dec_util",
                "mem_used_bytes",
            ],
        ),
        (
            "Allocation",
            &["gpu_uuid", "tenant", "gi_id", "ci_id", "replica", "share"],
        ),
        ("GpuEvent", &["gpu_uuid", "ts", "kind", "code", "message"]),
    ];

    /// A field is known by its place, so the order of every wire struct's fields is part of
    /// protocol v1: a field may be added at a struct's end (and here), never moved, removed or
    /// put between two others, or every agent's batches would be read wrong.
    #[test]
    fn compact_layout_field_order_is_the_wire_contract() {
        let declared = [
            field_names::<Batch>(),
            field_names::<Snapshot>(),
            field_names::<GpuInfo>(),
            field_names::<MigInstanceInfo>(),
            field_names::<Tenant>(),
            field_names::<GpuSample>(),
            field_names::<MigSample>(),
            field_names::<ProcessSample>(),
            field_names::<Allocation>(),
            field_names::<GpuEvent>(),
        ];
        for ((name, pinned), fields) in PINNED.into_iter().zip(declared) {
            assert_eq!(
                fields, pinned,
                "{name}: a field moved, went or was put between two others; a new one goes at \
                 the end of the struct and of this list"
            );
        }
    }

    #[test]
    fn numbers_and_strings_take_their_smallest_form() {
        let cases: [(&[u8], Vec<u8>); 8] = [
            (b"\x7f", to_compact(&127u64).unwrap()),
            (b"\xcc\x80", to_compact(&128u32).unwrap()),
            (b"\xcd\x01\x00", to_compact(&256i64).unwrap()),
            (b"\xe0", to_compact(&-32i64).unwrap()),
            (b"\xd0\xdf", to_compact(&-33i32).unwrap()),
            (b"\xd1\xff\x7f", to_compact(&-129i64).unwrap()),
            (
                b"\xd9\x20",
                to_compact(&"x".repeat(32)).unwrap()[..2].to_vec(),
            ),
            (b"\xca\x3f\x00\x00\x00", to_compact(&0.5f32).unwrap()),
        ];
        for (want, got) in cases {
            assert_eq!(got, want);
        }
        assert_eq!(to_compact(&vec![0u8; 16]).unwrap()[..3], *b"\xdc\x00\x10");
        assert_eq!(to_compact(&Some("a")).unwrap(), b"\xa1a");
        assert_eq!(to_compact(&None::<u8>).unwrap(), b"\xc0");
    }

    #[test]
    fn shapes_outside_the_wire_protocol_are_refused_by_name() {
        let map = std::collections::BTreeMap::from([("a", 1)]);
        assert!(to_compact(&map).unwrap_err().to_string().contains("a map"));
        assert!(
            to_compact(&(1, 2))
                .unwrap_err()
                .to_string()
                .contains("a tuple")
        );
    }
}
