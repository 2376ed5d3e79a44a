//! Each Service's endpoint rows: the addresses it publishes, the host label of each, in
//! label order. Working them out only reads the cluster view, so the index builder has them
//! prepared on a second thread while it writes the previous Services into the index.

use std::cmp::Ordering;
use std::net::IpAddr;
use std::sync::mpsc;

use super::names::{DashedIp, dashed_v4, is_host_label};
use rustc_hash::FxHashMap as HashMap;

use crate::view::{AddressFacts, ClusterView, PodFacts, Ports, Publish, ServiceFacts, SliceFacts};

/// One published address: under its endpoint's host name, or under its own address dashed
/// (`host: None`; that label is not stored, it is written again when asked for).
#[derive(Debug, Clone, Copy)]
pub(super) struct Row<'s> {
    /// The label's first 16 bytes in lower case, big-endian, zero-padded: labels sort by
    /// integer comparison (an IPv4 address's dashed label, at most 15 bytes, exactly), by
    /// their bytes only when prefixes tie.
    prefix: u128,
    pub(super) host: Option<&'s str>,
    pub(super) ip: IpAddr,
    /// The ports of the endpoint's slice.
    pub(super) ports: Ports<'s>,
}

impl Row<'_> {
    /// The label in lower case (needed only when two prefixes tie).
    fn label(&self) -> Vec<u8> {
        match self.host {
            Some(h) => h.as_bytes().to_ascii_lowercase(),
            None => DashedIp::new(self.ip).as_bytes().to_vec(),
        }
    }

    /// Label order, then address.
    fn order(&self, other: &Row<'_>) -> Ordering {
        self.prefix
            .cmp(&other.prefix)
            .then_with(|| self.label().cmp(&other.label()))
            .then(self.ip.cmp(&other.ip))
    }
}

/// `label`'s first 16 bytes in lower case, big-endian, zero-padded: compares as they do.
fn prefix(label: &[u8]) -> u128 {
    let mut buf = [0u8; 16];
    for (b, l) in buf.iter_mut().zip(label) {
        *b = l.to_ascii_lowercase();
    }
    u128::from_be_bytes(buf)
}

/// What working out rows needs besides the Service: the pods that can name an endpoint.
pub(super) struct Rows<'s> {
    /// Pods with a hostname under a subdomain, by namespace and name: gathered once for a
    /// full build; `None` for a few Services' rows, which look each pod up in `view`.
    pods: Option<HashMap<(&'s str, &'s str), &'s PodFacts>>,
    view: &'s ClusterView,
    /// Wire length of `svc.<zone>.`, to leave out names longer than 255 bytes.
    suffix_len: usize,
    /// Name endpoints without a hostname after their pod (`endpoint_pod_names`).
    pod_names: bool,
}

impl<'s> Rows<'s> {
    pub(super) fn new(view: &'s ClusterView, suffix_len: usize, pod_names: bool) -> Self {
        let pods = view
            .namespaces()
            .flat_map(|(ns, n)| n.pods.iter().map(move |p| (ns, p)))
            .filter(|(_, p)| p.hostname.is_some() && p.subdomain.is_some())
            .map(|(ns, p)| ((ns, &*p.name), p))
            .collect();
        Rows { pods: Some(pods), view, suffix_len, pod_names }
    }

    /// Rows for a few Services: each pod looked up in `view` when an endpoint names it.
    pub(super) fn looking_up(view: &'s ClusterView, suffix_len: usize, pod_names: bool) -> Self {
        Rows { pods: None, view, suffix_len, pod_names }
    }

    /// The pod `name` in `ns`, when it has a hostname under a subdomain.
    fn pod(&self, ns: &str, name: &'s str) -> Option<&'s PodFacts> {
        match &self.pods {
            Some(pods) => pods.get(&(ns, name)).copied(),
            None => self
                .view
                .namespaces
                .get(ns)?
                .pods
                .get(name)
                .filter(|p| p.hostname.is_some() && p.subdomain.is_some()),
        }
    }

    /// Appends the rows of Service `name` in `ns`: its ready endpoints' addresses (all of them
    /// with `publishNotReadyAddresses`; the controller marks them ready then, and the flag is
    /// honoured here too so hand-written slices behave the same), in label order, then
    /// address; of the same address under the same label, the first slice's.
    pub(super) fn service(
        &self,
        (ns, name): (&str, &str),
        svc: &ServiceFacts,
        slices: &[&'s SliceFacts],
        out: &mut Vec<Row<'s>>,
    ) {
        let svc = svc.read();
        if matches!(svc.publish, Publish::ExternalName(_)) {
            return;
        }
        let under = name.len() + 1 + ns.len() + 1 + self.suffix_len;
        let start = out.len();
        for slice in slices {
            let (ports, addresses) = slice.ports_and_addresses();
            for address in addresses.filter(|a| a.ready || svc.publish_not_ready) {
                let host = self.endpoint_host(&address, ns, name);
                let ip = address.ip;
                let (key, len) = match host {
                    Some(h) => (prefix(h.as_bytes()), h.len()),
                    None => match ip {
                        // Its label is whole in the prefix, already in lower case.
                        IpAddr::V4(v4) => {
                            let (label, len) = dashed_v4(v4);
                            (u128::from_be_bytes(label), len)
                        }
                        IpAddr::V6(_) => {
                            let dashed = DashedIp::new(ip);
                            // An IPv6 address can dash to a label starting with `-` (`::1`).
                            if !is_host_label(dashed.as_bytes()) {
                                continue;
                            }
                            (prefix(dashed.as_bytes()), dashed.as_bytes().len())
                        }
                    },
                };
                if len + 1 + under <= 255 {
                    out.push(Row { prefix: key, host, ip, ports });
                }
            }
        }
        let rows = &mut out[start..];
        rows.sort_by(Row::order);
        let kept = dedup(rows);
        out.truncate(start + kept);
    }

    /// The endpoint's host label: its `hostname`, else the hostname of the pod it points to
    /// when that pod's `subdomain` is this Service (how StatefulSet pods get stable names),
    /// else, with `endpoint_pod_names`, the name of the pod it targets (CoreDNS's order; a pod
    /// name that is no single label, one with a dot, keeps the dashed address).
    fn endpoint_host(&self, address: &AddressFacts<'s>, ns: &str, svc: &str) -> Option<&'s str> {
        if let Some(h) = address.hostname.filter(|h| is_host_label(h)) {
            return Some(h);
        }
        let pod_name = address.pod?;
        let from_pod = self
            .pod(ns, pod_name)
            .filter(|pod| pod.subdomain.as_deref() == Some(svc))
            .and_then(|pod| pod.hostname.as_deref())
            .filter(|h| is_host_label(h));
        from_pod.or_else(|| (self.pod_names && is_host_label(pod_name)).then_some(pod_name))
    }
}

/// Moves the first of each run of equal rows to the front; how many there are.
fn dedup(rows: &mut [Row<'_>]) -> usize {
    let mut kept = 0;
    for i in 0..rows.len() {
        if kept == 0 || rows[kept - 1].order(&rows[i]).is_ne() {
            rows[kept] = rows[i];
            kept += 1;
        }
    }
    kept
}

/// One Service as the index writes it: namespace, name, facts.
pub(super) type ServiceOf<'s> = (&'s str, &'s str, &'s ServiceFacts);

/// Services prepared together: each with its number of rows, and the rows.
#[derive(Default)]
struct Batch<'s> {
    services: Vec<(ServiceOf<'s>, usize)>,
    rows: Vec<Row<'s>>,
}

/// Services per batch: enough to make handing over cheap, few enough to stay in cache.
const BATCH: usize = 256;

/// Calls `write` for every Service with its rows, in namespace, then name order; the rows
/// are worked out on a second thread, a batch or two ahead.
pub(super) fn for_each_service<'s>(
    view: &'s ClusterView,
    rows: &Rows<'s>,
    mut write: impl FnMut(ServiceOf<'s>, &[Row<'s>]),
) {
    std::thread::scope(|scope| {
        let (full_tx, full_rx) = mpsc::sync_channel::<Batch<'s>>(2);
        let (empty_tx, empty_rx) = mpsc::channel::<Batch<'s>>();
        scope.spawn(move || {
            let mut batch = Batch::default();
            let mut open = true;
            for (ns, namespace) in view.namespaces() {
                namespace.for_each_service(|name, svc, slices| {
                    if !open {
                        return;
                    }
                    let before = batch.rows.len();
                    rows.service((ns, name), svc, slices, &mut batch.rows);
                    batch.services.push(((ns, name, svc), batch.rows.len() - before));
                    if batch.services.len() == BATCH {
                        let next = empty_rx.try_recv().unwrap_or_default();
                        open = full_tx.send(std::mem::replace(&mut batch, next)).is_ok();
                    }
                });
            }
            let _ = full_tx.send(batch);
        });
        for mut batch in full_rx {
            let mut at = 0;
            for &(svc, n) in &batch.services {
                write(svc, &batch.rows[at..at + n]);
                at += n;
            }
            batch.services.clear();
            batch.rows.clear();
            let _ = empty_tx.send(batch);
        }
    });
}

#[cfg(test)]
mod tests {
    use tideway_core::net::Protocol::Tcp;
    use tideway_core::testing::{mk_service, mk_slice};

    use super::*;

    #[test]
    fn rows_are_ready_legal_addresses_in_label_order_first_slice_wins() {
        let mut state = ClusterView::new();
        state.apply_service(mk_service("ns", "web").headless().build());
        let long = "a-very-long-hostname-";
        state.apply_endpoint_slice(
            mk_slice("ns", "web")
                .name("web-a")
                .port("http", Tcp, 80)
                .ready("10.0.0.10", "n")
                .ready("10.0.0.9", "n")
                .ready("10.0.0.7", "n")
                .hostname(&format!("{long}Y"))
                .ready("10.0.0.8", "n")
                .hostname(&format!("{long}x"))
                .endpoint("10.0.0.1", "n", false, false, false)
                .build(),
        );
        state.apply_endpoint_slice(
            mk_slice("ns", "web")
                .name("web-b")
                .port("http", Tcp, 8080)
                .ready("10.0.0.9", "n")
                .ready("::1", "n")
                .ready("fd00::2", "n")
                .build(),
        );
        let rows_of = Rows::new(&state, 20, false);
        let mut rows = Vec::new();
        let (_, ns) = state.namespaces().next().unwrap();
        ns.for_each_service(|name, svc, slices| rows_of.service(("ns", name), svc, slices, &mut rows));
        let got: Vec<(String, String, u16)> = rows
            .iter()
            .map(|r| {
                (String::from_utf8(r.label()).unwrap(), r.ip.to_string(), r.ports.iter().next().unwrap().2)
            })
            .collect();
        let want = [
            ("10-0-0-10", "10.0.0.10", 80),
            ("10-0-0-9", "10.0.0.9", 80), // in both slices: the first slice's ports
            (&format!("{long}x"), "10.0.0.8", 80),
            (&format!("{long}y"), "10.0.0.7", 80), // lower case; past the 16-byte prefix
            ("fd00--2", "fd00::2", 8080),          // `::1` dashes to `--1`: no label
        ];
        let want: Vec<(String, String, u16)> =
            want.iter().map(|(l, ip, p)| (l.to_string(), ip.to_string(), *p)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn prefixes_compare_as_lower_case_labels_do() {
        let labels = [
            "10-0-0-10",
            "10-0-0-9",
            "web-0",
            "Web-1",
            "a",
            "a-very-long-hostname-x",
            "a-very-long-hostname-y",
        ];
        for a in labels {
            for b in labels {
                let bytes = (a.to_ascii_lowercase(), b.to_ascii_lowercase());
                let (pa, pb) = (prefix(a.as_bytes()), prefix(b.as_bytes()));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), bytes.0.cmp(&bytes.1), "{a} vs {b}");
                } else {
                    let long = a.len() >= 16 && b.len() >= 16 && bytes.0[..16] == bytes.1[..16];
                    assert!(bytes.0 == bytes.1 || long, "{a} vs {b}: a tie means the same first 16 bytes");
                }
            }
        }
    }
}
