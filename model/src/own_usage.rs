//! What this process has used so far, from Linux's /proc/self (for the benchmarks of the agent
//! and the collector). None where /proc is missing or unreadable.

/// CPU seconds (user + system, all threads): fields 14 and 15 of /proc/self/stat, in clock
/// ticks of 1/100 s (USER_HZ).
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command name (which may hold spaces and parentheses) state is the first field,
    // utime the 12th and stime the 13th.
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: f64 = rest.next()?.parse().ok()?;
    let stime: f64 = rest.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// The whole machine's CPU so far, all cores together, from the first line of /proc/stat (in
/// USER_HZ ticks): (busy seconds, idle seconds). Busy is user + nice + system + irq + softirq +
/// steal; idle is idle + iowait. A benchmark whose database runs on the same machine sees the
/// database's CPU here, which [`cpu_seconds`] leaves out.
pub fn machine_cpu_seconds() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = ticks[..] else {
        return None;
    };
    Some((
        (user + nice + system + irq + softirq + steal) / 100.0,
        (idle + iowait) / 100.0,
    ))
}

/// Peak resident memory in MiB (VmHWM of /proc/self/status).
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn reads_this_process() {
        let before = super::cpu_seconds().expect("cpu time");
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        assert!(super::cpu_seconds().unwrap() >= before);
        assert!(super::peak_rss_mib().unwrap() > 0.0);
        let (busy, idle) = super::machine_cpu_seconds().expect("machine cpu time");
        assert!(busy >= super::cpu_seconds().unwrap() && idle >= 0.0);
    }
}
