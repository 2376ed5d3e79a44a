//! Kernel settings the rules depend on, written under `/proc/sys` (the decision to need one
//! is core's; this only writes it). In a container `/proc/sys` is read-only unless it is
//! privileged; the chart mounts the host's `/proc/sys/net` at `/run/tideway/host/proc/sys/net`
//! instead (as Cilium does at `/host/proc/sys/net`) and says so with `--sysctl-dir
//! /run/tideway/host/proc/sys`. Every setting here is under
//! `net/`, which the kernel resolves in the network namespace of the process that writes it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static ROOT: OnceLock<PathBuf> = OnceLock::new();

/// Where sysctls are written (`--sysctl-dir`; once, before the first write).
pub fn set_root(dir: &Path) {
    let _ = ROOT.set(dir.to_path_buf());
}

fn root() -> &'static Path {
    ROOT.get().map_or(Path::new("/proc/sys"), PathBuf::as_path)
}

/// A setting that could not be made, named as `sysctl` names it.
#[derive(Debug, thiserror::Error)]
#[error("{name}={value}: {source}")]
pub struct SysctlError {
    /// `net.ipv4.conf.all.route_localnet`.
    pub name: String,
    /// The value it needs.
    pub value: String,
    /// Why it could not be written.
    #[source]
    pub source: std::io::Error,
}

/// `net/ipv4/vs/conntrack` as `sysctl` names it: `net.ipv4.vs.conntrack`.
pub fn dotted(key: &str) -> String {
    key.replace('/', ".")
}

/// `net.ipv4.conf.all.route_localnet`: lets packets to 127.0.0.0/8 be routed (DNATed) off
/// the host, which localhost NodePorts need.
pub const ROUTE_LOCALNET: &str = "net/ipv4/conf/all/route_localnet";

/// Sets `/proc/sys/<key>` to `value` unless it already is; true when it wrote.
pub fn ensure(key: &str, value: &str) -> Result<bool, SysctlError> {
    ensure_under(root(), key, value).map_err(|source| SysctlError {
        name: dotted(key),
        value: value.to_string(),
        source,
    })
}

fn ensure_under(root: &Path, key: &str, value: &str) -> std::io::Result<bool> {
    let path = root.join(key);
    if std::fs::read_to_string(&path)?.trim() == value {
        return Ok(false);
    }
    std::fs::write(&path, value)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_only_when_the_value_differs() {
        let root = std::env::temp_dir().join(format!("tideway-sysctl-{}", std::process::id()));
        let file = root.join(ROUTE_LOCALNET);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "0\n").unwrap();
        assert!(ensure_under(&root, ROUTE_LOCALNET, "1").unwrap());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "1");
        assert!(!ensure_under(&root, ROUTE_LOCALNET, "1").unwrap());
        assert!(ensure_under(&root, "net/missing", "1").is_err());
        assert_eq!(dotted(ROUTE_LOCALNET), "net.ipv4.conf.all.route_localnet");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
