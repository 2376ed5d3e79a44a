//! Deterministic kernel object names, hashed exactly as kube-proxy hashes them.

use sha2::{Digest, Sha256};

use crate::model::ServicePortName;
use crate::net::join_host_port;
use crate::plan::Backend;
use crate::render::chains::{FIXED_CHAINS, KUBE_IPVS_OUT_FILTER, KUBE_PROXY_CANARY};

/// Chains only kube-proxy writes, never Tideway's renderers: `(table, chain, kube-proxy's
/// mode)`. kube-proxy's iptables mode keeps its canary `KUBE-PROXY-CANARY` in every table it
/// uses (its flush detector, removed by `kube-proxy --cleanup`); its IPVS mode filters the
/// node's own traffic to load balancers in `KUBE-IPVS-OUT-FILTER`. Either one on a node says
/// a kube-proxy programs the `KUBE-*` names there, which iptables and IPVS modes share with it.
pub const KUBE_PROXY_SIGNATURES: &[(&str, &str, &str)] =
    &[("nat", KUBE_PROXY_CANARY, "iptables"), ("filter", KUBE_IPVS_OUT_FILTER, "ipvs")];

/// Prefixes of the hashed per-Service and per-endpoint chains.
const SERVICE_CHAIN_PREFIXES: &[&str] = &["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-"];

/// True for a hashed per-Service or per-endpoint iptables chain (`KUBE-SVC-…`, `KUBE-SEP-…`, …).
pub fn is_service_chain(chain: &str) -> bool {
    SERVICE_CHAIN_PREFIXES.iter().any(|p| chain.starts_with(p))
}

/// True for any iptables chain the iptables or IPVS renderers create: what a backend may
/// remove when it cleans up.
pub fn is_own_chain(chain: &str) -> bool {
    FIXED_CHAINS.contains(&chain) || is_service_chain(chain)
}

const BASE32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// RFC 4648 base32 (standard alphabet, with padding), as Go's `base32.StdEncoding`.
pub fn base32(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(5) * 8);
    for chunk in data.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let bits = u64::from_be_bytes([0, 0, 0, buf[0], buf[1], buf[2], buf[3], buf[4]]);
        let chars = (chunk.len() * 8).div_ceil(5);
        for i in 0..8 {
            if i < chars {
                out.push(BASE32[((bits >> (35 - i * 5)) & 31) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn hash(input: &str, len: usize) -> String {
    let digest = Sha256::digest(input.as_bytes());
    // Only the bytes behind the first `len` characters need encoding (5 bits per character).
    let mut s = base32(&digest[..(len * 5).div_ceil(8).min(digest.len())]);
    s.truncate(len);
    s
}

/// kube-proxy's iptables service-chain hash: 16 chars of base32(sha256("ns/svc:port" + proto)).
pub fn port_proto_hash(spn: &ServicePortName) -> String {
    hash(&format!("{spn}{}", spn.protocol.as_str()), 16)
}

/// `KUBE-SVC-`, `KUBE-SVL-`, `KUBE-EXT-` or `KUBE-FW-` + the port/protocol hash.
pub fn service_chain(prefix: &str, spn: &ServicePortName) -> String {
    format!("{prefix}{}", port_proto_hash(spn))
}

/// `KUBE-SEP-` + 16 chars of base32(sha256("ns/svc:port" + proto + "ip:port")).
pub fn endpoint_chain(spn: &ServicePortName, ep: &Backend) -> String {
    let input = format!("{spn}{}{}", spn.protocol.as_str(), join_host_port(&ep.ip, ep.port));
    format!("KUBE-SEP-{}", hash(&input, 16))
}

/// kube-proxy nftables' readable name base: `ns/svc/proto/port`.
pub fn nft_service_base(spn: &ServicePortName) -> String {
    format!("{}/{}/{}/{}", spn.service.namespace, spn.service.name, spn.protocol.as_str(), spn.port)
}

/// `ns/svc/proto/port__ip/port` (IPv6 `:` written as `.`).
pub fn nft_endpoint_base(spn: &ServicePortName, ep: &Backend) -> String {
    let ip = ep.ip.to_string().replace(':', ".");
    format!("{}__{ip}/{}", nft_service_base(spn), ep.port)
}

/// `prefix-HASH8-base`, truncated like kube-proxy to keep names under nft's limit.
pub fn nft_name(prefix: &str, base: &str) -> String {
    let mut name = format!("{prefix}-{}-{base}", hash(base, 8));
    if name.len() > 240 {
        name.truncate(237);
        name.push_str("...");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ServiceName;
    use crate::net::Protocol;

    fn spn(ns: &str, name: &str, port: &str) -> ServicePortName {
        ServicePortName { service: ServiceName::new(ns, name), port: port.into(), protocol: Protocol::Tcp }
    }

    fn ep(ip: &str, port: u16) -> Backend {
        Backend {
            ip: ip.parse().unwrap(),
            port,
            local: false,
            ready: true,
            serving: true,
            terminating: false,
        }
    }

    #[test]
    fn base32_matches_rfc4648() {
        assert_eq!(base32(b""), "");
        assert_eq!(base32(b"f"), "MY======");
        assert_eq!(base32(b"foobar"), "MZXW6YTBOI======");
    }

    /// Vectors recomputed from kube-proxy's TestOverallIPTablesRules.
    #[test]
    fn iptables_names_match_kube_proxy() {
        assert_eq!(service_chain("KUBE-SVC-", &spn("ns1", "svc1", "p80")), "KUBE-SVC-XPGD46QRK7WJZT7O");
        assert_eq!(service_chain("KUBE-EXT-", &spn("ns2", "svc2", "p80")), "KUBE-EXT-GNZBNJ2PO5MGZ6GT");
        assert_eq!(service_chain("KUBE-SVC-", &spn("ns4", "svc4", "p80")), "KUBE-SVC-4SW47YFZTEDKD3PK");
        assert_eq!(service_chain("KUBE-FW-", &spn("ns5", "svc5", "p80")), "KUBE-FW-NUKIZ6OKUXPJNT4C");
        assert_eq!(
            endpoint_chain(&spn("ns1", "svc1", "p80"), &ep("10.180.0.1", 80)),
            "KUBE-SEP-SXIVWICOYRO3J4NJ"
        );
        assert_eq!(
            endpoint_chain(&spn("ns4", "svc4", "p80"), &ep("10.180.0.4", 80)),
            "KUBE-SEP-UKSFD7AGPMPPLUHC"
        );
    }

    #[test]
    fn nft_names_match_kube_proxy() {
        let s = spn("ns1", "svc1", "p80");
        assert_eq!(nft_name("service", &nft_service_base(&s)), "service-ULMVA6XW-ns1/svc1/tcp/p80");
        assert_eq!(
            nft_name("endpoint", &nft_endpoint_base(&s, &ep("10.180.0.1", 80))),
            "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
        );
    }

    #[test]
    fn every_iptables_and_ipvs_chain_counts_as_own() {
        use crate::config::ProxyMode;
        use crate::net::IpFamily;
        use crate::testing::random::{Rng, random_service, random_slice};
        let mut rng = Rng(7);
        let mut cluster = crate::cluster::ClusterState::new();
        for i in 0..24 {
            cluster.apply(random_service(&mut rng, i));
            cluster.apply(random_slice(&mut rng, i, false));
            cluster.apply(random_slice(&mut rng, i, true));
        }
        let ruleset = crate::plan::compile(&cluster, &crate::testing::mk_node_context());
        for mode in [ProxyMode::Iptables, ProxyMode::Ipvs] {
            for family in IpFamily::ALL {
                let lowered = crate::render::Renderer::new(mode, &ruleset).lower(family);
                for chain in &lowered.assemble().chains {
                    if ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"].contains(&&*chain.def.name)
                    {
                        continue; // built-in chains the program adds jumps to
                    }
                    assert!(
                        is_own_chain(&chain.def.name),
                        "{mode} chain {} is not recognised",
                        chain.def.name
                    );
                }
            }
        }
        assert!(is_service_chain("KUBE-SEP-SXIVWICOYRO3J4NJ") && !is_own_chain("KUBE-KUBELET-CANARY"));
        for (_, chain, _) in KUBE_PROXY_SIGNATURES {
            assert!(!is_own_chain(chain), "{chain} is kube-proxy's alone");
        }
    }
}
