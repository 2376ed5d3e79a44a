//! What a container runs (pure): the lab's whoami server for its images (one process per
//! container port, as the file-fed lab runs it), the build's `tideway` for Tideway's image
//! (its entrypoint is `tideway`; a `command` naming `tideway` is honoured), and nothing for any
//! other image: the lab pulls no images, so those wait in `ErrImagePull`, then
//! `ImagePullBackOff`, as a node without the image and without a registry would.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::core::v1::Container;

use super::config::{ImageKind, KubeletConfig};
use super::env::expand_all;

/// How a container starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Launch {
    /// These processes (usually one; the whoami server runs one per port).
    Run(Vec<Vec<String>>),
    /// It cannot start: the reason (`ErrImagePull`, `CreateContainerError`) and why.
    Refused {
        /// kubelet's reason.
        reason: String,
        /// Its message.
        message: String,
    },
}

/// The ports whoami serves: the container's, or 80.
pub fn whoami_ports(container: &Container) -> BTreeSet<i32> {
    let ports: BTreeSet<i32> =
        container.ports.as_deref().unwrap_or_default().iter().map(|p| p.container_port).collect();
    if ports.is_empty() { BTreeSet::from([80]) } else { ports }
}

/// What `container` of pod `pod_name` runs, its environment already made.
pub fn launch(
    cfg: &KubeletConfig,
    pod_name: &str,
    container: &Container,
    env: &[(String, String)],
) -> Launch {
    let image = container.image.as_deref().unwrap_or_default();
    let bin = cfg.tideway_binary.display().to_string();
    match cfg.image_kind(image) {
        ImageKind::Whoami => Launch::Run(
            whoami_ports(container)
                .into_iter()
                .map(|port| {
                    vec![
                        bin.clone(),
                        "whoami".into(),
                        "--name".into(),
                        pod_name.to_string(),
                        "--listen".into(),
                        format!("0.0.0.0:{port}"),
                    ]
                })
                .collect(),
        ),
        ImageKind::Tideway => {
            let command = expand_all(container.command.as_deref().unwrap_or_default(), env);
            let args = expand_all(container.args.as_deref().unwrap_or_default(), env);
            let mut argv = vec![bin];
            match command.split_first() {
                None => {}
                Some((first, rest)) if Path::new(first).file_name().is_some_and(|n| n == "tideway") => {
                    argv.extend(rest.iter().cloned());
                }
                Some((first, _)) => {
                    return Launch::Refused {
                        reason: "CreateContainerError".into(),
                        message: format!("the lab runs only `tideway` from {image}, not {first:?}"),
                    };
                }
            }
            argv.extend(args);
            Launch::Run(vec![argv])
        }
        ImageKind::Other => Launch::Refused {
            reason: "ErrImagePull".into(),
            message: format!("the lab pulls no images: {image:?} is neither Tideway's nor whoami's"),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn container(v: serde_json::Value) -> Container {
        serde_json::from_value(v).unwrap()
    }

    fn cfg() -> KubeletConfig {
        let mut c: KubeletConfig = serde_json::from_value(json!({
            "lab": "t", "nodeName": "w1", "kubeconfig": "/k", "addresses": [{"type": "InternalIP", "address": "172.18.0.4"}],
            "podCIDR": "10.10.1.0/24", "clusterDNS": ["10.96.0.10"], "leaseDurationSeconds": 40,
            "renewIntervalMs": 10000, "tidewayBinary": "/b/tideway", "stateDir": "/s",
        }))
        .unwrap();
        c.whoami_images.push("example/echo".into());
        c
    }

    #[test]
    fn whoami_runs_one_server_per_port_and_tideway_its_args_expanded() {
        let w = container(json!({"name": "c", "image": "traefik/whoami:v1.10",
            "ports": [{"containerPort": 80}, {"containerPort": 8080}, {"containerPort": 80, "protocol": "UDP"}]}));
        let Launch::Run(procs) = launch(&cfg(), "web", &w, &[]) else { panic!() };
        assert_eq!(procs.len(), 2);
        assert_eq!(procs[1].join(" "), "/b/tideway whoami --name web --listen 0.0.0.0:8080");
        let bare = container(json!({"name": "c", "image": "example/echo"}));
        assert_eq!(
            launch(&cfg(), "e", &bare, &[]),
            Launch::Run(vec![vec![
                "/b/tideway".into(),
                "whoami".into(),
                "--name".into(),
                "e".into(),
                "--listen".into(),
                "0.0.0.0:80".into()
            ]])
        );
        let env = [("NODE_NAME".to_string(), "w1".to_string())];
        let t = container(json!({"name": "agent", "image": "ghcr.io/tideway-net/tideway:0.1.0",
            "args": ["agent", "--node=$(NODE_NAME)"]}));
        assert_eq!(
            launch(&cfg(), "a", &t, &env),
            Launch::Run(vec![vec!["/b/tideway".into(), "agent".into(), "--node=w1".into()]])
        );
        let cmd = container(json!({"name": "dns", "image": "ghcr.io/tideway-net/tideway",
            "command": ["/usr/local/bin/tideway", "dns"], "args": ["--listen=0.0.0.0:53"]}));
        let Launch::Run(p) = launch(&cfg(), "d", &cmd, &env) else { panic!() };
        assert_eq!(p[0].join(" "), "/b/tideway dns --listen=0.0.0.0:53");
        let sh = container(
            json!({"name": "x", "image": "ghcr.io/tideway-net/tideway", "command": ["sh", "-c", "true"]}),
        );
        assert!(
            matches!(launch(&cfg(), "x", &sh, &env), Launch::Refused { reason, .. } if reason == "CreateContainerError")
        );
        let other = container(json!({"name": "x", "image": "quay.io/frrouting/frr:9.1.0"}));
        assert!(
            matches!(launch(&cfg(), "x", &other, &env), Launch::Refused { reason, .. } if reason == "ErrImagePull")
        );
    }
}
