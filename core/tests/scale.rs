//! At scale the planner and the renderers write exactly the rules they wrote before the model
//! was made compact and the agent stopped keeping programs: the text a synthetic cluster
//! renders to, in each mode, hashes to the value recorded from the code before those changes.
//! 100,000 Services x 10 endpoints in a release build (`make unit` runs it so), 10,000 in a
//! debug one (where 100,000 would take minutes).

use tideway_core::config::ProxyMode;
use tideway_core::plan::compile;
use tideway_core::render::Renderer;
use tideway_core::testing::{mk_node, mk_node_context, synthetic_cluster};

/// FNV-1a, 64 bits: a hash whose value no library or compiler version changes.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// `(Services, mode, bytes of rules, hash)`, recorded from the code before the change (in
/// nftables mode, again once every ClusterIP went into the `cluster-ips` set as well, and once
/// frontends reached their behaviour and endpoint-count chains through data sets instead of
/// verdict maps).
const RECORDED: &[(usize, ProxyMode, usize, u64)] = &[
    (10_000, ProxyMode::Nftables, 7_675_414, 0xee6a_b971_29ff_b756),
    (10_000, ProxyMode::Iptables, 32_580_774, 0x9ab0_d9d4_c9b1_e48e),
    (10_000, ProxyMode::Ipvs, 11_722_148, 0xcbbb_f6f9_296a_73cc),
    (100_000, ProxyMode::Nftables, 77_782_674, 0x25a3_147c_2ad7_3ae2),
    (100_000, ProxyMode::Iptables, 326_322_414, 0xa607_5ee3_403b_2697),
    (100_000, ProxyMode::Ipvs, 118_322_808, 0xe783_f366_2a43_6f12),
];

#[test]
fn a_large_cluster_renders_the_recorded_rules() {
    let services = if cfg!(debug_assertions) { 10_000 } else { 100_000 };
    let mut cluster = synthetic_cluster(services, 10);
    cluster.apply(mk_node("node-a", "192.168.0.10", "zone-a"));
    let ruleset = compile(&cluster, &mk_node_context());
    let mut differ = Vec::new();
    for &(n, mode, bytes, hash) in RECORDED.iter().filter(|r| r.0 == services) {
        let text = Renderer::new(mode, &ruleset).node_text();
        let got = (text.len(), fnv1a(text.as_bytes()));
        if got != (bytes, hash) {
            differ.push(format!(
                "({n}, ProxyMode::{mode:?}, {}, {:#018x}) where {bytes} / {hash:#018x} was recorded",
                got.0, got.1
            ));
        }
    }
    assert!(differ.is_empty(), "{services} Services render differently:\n{}", differ.join("\n"));
}
