//! A pod's volumes as directories in the node's state directory, and where each container
//! sees them (pure, but for [`write_atomically`]):
//!
//! ```text
//!  <state>/pods/<ns>_<pod>/volumes/<volume>/   emptyDir; configMap, secret, projected and
//!                                              downwardAPI files (kubelet's layout: the files
//!                                              in ..<timestamp>/, ..data -> it, NAME -> ..data/NAME,
//!                                              so a rotating token is never read half-written)
//!  <state>/hostpath/<path>                     a hostPath: the node's own filesystem ...
//!  /lib/modules, /run/xtables.lock,            ... except these, the host's (shared by every
//!  /proc/sys/net                               node, as the kernel and the iptables lock are;
//!                                              /proc/sys/net shows the netns of whoever opens
//!                                              it, so a node's agent sees its node's)
//! ```

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, Volume};

use super::mounts::Mount;

/// hostPaths that are the host's own on every node.
pub const HOST_PATHS: [&str; 3] = ["/lib/modules", "/run/xtables.lock", "/proc/sys/net"];

/// Why a volume cannot be set up (the pod waits in `ContainerCreating`, as kubelet's
/// `FailedMount`).
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// A kind of volume the lab's kubelet does not mount.
    #[error(
        "volume {0}: the lab's kubelet mounts emptyDir, hostPath, configMap, secret, projected and downwardAPI only"
    )]
    Unsupported(String),
    /// A ConfigMap or Secret that is not there (and not optional).
    #[error("volume {volume}: {what} not found")]
    Missing {
        /// The volume.
        volume: String,
        /// `configmap "x"`, `secret "y"`, `key "k" of configmap "x"`.
        what: String,
    },
    /// A volumeMount names no volume of the pod.
    #[error("volumeMount {0}: no such volume")]
    NoVolume(String),
    /// The API server refused a read or a token.
    #[error("volume {volume}: {message}")]
    Api {
        /// The volume.
        volume: String,
        /// Why.
        message: String,
    },
    /// A file.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A file of a volume: its bytes and mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// The content.
    pub data: Vec<u8>,
    /// Its mode.
    pub mode: u32,
}

/// A volume's files by path relative to its directory.
pub type Payload = BTreeMap<String, File>;

/// A pod's directory in the node's state directory.
pub fn pod_dir(state: &Path, namespace: &str, name: &str) -> PathBuf {
    state.join("pods").join(format!("{namespace}_{name}"))
}

/// Where pod `namespace/name` (uid `uid`) keeps its container logs once torn down, for
/// reading after the pod is gone (a rolled-over leader's last words): `gone/` beside `pods/`,
/// the uid's first part telling apart two pods of one name. Removed with the lab.
pub fn gone_dir(state: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    let uid: String = uid.chars().take(8).collect();
    state.join("gone").join(format!("{namespace}_{name}_{uid}"))
}

/// Moves the container logs (`containers/*.log`) of pod directory `pod_dir` to `to`.
pub fn keep_logs(pod_dir: &Path, to: &Path) -> std::io::Result<()> {
    let logs = to.join("containers");
    for e in std::fs::read_dir(pod_dir.join("containers"))?.flatten() {
        if e.path().extension().is_some_and(|x| x == "log") {
            std::fs::create_dir_all(&logs)?;
            std::fs::rename(e.path(), logs.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Volume `volume`'s directory in pod directory `pod_dir`.
pub fn volume_dir(pod_dir: &Path, volume: &str) -> PathBuf {
    pod_dir.join("volumes").join(volume)
}

/// Where a hostPath lives on node `state`: the host's own for [`HOST_PATHS`], else under the
/// node's state directory.
pub fn host_path(state: &Path, path: &str) -> PathBuf {
    let clean = Path::new(path).components().filter(|c| matches!(c, std::path::Component::Normal(_)));
    let rel: PathBuf = clean.collect();
    let normal = Path::new("/").join(&rel);
    if HOST_PATHS.iter().any(|h| normal == Path::new(h)) {
        return normal;
    }
    state.join("hostpath").join(rel)
}

/// The mounts of `container` of `pod` (in pod directory `pod_dir`, node state `state`), in the
/// container's order.
pub fn container_mounts(
    pod: &Pod,
    container: &Container,
    pod_dir: &Path,
    state: &Path,
) -> Result<Vec<Mount>, VolumeError> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    let mut out = Vec::new();
    for vm in container.volume_mounts.as_deref().unwrap_or_default() {
        let v = volumes
            .iter()
            .find(|v| v.name == vm.name)
            .ok_or_else(|| VolumeError::NoVolume(vm.name.clone()))?;
        let (mut source, forced_ro) = match &v.host_path {
            Some(hp) => (host_path(state, &hp.path), false),
            None => (volume_dir(pod_dir, &v.name), is_api_volume(v)),
        };
        if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
            source = source.join(sub);
        }
        out.push(Mount {
            source,
            target: PathBuf::from(&vm.mount_path),
            read_only: vm.read_only.unwrap_or(false) || forced_ro,
        });
    }
    Ok(out)
}

/// Makes the directory each mount nested in another mount's target needs inside that other
/// mount's source, as kubelet does (`MakeNestedMountpoints`): a volume mounted read-only (an
/// API volume) could not take a mount point once mounted.
pub fn make_nested_mountpoints(mounts: &[Mount]) -> std::io::Result<()> {
    for inner in mounts {
        let holder = mounts
            .iter()
            .filter(|m| m.source.is_dir())
            .filter_map(|m| Some((m, inner.target.strip_prefix(&m.target).ok()?)))
            .filter(|(_, rel)| !rel.as_os_str().is_empty())
            .max_by_key(|(m, _)| m.target.components().count());
        if let Some((m, rel)) = holder {
            let dir = m.source.join(rel);
            if !dir.exists() {
                std::fs::create_dir_all(dir)?;
            }
        }
    }
    Ok(())
}

/// Volumes whose files come from the API (kubelet mounts them read-only).
pub fn is_api_volume(v: &Volume) -> bool {
    v.config_map.is_some() || v.secret.is_some() || v.projected.is_some() || v.downward_api.is_some()
}

/// The files `items` (or every key of `data`, sorted) make, with `default_mode`.
pub fn key_files(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    match items {
        Some(items) if !items.is_empty() => {
            for it in items {
                let d = data.get(&it.key).ok_or_else(|| format!("key {:?}", it.key))?;
                let mode = it.mode.map_or(default_mode, |m| m as u32);
                out.insert(it.path.clone(), File { data: d.clone(), mode });
            }
        }
        _ => {
            for (k, d) in data {
                out.insert(k.clone(), File { data: d.clone(), mode: default_mode });
            }
        }
    }
    Ok(out)
}

fn timestamp_dir_name() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    format!("..{}_{:09}", now.as_secs(), now.subsec_nanos())
}

/// Writes `payload` into `dir` as kubelet's atomic writer does: the files into a new
/// `..<timestamp>` directory, `..data` swapped to it by a rename, a symlink per top-level name
/// into `..data`; names no longer in the payload and the old directory go after the swap.
pub fn write_atomically(dir: &Path, payload: &Payload) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let ts = timestamp_dir_name();
    let ts_path = dir.join(&ts);
    std::fs::create_dir(&ts_path)?;
    for (rel, f) in payload {
        let path = ts_path.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &f.data)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode & 0o7777))?;
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&ts, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    let top: std::collections::BTreeSet<String> =
        payload.keys().filter_map(|k| k.split('/').next().map(str::to_string)).collect();
    for name in &top {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(name), &link)?;
        }
    }
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !top.contains(&name) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if let Some(old) = old.filter(|o| o != Path::new(&ts)) {
        let _ = std::fs::remove_dir_all(dir.join(old));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn host_paths_are_the_nodes_own_but_for_the_kernel_its_net_sysctls_and_the_iptables_lock() {
        let s = Path::new("/run/tideway-lab/t/nodes/w1");
        assert_eq!(host_path(s, "/var/run/frr"), s.join("hostpath/var/run/frr"));
        assert_eq!(host_path(s, "/lib/modules"), Path::new("/lib/modules"));
        assert_eq!(host_path(s, "/run/xtables.lock"), Path::new("/run/xtables.lock"));
        assert_eq!(host_path(s, "/proc/sys/net"), Path::new("/proc/sys/net"));
        assert_eq!(host_path(s, "/proc/sys/kernel"), s.join("hostpath/proc/sys/kernel"));
        assert_eq!(host_path(s, "/../etc/x"), s.join("hostpath/etc/x"), "no way out of the node");
    }

    #[test]
    fn mounts_follow_the_containers_volume_mounts_and_api_volumes_are_read_only() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "n"},
            "spec": {
                "volumes": [
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
                    {"name": "kube-api-access", "projected": {"sources": []}},
                ],
                "containers": [{"name": "c", "volumeMounts": [
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "lock", "mountPath": "/run/xtables.lock"},
                    {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
                    {"name": "tmp", "mountPath": "/data", "subPath": "d", "readOnly": true},
                ]}],
            },
        }))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        let (pd, state) = (Path::new("/s/pods/n_a"), Path::new("/s"));
        let m = container_mounts(&pod, &c, pd, state).unwrap();
        assert_eq!(
            m[0],
            Mount { source: "/s/pods/n_a/volumes/tmp".into(), target: "/tmp".into(), read_only: false }
        );
        assert_eq!(m[1].source, Path::new("/run/xtables.lock"));
        assert!(m[2].read_only, "a projected volume is read-only");
        assert_eq!(
            m[3],
            Mount { source: "/s/pods/n_a/volumes/tmp/d".into(), target: "/data".into(), read_only: true }
        );
    }

    #[test]
    fn files_are_swapped_in_whole_and_old_names_go() {
        let dir = std::env::temp_dir().join(format!("tideway-atomic-{}", std::process::id()));
        let file = |s: &str, mode| File { data: s.as_bytes().to_vec(), mode };
        let first: Payload =
            [("token".to_string(), file("one", 0o600)), ("ca.crt".to_string(), file("ca", 0o644))].into();
        write_atomically(&dir, &first).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("token")).unwrap(), "one");
        assert!(std::fs::symlink_metadata(dir.join("token")).unwrap().file_type().is_symlink());
        let mode = std::fs::metadata(dir.join("token")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let first_target = std::fs::read_link(dir.join("..data")).unwrap();
        let second: Payload =
            [("token".to_string(), file("two", 0o600)), ("sub/namespace".to_string(), file("n", 0o644))]
                .into();
        write_atomically(&dir, &second).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("token")).unwrap(), "two");
        assert_eq!(std::fs::read_to_string(dir.join("sub/namespace")).unwrap(), "n");
        assert!(
            std::fs::symlink_metadata(dir.join("ca.crt")).is_err(),
            "a name no longer in the payload goes"
        );
        assert!(!dir.join(&first_target).exists(), "the old timestamp directory goes");
        let data: BTreeMap<String, Vec<u8>> =
            [("a".to_string(), b"1".to_vec()), ("b".to_string(), b"2".to_vec())].into();
        let items: Vec<KeyToPath> =
            vec![serde_json::from_value(json!({"key": "b", "path": "x/b", "mode": 256})).unwrap()];
        let p = key_files(&data, Some(&items), 0o644).unwrap();
        assert_eq!(p.keys().collect::<Vec<_>>(), ["x/b"]);
        assert_eq!(p["x/b"].mode, 0o400);
        assert_eq!(key_files(&data, None, 0o644).unwrap().len(), 2);
        let missing: Vec<KeyToPath> = vec![serde_json::from_value(json!({"key": "z", "path": "z"})).unwrap()];
        assert!(key_files(&data, Some(&missing), 0o644).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(test)]
mod nested_tests {
    use super::*;

    #[test]
    fn a_mount_inside_another_gets_its_mount_point_in_the_outer_volume() {
        let dir = std::env::temp_dir().join(format!("tideway-nested-{}", std::process::id()));
        let (outer, inner) = (dir.join("excludel2"), dir.join("memberlist"));
        std::fs::create_dir_all(&outer).unwrap();
        std::fs::create_dir_all(&inner).unwrap();
        let m = |source: &Path, target: &str| Mount {
            source: source.into(),
            target: target.into(),
            read_only: true,
        };
        // MetalLB's speaker: a ConfigMap at /etc/metallb, another inside it.
        let mounts =
            [m(&outer, "/etc/metallb"), m(&inner, "/etc/metallb/memberlist"), m(&inner, "/etc/other")];
        make_nested_mountpoints(&mounts).unwrap();
        assert!(outer.join("memberlist").is_dir());
        let mut made: Vec<_> = std::fs::read_dir(&outer).unwrap().map(|e| e.unwrap().file_name()).collect();
        made.sort();
        assert_eq!(made, ["memberlist"], "nothing for mounts that nest in no other");
        assert_eq!(std::fs::read_dir(&inner).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_torn_down_pods_logs_are_kept_apart_from_its_namesakes() {
        let state = std::env::temp_dir().join(format!("tideway-gone-{}", std::process::id()));
        let pod = pod_dir(&state, "ns", "op");
        std::fs::create_dir_all(pod.join("containers")).unwrap();
        std::fs::write(pod.join("containers/operator.log"), "last words\n").unwrap();
        std::fs::write(pod.join("containers/operator.pid"), "1").unwrap();
        let gone = gone_dir(&state, "ns", "op", "0123456789abcdef");
        assert_eq!(gone, state.join("gone/ns_op_01234567"));
        keep_logs(&pod, &gone).unwrap();
        assert_eq!(std::fs::read_to_string(gone.join("containers/operator.log")).unwrap(), "last words\n");
        assert!(!gone.join("containers/operator.pid").exists(), "logs only");
        assert_ne!(gone_dir(&state, "ns", "op", "fedcba98"), gone, "a namesake keeps its own");
        std::fs::remove_dir_all(&state).unwrap();
    }
}
