//! Name helpers: endpoint host labels, pod-name addresses and reverse (`.arpa`) names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::Name;

/// The label CoreDNS gives an endpoint without a hostname: its address with `.`/`:` replaced
/// by `-`, and a `0` appended when that leaves a trailing `-` (`5678:abcd::` -> `5678-abcd--0`).
/// Written into a buffer of its own: the index writes the label of an endpoint without a
/// hostname when it is asked for, instead of storing a million of them.
#[derive(Debug, Clone, Copy)]
pub struct DashedIp {
    buf: [u8; 48],
    len: u8,
}

/// The dashed label of an IPv4 address (at most 15 bytes), zero-padded to 16, and its length.
/// Written by hand: a million of these are made when the index is built.
pub(crate) fn dashed_v4(v4: std::net::Ipv4Addr) -> ([u8; 16], usize) {
    let mut buf = [0u8; 16];
    let mut len = 0;
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            buf[len] = b'-';
            len += 1;
        }
        for div in [100, 10, 1] {
            if octet >= div || div == 1 {
                buf[len] = b'0' + octet / div % 10;
                len += 1;
            }
        }
    }
    (buf, len)
}

impl DashedIp {
    /// The label of `ip`.
    pub fn new(ip: IpAddr) -> DashedIp {
        use std::io::Write;
        let mut buf = [0u8; 48];
        if let IpAddr::V4(v4) = ip {
            let (label, len) = dashed_v4(v4);
            buf[..16].copy_from_slice(&label);
            return DashedIp { buf, len: len as u8 };
        }
        let mut free = &mut buf[..];
        // At most 45 bytes (`::ffff:255.255.255.255`): the write cannot run out of room.
        let _ = write!(free, "{ip}");
        let mut len = 48 - free.len();
        for b in &mut buf[..len] {
            if *b == b'.' || *b == b':' {
                *b = b'-';
            }
        }
        if buf[len - 1] == b'-' {
            buf[len] = b'0';
            len += 1;
        }
        DashedIp { buf, len: len as u8 }
    }

    /// The label's bytes (lower case).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

/// The address a pod-record label stands for (`10-1-2-3` or `fd00-244--5`), as CoreDNS reads
/// it: exactly three dashes and no `--` means IPv4, anything else is tried as IPv6.
pub fn pod_label_ip(label: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(label).ok()?;
    let dashes = text.bytes().filter(|b| *b == b'-').count();
    if dashes == 3 && !text.contains("--") {
        text.replace('-', ".").parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    } else {
        text.replace('-', ":").parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    }
}

/// True for a label usable as an endpoint or pod host name (RFC 1123 label, any case).
pub fn is_host_label(s: impl AsRef<[u8]>) -> bool {
    let s = s.as_ref();
    !s.is_empty()
        && s.len() <= 63
        && s.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && s[0] != b'-'
}

/// Which reverse tree a name is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReverseTree {
    /// `in-addr.arpa.`
    V4,
    /// `ip6.arpa.`
    V6,
}

/// The reverse tree `labels` (lower-case, leaf first) belong to, if any.
pub fn reverse_tree(labels: &[&[u8]]) -> Option<ReverseTree> {
    match labels {
        [.., a, b] if *b == b"arpa" && *a == b"in-addr" => Some(ReverseTree::V4),
        [.., a, b] if *b == b"arpa" && *a == b"ip6" => Some(ReverseTree::V6),
        _ => None,
    }
}

/// The address a complete reverse name stands for (`4.3.2.1.in-addr.arpa.` or the 32-nibble
/// `ip6.arpa.` form); `None` for partial or malformed names.
pub fn reverse_ip(labels: &[&[u8]]) -> Option<IpAddr> {
    match reverse_tree(labels)? {
        ReverseTree::V4 => {
            let octets = &labels[..labels.len() - 2];
            if octets.len() != 4 {
                return None;
            }
            let mut out = [0u8; 4];
            for (i, label) in octets.iter().enumerate() {
                let s = std::str::from_utf8(label).ok()?;
                if s.len() > 1 && s.starts_with('0') {
                    return None;
                }
                out[3 - i] = s.parse().ok()?;
            }
            Some(IpAddr::V4(Ipv4Addr::from(out)))
        }
        ReverseTree::V6 => {
            let nibbles = &labels[..labels.len() - 2];
            if nibbles.len() != 32 {
                return None;
            }
            let mut value: u128 = 0;
            for label in nibbles.iter().rev() {
                let [c] = label else { return None };
                let digit = (*c as char).to_digit(16)?;
                value = (value << 4) | u128::from(digit);
            }
            Some(IpAddr::V6(Ipv6Addr::from(value)))
        }
    }
}

/// `Name::from_labels` for labels known to be short ASCII.
pub fn name_from(labels: &[&str]) -> Option<Name> {
    Name::from_labels(labels.iter().map(|l| l.as_bytes())).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(s: &str) -> Vec<&[u8]> {
        s.trim_end_matches('.').split('.').map(str::as_bytes).collect()
    }

    fn dashed_ip(ip: IpAddr) -> String {
        String::from_utf8_lossy(DashedIp::new(ip).as_bytes()).into_owned()
    }

    #[test]
    fn dashed_ips_follow_coredns() {
        assert_eq!(dashed_ip("10.1.2.3".parse().unwrap()), "10-1-2-3");
        for ip in ["0.0.0.0", "255.255.255.255", "100.9.10.101", "1.200.30.4"] {
            assert_eq!(dashed_ip(ip.parse().unwrap()), ip.replace('.', "-"));
        }
        assert_eq!(dashed_ip("5678:abcd::1".parse().unwrap()), "5678-abcd--1");
        assert_eq!(dashed_ip("5678:abcd::".parse().unwrap()), "5678-abcd--0");
    }

    #[test]
    fn pod_labels_parse_both_families() {
        assert_eq!(pod_label_ip(b"10-244-1-5"), Some("10.244.1.5".parse().unwrap()));
        assert_eq!(pod_label_ip(b"fd00-244--5"), Some("fd00:244::5".parse().unwrap()));
        assert_eq!(pod_label_ip(b"10-244-1"), None);
        assert_eq!(pod_label_ip(b"10-244-1-500"), None);
        assert_eq!(pod_label_ip(b"web"), None);
    }

    #[test]
    fn reverse_names_parse_only_when_complete() {
        assert_eq!(reverse_ip(&labels("1.0.96.10.in-addr.arpa")), Some("10.96.0.1".parse().unwrap()));
        assert_eq!(reverse_ip(&labels("0.96.10.in-addr.arpa")), None);
        assert_eq!(reverse_ip(&labels("01.0.96.10.in-addr.arpa")), None);
        let ip: Ipv6Addr = "fd00:96::1".parse().unwrap();
        let nibbles: String =
            format!("{:032x}", u128::from(ip)).chars().rev().map(|c| format!("{c}.")).collect();
        let v6 = format!("{nibbles}ip6.arpa");
        assert_eq!(reverse_ip(&labels(&v6)), Some(IpAddr::V6(ip)));
        assert_eq!(reverse_ip(&labels(&v6[2..])), None);
        assert_eq!(reverse_ip(&labels("d.f.ip6.arpa")), None);
        assert_eq!(reverse_tree(&labels("example.com")), None);
    }
}
