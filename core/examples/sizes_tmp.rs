use tideway_core::program::*;
fn main() {
    println!("Value {} Element {} ElemData {} SetRef {} pair {} Rule {} Chain {} Match {} Action {} Fragment {}",
        std::mem::size_of::<Value>(), std::mem::size_of::<Element>(), std::mem::size_of::<ElemData>(),
        std::mem::size_of::<SetRef>(), std::mem::size_of::<(SetRef, Element)>(), std::mem::size_of::<Rule>(),
        std::mem::size_of::<Chain>(), std::mem::size_of::<Match>(), std::mem::size_of::<Action>(), std::mem::size_of::<Fragment>());
    let cluster = tideway_core::testing::synthetic_cluster(10, 10);
    let rs = tideway_core::plan::compile(&cluster, &tideway_core::testing::mk_node_context());
    let p = tideway_core::render::lower(tideway_core::config::ProxyMode::Nftables, &rs, tideway_core::net::IpFamily::V4);
    let f = p.services.values().next().unwrap();
    println!("per service: chains {} shared {} sets {} rules {} elements {}", f.chains.len(), f.shared_chains.len(), f.sets.len(), f.rules.len(), f.elements.len());
    for (s, e) in f.elements.iter().take(40) { println!("  {} {:?}", s.name, e); }
    for c in &f.chains { println!(" chain {} rules {}", c.name, c.rules.len()); }
}
