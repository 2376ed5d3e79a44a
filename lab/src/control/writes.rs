//! What components wrote back (the exchange directory's `writes/`), merged into the API's view:
//! Service `status.loadBalancer`, L2Announcements, NodeProxyStates, ProxyConfig and pool status.
//! A write about an object the lab no longer has is ignored. A ProxyConfig spec changed over
//! the operator's REST API is not a status: the control plane adopts it into the lab's own
//! objects ([`Writes::adopt_config_specs`]), as the API server would store a PATCH.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tideway_api::crd::{ProxyConfig, ProxyConfigSpec};

/// The latest write per object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Writes {
    /// `ns_name` -> ingress list.
    pub ingress: BTreeMap<String, Value>,
    /// `ns_name` -> L2Announcement object.
    pub announcements: BTreeMap<String, Value>,
    /// node -> NodeProxyState object.
    pub node_states: BTreeMap<String, Value>,
    /// name -> ProxyConfig status.
    pub config_status: BTreeMap<String, Value>,
    /// name -> LoadBalancerPool status.
    pub pool_status: BTreeMap<String, Value>,
    /// name -> a ProxyConfig's new spec (`{"spec": ...}`), changed over REST.
    pub config_specs: BTreeMap<String, Value>,
}

impl Writes {
    /// Reads the files of the writes directory: (file name, contents). Unreadable or unknown
    /// files are skipped (a half-written file is never seen: writers rename into place).
    pub fn from_files<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Writes {
        let mut w = Writes::default();
        for (file, text) in files {
            let Some((kind, key)) = file.strip_suffix(".json").and_then(|f| f.split_once('_')) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(text) else { continue };
            let slot = match kind {
                "ingress" => &mut w.ingress,
                "l2a" => &mut w.announcements,
                "nodeproxystate" => &mut w.node_states,
                "pxcstatus" => &mut w.config_status,
                "lbpstatus" => &mut w.pool_status,
                "pxcspec" => &mut w.config_specs,
                _ => continue,
            };
            slot.insert(key.to_string(), v);
        }
        w
    }

    /// Moves each new ProxyConfig spec into `configs` (the lab's own objects); the names of
    /// the configs changed. A spec that does not read as one, or names a config the lab does
    /// not have, is dropped with a warning.
    pub fn adopt_config_specs(&mut self, configs: &mut [ProxyConfig]) -> Vec<String> {
        let mut changed = Vec::new();
        for (name, body) in std::mem::take(&mut self.config_specs) {
            let spec = match serde_json::from_value::<ProxyConfigSpec>(body["spec"].clone()) {
                Ok(spec) => spec,
                Err(e) => {
                    tracing::warn!(proxyconfig = %name, error = %e, "a ProxyConfig spec write does not read; dropped");
                    continue;
                }
            };
            match configs.iter_mut().find(|c| c.metadata.name.as_deref() == Some(name.as_str())) {
                Some(c) if c.spec == spec => {}
                Some(c) => {
                    c.spec = spec;
                    changed.push(name);
                }
                None => {
                    tracing::warn!(proxyconfig = %name, "a spec write names a ProxyConfig the lab does not have; dropped")
                }
            }
        }
        changed
    }

    /// `objects` (the control plane's view) with the writes merged in.
    pub fn publish(&self, mut objects: Vec<Value>) -> Vec<Value> {
        let key_of = |o: &Value| {
            let ns = o["metadata"]["namespace"].as_str().unwrap_or("default");
            format!("{ns}_{}", o["metadata"]["name"].as_str().unwrap_or(""))
        };
        let name_of = |o: &Value| o["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut services = std::collections::BTreeSet::new();
        let mut nodes = std::collections::BTreeSet::new();
        for o in &mut objects {
            match o["kind"].as_str() {
                Some("Service") => {
                    let key = key_of(o);
                    if let Some(ingress) = self.ingress.get(&key).and_then(|i| i.get("ingress")) {
                        o["status"] = json!({"loadBalancer": {"ingress": ingress}});
                    }
                    services.insert(key);
                }
                Some("Node") => {
                    nodes.insert(name_of(o));
                }
                Some("ProxyConfig") => {
                    if let Some(s) = self.config_status.get(&name_of(o)) {
                        o["status"] = s.clone();
                    }
                }
                Some("LoadBalancerPool") => {
                    if let Some(s) = self.pool_status.get(&name_of(o)) {
                        o["status"] = s.clone();
                    }
                }
                _ => {}
            }
        }
        let known = |kind: &str, v: &Value| -> Value {
            let mut v = v.clone();
            v["kind"] = json!(kind);
            v["apiVersion"] = json!("tideway.io/v1alpha1");
            v
        };
        objects.extend(
            self.announcements
                .iter()
                .filter(|(k, _)| services.contains(*k))
                .map(|(_, v)| known("L2Announcement", v)),
        );
        objects.extend(
            self.node_states
                .iter()
                .filter(|(k, _)| nodes.contains(*k))
                .map(|(_, v)| known("NodeProxyState", v)),
        );
        objects
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_writes_about_objects_that_exist() {
        let files = [
            ("ingress_default_web.json", r#"{"ingress": [{"ip": "172.18.255.200", "ipMode": "VIP"}]}"#),
            (
                "l2a_default_web.json",
                r#"{"metadata": {"name": "web", "namespace": "default"}, "spec": {"serviceName": "web", "node": "n1"}}"#,
            ),
            (
                "l2a_default_gone.json",
                r#"{"metadata": {"name": "gone", "namespace": "default"}, "spec": {"serviceName": "gone"}}"#,
            ),
            (
                "nodeproxystate_n1.json",
                r#"{"metadata": {"name": "n1"}, "spec": {"nodeName": "n1"}, "status": {"ready": true}}"#,
            ),
            (".nodeproxystate_n1.json.tmp", "{partial"),
            ("events.jsonl", "{}"),
        ];
        let w = Writes::from_files(files);
        let objects = vec![
            json!({"kind": "Service", "metadata": {"name": "web", "namespace": "default"}}),
            json!({"kind": "Node", "metadata": {"name": "n1"}}),
        ];
        let out = w.publish(objects);
        assert_eq!(out[0]["status"]["loadBalancer"]["ingress"][0]["ip"], "172.18.255.200");
        let kinds: Vec<&str> = out.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            vec!["Service", "Node", "L2Announcement", "NodeProxyState"],
            "the write about a gone Service is dropped"
        );
        assert_eq!(out[2]["apiVersion"], "tideway.io/v1alpha1");
    }

    #[test]
    fn config_specs_are_adopted_into_the_labs_objects() {
        let files = [
            ("pxcspec_default.json", r#"{"spec": {"mode": "iptables", "clusterCIDRs": ["10.10.0.0/16"]}}"#),
            ("pxcspec_gone.json", r#"{"spec": {"mode": "iptables"}}"#),
            ("pxcspec_bad.json", r#"{"spec": {"mode": 7}}"#),
        ];
        let mut w = Writes::from_files(files);
        let config = |name: &str, mode: &str| -> ProxyConfig {
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"mode": mode}})).unwrap()
        };
        let mut configs = vec![config("default", "nftables"), config("bad", "nftables")];
        assert_eq!(w.adopt_config_specs(&mut configs), vec!["default"]);
        assert_eq!(configs[0].spec.mode.as_deref(), Some("iptables"));
        assert_eq!(configs[0].spec.cluster_cidrs, vec!["10.10.0.0/16"]);
        assert_eq!(
            configs[1].spec.mode.as_deref(),
            Some("nftables"),
            "a spec that does not read changes nothing"
        );
        assert!(w.config_specs.is_empty(), "each write is adopted once");
        let mut again = Writes::from_files([(
            "pxcspec_default.json",
            r#"{"spec": {"mode": "iptables", "clusterCIDRs": ["10.10.0.0/16"]}}"#,
        )]);
        assert!(again.adopt_config_specs(&mut configs).is_empty(), "the same spec again is no change");
    }
}
