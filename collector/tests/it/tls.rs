//! HTTPS and mutual TLS on a real `gpulens serve`, with certificates made by the openssl CLI
//! for the test: a server certificate for 127.0.0.1 from one CA, agents' client certificates
//! from another, a rogue CA's client certificate, and a renewed server certificate from a third
//! CA that the running collector picks up without a restart. A real `gpulens-agent` ships over
//! mutual TLS; ingest without a client certificate, a certificate for another node, and the
//! rogue certificate are refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ingest_client::{Client, Delivered, SendError, Tls};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl CLI makes the test's certificates");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA: `<name>.key`, `<name>.pem`.
fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// A leaf certificate `<name>.pem` / `<name>.key` signed by CA `ca` for `san`
/// (`IP:127.0.0.1`, `DNS:node`), for `usage` (`serverAuth` or `clientAuth`).
fn leaf(dir: &Path, ca: &str, name: &str, san: &str, usage: &str) {
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!(
            "subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
        ),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

fn client(dir: &Path, ca: &str, cert: Option<&str>) -> reqwest::Client {
    let tls = Tls::from_files(
        Some(&dir.join(format!("{ca}.pem"))),
        cert.map(|c| dir.join(format!("{c}.pem"))).as_deref(),
        cert.map(|c| dir.join(format!("{c}.key"))).as_deref(),
    )
    .unwrap();
    tls.apply(ingest_client::http())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn bin(name: &str) -> PathBuf {
    let p = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: cargo build --workspace",
        p.display()
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_mutual_tls_for_agents_with_certificates_renewed_in_place() {
    let dir = crate::support::TempDir::new("tls");
    let d = dir.path();
    let fleet = crate::support::fleet();
    let (node, other) = (
        fleet.nodes[0].spec.name.clone(),
        fleet.nodes[1].spec.name.clone(),
    );
    ca(d, "server-ca");
    leaf(d, "server-ca", "server", "IP:127.0.0.1", "serverAuth");
    ca(d, "agents-ca");
    leaf(
        d,
        "agents-ca",
        "agent",
        &format!("DNS:{node}"),
        "clientAuth",
    );
    leaf(d, "agents-ca", "sim-agent", "DNS:gpu-h100-01", "clientAuth");
    ca(d, "rogue-ca");
    leaf(d, "rogue-ca", "rogue", &format!("DNS:{node}"), "clientAuth");
    ca(d, "renewed-ca");
    leaf(d, "renewed-ca", "renewed", "IP:127.0.0.1", "serverAuth");
    for f in ["server.pem", "server.key"] {
        std::fs::copy(d.join(f), d.join(format!("live-{f}"))).unwrap();
    }

    let port = crate::support::free_port();
    let token = "tls-agent-token-0001";
    let config = d.join("gpulens.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\ndata_dir = \"{data}\"\n\n[[agents]]\ntoken = \"{token}\"\nnodes = [\"*\"]\n\n[server.tls]\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\nclient_ca_file = \"{ca}\"\n",
            data = d.join("data").display(),
            cert = d.join("live-server.pem").display(),
            key = d.join("live-server.key").display(),
            ca = d.join("agents-ca.pem").display(),
        ),
    )
    .unwrap();
    let _collector = crate::support::Killed(
        Command::new(bin("gpulens"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("GPULENS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("https://127.0.0.1:{port}");
    let browser = client(d, "server-ca", None);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = browser.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the collector never answered over TLS"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Plain HTTP gets no answer from a TLS listener; a client that does not trust the CA
    // refuses the collector.
    let plain = ingest_client::http()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert!(
        plain
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .await
            .is_err_and(|e| !e.is_timeout()),
        "plain HTTP on the TLS port"
    );
    assert!(
        client(d, "rogue-ca", None)
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_err(),
        "a collector certificate from another CA is not trusted"
    );

    // The dashboard and read API need no client certificate; ingest does.
    let r = browser
        .get(format!("{base}/api/v1/nodes"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let instants: Vec<i64> = (0..3)
        .map(|i| model::time::now_ms() - 60_000 + i * 10_000)
        .collect();
    let batch = |n: usize, seq: u64| fleet.batch(n, "tls-agent", seq, &instants, 10_000);
    let body = Client::encode_json(&batch(0, 1)).unwrap();
    let r = browser
        .post(format!("{base}/api/v1/ingest"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("mutual TLS"));

    // An agent's certificate binds its node: its own node is stored, another is refused.
    let agent = |cert: &str| {
        Client::with_tls(
            &base,
            token,
            &Tls::from_files(
                Some(&d.join("server-ca.pem")),
                Some(&d.join(format!("{cert}.pem"))),
                Some(&d.join(format!("{cert}.key"))),
            )
            .unwrap(),
        )
        .unwrap()
    };
    let a = agent("agent");
    let sent = a
        .send_encoded(Client::encode(&batch(0, 1)).unwrap())
        .await
        .unwrap();
    assert!(matches!(sent, Delivered::Stored { .. }), "{sent:?}");
    match a.send_encoded(Client::encode(&batch(1, 1)).unwrap()).await {
        Err(SendError::Rejected {
            status: 403,
            message,
        }) => {
            assert!(
                message.contains(&other) && message.contains(&node),
                "{message}"
            )
        }
        got => panic!("{got:?}: another node's batch must be refused"),
    }
    // A client certificate from a CA the collector does not know ends the handshake.
    assert!(
        agent("rogue")
            .send_encoded(Client::encode(&batch(0, 2)).unwrap())
            .await
            .is_err(),
        "the rogue certificate was accepted"
    );

    // A real agent ships over mutual TLS.
    let _agent = crate::support::Killed(
        Command::new(bin("gpulens-agent"))
            .args(["run", "--backend", "simulated", "--node", "gpu-h100-01"])
            .args(["--spool-min-free-percent", "0"])
            .arg("--scenario")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/k8s-mixed.toml"))
            .args(["--collector", &base, "--interval", "1s", "--listen", "off"])
            .arg("--ca-file")
            .arg(d.join("server-ca.pem"))
            .arg("--client-cert")
            .arg(d.join("sim-agent.pem"))
            .arg("--client-key")
            .arg(d.join("sim-agent.key"))
            .arg("--state-dir")
            .arg(d.join("agent-state"))
            .env("GPULENS_TOKEN", token)
            .env("GPULENS_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = crate::support::get_json(&browser, &format!("{base}/api/v1/nodes")).await;
        if v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["node"] == "gpu-h100-01")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agent's batches never arrived: {v}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // A renewed certificate is served without a restart.
    let renewed = client(d, "renewed-ca", None);
    assert!(
        renewed.get(format!("{base}/healthz")).send().await.is_err(),
        "the renewed CA is trusted before the renewal"
    );
    for f in ["pem", "key"] {
        let tmp = d.join(format!("next.{f}"));
        std::fs::copy(d.join(format!("renewed.{f}")), &tmp).unwrap();
        std::fs::rename(&tmp, d.join(format!("live-server.{f}"))).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = renewed.get(format!("{base}/healthz")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
