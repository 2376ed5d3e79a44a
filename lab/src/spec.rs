//! The lab file: multi-document Kubernetes YAML (Nodes, Pods, Services, Namespaces,
//! ProxyConfigs, LoadBalancerPools) plus lab-only hosts (`lab.tideway.io/v1alpha1 LabHost`:
//! a name and an address on the node network, like the seeds' `mypc`).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use serde::Deserialize;
use serde_json::Value;
use tideway_api::crd::{LoadBalancerPool, ProxyConfig};

/// A machine outside the cluster on the node network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabHost {
    /// Name (`lab exec NAME`).
    pub name: String,
    /// Its address on the node network.
    pub ip: Ipv4Addr,
}

#[derive(Deserialize)]
struct LabHostObject {
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: LabHostSpec,
}

#[derive(Deserialize)]
struct LabHostSpec {
    ip: Ipv4Addr,
}

/// What a lab file declares.
#[derive(Debug, Clone, Default)]
pub struct LabSpec {
    /// Nodes, in file order (the first is the control plane: DNS runs there).
    pub nodes: Vec<Node>,
    /// Pods.
    pub pods: Vec<Pod>,
    /// Services.
    pub services: Vec<Service>,
    /// Namespaces declared (every namespace used exists anyway).
    pub namespaces: Vec<Namespace>,
    /// ProxyConfigs.
    pub proxy_configs: Vec<ProxyConfig>,
    /// LoadBalancerPools.
    pub pools: Vec<LoadBalancerPool>,
    /// Hosts outside the cluster.
    pub hosts: Vec<LabHost>,
}

/// A lab file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A document is not YAML or not an object of its kind.
    #[error("{file}: document {document}: {problem}")]
    Document {
        /// The file.
        file: String,
        /// 1-based document number.
        document: usize,
        /// What is wrong.
        problem: Problem,
    },
    /// The file as a whole makes no lab.
    #[error("{file}: {problem}")]
    Lab {
        /// The file.
        file: String,
        /// What is wrong.
        problem: Problem,
    },
}

/// What is wrong with a lab file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Not YAML.
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// Not an object of its kind.
    #[error("{kind} {name}: {message}")]
    Object {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
        /// The decoder's message, with the field.
        message: String,
    },
    /// A kind the lab does not run.
    #[error("{api} {kind} {name} is not something a lab runs")]
    NotRunnable {
        /// Its apiVersion.
        api: String,
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
    },
    /// No Node.
    #[error("a lab needs at least one Node")]
    NoNode,
    /// A name Kubernetes would refuse.
    #[error("{kind} {name:?}: names are lower-case letters, digits and '-'")]
    BadName {
        /// Its kind.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// Two objects of one kind with one name.
    #[error("{kind} {namespace}/{name} is declared twice")]
    Twice {
        /// Their kind.
        kind: &'static str,
        /// Their namespace (empty for cluster-wide kinds).
        namespace: String,
        /// Their name.
        name: String,
    },
    /// A Pod on a node the lab does not have.
    #[error("Pod {pod}: nodeName {node:?} is not a Node of the lab")]
    UnknownNode {
        /// `namespace/name` of the Pod.
        pod: String,
        /// The node it names.
        node: String,
    },
    /// A Pod without a node.
    #[error("Pod {pod}: spec.nodeName is required in a lab")]
    NoNodeName {
        /// `namespace/name` of the Pod.
        pod: String,
    },
}

fn name_of(v: &Value) -> String {
    v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>").to_string()
}

fn decode<T: serde::de::DeserializeOwned>(kind: &str, v: Value) -> Result<T, Problem> {
    let name = name_of(&v);
    serde_json::from_value(v).map_err(|e| Problem::Object { kind: kind.into(), name, message: e.to_string() })
}

impl LabSpec {
    /// Parses `text`; `file` names it in errors. Every document must be understood (a typo in
    /// a kind is an error, not a silently missing object).
    pub fn parse(file: &str, text: &str) -> Result<LabSpec, SpecError> {
        let mut spec = LabSpec::default();
        let docs = text
            .split("\n---")
            .map(|d| d.trim_start_matches("---"))
            .filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')));
        for (i, doc) in docs.enumerate() {
            let err = |problem: Problem| SpecError::Document { file: file.into(), document: i + 1, problem };
            let v: Value = serde_saphyr::from_str(doc).map_err(|e| err(Problem::Yaml(e.to_string())))?;
            spec.add(v).map_err(err)?;
        }
        spec.check().map_err(|problem| SpecError::Lab { file: file.into(), problem })?;
        Ok(spec)
    }

    fn add(&mut self, v: Value) -> Result<(), Problem> {
        let api = v.get("apiVersion").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("").to_string();
        match (api.as_str(), kind.as_str()) {
            ("v1", "Node") => self.nodes.push(decode(&kind, v)?),
            ("v1", "Pod") => self.pods.push(decode(&kind, v)?),
            ("v1", "Service") => self.services.push(decode(&kind, v)?),
            ("v1", "Namespace") => self.namespaces.push(decode(&kind, v)?),
            ("v1", "List") => {
                for item in v.get("items").and_then(Value::as_array).cloned().unwrap_or_default() {
                    self.add(item)?;
                }
            }
            ("tideway.io/v1alpha1", "ProxyConfig") => self.proxy_configs.push(decode(&kind, v)?),
            ("tideway.io/v1alpha1", "LoadBalancerPool") => self.pools.push(decode(&kind, v)?),
            ("lab.tideway.io/v1alpha1", "LabHost") => {
                let h: LabHostObject = decode(&kind, v)?;
                let name = h.metadata.name.unwrap_or_default();
                self.hosts.push(LabHost { name, ip: h.spec.ip });
            }
            _ => return Err(Problem::NotRunnable { name: name_of(&v), api, kind }),
        }
        Ok(())
    }

    /// Names are unique per kind and namespace; pods run on declared nodes; there is a node.
    fn check(&self) -> Result<(), Problem> {
        if self.nodes.is_empty() {
            return Err(Problem::NoNode);
        }
        let mut seen = BTreeSet::new();
        let names =
            self.nodes.iter().map(|n| ("Node", String::new(), n.metadata.name.clone().unwrap_or_default()));
        let names =
            names
                .chain(
                    self.pods.iter().map(|p| {
                        ("Pod", namespace(&p.metadata), p.metadata.name.clone().unwrap_or_default())
                    }),
                )
                .chain(self.services.iter().map(|s| {
                    ("Service", namespace(&s.metadata), s.metadata.name.clone().unwrap_or_default())
                }))
                .chain(self.hosts.iter().map(|h| ("LabHost", String::new(), h.name.clone())));
        for (kind, ns, name) in names {
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                return Err(Problem::BadName { kind, name });
            }
            if !seen.insert((kind, ns.clone(), name.clone())) {
                return Err(Problem::Twice { kind, namespace: ns, name });
            }
        }
        let nodes: BTreeSet<&str> = self.nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
        for p in &self.pods {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            match node {
                Some(n) if nodes.contains(n) => {}
                Some(n) => {
                    return Err(Problem::UnknownNode { pod: name_of_meta(&p.metadata), node: n.to_string() });
                }
                None => return Err(Problem::NoNodeName { pod: name_of_meta(&p.metadata) }),
            }
        }
        Ok(())
    }
}

/// An object's namespace (`default` when unset).
pub fn namespace(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_else(|| "default".into())
}

fn name_of_meta(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!("{}/{}", namespace(meta), meta.name.clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAB: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {app: web}}\nspec:\n  nodeName: n1\n  containers: [{name: c, image: whoami, ports: [{containerPort: 80}]}]\n---\napiVersion: lab.tideway.io/v1alpha1\nkind: LabHost\nmetadata: {name: mypc}\nspec: {ip: 172.18.0.100}\n";

    #[test]
    fn reads_kubernetes_objects_and_lab_hosts() {
        let spec = LabSpec::parse("lab.yaml", LAB).expect("valid");
        assert_eq!((spec.nodes.len(), spec.pods.len(), spec.hosts.len()), (1, 1, 1));
        assert_eq!(spec.hosts[0], LabHost { name: "mypc".into(), ip: Ipv4Addr::new(172, 18, 0, 100) });
    }

    #[test]
    fn rejects_what_it_cannot_run_naming_the_document() {
        let e = LabSpec::parse(
            "lab.yaml",
            &format!("{LAB}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\n"),
        );
        assert_eq!(
            e.unwrap_err().to_string(),
            "lab.yaml: document 4: apps/v1 Deployment d is not something a lab runs"
        );
        let e = LabSpec::parse("lab.yaml", &LAB.replace("nodeName: n1", "nodeName: n9")).unwrap_err();
        assert!(e.to_string().contains("nodeName \"n9\" is not a Node"), "{e}");
        let e = LabSpec::parse(
            "lab.yaml",
            &format!("{LAB}---\napiVersion: v1\nkind: Node\nmetadata: {{name: n1}}\n"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("Node /n1 is declared twice"), "{e}");
        let e = LabSpec::parse(
            "lab.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("at least one Node"), "{e}");
        assert!(LabSpec::parse("lab.yaml", "a: [").unwrap_err().to_string().contains("invalid YAML"));
    }
}
