//! Containers from loaded images, run by runc: each start gets a fresh writable layer (an
//! overlay above the image's unpacked layers, as a snapshotter gives a restarted container),
//! the spec [`super::oci`] wrote, and `runc run` in the foreground, so the kubelet sees its exit
//! status and a stop's SIGTERM reaches the container's first process as a runtime sends it.
//! Once it ended, `runc delete --force` removes its state and cgroups. runc's state lives in
//! the node's directory (`runc/`), so `runc --root DIR list` shows a node's containers.
//!
//! ```text
//!  <pod>/containers/NAME.bundle/config.json   the OCI spec
//!                              /rootfs        overlay: lower = the image, upper + work below
//!                              /pid           the container's first process, for exec probes
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use serde::{Deserialize, Serialize};

/// A runc container as the kubelet records it (in its [`super::runtime::Record`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Runc {
    /// runc's state directory.
    pub root: PathBuf,
    /// The container's id.
    pub id: String,
    /// The bundle.
    pub bundle: PathBuf,
}

impl Runc {
    /// Container `name` of the pod with `uid` in `pod_dir`, its state under `root`.
    pub fn new(root: &Path, pod_dir: &Path, uid: &str, name: &str) -> Runc {
        Runc {
            root: root.to_path_buf(),
            id: format!("{uid}-{name}"),
            bundle: pod_dir.join("containers").join(format!("{name}.bundle")),
        }
    }

    /// The root filesystem's mount point.
    pub fn rootfs(&self) -> PathBuf {
        self.bundle.join("rootfs")
    }

    /// The file runc writes the container's first process's pid to.
    pub fn pid_file(&self) -> PathBuf {
        self.bundle.join("pid")
    }

    /// Makes the bundle: a fresh overlay above `image_rootfs` and `spec` as `config.json`
    /// (a previous run's container and layer are removed first).
    pub fn prepare(&self, image_rootfs: &Path, spec: &serde_json::Value) -> std::io::Result<()> {
        self.delete();
        let rootfs = self.rootfs();
        let _ = umount2(&rootfs, MntFlags::MNT_DETACH);
        let (upper, work) = (self.bundle.join("upper"), self.bundle.join("work"));
        for d in [&upper, &work] {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d)?;
        }
        std::fs::create_dir_all(&rootfs)?;
        let _ = std::fs::remove_file(self.pid_file());
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            image_rootfs.display(),
            upper.display(),
            work.display()
        );
        mount(Some("overlay"), &rootfs, Some("overlay"), MsFlags::empty(), Some(options.as_str()))
            .map_err(|e| std::io::Error::other(format!("overlay on {}: {e}", rootfs.display())))?;
        let text = serde_json::to_vec_pretty(spec).map_err(std::io::Error::other)?;
        std::fs::write(self.bundle.join("config.json"), text)
    }

    /// The command that runs it in the foreground.
    pub fn run_argv(&self) -> Vec<String> {
        vec![
            "runc".into(),
            "--root".into(),
            self.root.display().to_string(),
            "run".into(),
            "--bundle".into(),
            self.bundle.display().to_string(),
            "--pid-file".into(),
            self.pid_file().display().to_string(),
            self.id.clone(),
        ]
    }

    /// Its first process, once runc wrote it.
    pub fn init_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.pid_file()).ok()?.trim().parse().ok()
    }

    /// Kills every process of it.
    pub fn kill(&self) {
        self.runc(&["kill", "--all", &self.id, "KILL"]);
    }

    fn runc(&self, args: &[&str]) {
        let _ = Command::new("runc")
            .arg("--root")
            .arg(&self.root)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// Removes what runc keeps of it and its root filesystem's mount (idempotent).
    pub fn delete(&self) {
        self.runc(&["delete", "--force", &self.id]);
        let _ = umount2(&self.rootfs(), MntFlags::MNT_DETACH);
    }
}

/// Removes every runc container of a lab (`<lab>/nodes/*/runc`) and every mount left under its
/// directory: a lab taken down, or one that crashed.
pub fn remove_all(lab_dir: &Path) {
    for node in std::fs::read_dir(lab_dir.join("nodes")).into_iter().flatten().flatten() {
        let root = node.path().join("runc");
        let Ok(out) = Command::new("runc").arg("--root").arg(&root).args(["list", "-q"]).output() else {
            continue;
        };
        for id in String::from_utf8_lossy(&out.stdout).lines() {
            let r = Runc { root: root.clone(), id: id.to_string(), bundle: PathBuf::new() };
            r.runc(&["delete", "--force", id]);
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut under: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|m| m.starts_with(lab_dir))
        .collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in under {
        let _ = umount2(&m, MntFlags::MNT_DETACH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_is_named_by_its_pod_and_runs_in_the_foreground() {
        let r = Runc::new(Path::new("/s/runc"), Path::new("/s/pods/ns_p"), "u1", "dns");
        assert_eq!(
            r.run_argv().join(" "),
            "runc --root /s/runc run --bundle /s/pods/ns_p/containers/dns.bundle \
             --pid-file /s/pods/ns_p/containers/dns.bundle/pid u1-dns"
        );
        assert_eq!(r.rootfs(), Path::new("/s/pods/ns_p/containers/dns.bundle/rootfs"));
    }
}
