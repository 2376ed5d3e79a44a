//! Kernel settings the rules depend on, written under `/proc/sys` (the decision to need one
//! is core's; this only writes it).

use std::path::Path;

/// `net.ipv4.conf.all.route_localnet`: lets packets to 127.0.0.0/8 be routed (DNATed) off
/// the host, which localhost NodePorts need.
pub const ROUTE_LOCALNET: &str = "net/ipv4/conf/all/route_localnet";

/// Sets `/proc/sys/<key>` to `value` unless it already is; true when it wrote.
pub fn ensure(key: &str, value: &str) -> std::io::Result<bool> {
    ensure_under(Path::new("/proc/sys"), key, value)
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
        std::fs::remove_dir_all(&root).unwrap();
    }
}
