//! Reading a component's Prometheus metrics in a test or a benchmark: its registry in the
//! same process, or its `/metrics` over plain HTTP.

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

/// The value of the sample line starting `name ` (no labels) in a Prometheus exposition.
pub fn value(body: &str, name: &str) -> Option<f64> {
    body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A plain HTTP/1.0 GET of `path` at `addr` (in the caller's network namespace): status line,
/// headers and body as one text.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}
