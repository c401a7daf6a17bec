//! People sign in through a real OpenID provider: oidc-provider (npm, a certified OpenID
//! Connect implementation) on 127.0.0.1, a collector serving on a real socket with
//! `[access.oidc]`, and headless Chromium driven by tests/browser/sign-in.mjs. Maria (group
//! team-ml) is a viewer scoped to team ml: she sees ml's tenants and is refused the
//! recommendations; Victor (gpu-viewers) reads every team but finds no approve form and a
//! forged approval refused; Olga (gpu-platform) approves the planned label change through the
//! form and signs out; Eve's groups give no role and she is told so. Also: the example
//! `[access]` configuration in docs/security.md loads.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use collector::config::{Config, TeamsConfig};
use collector::state::AppState;
use serde_json::Value;
use store::label_actions::ActionFilter;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The configuration this test serves with: the same shape as docs/security.md's example.
fn config(issuer: &str, base: &str, secret: &str) -> Config {
    Config::parse(&format!(
        r#"
[access]
session_key = "test-session-key-0123456789"

[access.oidc]
issuer = "{issuer}"
client_id = "gpulens"
client_secret = "{secret}"
redirect_url = "{base}/auth/callback"
display_name = "the test provider"

[[access.groups]]
group = "gpu-platform"
role = "operator"

[[access.groups]]
group = "gpu-viewers"
role = "viewer"

[[access.groups]]
group = "team-ml"
role = "viewer"
teams = ["ml"]

[labels]
mode = "apply-with-approval"
"#
    ))
    .expect("the test's access configuration loads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_people_sign_in_through_a_real_openid_provider_in_chromium() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let modules = root().join("tests/browser/node_modules");
    let ready = Path::new(&chromium).exists()
        && modules.join("playwright-core").exists()
        && modules.join("oidc-provider").exists()
        && Command::new("node").arg("--version").output().is_ok();
    if !ready {
        assert!(
            std::env::var("GPULENS_REQUIRE_BROWSER").is_err(),
            "Chromium, node, playwright-core or oidc-provider is missing"
        );
        eprintln!("skipping: no Chromium or npm packages (run the suite with tests/run.sh)");
        return;
    }
    let t = crate::support::sqlite().await;
    let teams = TeamsConfig::default();
    crate::support::ingest_small_fleet(&t.store, &teams).await;
    crate::support::store_time_slicing_step(&t.store, "time_slicing-whole", "whole", true).await;
    let rec_path = "/recommendations/time_slicing-whole".to_owned();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let provider_port = crate::support::free_port();
    let issuer = format!("http://127.0.0.1:{provider_port}");
    let secret = "client-secret-for-the-test";
    let mut provider = crate::support::Killed(
        Command::new("node")
            .arg(root().join("tests/browser/oidc-provider.mjs"))
            .arg(provider_port.to_string())
            .arg(format!("{base}/auth/callback"))
            .arg(secret)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    let mut from_provider = std::io::BufReader::new(provider.0.stdout.take().unwrap());
    from_provider.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("ready"),
        "the provider did not start: {line:?}"
    );
    // Keep reading what it prints: a closed pipe would end it at its next line (EPIPE).
    std::thread::spawn(move || std::io::copy(&mut from_provider, &mut std::io::sink()));

    let c = config(&issuer, &base, secret);
    let state = AppState::new(
        t.store.clone(),
        Default::default(),
        Default::default(),
        Default::default(),
        teams,
    )
    .with_access(c.access.clone())
    .unwrap()
    .with_labels(c.labels.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(collector::server::serve(listener, state, async {
        let _ = stopped.await;
    }));

    let shots = root().join("target/browser-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let out = tokio::task::spawn_blocking({
        let base = base.clone();
        let rec_path = rec_path.clone();
        move || {
            Command::new("node")
                .arg(root().join("tests/browser/sign-in.mjs"))
                .arg(&base)
                .arg(&rec_path)
                .arg(&shots)
                .env("CHROMIUM", &chromium)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let _ = stop.send(());
    let _ = server.await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| {
        panic!(
            "sign-in.mjs printed no result ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        r["error"].is_null(),
        "the browser run failed: {} at {}: {}",
        r["error"],
        r["error_at"],
        r["error_page"]
    );
    assert_eq!(r["console_errors"], serde_json::json!([]), "{r}");

    // Anonymous: sent to sign in, with the way back kept; the provider is the real one.
    let maria = &r["maria"];
    assert_eq!(
        maria["login_url"], "/login?next=%2Ffindings%3Fseverity%3Dwarning",
        "{maria}"
    );
    assert!(
        maria["login_text"]
            .as_str()
            .unwrap()
            .contains("Sign in with the test provider")
    );
    assert!(maria["provider_url"].as_str().unwrap().starts_with(&issuer));
    // ... and back where she was going, signed in, scoped to her team.
    assert_eq!(maria["landed"], "/findings?severity=warning", "{maria}");
    assert!(
        maria["text"]
            .as_str()
            .unwrap()
            .contains("Signed in as maria (viewer, ml)"),
        "{maria}"
    );
    assert_eq!(maria["tenants"], serde_json::json!(["ml", "ml"]), "{maria}");
    assert_eq!(maria["recommendation_status"], 403, "{maria}");
    assert!(
        maria["recommendation_text"]
            .as_str()
            .unwrap()
            .contains("you see the tenants of ml only")
    );

    // A viewer of every team reads the step, has no form, and a forged approval is refused.
    let victor = &r["victor"];
    assert_eq!(victor["recommendation_status"], 200, "{victor}");
    assert_eq!(victor["has_form"], false);
    assert_eq!(victor["forged"]["status"], 403, "{victor}");
    assert!(
        victor["forged"]["body"]
            .as_str()
            .unwrap()
            .contains("this needs an operator")
    );
    // The API takes approvals from bearer tokens only, not from a browser's session.
    assert_eq!(victor["api_approve"]["status"], 403, "{victor}");

    // The operator approves through the form; the action is approved in her name.
    let olga = &r["olga"];
    assert_eq!(olga["has_form"], true, "{olga}");
    assert!(
        olga["after_approve_url"]
            .as_str()
            .unwrap()
            .contains("approved="),
        "{olga}"
    );
    assert_eq!(
        olga["after_sign_out_url"], "/login?next=%2Ffindings",
        "{olga}"
    );
    let actions = t
        .store
        .label_actions(&ActionFilter::newest(10))
        .await
        .unwrap();
    assert_eq!(actions[0].state.as_str(), "approved");
    assert_eq!(actions[0].approved_by.as_deref(), Some("olga"));

    // Eve's groups give no role: refused, and told which groups she came with.
    let eve = &r["eve"];
    let text = eve["text"].as_str().unwrap();
    assert!(
        text.contains("none of your groups (marketing) has a role"),
        "{eve}"
    );
}

/// The example in docs/security.md is a configuration that loads (its secret files made here).
#[test]
fn the_documented_access_example_loads() {
    let doc = std::fs::read_to_string(root().join("docs/security.md")).unwrap();
    let block = doc
        .split("### Example\n\n```toml\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("docs/security.md has the [access] example");
    let dir = crate::support::TempDir::new("access-example");
    for name in ["session-key", "oidc-client-secret", "scrape-token"] {
        std::fs::write(dir.path().join(name), format!("{name}-value\n")).unwrap();
    }
    let text = block.replace(
        "/etc/gpulens/secrets/",
        &format!("{}/", dir.path().display()),
    );
    let c = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(c.access.mode(), collector_shared::access::Mode::SignIn);
    collector_shared::access::Access::new(&c.access, &[]).unwrap();
}
