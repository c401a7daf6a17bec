//! The ingest path up to the store: the body encoding (the first byte picks identity, gzip or
//! snappy, and JSON or MessagePack), the batch of protocol v1 and its domain checks.
//! Invariants: nothing panics, the decoded body never exceeds its limit, a gzip body intake
//! accepts decodes to the same bytes with flate2's own gzip reader (the reference), every batch
//! decoded reads back the same from its compact MessagePack layout, and a batch
//! that passes validation holds no more rows than the limit allows, only names that are DNS
//! subdomains, and only finite, in-range values; dropping a snapshot's impossible rows and
//! clearing its readings outside their domains, and taking out tenant values no batch may hold
//! (what the agent does before it batches) take nothing from a valid batch and are done in one
//! pass, and leave no tenant validation would refuse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use model::wire::v1::{Format, Limits, drop_impossible_tenants};

const MAX_DECODED: usize = 64 * 1024;
const NOW: i64 = 1_800_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let encoding = ["identity", "gzip", "snappy", "identity"][usize::from(first & 3)];
    let format = if first & 4 == 0 {
        Format::Json
    } else {
        Format::MessagePack
    };
    let Ok(decoded) = intake::body::decode(encoding, rest, MAX_DECODED) else {
        return;
    };
    assert!(decoded.len() <= MAX_DECODED);
    if encoding == "gzip" {
        let mut reference = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(rest), &mut reference)
            .expect("the reference decodes what intake accepted");
        assert_eq!(reference, decoded, "intake and the reference decode differently");
    }
    let Ok(batch) = intake::batch::decode(format, &decoded) else {
        return;
    };
    // The compact layout (structs as arrays) carries every batch the decoders take, and the
    // collector's decoder reads it back as the same batch.
    let compact = model::wire::v1::to_compact(&batch).expect("every batch has a compact form");
    let again = intake::batch::decode(Format::MessagePack, &compact)
        .expect("the compact form of a batch decodes");
    assert_eq!(
        model::wire::v1::to_compact(&again).unwrap(),
        compact,
        "the compact layout lost or changed something"
    );
    // What a producer takes out (rows no batch may hold, readings outside their domains) is
    // only what validation would refuse: nothing of a valid batch, all of it in one pass.
    let valid = batch.validate(&Limits::default(), NOW).is_ok();
    let mut cleared = batch.clone();
    let tenants = drop_impossible_tenants(&mut cleared.tenants, &mut cleared.snapshots);
    assert!(!valid || tenants.is_empty(), "a valid batch lost {tenants:?}");
    let mut again = cleared.clone();
    assert!(
        drop_impossible_tenants(&mut again.tenants, &mut again.snapshots).is_empty(),
        "a second pass took more tenant values"
    );
    for s in &mut cleared.snapshots {
        let rows = s.drop_impossible_rows();
        assert!(!valid || rows.is_empty(), "a valid batch lost rows {rows:?}");
        assert!(s.drop_impossible_rows().is_empty(), "a second pass dropped more");
        let gone = s.clear_out_of_domain();
        assert!(!valid || gone.is_empty(), "a valid batch lost {gone:?}");
        assert!(s.clear_out_of_domain().is_empty(), "a second pass cleared more");
    }
    // Whatever else is wrong with it, no tenant of what is left is refused.
    if let Err(e) = cleared.validate(&Limits::default(), NOW) {
        assert!(!e.0.contains("tenants["), "the take-out left {e}");
    }
    let limits = Limits {
        max_rows: 500,
        ..Limits::default()
    };
    if batch.validate(&limits, NOW).is_ok() {
        assert!(batch.row_count() <= limits.max_rows);
        assert!(model::names::check_subdomain(&batch.cluster).is_ok());
        assert!(model::names::check_subdomain(&batch.node).is_ok());
        for s in &batch.snapshots {
            assert!(s.ts <= NOW + limits.max_future_ms);
            for g in &s.gpus {
                for v in [g.gpu_util, g.mem_util, g.sm_active].into_iter().flatten() {
                    assert!(v.is_finite() && (0.0..=1.0).contains(&v), "{v}");
                }
            }
        }
    }
});
