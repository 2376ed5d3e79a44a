//! Runs the topology's commands, and finds and removes everything a lab made from the names
//! alone (`lab down` works after a crash: every namespace and `/etc/netns` entry carries the
//! lab's prefix, and deleting a namespace deletes its links, addresses, routes and rules).

use std::path::PathBuf;
use std::process::Command;

use crate::topology::Cmd;

/// A command that failed.
#[derive(Debug, thiserror::Error)]
#[error("`{command}` failed ({status}): {stderr}")]
pub struct NetError {
    /// The command line.
    pub command: String,
    /// Its exit status (or why it could not run).
    pub status: String,
    /// What it printed.
    pub stderr: String,
}

/// Runs `cmds` in order, stopping at the first failure.
pub fn run(cmds: &[Cmd]) -> Result<(), NetError> {
    for c in cmds {
        let out = Command::new(&c[0]).args(&c[1..]).output().map_err(|e| NetError {
            command: c.join(" "),
            status: e.to_string(),
            stderr: String::new(),
        })?;
        if !out.status.success() {
            return Err(NetError {
                command: c.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
    }
    Ok(())
}

/// The network namespaces whose name starts with `prefix`.
pub fn namespaces(prefix: &str) -> Vec<String> {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

/// Kills every process in namespace `ns` (SIGKILL).
pub fn kill_all_in(ns: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else { return };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if let Ok(pid) = pid.parse::<i32>() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

fn etc_netns(ns: &str) -> PathBuf {
    PathBuf::from("/etc/netns").join(ns)
}

/// Gives namespace `ns` its own resolv.conf (`ip netns exec` mounts it over /etc/resolv.conf).
pub fn write_resolv_conf(ns: &str, text: &str) -> std::io::Result<()> {
    let dir = etc_netns(ns);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("resolv.conf"), text)
}

/// Deletes namespace `ns`, its processes and its `/etc/netns` entry.
pub fn remove(ns: &str) {
    kill_all_in(ns);
    let _ = Command::new("ip").args(["netns", "del", ns]).output();
    let _ = std::fs::remove_dir_all(etc_netns(ns));
}

/// Removes everything whose name starts with `prefix`; returns how many namespaces went.
pub fn remove_all(prefix: &str) -> usize {
    // Processes first everywhere, so none holds a namespace another is still talking to.
    let all = namespaces(prefix);
    for ns in &all {
        kill_all_in(ns);
    }
    for ns in &all {
        remove(ns);
    }
    if let Ok(dir) = std::fs::read_dir("/etc/netns") {
        for e in dir.flatten() {
            if e.file_name().to_string_lossy().starts_with(prefix) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    all.len()
}
