//! The facts the DNS server keeps of each object: what its records read, compact. A
//! Service's and an EndpointSlice's facts are each one allocation ([`packed`](super::packed)):
//! a slice of ten IPv4 endpoints without names keeps its addresses in 40 bytes, where the
//! model's endpoints take 720 and more.

use std::net::IpAddr;

use tideway_core::cluster::spec_version;
use tideway_core::model::{EndpointSlice, Pod, Service, ServiceType};

use super::by_name::Named;
use super::packed::{Ips, Ports, Reader, Writer};

/// How a Service is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish<'a> {
    /// Its ClusterIPs.
    ClusterIp,
    /// Its ready endpoints (`clusterIP: None`, or no ClusterIP at all).
    Headless,
    /// A CNAME to `spec.externalName` (`None` when it has none: not published).
    ExternalName(Option<&'a str>),
}

const CLUSTER_IP: u8 = 0;
const HEADLESS: u8 = 1;
const EXTERNAL_NAME: u8 = 2;
const KIND: u8 = 0b11;
const HAS_TARGET: u8 = 1 << 2;
const PUBLISH_NOT_READY: u8 = 1 << 3;

/// What the records of one Service read, packed: its name, flags, generation, spec version,
/// ClusterIPs, external addresses, ports, then the ExternalName target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceFacts(Box<[u8]>);

/// A Service's facts, read.
#[derive(Clone, Copy)]
pub(crate) struct ServiceRead<'a> {
    pub(crate) publish: Publish<'a>,
    /// `publishNotReadyAddresses`.
    pub(crate) publish_not_ready: bool,
    /// `metadata.generation`.
    pub(crate) generation: i64,
    /// The `resourceVersion` at which its generation last changed (0: unknown).
    pub(crate) spec_version: u64,
    /// ClusterIPs (none unless [`Publish::ClusterIp`]).
    pub(crate) cluster_ips: Ips<'a>,
    /// `spec.externalIPs`, then LoadBalancer ingress addresses, each once (the external zone's).
    pub(crate) external: Ips<'a>,
    pub(crate) ports: Ports<'a>,
}

impl ServiceFacts {
    /// The facts of `svc`, whose version before was `old` (the spec version carries over
    /// while the generation stays).
    pub(crate) fn of(svc: &Service, old: Option<&ServiceFacts>) -> Self {
        let old = old.map(|o| o.read()).map(|o| (o.generation, Some(o.spec_version).filter(|v| *v != 0)));
        let (kind, target) = if svc.service_type == ServiceType::ExternalName {
            (EXTERNAL_NAME, svc.external_name.as_deref())
        } else if svc.headless || svc.cluster_ips.is_empty() {
            (HEADLESS, None)
        } else {
            (CLUSTER_IP, None)
        };
        let mut flags = kind;
        if target.is_some() {
            flags |= HAS_TARGET;
        }
        if svc.publish_not_ready_addresses {
            flags |= PUBLISH_NOT_READY;
        }
        let mut w = Writer::default();
        w.str(&svc.name.name);
        w.u8(flags);
        w.u64(svc.generation as u64);
        w.u64(spec_version(old, svc).unwrap_or(0));
        w.ips(if kind == CLUSTER_IP { &svc.cluster_ips } else { &[] });
        w.ips(&external_addresses(svc));
        w.ports(svc.ports.iter().map(|p| (p.name.as_str(), p.protocol, p.port)));
        if let Some(target) = target {
            w.str(target);
        }
        ServiceFacts(w.finish())
    }

    pub(crate) fn read(&self) -> ServiceRead<'_> {
        let mut r = Reader(&self.0);
        r.str_bytes();
        let flags = r.u8();
        let generation = r.u64() as i64;
        let spec_version = r.u64();
        let cluster_ips = r.ips();
        let external = r.ips();
        let ports = r.ports();
        let publish = match flags & KIND {
            CLUSTER_IP => Publish::ClusterIp,
            HEADLESS => Publish::Headless,
            _ => Publish::ExternalName((flags & HAS_TARGET != 0).then(|| r.str())),
        };
        ServiceRead {
            publish,
            publish_not_ready: flags & PUBLISH_NOT_READY != 0,
            generation,
            spec_version,
            cluster_ips,
            external,
            ports,
        }
    }
}

impl Named for ServiceFacts {
    fn name_bytes(&self) -> &[u8] {
        Reader(&self.0).str_bytes()
    }
}

/// What a Service publishes in the external zone: `spec.externalIPs`, then its LoadBalancer
/// ingress addresses (CoreDNS's order), each once.
fn external_addresses(svc: &Service) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = Vec::new();
    for ip in svc.external_ips.iter().copied().chain(svc.load_balancer_ingress.iter().filter_map(|i| i.ip)) {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    out
}

/// How a slice's addresses are written: all IPv4 (4 bytes each), all IPv6 (16), or each
/// after its family.
const ALL_V4: u8 = 4;
const ALL_V6: u8 = 6;
const MIXED: u8 = 0;

/// What the records of one EndpointSlice read, packed: its name, its Service, its ports, its addresses
/// (one per endpoint address, in the slice's order), a bit per address for "not ready", then,
/// when any endpoint has one, each address's hostname and pod name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SliceFacts(Box<[u8]>);

/// One address of a slice, as the index reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddressFacts<'a> {
    pub(crate) ip: IpAddr,
    pub(crate) ready: bool,
    /// The endpoint's `hostname`.
    pub(crate) hostname: Option<&'a str>,
    /// The pod its `targetRef` names.
    pub(crate) pod: Option<&'a str>,
}

impl SliceFacts {
    pub(crate) fn of(slice: &EndpointSlice) -> Self {
        let rows: Vec<(IpAddr, &tideway_core::model::Endpoint)> =
            slice.endpoints.iter().flat_map(|ep| ep.addresses.iter().map(move |ip| (*ip, ep))).collect();
        let family = if rows.iter().all(|(ip, _)| ip.is_ipv4()) {
            ALL_V4
        } else if rows.iter().all(|(ip, _)| ip.is_ipv6()) {
            ALL_V6
        } else {
            MIXED
        };
        let mut w = Writer::default();
        w.str(&slice.name);
        w.str(&slice.service);
        w.ports(slice.ports.iter().map(|p| (p.name.as_str(), p.protocol, p.port)));
        w.u32(u32::try_from(rows.len()).unwrap_or(u32::MAX));
        w.u8(family);
        for (ip, _) in &rows {
            match (family, ip) {
                (ALL_V4, IpAddr::V4(v4)) => w.bytes(&v4.octets()),
                (ALL_V6, IpAddr::V6(v6)) => w.bytes(&v6.octets()),
                _ => w.ip(*ip),
            }
        }
        let mut not_ready = vec![0u8; rows.len().div_ceil(8)];
        for (i, (_, ep)) in rows.iter().enumerate() {
            if !ep.ready {
                not_ready[i / 8] |= 1 << (i % 8);
            }
        }
        w.bytes(&not_ready);
        let named = rows.iter().any(|(_, ep)| ep.hostname().is_some() || ep.pod_name.is_some());
        w.u8(u8::from(named));
        if named {
            for (_, ep) in &rows {
                w.str(ep.hostname().unwrap_or(""));
                w.str(ep.pod_name.as_deref().unwrap_or(""));
            }
        }
        SliceFacts(w.finish())
    }

    /// Its Service's name, its ports, and a reader at its address count.
    fn head(&self) -> (&[u8], Ports<'_>, Reader<'_>) {
        let mut r = Reader(&self.0);
        r.str_bytes();
        let service = r.str_bytes();
        let ports = r.ports();
        (service, ports, r)
    }

    /// The name of the Service it belongs to.
    pub(crate) fn service(&self) -> &[u8] {
        self.head().0
    }

    /// The ports of its endpoints.
    #[cfg(test)]
    pub(crate) fn ports(&self) -> Ports<'_> {
        self.head().1
    }

    /// How many addresses it has.
    pub(crate) fn address_count(&self) -> usize {
        self.head().2.u32() as usize
    }

    /// Its addresses, in the slice's order.
    #[cfg(test)]
    pub(crate) fn addresses(&self) -> impl Iterator<Item = AddressFacts<'_>> {
        self.ports_and_addresses().1
    }

    /// The ports of its endpoints, and its addresses in the slice's order (read at once).
    pub(crate) fn ports_and_addresses(&self) -> (Ports<'_>, impl Iterator<Item = AddressFacts<'_>>) {
        let (_, ports, mut r) = self.head();
        let count = r.u32() as usize;
        let family = r.u8();
        let mut ips = r;
        // Skip to the readiness bits and the names.
        match family {
            ALL_V4 => r.skip(count * 4),
            ALL_V6 => r.skip(count * 16),
            _ => (0..count).for_each(|_| {
                r.ip();
            }),
        }
        let not_ready = r.take(count.div_ceil(8));
        let mut names = (r.u8() == 1).then_some(r);
        let addresses = (0..count).map(move |i| {
            let ip = match family {
                ALL_V4 => IpAddr::V4(ips.v4()),
                ALL_V6 => IpAddr::V6(ips.v6()),
                _ => ips.ip(),
            };
            let ready = not_ready.get(i / 8).is_none_or(|b| b & (1 << (i % 8)) == 0);
            let (hostname, pod) = match names.as_mut() {
                Some(n) => (Some(n.str()).filter(|s| !s.is_empty()), Some(n.str()).filter(|s| !s.is_empty())),
                None => (None, None),
            };
            AddressFacts { ip, ready, hostname, pod }
        });
        (ports, addresses)
    }
}

impl Named for SliceFacts {
    fn name_bytes(&self) -> &[u8] {
        Reader(&self.0).str_bytes()
    }

    /// Not named `<service>-...`, as the EndpointSlice controller names them.
    fn irregular(&self) -> bool {
        let (name, service) = (self.name_bytes(), self.service());
        !(name.starts_with(service) && name.get(service.len()) == Some(&b'-'))
    }
}

/// What the DNS server reads of a pod: its addresses (pod records in `verified` mode, and its
/// node's report with `--require-programmed`) and the names a StatefulSet pod is published
/// under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PodFacts {
    pub(crate) name: Box<str>,
    pub(crate) ips: Box<[IpAddr]>,
    pub(crate) node: Option<Box<str>>,
    pub(crate) hostname: Option<Box<str>>,
    pub(crate) subdomain: Option<Box<str>>,
}

impl PodFacts {
    pub(crate) fn of(pod: &Pod) -> Self {
        PodFacts {
            name: pod.name.as_str().into(),
            ips: pod.ips.iter().copied().collect(),
            node: pod.node_name.as_deref().map(Into::into),
            hostname: pod.hostname.as_deref().map(Into::into),
            subdomain: pod.subdomain.as_deref().map(Into::into),
        }
    }
}

impl Named for PodFacts {
    fn name_bytes(&self) -> &[u8] {
        self.name.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use tideway_core::net::Protocol::Tcp;
    use tideway_core::testing::mk_slice;

    use super::*;

    #[test]
    fn a_slice_keeps_each_address_with_its_readiness_and_names() {
        let slice = mk_slice("ns", "web")
            .port("http", Tcp, 80)
            .ready("10.0.0.1", "n")
            .hostname("web-0")
            .pod("web-0")
            .endpoint("10.0.0.2", "n", false, false, false)
            .pod("web-1")
            .ready("10.0.0.3", "n")
            .build();
        let facts = SliceFacts::of(&slice);
        let got: Vec<(String, bool, Option<&str>, Option<&str>)> =
            facts.addresses().map(|a| (a.ip.to_string(), a.ready, a.hostname, a.pod)).collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1".to_string(), true, Some("web-0"), Some("web-0")),
                ("10.0.0.2".to_string(), false, None, Some("web-1")),
                ("10.0.0.3".to_string(), true, None, None),
            ]
        );
        assert_eq!(facts.address_count(), 3);
        assert_eq!(facts.service(), b"web");
        let ports: Vec<_> = facts.ports().iter().collect();
        assert_eq!(ports, [("http", Tcp, 80)]);
    }

    #[test]
    fn a_service_keeps_every_external_address() {
        let mut svc = tideway_core::testing::mk_service("ns", "lb").cluster_ip("10.96.0.1").build();
        svc.external_ips =
            (0..300u32).map(|i| IpAddr::from(std::net::Ipv4Addr::from(0xc000_0200 + i))).collect();
        let facts = ServiceFacts::of(&svc, None);
        let read = facts.read();
        assert_eq!(read.external.count(), 300);
        assert_eq!(read.cluster_ips.collect::<Vec<_>>(), svc.cluster_ips);
        assert_eq!(facts.name(), "lb");
    }

    #[test]
    fn a_slice_without_names_keeps_ipv4_addresses_alone() {
        let slice = mk_slice("ns", "web").ready("10.0.0.1", "n").ready("10.0.0.2", "n").build();
        let facts = SliceFacts::of(&slice);
        // Name, Service, no ports, count, family, two addresses, one byte of bits, no names.
        assert_eq!(facts.name(), slice.name);
        assert_eq!(facts.0.len(), 2 + slice.name.len() + 2 + 3 + 2 + 4 + 1 + 8 + 1 + 1);
        for family in [["fd00::1", "fd00::2"], ["10.0.0.1", "fd00::2"]] {
            let slice = mk_slice("ns", "web").ready(family[0], "n").ready(family[1], "n").build();
            let got: Vec<IpAddr> = SliceFacts::of(&slice).addresses().map(|a| a.ip).collect();
            let want: Vec<IpAddr> = family.iter().map(|a| a.parse().unwrap()).collect();
            assert_eq!(got, want);
        }
    }
}
