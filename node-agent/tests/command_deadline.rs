//! A child process that hangs (as `iptables-restore --wait` does while another holds the
//! xtables lock): killed at the command deadline with an error naming it, and `/livez`
//! failing, naming the command and how long it ran, with no change queued, until the same
//! command succeeds again.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use prometheus_client::registry::Registry;
use tideway_node_agent::agent::AgentStatus;
use tideway_node_agent::exec;
use tideway_node_agent::health::ProxyHealth;
use tideway_node_agent::metrics::Metrics;
use tideway_sources::SharedCluster;
use tower::ServiceExt;

/// A fake tool at `dir/name` running `body`.
fn tool(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    path
}

async fn livez() -> (StatusCode, String) {
    let mut registry = Registry::default();
    let router = tideway_node_agent::http::health_router(
        Arc::new(ProxyHealth::new(Duration::from_secs(30))),
        Arc::new(Metrics::new(&mut registry)),
        Arc::new(RwLock::new(AgentStatus::default())),
        SharedCluster::new(),
    );
    let resp = router.oneshot(Request::get("/livez").body(Body::empty()).unwrap()).await.unwrap();
    let code = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (code, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_command_is_killed_at_its_deadline_and_livez_names_it() {
    let dir = std::env::temp_dir().join(format!("tideway-deadline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // It ignores SIGTERM and leaves a grandchild holding its output, as a wrapper script would.
    let restore = tool(&dir, "iptables-restore", "trap '' TERM\nsleep 30 &\nsleep 30");
    exec::set_deadline(Duration::from_millis(500));
    let program = restore.display().to_string();
    let started = Instant::now();
    let run =
        tokio::task::spawn_blocking(move || exec::run(&program, &["--noflush", "--wait"], Some("*filter\n")));
    let result = tokio::time::timeout(Duration::from_secs(5), run).await;
    let elapsed = started.elapsed();
    let result = result.expect("the hung command still ran after 5 s: no deadline").unwrap();
    let e = result.expect_err("a hung command fails");
    eprintln!("after {elapsed:?}: {e}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    let said = e.to_string();
    assert!(said.contains("iptables-restore --noflush --wait") && said.contains("deadline"), "{said}");

    let (code, body) = livez().await;
    eprintln!("/livez: {code} {body}");
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("iptables-restore --noflush --wait") && body.contains("deadline"), "{body}");

    // The same tool succeeding again: alive.
    tool(&dir, "iptables-restore", "cat >/dev/null");
    exec::run(&restore.display().to_string(), &["--noflush", "--wait"], Some("*filter\n")).expect("runs");
    let (code, body) = livez().await;
    assert_eq!(code, StatusCode::OK, "{body}");
    std::fs::remove_dir_all(&dir).unwrap();
}
