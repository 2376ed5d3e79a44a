//! Support for Tideway's cross-crate tests: fixture loading, golden-file comparison, network
//! namespaces ([`netns`]), FRR in them ([`frr`]) and a stand-in for the Kubernetes API server ([`fake_api`]).
//!
//! Fixtures are plain Kubernetes YAML in `tests/fixtures/`; each holds `node-a` (the node every
//! golden file is planned for), `node-b`, and a `default` ProxyConfig. Golden files live in
//! `tests/golden/`; run with `UPDATE_GOLDEN=1` to rewrite them after an intended change.

#![forbid(unsafe_code)]

pub mod audit;
pub mod fake_api;
pub mod fault_proxy;
pub mod frr;
pub mod metallb;
pub mod metrics;
pub mod netns;
pub mod procfs;

use std::path::{Path, PathBuf};

use tideway_api::manifest;
use tideway_core::cluster::ClusterState;
use tideway_core::config::{ProxySettings, resolve_proxy_config};
use tideway_core::model::ServiceName;
use tideway_core::plan::{NodeContext, NodeDns};

/// The `tests/` directory.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Tideway's image archive, as `make image` leaves it (`target/image/tideway-VERSION.oci.tar`)
/// or `TIDEWAY_IMAGE_ARCHIVE` names it; panics, saying how to build it, when it is missing.
pub fn image_archive() -> PathBuf {
    let default =
        root().join("../target/image").join(format!("tideway-{}.oci.tar", env!("CARGO_PKG_VERSION")));
    let path = std::env::var_os("TIDEWAY_IMAGE_ARCHIVE").map_or(default, PathBuf::from);
    assert!(path.exists(), "{}: no image archive; build it with `make image`", path.display());
    path
}

/// Every fixture file, sorted.
pub fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("fixtures"))
        .expect("fixtures dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    v.sort();
    v
}

/// A loaded fixture.
pub struct Fixture {
    /// The cluster.
    pub cluster: ClusterState,
    /// node-a's context.
    pub node: NodeContext,
    /// Load errors, one per line.
    pub errors: String,
}

/// Loads a fixture and builds node-a's context from its ProxyConfig.
pub fn load(path: &Path) -> Fixture {
    let m = manifest::load_file(path).expect("readable fixture");
    let errors: String = m
        .errors
        .iter()
        .map(|e| format!("{}\n", e.to_string().replace(&root().display().to_string(), "tests")))
        .collect();
    let cluster = ClusterState::from_snapshot(m.snapshot);
    let node = cluster.node("node-a").expect("fixtures define node-a");
    let settings = resolve_proxy_config(cluster.proxy_configs(), &node.labels)
        .map(|c| c.settings.clone())
        .unwrap_or_else(ProxySettings::default);
    let node = NodeContext::from_node(node, settings).with_service_cidrs(cluster.service_cidrs());
    let node = node.with_node_dns(node_local_dns(path, &cluster));
    Fixture { cluster, node, errors }
}

/// The node-local DNS listener a fixture asks for with a line `# agent: --node-local-dns`
/// (the agent's flag, with its defaults: 169.254.20.10, `kube-system/kube-dns`).
fn node_local_dns(path: &Path, cluster: &ClusterState) -> Option<NodeDns> {
    let text = std::fs::read_to_string(path).expect("readable fixture");
    text.lines().any(|l| l.trim() == "# agent: --node-local-dns").then(|| {
        let service = ServiceName::new("kube-system", "kube-dns");
        NodeDns::of(std::net::Ipv4Addr::new(169, 254, 20, 10).into(), &service, cluster)
    })
}

/// Compares `actual` with the golden file at `path`, or rewrites it when `UPDATE_GOLDEN` is
/// set. Returns a description of the first difference.
pub fn check_golden(path: &Path, actual: &str) -> Result<(), String> {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("golden dir");
        std::fs::write(path, actual).expect("write golden");
        return Ok(());
    }
    let expected = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e} (run `make generated` to create it)", path.display()))?;
    if expected == actual {
        return Ok(());
    }
    let (el, al): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let i = el.iter().zip(&al).position(|(a, b)| a != b).unwrap_or(el.len().min(al.len()));
    Err(format!(
        "{} differs at line {} (expected {} lines, got {}):\n  expected: {}\n  actual:   {}\nrun `make generated` if the change is intended",
        path.display(),
        i + 1,
        el.len(),
        al.len(),
        el.get(i).unwrap_or(&"<end of file>"),
        al.get(i).unwrap_or(&"<end of file>")
    ))
}

/// [`eventually`] for a condition: polls `f` every 25 ms until it holds, failing the test
/// after 15 s with `what`.
pub async fn until(what: &str, mut f: impl FnMut() -> bool) {
    eventually(what, || f().then_some(())).await;
}

/// Polls `f` every 25 ms until it yields a value, failing the test after 15 s with `what`.
pub async fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}
