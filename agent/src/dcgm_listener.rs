//! Who listens where the agent scrapes dcgm-exporter. On a host, `--dcgm-url` is usually
//! `http://localhost:9400/metrics`, an unprivileged port: while the exporter is down or
//! restarting, any local user may bind it and answer with SM activity of their choosing — an
//! idle job's GPU made to look busy. So before each scrape of a loopback URL the agent reads
//! the kernel's socket tables (`/proc/self/net/tcp`, `tcp6`: the agent's own network namespace,
//! the one its request goes out in) and scrapes only when every socket listening on that port
//! belongs to a system account: root, or a uid below 1000 (`SYS_UID_MAX` is 999 on every
//! mainstream distribution; dcgm-exporter runs as root or as an account of its own).
//! A URL that is not loopback (the Helm chart's node-local Service) is not checked.

use std::net::IpAddr;

/// Accounts below this uid are system accounts.
pub const FIRST_USER_UID: u32 = 1000;

/// The most of one socket table read; a table larger than this is not judged (the scrape
/// goes ahead, as without the check).
const MAX_TABLE: u64 = 16 * 1024 * 1024;

/// The port of `url` when its host is a loopback address (`localhost`, `127.0.0.0/8`, `::1`).
pub fn loopback_port(url: &str) -> Option<u16> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?;
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|a| a.is_loopback());
    loopback.then(|| url.port_or_known_default())?
}

/// The uids of the sockets listening on `port` in a `/proc/net/tcp` or `tcp6` table: columns
/// `sl local_address rem_address st … uid …`, the local address `ADDR:PORT` in hex, state
/// `0A` for LISTEN. Lines that do not read so are skipped.
pub fn listeners(table: &str, port: u16) -> Vec<u32> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit_once(':')?.1;
            let listening = *f.get(3)? == "0A";
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| f.get(7)?.parse().ok())?
        })
        .collect()
}

/// Whether the sockets listening on `port` in the agent's own network namespace are all a
/// system account's or `trusted`'s: `Err(uid)` names one that is not. Unreadable tables pass
/// (nothing to judge by), as does no listener at all (the scrape then fails on its own).
pub fn check(port: u16, trusted: Option<u32>) -> Result<(), u32> {
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Some(text) = crate::bounded_file::text(std::path::Path::new(table), MAX_TABLE) else {
            continue;
        };
        if let Some(uid) = listeners(&text, port)
            .into_iter()
            .find(|&uid| uid >= FIRST_USER_UID && Some(uid) != trusted)
        {
            return Err(uid);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the kernel writes them: a root exporter on 0.0.0.0:9400 (0x24B8), a user's socket
    /// on 127.0.0.1:9400, an established connection to 9400 and a listener on 9402.
    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:24B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 21974 1 0000000000000000 100 0 0 10 0
   1: 0100007F:24B8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 41974 1 0000000000000000 100 0 0 10 0
   2: 0100007F:9C40 0100007F:24B8 01 00000000:00000000 00:00000000 00000000  1002        0 51974 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:24BA 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1003        0 61974 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn listeners_on_the_port_and_their_owners() {
        assert_eq!(listeners(TABLE, 9400), [0, 1001]);
        assert_eq!(listeners(TABLE, 9402), [1003]);
        assert!(listeners(TABLE, 80).is_empty());
        assert!(listeners("garbage\n0: x y 0A\n\n", 9400).is_empty());
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:24B8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 1 1 0 100 0 0 10 0
";
        assert_eq!(listeners(tcp6, 9400), [999]);
    }

    #[test]
    fn only_loopback_urls_are_checked() {
        for (url, port) in [
            ("http://localhost:9400/metrics", Some(9400)),
            ("http://127.0.0.1:940/metrics", Some(940)),
            ("http://[::1]:9400/metrics", Some(9400)),
            ("http://LOCALHOST/metrics", Some(80)),
            ("http://dcgm-exporter.gpu-operator:9400/metrics", None),
            ("http://10.0.0.7:9400/metrics", None),
            ("not a url", None),
        ] {
            assert_eq!(loopback_port(url), port, "{url}");
        }
    }

    /// This process listens on a loopback port of its own: its uid (this test's) passes
    /// only if it is a system account's.
    #[test]
    fn a_listener_of_this_process_is_judged_by_its_uid() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let uid = crate::attribution::ProcFs::new(std::path::Path::new("/proc"), None)
            .uid(std::process::id())
            .unwrap();
        let verdict = check(port, None);
        if uid < FIRST_USER_UID {
            assert_eq!(verdict, Ok(()));
        } else {
            assert_eq!(verdict, Err(uid));
        }
        assert_eq!(check(port, Some(uid)), Ok(()), "the trusted account's");
    }
}
