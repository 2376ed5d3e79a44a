//! The valid values of every `ProxyConfig` and `LoadBalancerPool` field, defined once and read
//! three times: by the conversions ([`crate::crd::proxy_config`],
//! [`crate::crd::load_balancer_pool`]), so an agent refuses an invalid object with an error
//! naming the field and keeps its last valid configuration; by the REST PATCH check, which runs
//! the same conversion; and by the generated CRD schema (`pattern`, `maximum`, `maxItems`,
//! `maxLength`, and CEL rules using only standard functions), so the API server refuses the
//! object at `kubectl apply`.
//!
//! The ranges are kube-proxy's and MetalLB's: durations positive and at most 24 h
//! (`minSyncPeriod` may be 0, as in kube-proxy, and at most `syncPeriod`; IPVS timeouts may be 0,
//! meaning "keep the kernel's"), masquerade bit 0-31, at most one cluster CIDR per family, CIDRs
//! and address ranges that parse, a Maglev table size from the list of primes
//! [`maglev::TABLE_SIZES`] (an `enum` in the schema). One value only the conversion refuses: a
//! pool range whose first address is after its last (no standard CEL function orders
//! addresses); every component then keeps the pool's last valid version and logs and counts
//! the refusal.

use std::sync::LazyLock;
use std::time::Duration;

use serde_json::json;
use tideway_core::config::ProxySettings;
use tideway_core::maglev;
use tideway_core::net::{IpFamily, IpNet};

use crate::crd::schema::Constraint;
use crate::duration::{format_duration, parse_duration};
use crate::error::{ConvertError, Ctx};

/// The longest duration any setting takes.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// The longest duration string the schema admits (a CEL cost bound as much as a sanity one).
pub const DURATION_MAX_LENGTH: u64 = 32;
/// The highest packet-mark bit.
pub const MASQUERADE_BIT_MAX: i32 = 31;
/// Cluster CIDRs: one per family.
pub const MAX_CLUSTER_CIDRS: u64 = 2;
/// Entries of `nodePortAddresses`.
pub const MAX_NODE_PORT_ADDRESSES: u64 = 16;
/// Entries of a pool's `addresses`.
pub const MAX_POOL_ADDRESSES: u64 = 256;
/// Interfaces an L2 section names.
pub const MAX_INTERFACES: u64 = 16;
/// Namespaces or selectors a pool's `serviceAllocation` lists.
pub const MAX_ALLOCATION_ENTRIES: u64 = 64;
/// A Linux interface name (`IFNAMSIZ` less the terminating NUL).
pub const INTERFACE_MAX_LENGTH: u64 = 15;
/// A label value, such as `serviceProxyName`.
pub const LABEL_VALUE_MAX_LENGTH: u64 = 63;
/// A namespace name (a DNS label).
pub const NAMESPACE_MAX_LENGTH: u64 = 63;
/// The longest CIDR or address range text (two full IPv6 addresses and a dash).
pub const ADDRESS_MAX_LENGTH: u64 = 100;

/// Go durations, as [`parse_duration`] reads them (its length bounds are checked separately).
pub const DURATION_PATTERN: &str = "^(0|(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(ns|us|\u{b5}s|\u{3bc}s|ms|s|m|h))+)$";
/// A label value.
pub const LABEL_VALUE_PATTERN: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";
/// A namespace name.
pub const NAMESPACE_PATTERN: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A Linux interface name: no slash, colon or whitespace, not `.` or `..` (lengths 1 and 2
/// spelled out because the pattern language has no lookahead).
pub const INTERFACE_PATTERN: &str = "^([^/:\\s]{3,}|[^./:\\s]|[^./:\\s][^/:\\s]|\\.[^./:\\s])$";
/// `matchExpressions` of a label selector.
pub const MAX_SELECTOR_TERMS: u64 = 32;
/// Label-selector operators.
pub const SELECTOR_OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

const DEC_OCTET: &str = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";

fn ipv4() -> String {
    format!("{DEC_OCTET}(\\.{DEC_OCTET}){{3}}")
}

/// RFC 3986's IPv6address, which is what Rust's parser takes.
fn ipv6() -> String {
    let h16 = "[0-9a-fA-F]{1,4}";
    let ls32 = format!("({h16}:{h16}|{})", ipv4());
    let groups = |n: usize| format!("({h16}:){{{n}}}");
    // Up to `n` groups before `::` (none when n is 0).
    let head = |n: usize| match n {
        0 => String::new(),
        1 => format!("({h16})?"),
        _ => format!("(({h16}:){{0,{}}}{h16})?", n - 1),
    };
    let forms = [
        format!("{}{ls32}", groups(6)),
        format!("::{}{ls32}", groups(5)),
        format!("{}::{}{ls32}", head(1), groups(4)),
        format!("{}::{}{ls32}", head(2), groups(3)),
        format!("{}::{}{ls32}", head(3), groups(2)),
        format!("{}::{h16}:{ls32}", head(4)),
        format!("{}::{ls32}", head(5)),
        format!("{}::{h16}", head(6)),
        format!("{}::", head(7)),
    ];
    format!("({})", forms.join("|"))
}

/// An IPv4 CIDR; the prefix is optional (a bare address) when `bare` is true.
fn cidr_v4(bare: bool) -> String {
    format!("{}(/(3[0-2]|[12]?[0-9])){}", ipv4(), if bare { "?" } else { "" })
}

/// An IPv6 CIDR; the prefix is optional (a bare address) when `bare` is true.
fn cidr_v6(bare: bool) -> String {
    format!("{}(/(12[0-8]|1[01][0-9]|[1-9]?[0-9])){}", ipv6(), if bare { "?" } else { "" })
}

/// An IPv4 or IPv6 CIDR, or a bare address (one address).
pub static CIDR_PATTERN: LazyLock<String> =
    LazyLock::new(|| format!("^({}|{})$", cidr_v4(true), cidr_v6(true)));

/// A pool's address entry: a CIDR or `first-last` of one family (spaces around `-` allowed).
pub static POOL_ADDRESS_PATTERN: LazyLock<String> = LazyLock::new(|| {
    format!("^({}|{}|{v4} *- *{v4}|{v6} *- *{v6})$", cidr_v4(false), cidr_v6(false), v4 = ipv4(), v6 = ipv6())
});

/// [`MAX_DURATION`] as written in messages and CEL rules.
pub const MAX_DURATION_TEXT: &str = "24h";

pub(crate) fn duration_text() -> serde_json::Value {
    json!({"pattern": DURATION_PATTERN, "maxLength": DURATION_MAX_LENGTH})
}

/// A label selector at `path`: bounded terms with known operators.
fn selector(path: &'static str, expressions: &'static str, operators: &'static str) -> [Constraint; 2] {
    debug_assert!(expressions.starts_with(path) && operators.starts_with(expressions));
    [
        Constraint { path: expressions, keywords: json!({"maxItems": MAX_SELECTOR_TERMS}) },
        Constraint { path: operators, keywords: json!({"enum": SELECTOR_OPERATORS}) },
    ]
}

/// A CEL rule (standard functions and `duration()` only, so any CEL implementation checks it).
fn rule(rule: String, message: &str, field: &str) -> serde_json::Value {
    json!({"rule": rule, "message": message, "fieldPath": field})
}

/// The duration at `path` is at most [`MAX_DURATION`] (and more than 0 if `positive`): a rule on
/// the field itself, so that the API server names the field also when the value is no duration
/// at all (`duration()` fails, and an evaluation error is reported at the rule's own node).
fn duration_rule(path: &'static str, positive: bool) -> Constraint {
    let field = path.rsplit('.').next().unwrap_or(path);
    let max = MAX_DURATION_TEXT;
    let (low, message) = if positive {
        ("duration(self) > duration('0s') && ", format!("{field} must be more than 0s and at most 24h"))
    } else {
        ("", format!("{field} must be at most 24h"))
    };
    let rule = json!({"rule": format!("{low}duration(self) <= duration('{max}')"), "message": message});
    Constraint { path, keywords: json!({"x-kubernetes-validations": [rule]}) }
}

/// A Linux interface name.
fn interface_name() -> serde_json::Value {
    json!({"pattern": INTERFACE_PATTERN, "maxLength": INTERFACE_MAX_LENGTH})
}

/// `detectLocalMode: mode` comes with `detectLocal.field`.
fn needs_interface(mode: &str, field: &str) -> serde_json::Value {
    rule(
        format!(
            "!has(self.detectLocalMode) || self.detectLocalMode != '{mode}' || \
                 (has(self.detectLocal) && has(self.detectLocal.{field}) && size(self.detectLocal.{field}) > 0)"
        ),
        &format!("detectLocalMode {mode} needs detectLocal.{field}"),
        ".detectLocalMode",
    )
}

/// The ProxyConfig schema's constraints.
pub(crate) fn proxy_config_constraints() -> Vec<Constraint> {
    let defaults = ProxySettings::default();
    let (sync, min_sync) = (format_duration(defaults.sync_period), format_duration(defaults.min_sync_period));
    let cidr = json!({"pattern": &*CIDR_PATTERN, "maxLength": ADDRESS_MAX_LENGTH});
    let node_port_address =
        format!("^(primary|all|{})$", CIDR_PATTERN.trim_start_matches('^').trim_end_matches('$'));
    let mut out = vec![
        Constraint { path: "spec.syncPeriod", keywords: duration_text() },
        Constraint { path: "spec.minSyncPeriod", keywords: duration_text() },
        Constraint { path: "spec.ipvs.tcpTimeout", keywords: duration_text() },
        Constraint { path: "spec.ipvs.tcpFinTimeout", keywords: duration_text() },
        Constraint { path: "spec.ipvs.udpTimeout", keywords: duration_text() },
        Constraint {
            path: "spec.masqueradeBit",
            keywords: json!({"minimum": 0, "maximum": MASQUERADE_BIT_MAX}),
        },
        Constraint { path: "spec.maglevTableSize", keywords: json!({"enum": maglev::TABLE_SIZES}) },
        Constraint { path: "spec.clusterCIDRs", keywords: json!({"maxItems": MAX_CLUSTER_CIDRS}) },
        Constraint { path: "spec.clusterCIDRs[]", keywords: cidr },
        Constraint { path: "spec.nodePortAddresses", keywords: json!({"maxItems": MAX_NODE_PORT_ADDRESSES}) },
        Constraint {
            path: "spec.nodePortAddresses[]",
            keywords: json!({"pattern": node_port_address, "maxLength": ADDRESS_MAX_LENGTH}),
        },
        Constraint { path: "spec.detectLocal.bridgeInterface", keywords: interface_name() },
        Constraint { path: "spec.detectLocal.interfaceNamePrefix", keywords: interface_name() },
        Constraint {
            path: "spec.serviceProxyName",
            keywords: json!({"pattern": LABEL_VALUE_PATTERN, "maxLength": LABEL_VALUE_MAX_LENGTH}),
        },
        Constraint {
            path: "spec",
            keywords: json!({"x-kubernetes-validations": [
                rule(
                    format!("duration(has(self.minSyncPeriod) ? self.minSyncPeriod : '{min_sync}') <= \
                             duration(has(self.syncPeriod) ? self.syncPeriod : '{sync}')"),
                    &format!("minSyncPeriod (default {min_sync}) must be at most syncPeriod (default {sync})"),
                    ".minSyncPeriod",
                ),
                rule(
                    "!has(self.clusterCIDRs) || self.clusterCIDRs.size() < 2 || \
                     self.clusterCIDRs[0].contains(':') != self.clusterCIDRs[1].contains(':')"
                        .into(),
                    "clusterCIDRs takes at most one CIDR per family (IPv4, IPv6)",
                    ".clusterCIDRs",
                ),
                needs_interface("BridgeInterface", "bridgeInterface"),
                needs_interface("InterfaceNamePrefix", "interfaceNamePrefix"),
                rule(
                    "!has(self.nodePortAddresses) || self.nodePortAddresses.size() < 2 || \
                     !self.nodePortAddresses.exists(a, a == 'primary' || a == 'all')"
                        .into(),
                    "primary and all stand alone in nodePortAddresses",
                    ".nodePortAddresses",
                ),
            ]}),
        },
        duration_rule("spec.syncPeriod", true),
        duration_rule("spec.minSyncPeriod", false),
        duration_rule("spec.ipvs.tcpTimeout", false),
        duration_rule("spec.ipvs.tcpFinTimeout", false),
        duration_rule("spec.ipvs.udpTimeout", false),
    ];
    out.extend(selector(
        "spec.nodeSelector",
        "spec.nodeSelector.matchExpressions",
        "spec.nodeSelector.matchExpressions[].operator",
    ));
    out
}

/// The LoadBalancerPool schema's constraints.
pub(crate) fn load_balancer_pool_constraints() -> Vec<Constraint> {
    let mut out = vec![
        Constraint { path: "spec.addresses", keywords: json!({"maxItems": MAX_POOL_ADDRESSES}) },
        Constraint {
            path: "spec.addresses[]",
            keywords: json!({"pattern": &*POOL_ADDRESS_PATTERN, "maxLength": ADDRESS_MAX_LENGTH}),
        },
        Constraint { path: "spec.l2.interfaces", keywords: json!({"maxItems": MAX_INTERFACES}) },
        Constraint { path: "spec.l2.interfaces[]", keywords: interface_name() },
        Constraint { path: "spec.l2.nodeSelectors", keywords: json!({"maxItems": MAX_ALLOCATION_ENTRIES}) },
        Constraint {
            path: "spec.serviceAllocation.namespaces",
            keywords: json!({"maxItems": MAX_ALLOCATION_ENTRIES}),
        },
        Constraint {
            path: "spec.serviceAllocation.namespaces[]",
            keywords: json!({"pattern": NAMESPACE_PATTERN, "maxLength": NAMESPACE_MAX_LENGTH}),
        },
        Constraint {
            path: "spec.serviceAllocation.namespaceSelectors",
            keywords: json!({"maxItems": MAX_ALLOCATION_ENTRIES}),
        },
        Constraint {
            path: "spec.serviceAllocation.serviceSelectors",
            keywords: json!({"maxItems": MAX_ALLOCATION_ENTRIES}),
        },
    ];
    out.extend(selector(
        "spec.l2.nodeSelectors",
        "spec.l2.nodeSelectors[].matchExpressions",
        "spec.l2.nodeSelectors[].matchExpressions[].operator",
    ));
    out.extend(selector(
        "spec.serviceAllocation.namespaceSelectors",
        "spec.serviceAllocation.namespaceSelectors[].matchExpressions",
        "spec.serviceAllocation.namespaceSelectors[].matchExpressions[].operator",
    ));
    out.extend(selector(
        "spec.serviceAllocation.serviceSelectors",
        "spec.serviceAllocation.serviceSelectors[].matchExpressions",
        "spec.serviceAllocation.serviceSelectors[].matchExpressions[].operator",
    ));
    out
}

/// Which durations a setting takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationRange {
    /// More than 0, at most [`MAX_DURATION`].
    Positive,
    /// 0 to [`MAX_DURATION`].
    ZeroOrMore,
}

/// Parses and range-checks the duration at `field`.
pub(crate) fn duration(
    cx: &Ctx,
    field: &str,
    value: &str,
    range: DurationRange,
) -> Result<Duration, ConvertError> {
    if value.len() as u64 > DURATION_MAX_LENGTH {
        return Err(cx.err(field, format!("is longer than {DURATION_MAX_LENGTH} characters")));
    }
    let d = parse_duration(value).map_err(|e| cx.err(field, e.to_string()))?;
    if range == DurationRange::Positive && d.is_zero() {
        return Err(cx.err(field, "must be greater than 0"));
    }
    if d > MAX_DURATION {
        return Err(cx.err(field, format!("{value} is longer than {MAX_DURATION_TEXT}")));
    }
    Ok(d)
}

/// Checks that the list at `field` holds at most `max` entries.
pub(crate) fn max_items<T>(cx: &Ctx, field: &str, list: &[T], max: u64) -> Result<(), ConvertError> {
    if list.len() as u64 > max {
        return Err(cx.err(field, format!("has {} entries; at most {max} are allowed", list.len())));
    }
    Ok(())
}

/// Checks a label value (`serviceProxyName`).
pub(crate) fn label_value(cx: &Ctx, field: &str, value: &str) -> Result<(), ConvertError> {
    let ok = value.len() as u64 <= LABEL_VALUE_MAX_LENGTH
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && value.bytes().next().is_none_or(|b| b.is_ascii_alphanumeric())
        && value.bytes().last().is_none_or(|b| b.is_ascii_alphanumeric());
    if !ok {
        return Err(cx.err(
            field,
            format!(
                "{value:?} is not a label value (at most {LABEL_VALUE_MAX_LENGTH} letters, digits, '-', '_' or '.', \
                 starting and ending with a letter or digit)"
            ),
        ));
    }
    Ok(())
}

/// Checks that `nets` hold at most one network per family (a dual-stack pair at most).
pub(crate) fn one_per_family(cx: &Ctx, field: &str, nets: &[IpNet]) -> Result<(), ConvertError> {
    let distinct = match nets {
        [] | [_] => true,
        [a, b] => IpFamily::of_net(a) != IpFamily::of_net(b),
        _ => false,
    };
    if distinct { Ok(()) } else { Err(cx.err(field, "at most one CIDR per family (IPv4, IPv6)")) }
}

/// Checks an interface name.
pub(crate) fn interface(cx: &Ctx, field: &str, value: &str) -> Result<(), ConvertError> {
    let ok = !value.is_empty()
        && value.len() as u64 <= INTERFACE_MAX_LENGTH
        && !value.chars().any(|c| c == '/' || c == ':' || c.is_whitespace())
        && value != "."
        && value != "..";
    if !ok {
        return Err(cx.err(
            field,
            format!("{value:?} is not an interface name (1-{INTERFACE_MAX_LENGTH} characters, no '/', ':' or spaces)"),
        ));
    }
    Ok(())
}

/// Checks a namespace name.
pub(crate) fn namespace(cx: &Ctx, field: &str, value: &str) -> Result<(), ConvertError> {
    let ok = !value.is_empty()
        && value.len() as u64 <= NAMESPACE_MAX_LENGTH
        && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if !ok {
        return Err(cx.err(field, format!("{value:?} is not a namespace name")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, value: &str) -> bool {
        regex::Regex::new(pattern).expect("pattern compiles").is_match(value)
    }

    #[test]
    fn the_cidr_pattern_takes_what_the_conversion_takes() {
        let cx = Ctx::new("ProxyConfig", None, "t");
        let good = [
            "10.0.0.0/8",
            "10.244.0.0/16",
            "0.0.0.0/0",
            "192.168.1.1",
            "255.255.255.255/32",
            "::/0",
            "::1",
            "fd00:244::/32",
            "fe80::1/64",
            "2001:db8::ffff:1.2.3.4/128",
            "1:2:3:4:5:6:7:8",
            "1::",
            "::ffff:10.0.0.1",
            "1:2:3:4:5:6:7::",
            "::2:3:4:5:6:7:8",
        ];
        let bad = [
            "",
            "10.0.0.0/33",
            "10.0.0/8",
            "256.0.0.0/8",
            "10.0.0.0/",
            "fd00::/129",
            "1:2:3:4:5:6:7:8:9",
            "::1::",
            "10.0.0.01",
            "abc",
            "10.0.0.0/8 ",
            " 10.0.0.0/8",
            "1:::2",
            "12345::",
            "10.0.0.0-10.0.0.5",
        ];
        for v in good {
            assert!(matches(&CIDR_PATTERN, v), "pattern refuses {v:?}");
            assert!(cx.cidr("f", v).is_ok(), "conversion refuses {v:?}");
        }
        for v in bad {
            assert!(!matches(&CIDR_PATTERN, v), "pattern admits {v:?}");
        }
    }

    #[test]
    fn the_pool_pattern_takes_ranges_of_one_family() {
        for v in
            ["192.168.10.0/24", "192.168.9.1-192.168.9.5", "192.168.9.1 - 192.168.9.5", "fc00::1-fc00::9"]
        {
            assert!(matches(&POOL_ADDRESS_PATTERN, v), "{v:?}");
            assert!(tideway_core::ipam::AddrRange::parse(v).is_ok(), "{v:?}");
        }
        for v in
            ["192.168.9.1-fc00::1", "192.168.9.1-", "pool", "10.0.0.0/40", "10.0.0.1--10.0.0.2", "10.0.0.7"]
        {
            assert!(!matches(&POOL_ADDRESS_PATTERN, v), "{v:?}");
        }
    }

    #[test]
    fn the_duration_pattern_takes_what_the_parser_takes() {
        for v in ["0", "0s", "30s", "1m30s", "1.5h", ".5s", "1.s", "500ms", "2µs", "24h"] {
            assert!(matches(DURATION_PATTERN, v), "{v:?}");
            assert!(parse_duration(v).is_ok(), "{v:?}");
        }
        for v in ["", "1", "s", ".s", "-1s", "1 s", "5 minutes", "1d", "1sm"] {
            assert!(!matches(DURATION_PATTERN, v), "{v:?}");
            assert!(parse_duration(v).is_err(), "{v:?}");
        }
    }

    #[test]
    fn durations_are_range_checked() {
        assert_eq!(parse_duration(MAX_DURATION_TEXT), Ok(MAX_DURATION));
        let cx = Ctx::new("ProxyConfig", None, "t");
        let check = |v, r| duration(&cx, "spec.syncPeriod", v, r).map_err(|e| e.message);
        assert_eq!(check("24h", DurationRange::Positive), Ok(MAX_DURATION));
        assert!(check("24h1ns", DurationRange::Positive).unwrap_err().contains("longer than 24h"));
        assert!(check("0s", DurationRange::Positive).unwrap_err().contains("greater than 0"));
        assert_eq!(check("0s", DurationRange::ZeroOrMore), Ok(Duration::ZERO));
        assert!(check("9999999999999999999999h", DurationRange::Positive).unwrap_err().contains("too long"));
        assert!(check(&"1".repeat(40), DurationRange::Positive).unwrap_err().contains("longer than 32"));
    }
}
