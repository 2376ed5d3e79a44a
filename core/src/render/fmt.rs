//! Fast text helpers for printers that write megabytes: addresses and numbers appended to a
//! buffer without going through `format!`.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::net::IpNet;

/// Appends a decimal integer.
pub(crate) fn push_u32(out: &mut String, n: u32) {
    if n >= 10 {
        push_u32(out, n / 10);
    }
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// Appends an address (IPv4 by hand; IPv6 through `Display`, which compresses zeros).
pub(crate) fn push_ip(out: &mut String, ip: &IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            push_u32(out, a.into());
            out.push('.');
            push_u32(out, b.into());
            out.push('.');
            push_u32(out, c.into());
            out.push('.');
            push_u32(out, d.into());
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Appends `ip:port`, bracketing IPv6.
pub(crate) fn push_host_port(out: &mut String, ip: &IpAddr, port: u16) {
    if ip.is_ipv6() {
        out.push('[');
        push_ip(out, ip);
        out.push(']');
    } else {
        push_ip(out, ip);
    }
    out.push(':');
    push_u32(out, port.into());
}

/// Appends a network as `addr/len`.
pub(crate) fn push_net(out: &mut String, n: &IpNet) {
    push_ip(out, &n.addr());
    out.push('/');
    push_u32(out, n.prefix_len().into());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_display() {
        for s in ["0.0.0.0", "10.244.1.5", "255.255.255.255", "fd00::1", "::"] {
            let ip: IpAddr = s.parse().unwrap();
            let mut out = String::new();
            push_ip(&mut out, &ip);
            assert_eq!(out, ip.to_string());
        }
        let mut out = String::new();
        push_host_port(&mut out, &"fd00::1".parse().unwrap(), 80);
        push_u32(&mut out, 0);
        assert_eq!(out, "[fd00::1]:800");
    }
}
