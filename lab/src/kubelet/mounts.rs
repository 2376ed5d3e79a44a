//! A container's own view of the filesystem: `tideway lab container --spec FILE` (hidden) runs
//! inside the pod's network namespace (`ip netns exec`), enters a private mount namespace
//! (and, for a pod with its own network, a UTS namespace named after the pod), bind-mounts the
//! container's volumes at their mountPaths and its resolv.conf at `/etc/resolv.conf`, then
//! executes the container's processes. Nothing it mounts is seen outside that process tree.
//!
//! A mountPath whose directory does not exist on the host (`/var/run/secrets/...`,
//! `/etc/tideway/tls`) is not made on the host: the nearest existing ancestor gets an overlay
//! whose upper layer is a tmpfs private to the container, the mount point is made there, and
//! the ancestor's own submounts (`/run/netns/...`, the resolv.conf `ip netns exec` mounted) are
//! bound back on top. The upper layer cannot live in the node's state directory: that lies
//! under `/run` itself, and overlayfs refuses an upper layer inside its lower one. Overlaying
//! `/` is refused. Every source is opened before any overlay hides it, so a volume under `/run`
//! stays the real directory (its `..data` swaps show through).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::mount::{MsFlags, mount};
use nix::sys::stat::Mode;
use serde::{Deserialize, Serialize};

/// A bind mount: `source` on the node, seen at `target` in the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// The directory or file on the node.
    pub source: PathBuf,
    /// The mountPath.
    pub target: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Everything the container helper needs, written by the kubelet next to the container's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// The processes (each an argv); the container ends when the first one ends.
    pub processes: Vec<Vec<String>>,
    /// The environment (nothing else is inherited).
    pub env: Vec<(String, String)>,
    /// The mounts, in the container's order.
    pub mounts: Vec<Mount>,
    /// `workingDir`.
    pub working_dir: Option<String>,
    /// The host name, for a pod with its own network namespace.
    pub hostname: Option<String>,
    /// An empty directory for the overlays' private tmpfs.
    pub scratch: PathBuf,
}

/// Why the container's filesystem could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// A mountPath whose nearest existing ancestor is `/`.
    #[error("mountPath {0}: its parent does not exist, and the lab does not overlay /")]
    Root(PathBuf),
    /// A mountPath that is not absolute.
    #[error("mountPath {0}: not absolute")]
    Relative(PathBuf),
    /// A system call.
    #[error("{what}: {errno}")]
    Sys {
        /// What was tried.
        what: String,
        /// How it failed.
        errno: nix::Error,
    },
    /// A file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A mount's target split at its nearest existing ancestor (symlinks resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The existing ancestor, canonical.
    pub existing: PathBuf,
    /// What is missing below it (empty when the target exists).
    pub missing: PathBuf,
}

/// What is done, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Directories that get an overlay (none inside another).
    pub overlays: Vec<PathBuf>,
    /// Bind mounts, parents before children, targets resolved.
    pub binds: Vec<Mount>,
}

/// Plans `mounts` against a filesystem seen through `resolve`.
pub fn plan(mounts: &[Mount], resolve: &dyn Fn(&Path) -> Resolved) -> Result<Plan, MountError> {
    let mut overlays: Vec<PathBuf> = Vec::new();
    let mut binds = Vec::new();
    for m in mounts {
        if !m.target.is_absolute() {
            return Err(MountError::Relative(m.target.clone()));
        }
        let r = resolve(&m.target);
        if !r.missing.as_os_str().is_empty() {
            if r.existing == Path::new("/") {
                return Err(MountError::Root(m.target.clone()));
            }
            overlays.push(r.existing.clone());
        }
        let target =
            if r.missing.as_os_str().is_empty() { r.existing.clone() } else { r.existing.join(&r.missing) };
        binds.push(Mount { target, ..m.clone() });
    }
    overlays.sort();
    overlays.dedup();
    let all = overlays.clone();
    overlays.retain(|o| !all.iter().any(|p| p != o && o.starts_with(p)));
    binds.sort_by_key(|b| b.target.components().count());
    Ok(Plan { overlays, binds })
}

/// The real filesystem's answer for [`plan`].
pub fn resolve_on_host(target: &Path) -> Resolved {
    for ancestor in target.ancestors() {
        if let Ok(canonical) = std::fs::canonicalize(ancestor) {
            let missing = target.strip_prefix(ancestor).map(Path::to_path_buf).unwrap_or_default();
            return Resolved { existing: canonical, missing };
        }
    }
    Resolved {
        existing: PathBuf::from("/"),
        missing: target.strip_prefix("/").unwrap_or(target).to_path_buf(),
    }
}

/// The mount points strictly below `dir` that no other of them holds (from mountinfo's fifth
/// field, with its octal escapes).
pub fn top_submounts(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    let points: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .filter(|p| p.starts_with(dir) && p != dir)
        .collect();
    let mut top: Vec<PathBuf> =
        points.iter().filter(|p| !points.iter().any(|q| q != *p && p.starts_with(q))).cloned().collect();
    top.sort();
    top.dedup();
    top
}

fn unescape(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push(u8::from_str_radix(&s[i + 1..i + 4], 8).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn sys<T>(what: impl FnOnce() -> String, r: nix::Result<T>) -> Result<T, MountError> {
    r.map_err(|errno| MountError::Sys { what: what(), errno })
}

fn open_path(p: &Path) -> Result<OwnedFd, MountError> {
    sys(
        || format!("open {}", p.display()),
        nix::fcntl::open(p, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()),
    )
}

fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn bind(source: &Path, target: &Path) -> Result<(), MountError> {
    let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
    sys(
        || format!("bind {} on {}", source.display(), target.display()),
        mount(Some(source), target, None::<&str>, flags, None::<&str>),
    )
}

/// Sets up the container's mount namespace as planned (the calling process's own: call it in
/// the helper only).
pub fn enter(spec: &ContainerSpec) -> Result<(), MountError> {
    use nix::sched::{CloneFlags, unshare};
    let mut flags = CloneFlags::CLONE_NEWNS;
    if spec.hostname.is_some() {
        flags |= CloneFlags::CLONE_NEWUTS;
    }
    sys(|| "unshare".into(), unshare(flags))?;
    let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
    sys(|| "make / private".into(), mount(None::<&str>, "/", None::<&str>, private, None::<&str>))?;
    if let Some(h) = &spec.hostname {
        sys(|| format!("sethostname {h}"), nix::unistd::sethostname(h))?;
    }
    let plan = plan(&spec.mounts, &resolve_on_host)?;
    // Open everything before an overlay can hide it.
    let sources: Vec<OwnedFd> = plan.binds.iter().map(|b| open_path(&b.source)).collect::<Result<_, _>>()?;
    let lowers: Vec<OwnedFd> = plan.overlays.iter().map(|o| open_path(o)).collect::<Result<_, _>>()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    if !plan.overlays.is_empty() {
        overlay_all(&plan.overlays, &lowers, &spec.scratch, &mountinfo)?;
    }
    for (b, fd) in plan.binds.iter().zip(&sources) {
        make_target(&b.target, b.source.is_dir())?;
        bind(&fd_path(fd), &b.target)?;
        if b.read_only {
            let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_REC;
            sys(
                || format!("read-only {}", b.target.display()),
                mount(None::<&str>, &b.target, None::<&str>, ro, None::<&str>),
            )?;
        }
    }
    Ok(())
}

fn overlay_all(
    overlays: &[PathBuf],
    lowers: &[OwnedFd],
    scratch: &Path,
    mountinfo: &str,
) -> Result<(), MountError> {
    std::fs::create_dir_all(scratch)?;
    let tmpfs = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    sys(
        || format!("tmpfs on {}", scratch.display()),
        mount(Some("tmpfs"), scratch, Some("tmpfs"), tmpfs, Some("size=64m,mode=0755")),
    )?;
    let scratch_fd = open_path(scratch)?;
    for (i, (dir, lower)) in overlays.iter().zip(lowers).enumerate() {
        let layer = scratch.join(i.to_string());
        std::fs::create_dir_all(layer.join("upper"))?;
        std::fs::create_dir_all(layer.join("work"))?;
        let s = fd_path(&scratch_fd);
        let options = format!(
            "lowerdir={},upperdir={}/{i}/upper,workdir={}/{i}/work",
            fd_path(lower).display(),
            s.display(),
            s.display()
        );
        let subs = top_submounts(mountinfo, dir);
        sys(
            || format!("overlay on {}", dir.display()),
            mount(Some("overlay"), dir, Some("overlay"), MsFlags::empty(), Some(options.as_str())),
        )?;
        for sub in subs {
            let rel = sub.strip_prefix(dir).expect("below the overlay");
            let from = fd_path(lower).join(rel);
            if std::fs::symlink_metadata(&sub).is_ok() {
                bind(&from, &sub)?;
            }
        }
    }
    Ok(())
}

/// Makes a mount point: a directory, or an empty file for a file.
fn make_target(target: &Path, dir: bool) -> std::io::Result<()> {
    if std::fs::symlink_metadata(target).is_ok() {
        return Ok(());
    }
    if dir {
        return std::fs::create_dir_all(target);
    }
    if let Some(p) = target.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::OpenOptions::new().create(true).append(true).open(target).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A filesystem with /run, /tmp, /etc and a /var/run -> /run symlink.
    fn fs(target: &Path) -> Resolved {
        let exists = ["/", "/run", "/tmp", "/etc", "/run/xtables.lock"];
        let mut t = target.to_path_buf();
        if let Ok(rest) = t.strip_prefix("/var/run") {
            t = Path::new("/run").join(rest);
        }
        for a in t.ancestors() {
            if exists.iter().any(|e| Path::new(e) == a) {
                return Resolved {
                    existing: a.to_path_buf(),
                    missing: t.strip_prefix(a).unwrap().to_path_buf(),
                };
            }
        }
        unreachable!()
    }

    fn m(source: &str, target: &str) -> Mount {
        Mount { source: source.into(), target: target.into(), read_only: false }
    }

    #[test]
    fn missing_mount_points_get_an_overlay_on_their_nearest_existing_ancestor() {
        let p = plan(
            &[
                m("/s/token", "/var/run/secrets/kubernetes.io/serviceaccount"),
                m("/s/tmp", "/tmp"),
                m("/run/xtables.lock", "/run/xtables.lock"),
                m("/s/frr", "/var/run/tideway/frr"),
                m("/s/tls", "/etc/tideway/tls"),
                m("/s/resolv.conf", "/etc/resolv.conf"),
            ],
            &fs,
        )
        .unwrap();
        assert_eq!(p.overlays, [PathBuf::from("/etc"), PathBuf::from("/run")]);
        let targets: Vec<&str> = p.binds.iter().map(|b| b.target.to_str().unwrap()).collect();
        assert_eq!(
            targets,
            [
                "/tmp",
                "/run/xtables.lock",
                "/etc/resolv.conf",
                "/run/tideway/frr",
                "/etc/tideway/tls",
                "/run/secrets/kubernetes.io/serviceaccount"
            ],
            "symlinks resolved, parents first"
        );
        assert!(matches!(plan(&[m("/s/d", "/data/x")], &fs), Err(MountError::Root(_))));
        assert!(matches!(plan(&[m("/s/d", "data")], &fs), Err(MountError::Relative(_))));
        assert!(
            plan(&[m("/s/tmp", "/tmp")], &fs).unwrap().overlays.is_empty(),
            "nothing missing, no overlay"
        );
    }

    #[test]
    fn the_submounts_bound_back_are_the_outermost_below_the_overlay() {
        let info = "22 1 254:0 / / rw shared:1 - ext4 /dev/vda rw\n\
                    30 22 0:4 / /run/netns rw shared:5 - tmpfs tmpfs rw\n\
                    31 30 0:4 net:[1] /run/netns/tw-a rw shared:6 - nsfs nsfs rw\n\
                    32 22 0:5 / /run/with\\040space rw - tmpfs tmpfs rw\n\
                    33 22 0:6 / /proc rw - proc proc rw\n";
        assert_eq!(
            top_submounts(info, Path::new("/run")),
            [PathBuf::from("/run/netns"), PathBuf::from("/run/with space")]
        );
        assert!(top_submounts(info, Path::new("/etc")).is_empty());
    }
}
