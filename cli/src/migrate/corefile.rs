//! A Corefile to the DNS server's chart values: the `kubernetes` plugin's zone, pod mode and
//! TTL, `k8s_external`, `forward`'s upstreams and `health`'s lameduck; the plugins whose
//! behaviour Tideway has built in (errors, ready, prometheus on :9153, loop, reload,
//! loadbalance, a cache that leaves the cluster zone out) are carried as they are; everything
//! else is named in the table.

use serde_json::Value;

use super::error::MigrateError;
use super::left::Left;
use super::values::Values;

const SOURCE: &str = "CoreDNS";

/// One directive: `name args... [{ block }]`, with its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Directive {
    /// The plugin or option name.
    pub(crate) name: String,
    /// Its arguments.
    pub(crate) args: Vec<String>,
    /// Its block's directives.
    pub(crate) block: Vec<Directive>,
    /// 1-based line.
    pub(crate) line: usize,
}

/// A server block: its keys (`.:53`) and directives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerBlock {
    /// Zones and ports.
    pub(crate) keys: Vec<String>,
    /// Plugins.
    pub(crate) plugins: Vec<Directive>,
}

fn error(line: usize, message: impl Into<String>) -> MigrateError {
    MigrateError::Input(format!("Corefile line {line}"), message.into())
}

/// Words and braces with their lines; `#` starts a comment.
fn tokens(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        for word in line.split_whitespace() {
            let mut rest = word;
            while !rest.is_empty() {
                match rest.find(['{', '}']) {
                    Some(0) => {
                        out.push((i + 1, rest[..1].to_string()));
                        rest = &rest[1..];
                    }
                    Some(n) => {
                        out.push((i + 1, rest[..n].to_string()));
                        rest = &rest[n..];
                    }
                    None => {
                        out.push((i + 1, rest.to_string()));
                        rest = "";
                    }
                }
            }
        }
    }
    out
}

/// Directives up to the closing brace (or the end at depth 0).
fn directives(
    toks: &[(usize, String)],
    at: &mut usize,
    depth: usize,
) -> Result<Vec<Directive>, MigrateError> {
    let mut out = Vec::new();
    while let Some((line, word)) = toks.get(*at) {
        match word.as_str() {
            "}" if depth > 0 => {
                *at += 1;
                return Ok(out);
            }
            "}" | "{" => return Err(error(*line, format!("unexpected {word}"))),
            _ => {}
        }
        let mut d = Directive { name: word.clone(), args: Vec::new(), block: Vec::new(), line: *line };
        *at += 1;
        while let Some((l, w)) = toks.get(*at)
            && *l == d.line
            && w != "{"
            && w != "}"
        {
            d.args.push(w.clone());
            *at += 1;
        }
        if let Some((_, w)) = toks.get(*at)
            && w == "{"
        {
            *at += 1;
            d.block = directives(toks, at, depth + 1)?;
        }
        out.push(d);
    }
    if depth > 0 {
        return Err(error(toks.last().map_or(0, |t| t.0), "a block is not closed"));
    }
    Ok(out)
}

/// Parses a Corefile into server blocks.
pub(crate) fn parse(text: &str) -> Result<Vec<ServerBlock>, MigrateError> {
    let toks = tokens(text);
    let mut at = 0;
    let top = directives(&toks, &mut at, 0)?;
    top.into_iter()
        .map(|d| {
            if d.block.is_empty() {
                return Err(error(d.line, format!("{} has no block of plugins", d.name)));
            }
            let mut keys = vec![d.name];
            keys.extend(d.args);
            Ok(ServerBlock { keys, plugins: d.block })
        })
        .collect()
}

/// What a Corefile becomes.
#[derive(Debug, Default)]
pub(crate) struct Converted {
    /// Chart values.
    pub(crate) values: Values,
    /// Settings not carried.
    pub(crate) left: Vec<Left>,
}

fn show(d: &Directive) -> Value {
    Value::String(
        std::iter::once(d.name.as_str())
            .chain(d.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" "),
    )
}

fn is_reverse(zone: &str) -> bool {
    matches!(zone.trim_end_matches('.'), "in-addr.arpa" | "ip6.arpa")
}

/// Converts a Corefile.
pub(crate) fn convert(text: &str) -> Result<Converted, MigrateError> {
    let mut c = Converted::default();
    for block in parse(text)? {
        let key = block.keys.join(" ");
        if !block.keys.iter().all(|k| k == "." || k == ".:53") {
            c.left.push(Left::new(
                SOURCE,
                &format!("server block {key}"),
                &Value::String(format!("{} plugins", block.plugins.len())),
                "Tideway serves one root block: names outside its zones go to one upstream list (no stub domains)",
            ));
            continue;
        }
        for p in &block.plugins {
            plugin(&mut c, p);
        }
    }
    c.left.sort_by(|a, b| a.setting.cmp(&b.setting));
    Ok(c)
}

fn leave(c: &mut Converted, setting: &str, d: &Directive, why: &str) {
    c.left.push(Left::new(SOURCE, setting, &show(d), why));
}

fn plugin(c: &mut Converted, p: &Directive) {
    let at = |name: &str| format!("{name} (line {})", p.line);
    match p.name.as_str() {
        "errors" | "ready" | "reload" | "loop" | "loadbalance" => {}
        "health" => {
            for o in &p.block {
                match (o.name.as_str(), o.args.as_slice()) {
                    ("lameduck", [d]) if d == "5s" => {}
                    ("lameduck", [d]) => c.values.dns_args.push(format!("--lameduck={d}")),
                    _ => leave(c, &at("health"), o, "no equivalent in Tideway"),
                }
            }
        }
        "prometheus" if p.args.is_empty() || p.args == [":9153"] => {}
        "kubernetes" => kubernetes(c, p),
        "k8s_external" => match p.args.as_slice() {
            [zone] => {
                c.values.dns.insert("externalZone".into(), zone.trim_end_matches('.').into());
                for o in &p.block {
                    match (o.name.as_str(), o.args.as_slice()) {
                        ("ttl", [n]) if n.parse::<u32>().is_ok() => {
                            c.values.dns.insert("externalTTL".into(), n.parse::<u32>().unwrap_or(5).into());
                        }
                        _ => leave(c, &at("k8s_external"), o, "no equivalent in Tideway"),
                    }
                }
            }
            _ => leave(c, &at("k8s_external"), p, "Tideway serves one external zone"),
        },
        "forward" => forward(c, p),
        "cache" => cache(c, p),
        _ => leave(c, &at(&p.name), p, "no equivalent in Tideway"),
    }
}

fn kubernetes(c: &mut Converted, p: &Directive) {
    let at = format!("kubernetes (line {})", p.line);
    let zones: Vec<&String> = p.args.iter().filter(|z| !is_reverse(z)).collect();
    // The plugin's TTL when the block sets none (the chart's default is kubeadm's 30).
    c.values.dns.insert("ttl".into(), 5.into());
    match zones.as_slice() {
        [] => {}
        [zone, more @ ..] => {
            c.values.dns.insert("clusterDomain".into(), zone.trim_end_matches('.').into());
            for z in more {
                c.values.dns_args.push(format!("--zone={}", z.trim_end_matches('.')));
            }
        }
    }
    for o in &p.block {
        match (o.name.as_str(), o.args.as_slice()) {
            ("pods", [mode]) if ["disabled", "insecure", "verified"].contains(&mode.as_str()) => {
                c.values.dns.insert("pods".into(), mode.as_str().into());
            }
            // The reverse names that are not the cluster's always go upstream.
            ("fallthrough", []) => c.values.dns_args.push("--fallthrough".into()),
            ("fallthrough", zones) => {
                let ours: Vec<&str> =
                    zones.iter().filter(|z| !is_reverse(z)).map(|z| z.trim_end_matches('.')).collect();
                if !ours.is_empty() {
                    c.values.dns_args.push(format!("--fallthrough={}", ours.join(",")));
                }
            }
            ("endpoint_pod_names", []) => {
                c.values.dns.insert("endpointPodNames".into(), true.into());
            }
            ("ttl", [n]) if n.parse::<u32>().is_ok_and(|n| n <= 3600) => {
                c.values.dns.insert("ttl".into(), n.parse::<u32>().unwrap_or(30).into());
            }
            _ => leave(c, &at, o, "no equivalent in Tideway"),
        }
    }
}

fn forward(c: &mut Converted, p: &Directive) {
    let at = format!("forward (line {})", p.line);
    match p.args.split_first() {
        Some((from, to)) if from == "." && !to.is_empty() => {
            for t in to {
                let addr = t.strip_prefix("dns://").unwrap_or(t);
                if addr == "/etc/resolv.conf" {
                } else if addr.parse::<std::net::SocketAddr>().is_ok()
                    || addr.parse::<std::net::IpAddr>().is_ok()
                {
                    c.values.dns_args.push(format!("--upstream={addr}"));
                } else {
                    c.left.push(Left::new(
                        SOURCE,
                        &at,
                        &Value::String(t.clone()),
                        "Tideway forwards over plain DNS to addresses or the resolv.conf",
                    ));
                }
            }
        }
        _ => leave(c, &at, p, "Tideway forwards every name outside its zones (`forward .`) only"),
    }
    for o in &p.block {
        match (o.name.as_str(), o.args.as_slice()) {
            ("max_concurrent", [n]) if n == "1000" => {}
            ("max_concurrent", _) => {
                leave(c, &at, o, "set forward.maxConcurrent in the DNS settings file (--config)")
            }
            _ => leave(c, &at, o, "no equivalent in Tideway"),
        }
    }
}

fn cache(c: &mut Converted, p: &Directive) {
    let at = format!("cache (line {})", p.line);
    let domain =
        c.values.dns.get("clusterDomain").and_then(Value::as_str).unwrap_or("cluster.local").to_string();
    if let [ttl] = p.args.as_slice() {
        leave(
            c,
            &at,
            p,
            &format!(
                "forwarded answers are cached up to their TTL (success 3600 s, denial 1800 s at most), not {ttl} s: set \
                 cache.successMaxTtl and denialMaxTtl in the DNS settings file (--config)"
            ),
        );
    } else if !p.args.is_empty() {
        leave(c, &at, p, "Tideway caches forwarded answers only");
    }
    for o in &p.block {
        match (o.name.as_str(), o.args.as_slice()) {
            // The cluster zone is answered from the index, never from the cache.
            ("disable", [_, zone]) if zone.trim_end_matches('.') == domain => {}
            _ => leave(c, &at, o, "set it in the DNS settings file's cache section (--config), if at all"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBEADM: &str = include_str!("../../tests/fixtures/Corefile");

    fn rows(c: &Converted) -> Vec<(&str, &str)> {
        c.left.iter().map(|l| (l.setting.as_str(), l.value.as_str())).collect()
    }

    #[test]
    fn parses_blocks_nested_blocks_and_comments() {
        let blocks = parse("# c\n.:53 {\n  health {\n    lameduck 5s # why\n  }\n  forward . 1.1.1.1 {max_concurrent 10}\n}\nexample.org {\n  file db\n}\n")
            .expect("parses");
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].keys, [".:53"]);
        let health = &blocks[0].plugins[0];
        assert_eq!(
            (health.name.as_str(), health.block[0].args.as_slice()),
            ("health", &["5s".to_string()][..])
        );
        assert_eq!(blocks[0].plugins[1].args, [".", "1.1.1.1"]);
        assert_eq!(blocks[0].plugins[1].block[0].args, ["10"]);
        assert_eq!(blocks[1].plugins[0].line, 9);
        assert!(parse(".:53 {\n errors\n").unwrap_err().to_string().contains("not closed"));
        assert!(parse(".:53 {\n}\n}\n").unwrap_err().to_string().contains("unexpected }"));
    }

    #[test]
    fn kubeadms_corefile_becomes_the_chart_defaults_with_its_ttl() {
        let c = convert(KUBEADM).expect("converts");
        assert_eq!(c.values.dns.get("clusterDomain"), Some(&Value::from("cluster.local")));
        assert_eq!(c.values.dns.get("pods"), Some(&Value::from("insecure")));
        assert_eq!(c.values.dns.get("ttl"), Some(&Value::from(30)));
        assert!(c.values.dns_args.is_empty(), "{:?}", c.values.dns_args);
        assert_eq!(rows(&c), [("cache (line 16)", "cache 30")], "{:#?}", c.left);
    }

    #[test]
    fn fallthrough_keeps_its_cluster_zones() {
        let text = ".:53 {\n  kubernetes cluster.local example.local in-addr.arpa ip6.arpa {\n    \
                    fallthrough example.local. in-addr.arpa ip6.arpa\n  }\n  forward . /etc/resolv.conf\n}\n";
        let c = convert(text).expect("converts");
        assert_eq!(c.values.dns_args, ["--zone=example.local", "--fallthrough=example.local"]);
        assert!(rows(&c).is_empty(), "{:#?}", c.left);
    }

    #[test]
    fn what_has_no_equivalent_is_named() {
        let text = ".:53 {\n  kubernetes k8s.example cluster.local in-addr.arpa {\n    endpoint_pod_names\n    fallthrough\n    pods verified\n  }\n  \
                    k8s_external ext.example {\n    ttl 60\n  }\n  forward . 10.0.0.2 dns://10.0.0.3:5353 tls://9.9.9.9\n  hosts /etc/hosts\n  \
                    health {\n    lameduck 10s\n  }\n}\nconsul.local:53 {\n  forward . 10.150.0.1\n}\n";
        let c = convert(text).expect("converts");
        assert_eq!(c.values.dns.get("clusterDomain"), Some(&Value::from("k8s.example")));
        assert_eq!(c.values.dns.get("pods"), Some(&Value::from("verified")));
        assert_eq!(c.values.dns.get("externalZone"), Some(&Value::from("ext.example")));
        assert_eq!(c.values.dns.get("externalTTL"), Some(&Value::from(60)));
        assert_eq!(c.values.dns.get("ttl"), Some(&Value::from(5)), "the plugin's default TTL");
        assert_eq!(c.values.dns.get("endpointPodNames"), Some(&Value::from(true)));
        assert_eq!(
            c.values.dns_args,
            [
                "--zone=cluster.local",
                "--fallthrough",
                "--upstream=10.0.0.2",
                "--upstream=10.0.0.3:5353",
                "--lameduck=10s"
            ]
        );
        assert_eq!(
            rows(&c),
            [
                ("forward (line 10)", "tls://9.9.9.9"),
                ("hosts (line 11)", "hosts /etc/hosts"),
                ("server block consul.local:53", "1 plugins"),
            ]
        );
    }
}
