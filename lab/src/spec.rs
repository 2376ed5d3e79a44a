//! The lab file: multi-document Kubernetes YAML (Nodes, Pods, Services, Namespaces,
//! ProxyConfigs, LoadBalancerPools, the BGP objects) plus lab-only hosts
//! (`lab.tideway.io/v1alpha1 LabHost`: a name and an address on the node network, like the
//! seeds' `mypc`, or behind a router) and routers (`LabRouter`: an upstream BGP router on the
//! node network with an outside network behind it).

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
    /// Its address: on the node network, or on the outside network of `router`.
    pub ip: Ipv4Addr,
    /// The router it sits behind (none: on the node network).
    pub router: Option<String>,
}

#[derive(Deserialize)]
struct LabHostObject {
    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: LabHostSpec,
}

#[derive(Deserialize)]
struct LabHostSpec {
    ip: Ipv4Addr,
    #[serde(default)]
    router: Option<String>,
}

/// A router upstream of the nodes (`lab.tideway.io/v1alpha1 LabRouter`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabRouter {
    /// Name (`lab exec NAME`).
    pub name: String,
    /// Its address on the node network: the nodes' BGPPeer `peerAddress`.
    pub ip: Ipv4Addr,
    /// Its ASN: the nodes' BGPPeer `peerASN`.
    pub asn: u32,
    /// Its address on the outside network, and that network's prefix length.
    pub outside: (Ipv4Addr, u8),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LabRouterSpec {
    ip: Ipv4Addr,
    asn: u32,
    /// The router's address on its outside network, with the prefix length (`192.168.50.1/24`).
    outside: String,
}

fn lab_router(v: Value) -> Result<LabRouter, Problem> {
    let name = name_of(&v);
    let spec: LabRouterSpec = decode("LabRouter", v.get("spec").cloned().unwrap_or(Value::Null))?;
    let bad = |message: String| Problem::Object { kind: "LabRouter".into(), name: name.clone(), message };
    let (ip, len) = spec.outside.split_once('/').ok_or_else(|| bad("spec.outside: ADDRESS/LENGTH".into()))?;
    let ip: Ipv4Addr = ip.parse().map_err(|e| bad(format!("spec.outside: {e}")))?;
    let len: u8 = len
        .parse()
        .ok()
        .filter(|l| (8..=30).contains(l))
        .ok_or_else(|| bad("spec.outside: a prefix length of 8 to 30".into()))?;
    Ok(LabRouter { name: name.clone(), ip: spec.ip, asn: spec.asn, outside: (ip, len) })
}

/// The BGP kinds a lab file may hold (Tideway's; MetalLB's are read by `tideway migrate`).
const BGP_KINDS: [&str; 4] = ["BGPPeer", "BGPAdvertisement", "BFDProfile", "Community"];

/// Decodes a BGP object as its kind, so that a typo is the lab file's error.
fn check_bgp(kind: &str, v: &Value) -> Result<(), Problem> {
    use tideway_api::crd::{BFDProfile, BGPAdvertisement, BGPPeer, Community};
    let v = v.clone();
    match kind {
        "BGPPeer" => decode::<BGPPeer>(kind, v).map(drop),
        "BGPAdvertisement" => decode::<BGPAdvertisement>(kind, v).map(drop),
        "BFDProfile" => decode::<BFDProfile>(kind, v).map(drop),
        _ => decode::<Community>(kind, v).map(drop),
    }
}

/// How a file changes the running lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// The lab becomes exactly the file (`lab replace -f`).
    #[default]
    Replace,
    /// The file's objects are added, or replace those of the same kind and name
    /// (`lab apply -f`, as `kubectl apply`).
    Apply,
    /// The objects the file names are removed (`lab delete -f`, as `kubectl delete -f`).
    Delete,
}

/// Puts each of `new` in place of the item of `list` with its key, or at the end.
fn upsert<T>(list: &mut Vec<T>, new: Vec<T>, key: impl Fn(&T) -> String) {
    for item in new {
        match list.iter().position(|o| key(o) == key(&item)) {
            Some(i) => list[i] = item,
            None => list.push(item),
        }
    }
}

/// Removes from `list` every item whose key one of `gone` has.
fn remove<T>(list: &mut Vec<T>, gone: &[T], key: impl Fn(&T) -> String) {
    list.retain(|o| !gone.iter().any(|g| key(g) == key(o)));
}

fn node_key(n: &Node) -> String {
    n.metadata.name.clone().unwrap_or_default()
}

fn ns_key(n: &Namespace) -> String {
    n.metadata.name.clone().unwrap_or_default()
}

fn pod_key(p: &Pod) -> String {
    name_of_meta(&p.metadata)
}

fn service_key(s: &Service) -> String {
    name_of_meta(&s.metadata)
}

fn config_key(c: &ProxyConfig) -> String {
    c.metadata.name.clone().unwrap_or_default()
}

fn pool_key(p: &LoadBalancerPool) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn host_key(h: &LabHost) -> String {
    h.name.clone()
}

fn router_key(r: &LabRouter) -> String {
    r.name.clone()
}

fn bgp_key(v: &Value) -> String {
    format!("{}/{}", v["kind"].as_str().unwrap_or(""), name_of(v))
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
    /// Routers upstream of the nodes.
    pub routers: Vec<LabRouter>,
    /// BGP objects (`BGPPeer`, `BGPAdvertisement`, `BFDProfile`, `Community`), as written.
    pub bgp: Vec<Value>,
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
    /// A host behind a router the lab does not have, or off that router's outside network.
    #[error("LabHost {host}: {message}")]
    Behind {
        /// The host.
        host: String,
        /// What is wrong.
        message: String,
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
        let spec = LabSpec::parse_objects(file, text)?;
        spec.check().map_err(|problem| SpecError::Lab { file: file.into(), problem })?;
        Ok(spec)
    }

    /// Parses the objects of `text` without asking them to make a whole lab (for `lab apply`
    /// and `lab delete`, whose result is checked instead).
    pub fn parse_objects(file: &str, text: &str) -> Result<LabSpec, SpecError> {
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
        Ok(spec)
    }

    /// This lab with `change` of `objects` (read from `file`), checked as a whole lab.
    pub fn changed(&self, objects: LabSpec, change: Change, file: &str) -> Result<LabSpec, SpecError> {
        let mut out = self.clone();
        match change {
            Change::Replace => out = objects,
            Change::Apply => {
                upsert(&mut out.nodes, objects.nodes, node_key);
                upsert(&mut out.pods, objects.pods, pod_key);
                upsert(&mut out.services, objects.services, service_key);
                upsert(&mut out.namespaces, objects.namespaces, ns_key);
                upsert(&mut out.proxy_configs, objects.proxy_configs, config_key);
                upsert(&mut out.pools, objects.pools, pool_key);
                upsert(&mut out.hosts, objects.hosts, host_key);
                upsert(&mut out.routers, objects.routers, router_key);
                upsert(&mut out.bgp, objects.bgp, bgp_key);
            }
            Change::Delete => {
                remove(&mut out.nodes, &objects.nodes, node_key);
                remove(&mut out.pods, &objects.pods, pod_key);
                remove(&mut out.services, &objects.services, service_key);
                remove(&mut out.namespaces, &objects.namespaces, ns_key);
                remove(&mut out.proxy_configs, &objects.proxy_configs, config_key);
                remove(&mut out.pools, &objects.pools, pool_key);
                remove(&mut out.hosts, &objects.hosts, host_key);
                remove(&mut out.routers, &objects.routers, router_key);
                remove(&mut out.bgp, &objects.bgp, bgp_key);
            }
        }
        out.check().map_err(|problem| SpecError::Lab { file: file.into(), problem })?;
        Ok(out)
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
                self.hosts.push(LabHost { name, ip: h.spec.ip, router: h.spec.router });
            }
            ("lab.tideway.io/v1alpha1", "LabRouter") => self.routers.push(lab_router(v)?),
            ("tideway.io/v1alpha1", k) if BGP_KINDS.contains(&k) => {
                check_bgp(k, &v)?;
                self.bgp.push(v);
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
                .chain(self.hosts.iter().map(|h| ("LabHost", String::new(), h.name.clone())))
                .chain(self.routers.iter().map(|r| ("LabRouter", String::new(), r.name.clone())))
                .chain(self.bgp.iter().map(|v| (bgp_kind(v), String::new(), name_of(v))));
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
        for h in &self.hosts {
            self.check_behind(h)?;
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

impl LabSpec {
    /// The router host `h` sits behind, if any.
    pub fn router_of(&self, h: &LabHost) -> Option<&LabRouter> {
        self.routers.iter().find(|r| Some(&r.name) == h.router.as_ref())
    }

    fn check_behind(&self, h: &LabHost) -> Result<(), Problem> {
        let Some(name) = &h.router else { return Ok(()) };
        let bad = |message: String| Problem::Behind { host: h.name.clone(), message };
        let r = self
            .router_of(h)
            .ok_or_else(|| bad(format!("spec.router {name:?} is not a LabRouter of the lab")))?;
        if !r.is_outside(h.ip) || h.ip == r.outside.0 {
            let (net, len) = r.outside_net();
            return Err(bad(format!(
                "{} is not a free address of router {name}'s outside network {net}/{len}",
                h.ip
            )));
        }
        Ok(())
    }
}

/// The kind of a BGP object, as the uniqueness check names it.
fn bgp_kind(v: &Value) -> &'static str {
    let kind = v["kind"].as_str().unwrap_or("");
    BGP_KINDS.into_iter().find(|k| *k == kind).unwrap_or("BGP object")
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
        assert_eq!(
            spec.hosts[0],
            LabHost { name: "mypc".into(), ip: Ipv4Addr::new(172, 18, 0, 100), router: None }
        );
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

    const ROUTER: &str = "---\napiVersion: lab.tideway.io/v1alpha1\nkind: LabRouter\nmetadata: {name: tor}\nspec: {ip: 172.18.0.254, asn: 64513, outside: 192.168.50.1/24}\n---\napiVersion: lab.tideway.io/v1alpha1\nkind: LabHost\nmetadata: {name: far}\nspec: {ip: 192.168.50.10, router: tor}\n---\napiVersion: tideway.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: tor}\nspec: {myASN: 64512, peerASN: 64513, peerAddress: 172.18.0.254}\n";

    #[test]
    fn reads_routers_hosts_behind_them_and_bgp_objects() {
        let spec = LabSpec::parse("lab.yaml", &format!("{LAB}{ROUTER}")).expect("valid");
        let tor = &spec.routers[0];
        assert_eq!((tor.name.as_str(), tor.asn, tor.outside.1), ("tor", 64513, 24));
        assert_eq!(spec.router_of(&spec.hosts[1]), Some(tor));
        assert_eq!(spec.bgp.len(), 1);
        let example =
            LabSpec::parse("bgp.yaml", include_str!("../../examples/bgp.yaml")).expect("the example");
        assert_eq!((example.routers.len(), example.bgp.len(), example.hosts.len()), (1, 3, 2));
    }

    #[test]
    fn rejects_hosts_behind_unknown_routers_and_mistyped_bgp_objects() {
        let e =
            LabSpec::parse("lab.yaml", &format!("{LAB}{}", ROUTER.replace("router: tor", "router: spine")));
        assert!(e.unwrap_err().to_string().contains("spec.router \"spine\" is not a LabRouter"));
        let e =
            LabSpec::parse("lab.yaml", &format!("{LAB}{}", ROUTER.replace("192.168.50.10", "192.168.51.10")));
        assert!(
            e.unwrap_err()
                .to_string()
                .contains("is not a free address of router tor's outside network 192.168.50.0/24")
        );
        let e =
            LabSpec::parse("lab.yaml", &format!("{LAB}{}", ROUTER.replace("myASN: 64512", "myASN: many")))
                .unwrap_err();
        assert!(e.to_string().contains("BGPPeer tor"), "{e}");
        let e = LabSpec::parse("lab.yaml", &format!("{LAB}{}", ROUTER.replace("/24}", "}"))).unwrap_err();
        assert!(e.to_string().contains("spec.outside"), "{e}");
        let twice = format!("{LAB}{ROUTER}{}", &ROUTER[ROUTER.rfind("---").unwrap()..]);
        assert!(
            LabSpec::parse("lab.yaml", &twice)
                .unwrap_err()
                .to_string()
                .contains("BGPPeer /tor is declared twice")
        );
    }

    const SVC: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n";

    fn names(s: &LabSpec) -> (Vec<String>, Vec<String>, Vec<String>) {
        (
            s.nodes.iter().map(node_key).collect(),
            s.pods.iter().map(pod_key).collect(),
            s.services.iter().map(service_key).collect(),
        )
    }

    #[test]
    fn apply_adds_and_updates_delete_removes_replace_replaces() {
        let lab = LabSpec::parse("lab.yaml", LAB).expect("valid");
        let svc = LabSpec::parse_objects("svc.yaml", SVC).expect("a Service alone parses as objects");
        assert!(LabSpec::parse("svc.yaml", SVC).is_err(), "but is no lab");
        let added = lab.changed(svc.clone(), Change::Apply, "svc.yaml").expect("applied");
        assert_eq!(
            names(&added),
            (vec!["n1".into()], vec!["default/web".into()], vec!["default/web".into()])
        );
        assert_eq!(added.hosts.len(), 1, "the rest of the lab stays");
        // Applied again with a change: updated in place, not added twice.
        let changed =
            LabSpec::parse_objects("svc.yaml", &SVC.replace("port: 80", "port: 8080")).expect("objects");
        let updated = added.changed(changed, Change::Apply, "svc.yaml").expect("applied");
        assert_eq!(updated.services.len(), 1);
        let port = updated.services[0].spec.as_ref().and_then(|s| s.ports.as_ref()).map(|p| p[0].port);
        assert_eq!(port, Some(8080));
        let deleted = updated.changed(svc.clone(), Change::Delete, "svc.yaml").expect("deleted");
        assert_eq!(names(&deleted), names(&lab));
        let e = lab.changed(svc, Change::Replace, "svc.yaml").unwrap_err();
        assert!(e.to_string().contains("at least one Node"), "replace makes the lab the file: {e}");
        // Deleting the node its pod runs on leaves no lab to run: refused, naming the pod.
        let node = LabSpec::parse_objects("n.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n")
            .expect("objects");
        let e = lab.changed(node, Change::Delete, "n.yaml").unwrap_err().to_string();
        assert!(e.contains("n.yaml"), "{e}");
    }
}
