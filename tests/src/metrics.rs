//! Reading a component's Prometheus registry in a test.

/// The sum of every sample of `registry` whose line contains `needle` (a metric name, a label
/// pair, or both: `tideway_source_relists_total{kind="Service"}`, `code="429"`).
pub fn sum(registry: &prometheus_client::registry::Registry, needle: &str) -> f64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("the registry encodes");
    text.lines()
        .filter(|l| l.contains(needle) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
