//! DCGM profiling fields from a local dcgm-exporter: its `/metrics` text is fetched each cycle
//! and the `DCGM_FI_PROF_*` gauges are mapped to GPUs by `UUID` and to MIG instances by
//! `GPU_I_ID`. Both spellings of the host label (`Hostname`, `hostname`) are accepted. When the
//! exporter is absent or its data is stale, the fields stay absent (NULL), and the agent's
//! `gpulens_agent_dcgm_up` says so.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use model::wire::v1::Snapshot;

/// The most of a dcgm-exporter answer read: its full default field set for 8 GPUs with MIG
/// instances is a few hundred KiB.
const MAX_SCRAPE: usize = 8 * 1024 * 1024;

/// Profiling ratios (0–1) of one GPU or one GPU instance (`model::dcgm`, the field table the
/// collector's remote-write receiver reads with too).
pub use model::dcgm::Profiling;

/// Everything one scrape said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Readings {
    pub gpus: HashMap<String, Profiling>,
    /// Keyed by (GPU UUID, GPU instance id).
    pub instances: HashMap<(String, u32), Profiling>,
    pub hostname: Option<String>,
}

/// Parses Prometheus text exposition as dcgm-exporter writes it. Lines that are not samples
/// of the fields used here are ignored; malformed lines are skipped, never fatal.
pub fn parse(text: &str) -> Readings {
    let mut out = Readings::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, labels, value)) = split_sample(line) else {
            continue;
        };
        // The same field table (names, domains) the collector's remote-write receiver reads.
        let Some(field) = model::dcgm::Field::parse(name).filter(|f| f.as_ratio().is_some()) else {
            continue;
        };
        if field.ratio(value).is_none() {
            continue;
        }
        let Some(uuid) = labels.get("UUID") else {
            continue;
        };
        if let Some(h) = labels.get("Hostname").or_else(|| labels.get("hostname")) {
            out.hostname.get_or_insert_with(|| h.clone());
        }
        // A `GPU_I_ID` that is no number names no instance, nor the whole GPU.
        let target = match labels.get("GPU_I_ID").map(|g| g.parse::<u32>()) {
            Some(Ok(gi)) => out.instances.entry((uuid.clone(), gi)).or_default(),
            Some(Err(_)) => continue,
            None => out.gpus.entry(uuid.clone()).or_default(),
        };
        target.set(field, value);
    }
    out
}

/// `name{labels} value [timestamp]` → parts; None for anything else.
fn split_sample(line: &str) -> Option<(&str, HashMap<String, String>, f64)> {
    let (name, rest) = match line.find('{') {
        Some(i) => (&line[..i], &line[i..]),
        None => {
            let (n, r) = line.split_once(char::is_whitespace)?;
            (n, r)
        }
    };
    let mut labels = HashMap::new();
    let rest = if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        let end;
        loop {
            // label name
            let start = chars.peek()?.0;
            let mut eq = None;
            for (i, c) in chars.by_ref() {
                if c == '=' {
                    eq = Some(i);
                    break;
                }
                if c == '}' {
                    return None;
                }
            }
            let key = body[start..eq?]
                .trim()
                .trim_start_matches(',')
                .trim()
                .to_owned();
            if chars.next()?.1 != '"' {
                return None;
            }
            let mut val = String::new();
            loop {
                let (_, c) = chars.next()?;
                match c {
                    '\\' => match chars.next()?.1 {
                        'n' => val.push('\n'),
                        other => val.push(other),
                    },
                    '"' => break,
                    c => val.push(c),
                }
            }
            labels.insert(key, val);
            match chars.next()? {
                (i, '}') => {
                    end = i;
                    break;
                }
                (_, ',') => {
                    if let Some(&(i, '}')) = chars.peek() {
                        end = i;
                        break;
                    }
                }
                _ => return None,
            }
        }
        &body[end + 1..]
    } else {
        rest
    };
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    Some((name.trim(), labels, value))
}

/// A dcgm-exporter the agent reads each cycle.
#[derive(Debug)]
pub struct Dcgm {
    url: String,
    http: reqwest::Client,
    last: Option<(Instant, Readings)>,
    stale_after: Duration,
    /// The URL's port when it is a loopback one, whose listener is checked before each scrape
    /// ([`crate::dcgm_listener`]).
    local_port: Option<u16>,
    /// The user whose listener was last refused, to warn once for each.
    refused: Option<u32>,
    /// A user account trusted to listen there besides the system accounts.
    trusted_uid: Option<u32>,
    /// When the listener last passed the check; None: check before the next scrape (at the
    /// first, and after any scrape or check that failed).
    checked: Option<Instant>,
}

/// How long a passed listener check holds: reading the kernel's socket tables costs about 2 ms
/// (it walks the whole connection hash), too much for every cycle. A user who takes the port
/// after a check is found within this, and after any failed scrape before the next one.
const LISTENER_CHECK_EVERY: Duration = Duration::from_secs(60);

impl Dcgm {
    pub fn new(url: &str, stale_after: Duration) -> anyhow::Result<Dcgm> {
        let http = ingest_client::http()
            .timeout(Duration::from_millis(800))
            .build()?;
        Ok(Dcgm {
            url: url.to_owned(),
            http,
            last: None,
            stale_after,
            local_port: crate::dcgm_listener::loopback_port(url),
            refused: None,
            trusted_uid: None,
            checked: None,
        })
    }

    /// Trusts the listener of user account `uid` too (`--dcgm-exporter-uid`: the account that
    /// runs the exporter, when it is no system account).
    pub fn trusting(mut self, uid: Option<u32>) -> Dcgm {
        self.trusted_uid = uid;
        self
    }

    /// Scrapes the exporter; keeps the last good answer until it goes stale. A loopback port a
    /// user's process listens on is not scraped (checked at the first scrape, after a failed
    /// one, and every [`LISTENER_CHECK_EVERY`]).
    pub async fn refresh(&mut self) -> bool {
        if let Some(port) = self.local_port
            && self
                .checked
                .is_none_or(|at| at.elapsed() >= LISTENER_CHECK_EVERY)
        {
            match crate::dcgm_listener::check(port, self.trusted_uid) {
                Ok(()) => {
                    self.refused = None;
                    self.checked = Some(Instant::now());
                }
                Err(uid) => {
                    self.checked = None;
                    if self.refused != Some(uid) {
                        tracing::warn!(
                            port,
                            uid,
                            "a process of a user account listens on the DCGM exporter's port; its answers are not read (serve the exporter on a port below 1024, or name its account with --dcgm-exporter-uid; docs/security.md)"
                        );
                        self.refused = Some(uid);
                    }
                    return false;
                }
            }
        }
        let fetched = async {
            let resp = self.http.get(&self.url).send().await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            // Bounded while read: an exporter answering without end costs at most this much.
            let body = ingest_client::bounded::body(resp, MAX_SCRAPE).await.ok()?;
            String::from_utf8(body).ok()
        }
        .await;
        match fetched {
            Some(text) => {
                self.last = Some((Instant::now(), parse(&text)));
                true
            }
            None => {
                // The exporter may be down, and its port free for anyone: check again first.
                self.checked = None;
                false
            }
        }
    }

    /// Fresh readings, if any.
    pub fn current(&self) -> Option<&Readings> {
        self.last
            .as_ref()
            .filter(|(at, _)| at.elapsed() <= self.stale_after)
            .map(|(_, r)| r)
    }
}

/// Fills the snapshot's profiling fields from DCGM where they are absent.
pub fn apply(snap: &mut Snapshot, r: &Readings) {
    for g in &mut snap.gpus {
        if let Some(p) = r.gpus.get(&g.gpu_uuid) {
            p.fill_gpu(g);
        }
    }
    for m in &mut snap.mig {
        if let Some(p) = r.instances.get(&(m.gpu_uuid.clone(), m.gi_id)) {
            p.fill_mig(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use model::profiling::Ratio;

    use super::*;

    const SAMPLE: &str = include_str!("../tests/fixtures/dcgm/a100-mig-sample.prom");
    const UUID: &str = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660";

    /// An exporter answering without end is read no further than `MAX_SCRAPE`
    /// (in its 800 ms a loopback peer sends gigabytes): the scrape fails and costs little.
    #[tokio::test]
    async fn an_exporter_answering_without_end_is_cut_at_the_budget() {
        use kube_standin::hostile::{Behaviour, Hostile};
        let peer = Hostile::start(Behaviour::Endless {
            status: 200,
            filler: "#",
        })
        .await;
        let url = format!("{}/metrics", peer.url);
        let mut d = Dcgm::new(&url, Duration::from_secs(30)).unwrap();
        assert!(!d.refresh().await);
        assert!(d.current().is_none());
        let peak_kb = model::own_usage::peak_rss_mib().unwrap() * 1024.0;
        assert!(peak_kb < 256.0 * 1024.0, "{peak_kb} kB");
    }

    /// The exporter, run by root, goes down and a user's process takes its loopback port: the
    /// failed scrape has the next one check the listener first, and the user's server is not
    /// read. Starting a server as another user needs root, which this suite runs as;
    /// elsewhere the test says so and checks nothing.
    #[tokio::test]
    async fn a_users_listener_on_the_exporters_port_is_not_read() {
        let root = crate::attribution::ProcFs::new(std::path::Path::new("/proc"), None)
            .uid(std::process::id())
            == Some(0);
        // The system's Python, which uid 1001 may run (not a root-only pyenv shim), and
        // util-linux's setpriv to run it so.
        let (python, setpriv) = ("/usr/bin/python3", "/usr/bin/setpriv");
        if !root
            || ![python, setpriv]
                .iter()
                .all(|p| std::path::Path::new(p).exists())
        {
            eprintln!("skipped: a listener as another user needs root, {python} and {setpriv}");
            return;
        }
        let dir = crate::scratch::fresh_dir("dcgm-squat").unwrap();
        std::fs::write(dir.join("metrics"), SAMPLE).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // A static file server on `port`: root's, or uid/gid 1001's (`setpriv` drops them
        // before it binds).
        let serve = |as_user: bool| {
            let mut cmd = std::process::Command::new(if as_user { setpriv } else { python });
            if as_user {
                cmd.args(["--reuid=1001", "--regid=1001", "--clear-groups", python]);
            }
            cmd.args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
            ])
            .current_dir(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
        };
        let listening = || async {
            let up = std::time::Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    up.elapsed() < Duration::from_secs(10),
                    "server never listened"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let url = format!("http://127.0.0.1:{port}/metrics");
        let mut d = Dcgm::new(&url, Duration::from_secs(30)).unwrap();
        // The exporter, run by root, is read.
        let mut exporter = serve(false);
        listening().await;
        assert!(d.refresh().await);
        // It goes down: the scrape fails, and a user takes the port.
        exporter.kill().unwrap();
        exporter.wait().unwrap();
        assert!(!d.refresh().await);
        let mut squatter = serve(true);
        listening().await;
        let read = d.refresh().await;
        squatter.kill().unwrap();
        squatter.wait().unwrap();
        assert!(!read, "the user's server was read");
        assert_eq!(d.refused, Some(1001));
        // Named as the exporter's account (`--dcgm-exporter-uid 1001`), the same server is read.
        let mut d = d.trusting(Some(1001));
        d.checked = None;
        let mut exporter = serve(true);
        listening().await;
        let read = d.refresh().await;
        exporter.kill().unwrap();
        exporter.wait().unwrap();
        assert!(read, "the named account's server was not read");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_real_sample_maps_to_the_gpu_and_its_instance() {
        let r = parse(SAMPLE);
        assert_eq!(r.hostname.as_deref(), Some("ub20-a100-k8s"));
        let gpu = |ratio| *r.gpus[UUID].get(ratio);
        assert_eq!(gpu(Ratio::GrEngineActive), Some(0.995_63));
        assert_eq!(gpu(Ratio::TensorActive), Some(0.929_26));
        assert_eq!(gpu(Ratio::DramActive), Some(0.690_789));
        assert_eq!(
            gpu(Ratio::SmActive),
            None,
            "the sample has no SM_ACTIVE: absent, not 0"
        );
        let mig = &r.instances[&(UUID.to_owned(), 13)];
        assert_eq!(*mig.get(Ratio::DramActive), Some(0.800_339));
        assert_eq!(r.instances.len(), 1);
    }

    #[test]
    fn both_hostname_spellings_and_escapes() {
        let text = "DCGM_FI_PROF_SM_ACTIVE{gpu=\"0\",UUID=\"GPU-1\",hostname=\"node \\\"a\\\"\",} 0.5 1700000000000\n";
        let r = parse(text);
        assert_eq!(r.hostname.as_deref(), Some("node \"a\""));
        assert_eq!(*r.gpus["GPU-1"].get(Ratio::SmActive), Some(0.5));
    }

    #[test]
    fn garbage_never_panics_and_out_of_range_values_are_ignored() {
        assert_eq!(
            parse("DCGM_FI_PROF_SM_ACTIVE{UUID=\"G\"} 7\n").gpus.len(),
            0
        );
        assert_eq!(
            parse("DCGM_FI_PROF_SM_ACTIVE{UUID=\"G\"} NaN\n").gpus.len(),
            0
        );
        // A GPU instance id that is no number names neither an instance nor the GPU.
        let r = parse("DCGM_FI_PROF_SM_ACTIVE{UUID=\"G\",GPU_I_ID=\"x\"} 0.5\n");
        assert!(r.gpus.is_empty() && r.instances.is_empty());
        // Mutations of the real sample: truncations and byte flips at every position.
        let bytes = SAMPLE.as_bytes();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for i in 0..4000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut m = bytes[..(state as usize % bytes.len())].to_vec();
            if !m.is_empty() {
                let at = (state >> 20) as usize % m.len();
                m[at] = [b'{', b'}', b'"', b'\\', b',', b'=', b' ', b'\n', 0xff][i % 9];
            }
            let _ = parse(&String::from_utf8_lossy(&m));
        }
    }
}
