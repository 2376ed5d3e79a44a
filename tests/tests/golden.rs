//! Golden rulesets: every fixture, planned for node-a, printed by every backend.

use tideway_core::config::ProxyMode;
use tideway_core::plan::compile;
use tideway_core::render;
use tideway_tests::{check_golden, fixtures, load, root};

#[test]
fn golden_rulesets() {
    let mut failures = Vec::new();
    for path in fixtures() {
        let name = path.file_stem().expect("stem").to_string_lossy().to_string();
        let f = load(&path);
        let ruleset = compile(&f.cluster, &f.node);
        for mode in ProxyMode::ALL {
            let ext = match mode {
                ProxyMode::Nftables => "nft",
                ProxyMode::Iptables => "iptables",
                ProxyMode::Ipvs => "ipvs",
            };
            let golden = root().join("golden").join(format!("{name}.{ext}"));
            if let Err(e) = check_golden(&golden, &render::Renderer::new(mode, &ruleset).node_text()) {
                failures.push(e);
            }
        }
        let mut report = f.errors.clone();
        for w in ruleset.warnings() {
            report.push_str(&format!("warning: {}: {}\n", w.service_port, w.message));
        }
        let errors = root().join("golden").join(format!("{name}.errors"));
        if (!report.is_empty() || errors.exists())
            && let Err(e) = check_golden(&errors, &report)
        {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
