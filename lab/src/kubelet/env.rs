//! A container's environment and its `$(VAR)` references, as kubelet makes them: the Service
//! variables first (the `kubernetes` Service's always, the pod namespace's others unless
//! `enableServiceLinks: false`), then the container's `env` in order, each value expanded
//! against what is defined before it; `command` and `args` are expanded against the whole.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, Service};

/// Why a container's environment cannot be made (kubelet: `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// A `fieldRef` the kubelet does not know.
    #[error("unsupported fieldRef {0:?}")]
    FieldPath(String),
    /// A source of values the lab's kubelet does not resolve.
    #[error("env {0}: the lab's kubelet resolves only value and fieldRef")]
    Unsupported(String),
}

/// What `fieldRef`s read besides the pod object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runtime {
    /// The pod's address.
    pub pod_ip: Option<String>,
    /// The node's address.
    pub host_ip: Option<String>,
}

/// Expands `$(NAME)` in `input` from `vars` as Kubernetes does: `$$` is a literal `$`, an
/// unknown or unclosed reference stays as written.
pub fn expand(input: &str, vars: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let (mut cursor, mut checkpoint) = (0, 0);
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        out.push_str(&vars(name).unwrap_or_else(|| format!("$({name})")));
                        close + 1
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // `$` before anything else is kept with what follows.
                    let c = rest.chars().next().expect("not empty");
                    out.push('$');
                    out.push(c);
                    c.len_utf8()
                }
            };
            cursor += advance + 1;
            checkpoint = cursor;
            continue;
        }
        cursor += 1;
    }
    out.push_str(&input[checkpoint.min(input.len())..]);
    out
}

/// The value of `fieldRef.fieldPath` `path` for `pod`.
pub fn field_ref(pod: &Pod, path: &str, rt: &Runtime) -> Result<String, EnvError> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let quoted = |p: &str, prefix: &str| -> Option<String> {
        p.strip_prefix(prefix)?.strip_suffix("']").map(str::to_string)
    };
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.podIP" | "status.podIPs" => rt.pod_ip.clone().unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => rt.host_ip.clone().unwrap_or_default(),
        "metadata.labels" => format_map(m.labels.as_ref()),
        "metadata.annotations" => format_map(m.annotations.as_ref()),
        p => {
            if let Some(k) = quoted(p, "metadata.labels['") {
                m.labels.as_ref().and_then(|l| l.get(&k).cloned()).unwrap_or_default()
            } else if let Some(k) = quoted(p, "metadata.annotations['") {
                m.annotations.as_ref().and_then(|a| a.get(&k).cloned()).unwrap_or_default()
            } else {
                return Err(EnvError::FieldPath(p.to_string()));
            }
        }
    })
}

/// Labels or annotations as the downward API writes them: `key="value"` lines, sorted.
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.map(|m| m.iter().map(|(k, v)| format!("{k}={v:?}\n")).collect()).unwrap_or_default()
}

/// The Docker-links variables of `services` (kubelet's `FromServices`): for each with a
/// ClusterIP, `NAME_SERVICE_HOST`, `NAME_SERVICE_PORT`, `NAME_SERVICE_PORT_PORTNAME`,
/// `NAME_PORT` and the `NAME_PORT_P_PROTO[_PROTO|_PORT|_ADDR]` set.
pub fn service_env(services: &[Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in services {
        let Some(spec) = &s.spec else { continue };
        let ip = match spec.cluster_ip.as_deref() {
            Some(ip) if !ip.is_empty() && ip != "None" => ip,
            _ => continue,
        };
        let ports = spec.ports.as_deref().unwrap_or_default();
        let Some(first) = ports.first() else { continue };
        let name = s.metadata.name.as_deref().unwrap_or_default().to_uppercase().replace('-', "_");
        out.push((format!("{name}_SERVICE_HOST"), ip.to_string()));
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        for p in ports {
            if let Some(pn) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((
                    format!("{name}_SERVICE_PORT_{}", pn.to_uppercase().replace('-', "_")),
                    p.port.to_string(),
                ));
            }
        }
        let proto =
            |p: &k8s_openapi::api::core::v1::ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
        out.push((format!("{name}_PORT"), format!("{}://{ip}:{}", proto(first).to_lowercase(), first.port)));
        for p in ports {
            let (upper, port) = (proto(p), p.port);
            let prefix = format!("{name}_PORT_{port}_{upper}");
            out.push((prefix.clone(), format!("{}://{ip}:{port}", upper.to_lowercase())));
            out.push((format!("{prefix}_PROTO"), upper.to_lowercase()));
            out.push((format!("{prefix}_PORT"), port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.to_string()));
        }
    }
    out
}

/// The container's environment, in order (a later definition of a name wins, as in kubelet).
pub fn environment(
    pod: &Pod,
    container: &Container,
    services: &[Service],
    rt: &Runtime,
) -> Result<Vec<(String, String)>, EnvError> {
    let mut env: Vec<(String, String)> = service_env(services);
    for e in container.env.as_deref().unwrap_or_default() {
        let value = if let Some(v) = &e.value {
            let defined = env.clone();
            let lookup = move |n: &str| defined.iter().rev().find(|(k, _)| k == n).map(|(_, v)| v.clone());
            expand(v, &lookup)
        } else if let Some(from) = &e.value_from {
            match &from.field_ref {
                Some(f) => field_ref(pod, &f.field_path, rt)?,
                None => return Err(EnvError::Unsupported(e.name.clone())),
            }
        } else {
            String::new()
        };
        env.push((e.name.clone(), value));
    }
    if container.env_from.as_ref().is_some_and(|f| !f.is_empty()) {
        return Err(EnvError::Unsupported("envFrom".into()));
    }
    // Later definitions win; keep each name once, at its last place.
    let mut seen = std::collections::BTreeSet::new();
    let mut out: Vec<(String, String)> =
        env.into_iter().rev().filter(|(k, _)| seen.insert(k.clone())).collect();
    out.reverse();
    Ok(out)
}

/// `command` and `args` of `container` expanded against `env`.
pub fn expand_all(words: &[String], env: &[(String, String)]) -> Vec<String> {
    let map: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let lookup = |n: &str| map.get(n).map(|v| v.to_string());
    words.iter().map(|w| expand(w, &lookup)).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vars(n: &str) -> Option<String> {
        match n {
            "NODE_NAME" => Some("w1".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn references_expand_as_kubernetes_expands_them() {
        let cases = [
            ("--node=$(NODE_NAME)", "--node=w1"),
            ("$(NODE_NAME)$(NODE_NAME)", "w1w1"),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$$(NODE_NAME)", "$(NODE_NAME)"),
            ("$$$(NODE_NAME)", "$w1"),
            ("a$(EMPTY)b", "ab"),
            ("$(NODE_NAME", "$(NODE_NAME"),
            ("100$", "100$"),
            ("$x", "$x"),
            ("$", "$"),
            ("plain", "plain"),
            ("é$(NODE_NAME)é", "éw1é"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &vars), want, "{input}");
        }
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "labels": {"app": "web", "tier": "a"}},
            "spec": {"nodeName": "w1", "serviceAccountName": "sa", "containers": [{
                "name": "c",
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "WHERE", "value": "$(NODE_NAME)/$(POD_IP)/$(KUBERNETES_SERVICE_HOST)"},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "KUBERNETES_SERVICE_HOST", "value": "172.18.0.2"},
                ],
            }]},
        }))
        .unwrap()
    }

    fn kubernetes_service() -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]},
        }))
        .unwrap()
    }

    #[test]
    fn the_environment_has_service_links_field_refs_and_later_values_win() {
        let p = pod();
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        let rt = Runtime { pod_ip: Some("10.10.1.2".into()), host_ip: Some("172.18.0.4".into()) };
        let env = environment(&p, &c, &[kubernetes_service()], &rt).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("443"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT_HTTPS"), Some("443"));
        assert_eq!(get("KUBERNETES_PORT"), Some("tcp://10.96.0.1:443"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_ADDR"), Some("10.96.0.1"));
        assert_eq!(get("NODE_NAME"), Some("w1"));
        assert_eq!(get("WHERE"), Some("w1/10.10.1.2/10.96.0.1"), "expanded against what came before");
        assert_eq!(get("APP"), Some("web"));
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("172.18.0.2"), "the pod's own value wins");
        assert_eq!(env.iter().filter(|(k, _)| k == "KUBERNETES_SERVICE_HOST").count(), 1);
        let args = expand_all(&["--node=$(NODE_NAME)".into(), "$(NOPE)".into()], &env);
        assert_eq!(args, ["--node=w1", "$(NOPE)"]);
        assert_eq!(field_ref(&p, "metadata.labels", &rt).unwrap(), "app=\"web\"\ntier=\"a\"\n");
        assert_eq!(field_ref(&p, "spec.serviceAccountName", &rt).unwrap(), "sa");
        assert!(field_ref(&p, "status.phase", &rt).is_err());
    }
}
