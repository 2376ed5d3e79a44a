//! The cluster the churn runs on, as the API server's objects, and the changes made to it: a
//! mix of endpoints turning ready or not (half), pods replaced by new ones at new addresses
//! (four tenths), and Services added and removed with their slices (a tenth). Each change that
//! makes a DNS name appear names it, for the prober to ask.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// Endpoints per Service.
pub(crate) const ENDPOINTS: usize = 10;
/// The node the agent programs.
pub(crate) const NODE: &str = "node-a";
/// The namespace of the Services the churn adds.
const ADDED_NS: &str = "churn";
/// Added Services are removed only past this many.
const KEPT_ADDED: usize = 50;

/// What one change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Ready,
    Replaced,
    Added,
    Removed,
}

/// One change: objects written or deleted, and the name it makes appear in DNS.
pub(crate) struct Change {
    pub kind: Kind,
    pub upserts: Vec<Value>,
    /// The objects deleted (kind, apiVersion and names).
    pub deletes: Vec<Value>,
    pub appears: Option<String>,
}

/// One endpoint: the number of its pod (its address) and whether it is ready.
#[derive(Debug, Clone, Copy)]
struct Endpoint {
    pod: u32,
    ready: bool,
}

/// The cluster's Services and endpoints as the churn left them.
pub(crate) struct Cluster {
    endpoints: Vec<[Endpoint; ENDPOINTS]>,
    next_pod: u32,
    added: VecDeque<u32>,
    next_added: u32,
    rng: u64,
}

fn service_name(i: usize) -> (String, String) {
    (format!("ns-{}", i / 100), format!("svc-{}", i % 100))
}

/// The i-th address of a /14 from `base`: `base.x.y.z`.
fn address(first: u8, i: u32) -> String {
    format!("10.{}.{}.{}", u32::from(first) + i / 62_500, i / 250 % 250, i % 250 + 1)
}

/// A pod's address as its DNS name's first label.
fn dashed(pod: u32) -> String {
    address(128, pod).replace('.', "-")
}

fn service(ns: &str, name: &str, ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterIP": ip, "clusterIPs": [ip],
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]}})
}

fn slice(ns: &str, name: &str, endpoints: &[Endpoint], trigger: Option<&str>) -> Value {
    let endpoints: Vec<Value> = endpoints
        .iter()
        .enumerate()
        .map(|(j, e)| {
            json!({"addresses": [address(128, e.pod)], "nodeName": if j % 2 == 0 { NODE } else { "node-b" },
                "conditions": {"ready": e.ready, "serving": e.ready, "terminating": false}})
        })
        .collect();
    let mut meta = json!({"name": format!("{name}-1"), "namespace": ns,
        "labels": {"kubernetes.io/service-name": name}});
    if let Some(t) = trigger {
        meta["annotations"] = json!({"endpoints.kubernetes.io/last-change-trigger-time": t});
    }
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints})
}

/// `t` as RFC 3339 in UTC with nanoseconds, as the EndpointSlice controller writes the
/// trigger time.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let (days, secs) = ((since.as_secs() / 86_400) as i64, since.as_secs() % 86_400);
    // Days to a civil date (Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        since.subsec_nanos()
    )
}

impl Cluster {
    /// `n` Services of `ENDPOINTS` ready endpoints each.
    pub(crate) fn new(n: usize, seed: u64) -> Cluster {
        let endpoints = (0..n)
            .map(|i| std::array::from_fn(|j| Endpoint { pod: (i * ENDPOINTS + j) as u32, ready: true }))
            .collect();
        let next_pod = (n * ENDPOINTS) as u32;
        Cluster { endpoints, next_pod, added: VecDeque::new(), next_added: 0, rng: seed | 1 }
    }

    fn below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    /// The node, the namespaces, and every Service with its slice, for the server to hold
    /// before anyone reads.
    pub(crate) fn objects(&self) -> Vec<Value> {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.10"}],
                       "conditions": [{"type": "Ready", "status": "True"}]}});
        let mut out = vec![node];
        let namespaces = self.endpoints.len().div_ceil(100);
        for ns in (0..namespaces).map(|i| format!("ns-{i}")).chain([ADDED_NS.to_string()]) {
            out.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        }
        for (i, eps) in self.endpoints.iter().enumerate() {
            let (ns, name) = service_name(i);
            // From 10.96.0.2: a real API server's own `kubernetes` Service holds 10.96.0.1.
            out.push(service(&ns, &name, &address(96, i as u32 + 1)));
            out.push(slice(&ns, &name, eps, None));
        }
        out
    }

    /// The next change, made at `now`.
    pub(crate) fn next(&mut self, now: SystemTime) -> Change {
        let trigger = rfc3339(now);
        let roll = self.below(10);
        if roll == 0 {
            return self.add_or_remove(&trigger);
        }
        let i = self.below(self.endpoints.len());
        let j = self.below(ENDPOINTS);
        let (ns, name) = service_name(i);
        let (kind, appears) = if roll <= 5 {
            let e = &mut self.endpoints[i][j];
            e.ready = !e.ready;
            (Kind::Ready, e.ready.then(|| format!("{}.{name}.{ns}", dashed(e.pod))))
        } else {
            let pod = self.next_pod;
            self.next_pod += 1;
            self.endpoints[i][j] = Endpoint { pod, ready: true };
            (Kind::Replaced, Some(format!("{}.{name}.{ns}", dashed(pod))))
        };
        let upserts = vec![slice(&ns, &name, &self.endpoints[i], Some(&trigger))];
        Change { kind, upserts, deletes: Vec::new(), appears }
    }

    /// A Service added with ready endpoints, or (every other time, once more than
    /// [`KEPT_ADDED`] were added) the oldest added one removed: a Service lives long enough
    /// for its name to be asked.
    fn add_or_remove(&mut self, trigger: &str) -> Change {
        if self.added.len() > KEPT_ADDED && self.below(2) == 0 {
            let k = self.added.pop_front().unwrap_or_default();
            let name = format!("added-{k}");
            let meta = |name: String| json!({"name": name, "namespace": ADDED_NS});
            let deletes = vec![
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta(format!("{name}-1"))}),
                json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(name)}),
            ];
            return Change { kind: Kind::Removed, upserts: Vec::new(), deletes, appears: None };
        }
        let k = self.next_added;
        self.next_added += 1;
        self.added.push_back(k);
        let name = format!("added-{k}");
        let eps: [Endpoint; ENDPOINTS] = std::array::from_fn(|_| {
            self.next_pod += 1;
            Endpoint { pod: self.next_pod - 1, ready: true }
        });
        let upserts =
            vec![service(ADDED_NS, &name, &address(99, k)), slice(ADDED_NS, &name, &eps, Some(trigger))];
        Change {
            kind: Kind::Added,
            upserts,
            deletes: Vec::new(),
            appears: Some(format!("{name}.{ADDED_NS}")),
        }
    }
}
