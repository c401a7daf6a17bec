//! A remote-write body: snappy within the decoded limit, then protobuf; then the per-sample
//! domain check every DCGM sample goes through. Invariants: nothing panics, no allocation
//! past the limit is attempted (the stated length is checked first), and every sample the
//! domain table accepts is finite.
#![no_main]

use libfuzzer_sys::fuzz_target;

const MAX_DECODED: usize = 256 * 1024;

fuzz_target!(|data: &[u8]| {
    let Ok(req) = intake::remote_write::decode(data, MAX_DECODED) else {
        return;
    };
    for ts in &req.timeseries {
        let Some(name) = intake::remote_write::label(&ts.labels, "__name__") else {
            continue;
        };
        for s in &ts.samples {
            if model::dcgm::in_domain(name, s.value) {
                assert!(s.value.is_finite());
                let d = model::dcgm::domain(name).expect("a field in the table");
                assert!(s.value >= d.min);
            }
        }
        if let Some(host) = intake::remote_write::label(&ts.labels, "Hostname") {
            // Hosts become node names only as DNS subdomains: never a path or a query.
            if model::names::check_subdomain(host).is_ok() {
                assert!(!host.contains(['/', '?', '#', '%']));
            }
        }
    }
});
