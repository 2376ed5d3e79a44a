//! A large cluster written into a control plane's etcd directly, as its API server stores it:
//! the set-up of the first view at 100,000 Services, written once and kept as a snapshot.
//!
//! Through the API, writing 100,000 Services takes hours: since Kubernetes 1.34 each ClusterIP
//! allocation counts every address allocated so far (`ipallocator.(*Allocator).Used` lists
//! every IPAddress object, twice per Service), so the writing is quadratic. A CPU profile of the
//! API server at 45,000 Services put 88 % of it there, at about 10 Services a second.
//!
//! So the API server writes one sample of each kind (the first Service, its EndpointSlice, and
//! the IPAddress object it allocated), and every other object is its sample with the object's
//! own name, addresses and endpoints, put as JSON under the key the API server uses for it
//! (it decodes JSON from etcd as well as the protobuf it writes). The sample's keys are looked
//! up first, so a change of the server's layout fails here; the objects are then counted back
//! through the API.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use super::support::real_api::{Api, get};

/// Puts per etcd transaction (etcd allows 128).
const BATCH: usize = 100;

/// Writes the rest of `objects` (Services each followed by its slice, after the node and the
/// namespaces that `written` held and the API server wrote) into `api`'s etcd.
pub(crate) async fn write_rest(api: &Api, written: &[Value], rest: &[Value]) {
    let service = &written[written.len() - 2];
    let (ns, name) = names(service);
    let ip = service["spec"]["clusterIP"].as_str().expect("a ClusterIP").to_string();
    let sample = Samples {
        service: stored(get(&api.admin, &format!("/api/v1/namespaces/{ns}/services/{name}")).await),
        slice: stored(
            get(&api.admin, &format!("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices/{name}-1"))
                .await,
        ),
        address: stored(get(&api.admin, &format!("/apis/networking.k8s.io/v1/ipaddresses/{ip}")).await),
    };
    let etcd = Etcd::of(api);
    for key in [service_key(&ns, &name), slice_key(&ns, &format!("{name}-1")), address_key(&ip)] {
        assert!(etcd.has(&key), "the API server stores no {key}: its layout in etcd changed");
    }
    let mut puts = Vec::with_capacity(BATCH);
    for (i, pair) in rest.chunks(2).enumerate() {
        puts.extend(sample.fill(i, &pair[0], &pair[1]));
        if puts.len() >= BATCH {
            etcd.put(&std::mem::take(&mut puts));
        }
    }
    etcd.put(&puts);
}

/// The stored form of each kind, as the API server wrote it.
struct Samples {
    service: Value,
    slice: Value,
    address: Value,
}

impl Samples {
    /// The three keys and values for `service` (the `i`-th written here) and its `slice`.
    fn fill(&self, i: usize, service: &Value, slice: &Value) -> [(String, Value); 3] {
        let uid = |kind: u32| format!("{kind:08x}-0000-4000-8000-{i:012x}");
        let (ns, name) = names(service);
        let ip = service["spec"]["clusterIP"].clone();
        let mut s = self.service.clone();
        s["metadata"]["name"] = json!(name);
        s["metadata"]["namespace"] = json!(ns);
        s["metadata"]["uid"] = json!(uid(1));
        s["spec"]["clusterIP"] = ip.clone();
        s["spec"]["clusterIPs"] = json!([ip]);
        let mut e = self.slice.clone();
        let (_, slice_name) = names(slice);
        e["metadata"]["name"] = json!(slice_name);
        e["metadata"]["namespace"] = json!(ns);
        e["metadata"]["uid"] = json!(uid(2));
        e["metadata"]["labels"] = slice["metadata"]["labels"].clone();
        e["endpoints"] = slice["endpoints"].clone();
        let mut a = self.address.clone();
        let ip = ip.as_str().unwrap_or_default().to_string();
        a["metadata"]["name"] = json!(ip);
        a["metadata"]["uid"] = json!(uid(3));
        a["spec"]["parentRef"]["namespace"] = json!(ns);
        a["spec"]["parentRef"]["name"] = json!(name);
        [(service_key(&ns, &name), s), (slice_key(&ns, &slice_name), e), (address_key(&ip), a)]
    }
}

fn names(object: &Value) -> (String, String) {
    let meta = &object["metadata"];
    let field = |f: &str| meta[f].as_str().unwrap_or_default().to_string();
    (field("namespace"), field("name"))
}

/// An object as read from the API, as etcd holds it: no resourceVersion (etcd's revision is).
fn stored(object: Option<Value>) -> Value {
    let mut object = object.expect("a sample the API server wrote");
    if let Some(meta) = object["metadata"].as_object_mut() {
        meta.remove("resourceVersion");
    }
    object
}

fn service_key(ns: &str, name: &str) -> String {
    format!("/registry/services/specs/{ns}/{name}")
}

fn slice_key(ns: &str, name: &str) -> String {
    format!("/registry/endpointslices/{ns}/{name}")
}

fn address_key(ip: &str) -> String {
    format!("/registry/ipaddresses/{ip}")
}

/// The control plane's etcd, through its JSON gateway on the namespace's loopback, with the
/// API server's client certificate.
struct Etcd {
    netns: String,
    pki: PathBuf,
}

impl Etcd {
    fn of(api: &Api) -> Etcd {
        Etcd { netns: api.standalone.netns().to_string(), pki: api.standalone.cp.layout().pki() }
    }

    /// Whether `key` is there.
    fn has(&self, key: &str) -> bool {
        let answer = self.call("range", &json!({"key": base64(key.as_bytes()), "count_only": true}));
        answer["count"].as_str().is_some_and(|c| c == "1")
    }

    /// Puts every key and value in one transaction.
    fn put(&self, puts: &[(String, Value)]) {
        if puts.is_empty() {
            return;
        }
        let ops: Vec<Value> = puts
            .iter()
            .map(|(k, v)| {
                let value = serde_json::to_vec(v).expect("JSON");
                json!({"requestPut": {"key": base64(k.as_bytes()), "value": base64(&value)}})
            })
            .collect();
        let answer = self.call("txn", &json!({"success": ops}));
        assert_eq!(answer["succeeded"], json!(true), "the transaction: {answer}");
    }

    fn call(&self, verb: &str, body: &Value) -> Value {
        let file = std::env::temp_dir().join(format!("etcd-seed-{}.json", std::process::id()));
        std::fs::write(&file, serde_json::to_vec(body).expect("JSON")).expect("request file");
        let pki = |f: &str| self.pki.join(f).display().to_string();
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", &self.netns, "curl", "-sS", "--fail", "--max-time", "60"])
            .args(["--cacert", &pki("etcd/ca.crt"), "--cert", &pki("apiserver-etcd-client.crt")])
            .args(["--key", &pki("apiserver-etcd-client.key"), "-H", "Content-Type: application/json"])
            .arg("--data-binary")
            .arg(format!("@{}", file.display()))
            .arg(format!("https://127.0.0.1:2379/v3/kv/{verb}"))
            .output()
            .expect("curl");
        let _ = std::fs::remove_file(&file);
        assert!(out.status.success(), "etcd {verb}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("etcd's answer")
    }
}

fn base64(bytes: &[u8]) -> Value {
    serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec())).expect("base64")
}

/// How many objects of `path` (a list URL) the API server holds, from one page of one object
/// and the count of the rest.
pub(crate) async fn count(api: &Api, path: &str) -> u64 {
    for _ in 0..60 {
        let page = get(&api.admin, &format!("{path}?limit=1")).await.expect("a list");
        let shown = page["items"].as_array().map_or(0, |i| i.len() as u64);
        if let Some(rest) = page["metadata"]["remainingItemCount"].as_u64() {
            return shown + rest;
        }
        if page["metadata"]["continue"].as_str().is_none_or(str::is_empty) {
            return shown;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("{path}: no count")
}
