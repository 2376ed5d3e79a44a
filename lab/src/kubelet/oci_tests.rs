use serde_json::json;

use super::*;

const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnonroot:x:65532:\nnet:x:300:\n";

fn pod(v: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": v})).unwrap()
}

fn container(v: Value) -> Container {
    serde_json::from_value(v).unwrap()
}

fn image() -> ImageConfig {
    ImageConfig {
        user: Some("65532".into()),
        env: Some(vec!["PATH=/usr/sbin:/usr/bin".into(), "A=image".into()]),
        entrypoint: Some(vec!["/usr/local/bin/tideway".into()]),
        cmd: Some(vec!["--help".into()]),
        working_dir: None,
    }
}

fn run(pod: &Pod, c: &Container, image: &ImageConfig, env: &[(String, String)]) -> Result<Value, OciError> {
    let mounts = [Mount { source: "/s/tok".into(), target: "/var/run/secrets/x".into(), read_only: true }];
    spec(&Input {
        pod,
        container: c,
        image,
        passwd: PASSWD,
        group: GROUP,
        env,
        mounts: &mounts,
        rootfs: Path::new("/b/rootfs"),
        netns: Some(Path::new("/run/netns/pod")),
        hostname: Some("p"),
        node_name: "w1",
        cgroups_path: "/tideway-lab/x",
    })
}

#[test]
fn an_unprivileged_container_gets_containerds_defaults_and_kubelets_read_only_proc_sys() {
    let p = pod(json!({"containers": [], "securityContext": {"seccompProfile": {"type": "RuntimeDefault"},
        "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "53"}], "fsGroup": 2000}}));
    let c = container(json!({"name": "dns", "args": ["dns", "--listen=$(ADDR)"], "securityContext": {
        "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}));
    let env = [("ADDR".to_string(), "0.0.0.0:53".to_string()), ("A".to_string(), "pod".to_string())];
    let s = run(&p, &c, &image(), &env).unwrap();
    assert_eq!(
        s["process"]["args"],
        json!(["/usr/local/bin/tideway", "dns", "--listen=0.0.0.0:53"]),
        "args replace Cmd"
    );
    assert_eq!(s["process"]["user"], json!({"uid": 65532, "gid": 65532, "additionalGids": [2000]}));
    assert_eq!(
        s["process"]["env"],
        json!(["HOSTNAME=p", "PATH=/usr/sbin:/usr/bin", "A=pod", "ADDR=0.0.0.0:53"])
    );
    assert_eq!(s["process"]["capabilities"]["effective"], json!(["CAP_NET_BIND_SERVICE"]));
    assert_eq!(s["process"]["noNewPrivileges"], true);
    assert_eq!(s["root"], json!({"path": "/b/rootfs", "readonly": true}));
    assert!(s["linux"]["readonlyPaths"].as_array().unwrap().contains(&json!("/proc/sys")));
    assert!(s["linux"]["maskedPaths"].as_array().unwrap().contains(&json!("/proc/kcore")));
    assert_eq!(s["linux"]["sysctl"], json!({"net.ipv4.ip_unprivileged_port_start": "53"}));
    assert_eq!(s["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
    let ns = s["linux"]["namespaces"].as_array().unwrap();
    assert!(
        ns.contains(&json!({"type": "network", "path": "/run/netns/pod"}))
            && ns.contains(&json!({"type": "uts"}))
    );
    let sysfs = s["mounts"].as_array().unwrap().iter().find(|m| m["type"] == "sysfs").unwrap();
    assert!(sysfs["options"].as_array().unwrap().contains(&json!("ro")));
    assert!(s["mounts"].as_array().unwrap().iter().all(|m| m["destination"] != "/run"), "CRI drops /run");
    let bind = s["mounts"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(bind["destination"], "/var/run/secrets/x");
    assert_eq!(bind["options"], json!(["rbind", "rprivate", "ro"]));
}

#[test]
fn capabilities_widen_the_seccomp_profile_and_privileged_lifts_every_limit() {
    let p = pod(
        json!({"containers": [], "hostNetwork": true, "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}),
    );
    let narrow = container(json!({"name": "a"}));
    let wide = container(
        json!({"name": "a", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]}}}),
    );
    let rules = |c: &Container| {
        run(&p, c, &image(), &[]).unwrap()["linux"]["seccomp"]["syscalls"].as_array().unwrap().len()
    };
    assert!(rules(&wide) > rules(&narrow), "CAP_SYS_ADMIN allows more system calls");
    let s = run(&p, &wide, &image(), &[]).unwrap();
    assert!(s["process"]["capabilities"]["bounding"].as_array().unwrap().contains(&json!("CAP_NET_ADMIN")));
    assert!(
        s["process"]["capabilities"]["bounding"].as_array().unwrap().contains(&json!("CAP_CHOWN")),
        "defaults kept"
    );
    assert_eq!(s["process"]["noNewPrivileges"], false, "CRI lets privileges rise unless told");
    let privileged = container(json!({"name": "a", "securityContext": {"privileged": true}}));
    let s = run(&p, &privileged, &image(), &[]).unwrap();
    let every = s["process"]["capabilities"]["bounding"].as_array().unwrap().clone();
    assert_eq!(every, in_set(held_by_this_process()), "every capability the runtime holds");
    assert!(every.contains(&json!("CAP_SYS_ADMIN")) && every.contains(&json!("CAP_NET_ADMIN")));
    assert!(s["linux"]["readonlyPaths"].is_null() && s["linux"]["maskedPaths"].is_null());
    assert!(s["linux"]["seccomp"].is_null());
    let unconfined = pod(json!({"containers": []}));
    assert!(
        run(&unconfined, &narrow, &image(), &[]).unwrap()["linux"]["seccomp"].is_null(),
        "kubelet's default"
    );
}

/// This process's bounding set.
fn held_by_this_process() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let bnd = status.lines().find_map(|l| l.strip_prefix("CapBnd:")).unwrap();
    u64::from_str_radix(bnd.trim(), 16).unwrap()
}

#[test]
fn capability_sets_read_by_number() {
    assert_eq!(in_set(0b1), ["CAP_CHOWN"]);
    assert_eq!(in_set(1 << 12 | 1 << 21), ["CAP_NET_ADMIN", "CAP_SYS_ADMIN"]);
    assert_eq!(in_set(0x1ff_feff_ffff).len(), 40, "all but CAP_SYS_RESOURCE (24)");
    assert!(!in_set(0x1ff_feff_ffff).contains(&"CAP_SYS_RESOURCE".to_string()));
}

#[test]
fn users_resolve_as_kubelet_and_cri_resolve_them() {
    let p = pod(json!({"containers": [], "securityContext": {"runAsNonRoot": true}}));
    let named = ImageConfig { user: Some("nonroot:net".into()), ..image() };
    let s = run(&p, &container(json!({"name": "a"})), &named, &[]).unwrap_err();
    assert!(matches!(s, OciError::NonNumericUser(n) if n == "nonroot:net".split(':').next().unwrap()));
    let open = pod(json!({"containers": []}));
    let s = run(&open, &container(json!({"name": "a"})), &named, &[]).unwrap();
    assert_eq!(s["process"]["user"], json!({"uid": 65532, "gid": 300, "additionalGids": []}));
    let root = ImageConfig { user: None, ..image() };
    let refused = run(&p, &container(json!({"name": "a"})), &root, &[]).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "container has runAsNonRoot and image will run as root (pod: \"p\", container: a)"
    );
    let as_user = container(json!({"name": "a", "securityContext": {"runAsUser": 1000, "runAsGroup": 1001}}));
    assert_eq!(run(&p, &as_user, &root, &[]).unwrap()["process"]["user"]["uid"], 1000);
    let ghost = ImageConfig { user: Some("ghost".into()), ..image() };
    assert!(matches!(
        run(&open, &container(json!({"name": "a"})), &ghost, &[]),
        Err(OciError::UnknownName { .. })
    ));
}

#[test]
fn command_and_args_combine_with_the_images_as_kubernetes_documents() {
    let p = pod(json!({"containers": []}));
    let argv =
        |c: Value, i: &ImageConfig| run(&p, &container(c), i, &[]).map(|s| s["process"]["args"].clone());
    assert_eq!(argv(json!({"name": "a"}), &image()).unwrap(), json!(["/usr/local/bin/tideway", "--help"]));
    assert_eq!(
        argv(json!({"name": "a", "command": ["sh"]}), &image()).unwrap(),
        json!(["sh"]),
        "Cmd ignored"
    );
    assert_eq!(
        argv(json!({"name": "a", "command": ["sh"], "args": ["-c", "x"]}), &image()).unwrap(),
        json!(["sh", "-c", "x"])
    );
    let bare = ImageConfig::default();
    assert_eq!(argv(json!({"name": "a"}), &bare), Err(OciError::NoCommand));
}
