//! Numbers and times as the pages show them: figures through `model::figures` (one formatter
//! for the pages, the report, findings and alerts), with what only pages need (no value, a
//! change, words for kinds and metrics, URL components).

/// `YYYY-MM-DD HH:MM` (UTC) of Unix milliseconds.
pub fn time(ms: i64) -> String {
    let (y, m, d, hh, mm) = civil(ms);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}")
}

/// `MM-DD HH:MM` (UTC), for axis labels.
pub fn short_time(ms: i64) -> String {
    let (_, m, d, hh, mm) = civil(ms);
    format!("{m:02}-{d:02} {hh:02}:{mm:02}")
}

/// Year, month, day, hour, minute (UTC) of Unix milliseconds.
pub fn civil(ms: i64) -> (i64, u32, u32, u32, u32) {
    let (y, m, d) = model::time::civil_from_days(ms.div_euclid(86_400_000));
    let rem = ms.rem_euclid(86_400_000) / 1000;
    (
        y,
        m as u32,
        d as u32,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
    )
}

/// A number with sensible precision: `1,234`, `12.3`, `0.42`.
pub fn num(x: f64) -> String {
    model::figures::quantity(x)
}

/// Money as every page and the report show it: whole units, grouped, with the currency
/// (`1,463 USD`). CSV keeps cents.
pub fn money(x: f64, currency: &str) -> String {
    model::figures::money(x, currency)
}

/// `42 %` of a 0–1 ratio, `–` without one.
pub fn pct(x: Option<f64>) -> String {
    x.map_or("–".into(), model::figures::percent)
}

/// A change from `before` to `now`: `+12 %`, `−3 %`.
pub fn change(now: f64, before: f64) -> String {
    if before == 0.0 {
        return if now == 0.0 {
            "±0 %".into()
        } else {
            "new".into()
        };
    }
    let p = (now - before) / before * 100.0;
    if p.abs() < 0.5 {
        "±0 %".into()
    } else if p > 0.0 {
        format!("+{p:.0} %")
    } else {
        format!("−{:.0} %", -p)
    }
}

/// A finding's or recommendation's kind as people read it: `idle allocation`, `MIG layout`,
/// `MPS`, `time slicing`, `separation` (the API keeps `mig_layout`, `separate`). A
/// recommendation's kind is a noun, as the plan's texts name its steps.
pub fn kind(k: &str) -> String {
    match k {
        "mig_layout" => "MIG layout".into(),
        "mps" => "MPS".into(),
        "separate" => "separation".into(),
        "consolidate" => "consolidation".into(),
        "right_size" => "right-sizing".into(),
        "per_gpu_sharing" => "per-GPU sharing".into(),
        _ => k.replace('_', " "),
    }
}

/// A finding's number's name as people read it: `allocated_gpu_hours` → "Allocated
/// GPU-hours", `memory_p99_gib` → "Memory p99 GiB", `xid_errors` → "XID errors" (the API
/// keeps the key).
pub fn metric_name(key: &str) -> String {
    let words: Vec<&str> = key.split('_').filter(|w| !w.is_empty()).collect();
    let mut out: Vec<String> = Vec::with_capacity(words.len());
    let mut i = 0;
    while i < words.len() {
        let word = match (words[i], words.get(i + 1)) {
            ("gpu", Some(&"hours")) => {
                i += 1;
                "GPU-hours"
            }
            ("gpu", _) => "GPU",
            ("gpus", _) => "GPUs",
            ("gib", _) => "GiB",
            ("ecc", _) => "ECC",
            ("xid", _) => "XID",
            (w, _) => w,
        };
        out.push(word.to_owned());
        i += 1;
    }
    capitalized(&out.join(" "))
}

/// What a finding's effective use rests on, in words: the analysis's keys (`sm_active`,
/// `gpu_util`, `mixed`, `none`) are named with the key after them; any other signal is
/// already a description and is shown as it is.
pub fn signal(s: &str) -> String {
    match s {
        "sm_active" => "DCGM SM activity (sm_active)".into(),
        "gpu_util" => "NVML GPU utilization (gpu_util)".into(),
        "mixed" => "DCGM SM activity where reported, NVML GPU utilization elsewhere (mixed)".into(),
        "none" => "no measurement of its use (none)".into(),
        other => other.to_owned(),
    }
}

/// A GPU's sharing mode as people read it: `exclusive`, `MIG`, `MPS`, `time slicing` (the API
/// and the store keep `mig`, `time_slicing`).
pub fn sharing(mode: &str) -> String {
    match mode {
        "mig" => "MIG".into(),
        // A per-GPU mechanism the plan pins groups with: `dra_consumable_capacity`.
        m if m.starts_with("dra_") => format!("DRA {}", m["dra_".len()..].replace('_', " ")),
        m => kind(m),
    }
}

/// A kind as a heading starts: `Idle allocation finding`, `MIG layout recommendation`.
pub fn kind_heading(k: &str, noun: &str) -> String {
    let k = kind(k);
    if k.is_empty() {
        return noun.to_owned();
    }
    format!("{} {noun}", capitalized(&k))
}

/// `s` with its first letter upper-case.
fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => format!("{}{}", first.to_uppercase(), c.as_str()),
        None => String::new(),
    }
}

/// What stays as it is in a query or path component: RFC 3986's unreserved characters.
const COMPONENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a query or path component.
pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_read_as_words() {
        assert_eq!(signal("sm_active"), "DCGM SM activity (sm_active)");
        assert_eq!(signal("gpu_util"), "NVML GPU utilization (gpu_util)");
        let described = "NVML process SM time, gpu_util";
        assert_eq!(signal(described), described);
    }

    #[test]
    fn metric_names_read_as_words() {
        let cases = [
            ("allocated_gpu_hours", "Allocated GPU-hours"),
            ("effective_p95_gpu", "Effective p95 GPU"),
            ("memory_p99_gib", "Memory p99 GiB"),
            ("ecc_uncorrected", "ECC uncorrected"),
            ("xid_errors", "XID errors"),
            ("largest_request_gpus", "Largest request GPUs"),
            ("idle_share_of_allocation", "Idle share of allocation"),
            ("score", "Score"),
            ("__", ""),
        ];
        for (key, name) in cases {
            assert_eq!(metric_name(key), name, "{key}");
        }
    }

    #[test]
    fn times_and_numbers() {
        assert_eq!(time(1_795_219_200_000), "2026-11-21 00:00");
        assert_eq!(time(0), "1970-01-01 00:00");
        assert_eq!(money(1462.56, "USD"), "1,463 USD");
        assert_eq!(money(7.4, "EUR"), "7 EUR");
        assert_eq!(money(169.0, "USD"), "169 USD");
        assert_eq!(short_time(1_709_164_800_000 + 90_000), "02-29 00:01");
        assert_eq!(num(1234567.0), "1,234,567");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(0.421), "0.42");
        // Halves round away from zero, as the summaries and the report round them.
        assert_eq!(pct(Some(0.425)), "43 %");
        assert_eq!(change(110.0, 100.0), "+10 %");
        assert_eq!(change(90.0, 100.0), "−10 %");
        assert_eq!(enc("pod/a b"), "pod%2Fa%20b");
    }

    #[test]
    fn kinds_read_as_words() {
        assert_eq!(kind("idle_allocation"), "idle allocation");
        assert_eq!(kind("mig_layout"), "MIG layout");
        assert_eq!(
            kind_heading("mig_layout", "recommendation"),
            "MIG layout recommendation"
        );
        assert_eq!(
            kind_heading("time_slicing", "recommendation"),
            "Time slicing recommendation"
        );
        assert_eq!(kind_heading("mps", "step (applied)"), "MPS step (applied)");
        assert_eq!(
            kind_heading("separate", "recommendation"),
            "Separation recommendation"
        );
        assert_eq!(kind_heading("", "finding"), "finding");
        assert_eq!(
            sharing("dra_consumable_capacity"),
            "DRA consumable capacity"
        );
        assert_eq!(kind("per_gpu_sharing"), "per-GPU sharing");
        let modes = ["exclusive", "mig", "mps", "time_slicing"].map(sharing);
        assert_eq!(modes, ["exclusive", "MIG", "MPS", "time slicing"]);
    }
}
