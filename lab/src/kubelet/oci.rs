//! The OCI runtime spec of a container from a loaded image (pure), written as kubelet and
//! containerd's CRI plugin write it, from what they start from (`runtime-defaults.json`,
//! generated from containerd's own packages by `scripts/gen-runtime-defaults.sh`):
//!
//! * process: the image's Entrypoint and Cmd under the container's command and args (`$(VAR)`
//!   expanded), the image's Env under the container's, `HOSTNAME`, a default PATH; the user
//!   from runAsUser / runAsGroup over the image's `User` (names looked up in its `/etc/passwd`
//!   and `/etc/group`), supplementalGroups and fsGroup as additional groups; runAsNonRoot
//!   refused as kubelet refuses it; containerd's default capabilities with the container's
//!   add and drop (`ALL` first, as containerd applies them), every capability when privileged;
//!   no_new_privs when allowPrivilegeEscalation is false; no rlimits (inherited);
//! * filesystem: containerd's mounts (proc, a tmpfs `/dev`, devpts, shm, mqueue, a read-only
//!   sysfs, read-write when privileged), the volumes bound at their mountPaths, kubelet's masked
//!   and read-only paths (`/proc/sys` among them) unless privileged; readOnlyRootFilesystem;
//! * namespaces: pid, ipc and mount of its own, the pod's network namespace (the node's for
//!   hostNetwork, whose pods also keep the node's UTS), the pod's sysctls;
//! * seccomp: containerd's RuntimeDefault profile (widened by the capabilities it has) when the
//!   pod or container asks for RuntimeDefault; none for Unconfined or nothing, kubelet's default.
//!
//! Unlike a CRI runtime the containers of one pod share no pause container: each has its own
//! PID and IPC namespaces (`shareProcessNamespace` is not honoured), and no cgroup limits.

use std::path::Path;
use std::sync::LazyLock;

use k8s_openapi::api::core::v1::{Container, Pod, PodSecurityContext, SecurityContext};
use serde_json::{Value, json};

use super::env::expand_all;
use super::mounts::Mount;
use crate::images::ImageConfig;

/// What containerd starts from (see the module's docs).
static DEFAULTS: LazyLock<Value> =
    LazyLock::new(|| serde_json::from_str(include_str!("runtime-defaults.json")).expect("generated JSON"));

/// The paths kubelet masks for the default procMount.
const MASKED_PATHS: [&str; 12] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
/// The paths kubelet makes read-only for the default procMount.
const READONLY_PATHS: [&str; 5] = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"];
/// Every capability Linux knows, by number (bit N of a capability set is `ALL_CAPS[N]`).
const ALL_CAPS: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The capabilities of `set` (a capability set's bits, as `/proc/PID/status` shows them).
fn in_set(set: u64) -> Vec<String> {
    ALL_CAPS.iter().enumerate().filter(|(i, _)| set & (1 << i) != 0).map(|(_, c)| c.to_string()).collect()
}

/// What a privileged container (and `add: [ALL]`) gets: every capability the kubelet itself
/// holds, as containerd gives one every capability of its own process (a capability outside
/// the runtime's bounding set cannot be given: runc fails with EPERM).
fn every_held_capability() -> Vec<String> {
    static HELD: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let bnd = status.lines().find_map(|l| l.strip_prefix("CapBnd:")).map(str::trim);
        bnd.and_then(|h| u64::from_str_radix(h, 16).ok()).unwrap_or(u64::MAX)
    });
    in_set(*HELD)
}
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why a container's spec could not be made: kubelet's `CreateContainerConfigError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciError {
    /// runAsNonRoot with a root user.
    #[error("container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})")]
    RunsAsRoot {
        /// The pod.
        pod: String,
        /// The container.
        container: String,
    },
    /// runAsNonRoot with a user name and no runAsUser.
    #[error(
        "container has runAsNonRoot and image has non-numeric user ({0}), cannot verify user is non-root"
    )]
    NonNumericUser(String),
    /// A user or group name the image's files do not know.
    #[error("unable to find {kind} {name}: no matching entries in {kind} file")]
    UnknownName {
        /// `user` or `group`.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// Nothing to run.
    #[error("no command specified")]
    NoCommand,
}

/// Everything a container's spec is made of.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// The container.
    pub container: &'a Container,
    /// The image's configuration.
    pub image: &'a ImageConfig,
    /// The image's `/etc/passwd` and `/etc/group` (empty when it has none).
    pub passwd: &'a str,
    /// See `passwd`.
    pub group: &'a str,
    /// The environment kubelet made (env, fieldRefs, Service links).
    pub env: &'a [(String, String)],
    /// Volumes and the resolv.conf, at their mountPaths.
    pub mounts: &'a [Mount],
    /// The root filesystem.
    pub rootfs: &'a Path,
    /// The network namespace to join (`None`: the node's, which the kubelet is in).
    pub netns: Option<&'a Path>,
    /// The pod's host name (`None` for hostNetwork pods: they keep the node's UTS).
    pub hostname: Option<&'a str>,
    /// The node's name (HOSTNAME for hostNetwork pods).
    pub node_name: &'a str,
    /// The cgroup path.
    pub cgroups_path: &'a str,
}

/// The pod's and the container's security settings, the container's winning.
struct Security<'a> {
    pod: Option<&'a PodSecurityContext>,
    ctr: Option<&'a SecurityContext>,
}

impl Security<'_> {
    fn run_as_user(&self) -> Option<i64> {
        self.ctr.and_then(|c| c.run_as_user).or(self.pod.and_then(|p| p.run_as_user))
    }
    fn run_as_group(&self) -> Option<i64> {
        self.ctr.and_then(|c| c.run_as_group).or(self.pod.and_then(|p| p.run_as_group))
    }
    fn run_as_non_root(&self) -> bool {
        self.ctr.and_then(|c| c.run_as_non_root).or(self.pod.and_then(|p| p.run_as_non_root)).unwrap_or(false)
    }
    fn privileged(&self) -> bool {
        self.ctr.and_then(|c| c.privileged).unwrap_or(false)
    }
    fn seccomp(&self) -> Option<&str> {
        self.ctr
            .and_then(|c| c.seccomp_profile.as_ref())
            .or(self.pod.and_then(|p| p.seccomp_profile.as_ref()))
            .map(|p| p.type_.as_str())
    }
}

/// The container's OCI runtime spec.
pub fn spec(input: &Input<'_>) -> Result<Value, OciError> {
    let pod_spec = input.pod.spec.as_ref();
    let sec = Security {
        pod: pod_spec.and_then(|s| s.security_context.as_ref()),
        ctr: input.container.security_context.as_ref(),
    };
    let (uid, gid, additional) = user(input, &sec)?;
    let caps = capabilities(&sec);
    let mut spec = DEFAULTS["spec"].clone();
    spec["root"] = json!({"path": input.rootfs,
        "readonly": sec.ctr.and_then(|c| c.read_only_root_filesystem).unwrap_or(false)});
    spec["process"] = json!({
        "terminal": false,
        "user": {"uid": uid, "gid": gid, "additionalGids": additional},
        "args": argv(input)?,
        "env": environment(input),
        "cwd": input.container.working_dir.clone()
            .or_else(|| input.image.working_dir.clone().filter(|w| !w.is_empty()))
            .unwrap_or_else(|| "/".into()),
        "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        "noNewPrivileges": sec.ctr.and_then(|c| c.allow_privilege_escalation) == Some(false),
    });
    if let Some(h) = input.hostname {
        spec["hostname"] = json!(h);
    }
    let mounts = spec["mounts"].as_array_mut().expect("default mounts");
    for m in input.mounts {
        let mode = if m.read_only { "ro" } else { "rw" };
        mounts.push(json!({"destination": m.target, "type": "bind", "source": m.source,
            "options": ["rbind", "rprivate", mode]}));
    }
    if sec.privileged() {
        for m in mounts.iter_mut().filter(|m| m["type"] == "sysfs") {
            m["options"] = json!(["nosuid", "noexec", "nodev", "rw"]);
        }
    }
    let linux = &mut spec["linux"];
    linux["cgroupsPath"] = json!(input.cgroups_path);
    let mut namespaces = vec![json!({"type": "pid"}), json!({"type": "ipc"}), json!({"type": "mount"})];
    if input.hostname.is_some() {
        namespaces.push(json!({"type": "uts"}));
    }
    if let Some(ns) = input.netns {
        namespaces.push(json!({"type": "network", "path": ns}));
    }
    linux["namespaces"] = json!(namespaces);
    if !sec.privileged() {
        linux["maskedPaths"] = json!(MASKED_PATHS);
        linux["readonlyPaths"] = json!(READONLY_PATHS);
    }
    let sysctls: serde_json::Map<String, Value> = sec
        .pod
        .and_then(|p| p.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (s.name.clone(), json!(s.value)))
        .collect();
    if !sysctls.is_empty() {
        linux["sysctl"] = Value::Object(sysctls);
    }
    if sec.seccomp() == Some("RuntimeDefault") && !sec.privileged() {
        linux["seccomp"] = seccomp(&caps);
    }
    Ok(spec)
}

/// The process's argv, as kubelet and CRI combine the image's and the container's.
fn argv(input: &Input<'_>) -> Result<Vec<String>, OciError> {
    let c = input.container;
    let (entrypoint, cmd) = match (&c.command, &c.args) {
        (Some(command), args) => {
            (expand_all(command, input.env), args.clone().map(|a| expand_all(&a, input.env)))
        }
        (None, Some(args)) => {
            (input.image.entrypoint.clone().unwrap_or_default(), Some(expand_all(args, input.env)))
        }
        (None, None) => (input.image.entrypoint.clone().unwrap_or_default(), input.image.cmd.clone()),
    };
    let argv: Vec<String> = entrypoint.into_iter().chain(cmd.unwrap_or_default()).collect();
    if argv.is_empty() { Err(OciError::NoCommand) } else { Ok(argv) }
}

fn environment(input: &Input<'_>) -> Vec<String> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut set = |k: &str, v: &str| match env.iter_mut().find(|(n, _)| n == k) {
        Some(e) => e.1 = v.to_string(),
        None => env.push((k.to_string(), v.to_string())),
    };
    set("HOSTNAME", input.hostname.unwrap_or(input.node_name));
    for e in input.image.env.iter().flatten() {
        let (k, v) = e.split_once('=').unwrap_or((e, ""));
        set(k, v);
    }
    for (k, v) in input.env {
        set(k, v);
    }
    let mut out: Vec<String> = env.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    if !out.iter().any(|e| e.starts_with("PATH=")) {
        out.insert(0, DEFAULT_PATH.into());
    }
    out
}

/// The entries of a passwd or group file: name, id and (passwd) primary group.
fn entries(file: &str) -> impl Iterator<Item = (&str, i64, Option<i64>)> {
    file.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        Some((*f.first()?, f.get(2)?.parse().ok()?, f.get(3).and_then(|g| g.parse().ok())))
    })
}

/// A name's id and primary group in a passwd or group file.
fn lookup(file: &str, name: &str) -> Option<(i64, Option<i64>)> {
    entries(file).find(|(n, _, _)| *n == name).map(|(_, id, gid)| (id, gid))
}

fn user(input: &Input<'_>, sec: &Security<'_>) -> Result<(i64, i64, Vec<i64>), OciError> {
    let image_user = input.image.user.clone().unwrap_or_default();
    let (u, g) = image_user.split_once(':').map_or((image_user.as_str(), None), |(u, g)| (u, Some(g)));
    let (image_uid, passwd_gid) = match u {
        "" => (0, None),
        n if let Ok(uid) = n.parse::<i64>() => {
            (uid, entries(input.passwd).find(|(_, id, _)| *id == uid).and_then(|(_, _, gid)| gid))
        }
        name => {
            if sec.run_as_user().is_none() && sec.run_as_non_root() {
                return Err(OciError::NonNumericUser(name.into()));
            }
            lookup(input.passwd, name).ok_or(OciError::UnknownName { kind: "user", name: name.into() })?
        }
    };
    let image_gid = match g {
        None => passwd_gid.unwrap_or(0),
        Some(n) => match n.parse() {
            Ok(id) => id,
            Err(_) => {
                lookup(input.group, n).ok_or(OciError::UnknownName { kind: "group", name: n.into() })?.0
            }
        },
    };
    let uid = sec.run_as_user().unwrap_or(image_uid);
    if uid == 0 && sec.run_as_non_root() {
        return Err(OciError::RunsAsRoot {
            pod: input.pod.metadata.name.clone().unwrap_or_default(),
            container: input.container.name.clone(),
        });
    }
    let gid = sec.run_as_group().unwrap_or(image_gid);
    let mut additional: Vec<i64> = sec.pod.and_then(|p| p.supplemental_groups.clone()).unwrap_or_default();
    additional.extend(sec.pod.and_then(|p| p.fs_group));
    additional.retain(|g| *g != gid);
    additional.dedup();
    Ok((uid, gid, additional))
}

fn capabilities(sec: &Security<'_>) -> Vec<String> {
    if sec.privileged() {
        return every_held_capability();
    }
    let defaults = DEFAULTS["spec"]["process"]["capabilities"]["bounding"].as_array().expect("default caps");
    let mut caps: Vec<String> = defaults.iter().filter_map(|c| c.as_str().map(str::to_string)).collect();
    let named = |list: Option<&Vec<String>>| -> Vec<String> {
        list.into_iter()
            .flatten()
            .map(|c| if c.starts_with("CAP_") { c.clone() } else { format!("CAP_{c}") })
            .collect()
    };
    let set = sec.ctr.and_then(|c| c.capabilities.as_ref());
    let (add, drop) = (named(set.and_then(|s| s.add.as_ref())), named(set.and_then(|s| s.drop.as_ref())));
    if add.iter().any(|c| c == "CAP_ALL") {
        caps = every_held_capability();
    }
    if drop.iter().any(|c| c == "CAP_ALL") {
        caps.clear();
    }
    for c in add.iter().filter(|c| *c != "CAP_ALL") {
        if !caps.contains(c) {
            caps.push(c.clone());
        }
    }
    caps.retain(|c| !drop.contains(c));
    caps
}

/// containerd's RuntimeDefault profile for a process with `caps`.
fn seccomp(caps: &[String]) -> Value {
    let mut profile = DEFAULTS["base"].clone();
    let rules = profile["syscalls"].as_array_mut().expect("base rules");
    for c in caps {
        rules.extend(DEFAULTS["byCapability"][c].as_array().into_iter().flatten().cloned());
    }
    profile
}

#[cfg(test)]
#[path = "oci_tests.rs"]
mod tests;
