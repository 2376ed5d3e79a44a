//! CoreDNS (`make peers`) as a process of the test, with the Corefile kubeadm's CoreDNS addon
//! writes, changed only where a process on the test's host must differ from kubeadm's Pod.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::free_port;

/// The zone `k8s_external` serves (Tideway's `--external-zone`).
pub(crate) const EXTERNAL: &str = "example.org";

/// CoreDNS from `make peers`, run as a process of the test.
pub(crate) struct CoreDns {
    child: Child,
    /// Where it answers DNS.
    pub(crate) addr: SocketAddr,
    /// Its `ready` plugin's address.
    pub(crate) ready: SocketAddr,
    log: PathBuf,
}

impl CoreDns {
    /// CoreDNS with kubeadm's Corefile as [`corefile`] adapts it, its files in `dir`.
    pub(crate) fn start(kubeadm_corefile: &str, kubeconfig: &Path, dir: &Path) -> CoreDns {
        let binary = tideway_lab::kube::peer_binary("coredns").expect("CoreDNS (make peers)");
        let port = free_port();
        let ready: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let text = corefile(kubeadm_corefile, port, ready, kubeconfig);
        let path = dir.join("Corefile");
        std::fs::write(&path, &text).unwrap();
        let log = dir.join("coredns.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .arg("-conf")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("coredns");
        CoreDns { child, addr: format!("127.0.0.1:{port}").parse().unwrap(), ready, log }
    }

    /// Its process's id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for CoreDns {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// kubeadm's Corefile, changed only where a process on the test's host must differ from the
/// Pod kubeadm's Deployment would run, each change here:
/// * `.:53` -> `.:PORT`: a free port (not a privileged one, and not the host's resolver);
/// * `health` and `prometheus` -> on `127.0.0.1` and free ports (`:8080` and `:9153` are the
///   host's to give), `ready` -> on `127.0.0.1` and a free port the test asks;
/// * `kubernetes`: `kubeconfig PATH` added (a Pod reads its ServiceAccount token instead);
/// * `forward . /etc/resolv.conf` -> `forward . 127.0.0.1:9`: the test's host has no resolver
///   to offer, and both servers get the same unreachable upstream;
/// * `k8s_external example.org` added: the plugin is in CoreDNS's default build but not in
///   kubeadm's Corefile, and Tideway answers that zone too (`--external-zone`).
fn corefile(kubeadm: &str, port: u16, ready: SocketAddr, kubeconfig: &Path) -> String {
    let (health, metrics) = (free_port(), free_port());
    let mut out = String::new();
    let mut changed = 0;
    for line in kubeadm.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        let words: Vec<&str> = line.split_whitespace().collect();
        let replaced = match words.as_slice() {
            [".:53", "{"] => Some(format!(".:{port} {{")),
            ["health", "{"] => Some(format!("{indent}health 127.0.0.1:{health} {{")),
            ["ready"] => Some(format!("{indent}ready {ready}")),
            ["prometheus", _] => Some(format!("{indent}prometheus 127.0.0.1:{metrics}")),
            ["forward", ".", "/etc/resolv.conf", rest @ ..] => {
                Some(format!("{indent}forward . 127.0.0.1:9 {}", rest.join(" ")))
            }
            ["kubernetes", ..] => Some(format!(
                "{indent}k8s_external {EXTERNAL}\n{line}\n{indent}   kubeconfig {}",
                kubeconfig.display()
            )),
            _ => None,
        };
        changed += usize::from(replaced.is_some());
        out.push_str(&replaced.unwrap_or_else(|| line.to_string()));
        out.push('\n');
    }
    assert_eq!(changed, 6, "kubeadm's Corefile is not the one this test adapts:\n{kubeadm}");
    out
}
