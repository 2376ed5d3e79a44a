//! Small network vocabulary shared by every layer: address families, L4 protocols, CIDRs.

use std::fmt;
use std::net::IpAddr;

pub use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// An IP address family. Every family is planned independently (dual-stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum IpFamily {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl IpFamily {
    /// Both families, IPv4 first.
    pub const ALL: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

    /// The family of an address.
    pub fn of(ip: &IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    /// The family of a network.
    pub fn of_net(net: &IpNet) -> IpFamily {
        match net {
            IpNet::V4(_) => IpFamily::V4,
            IpNet::V6(_) => IpFamily::V6,
        }
    }

    /// The networks of `nets` of this family.
    pub fn nets_of(self, nets: &[IpNet]) -> Vec<IpNet> {
        nets.iter().copied().filter(|n| IpFamily::of_net(n) == self).collect()
    }

    /// The loopback network of this family (127.0.0.0/8 or ::1/128).
    pub fn loopback_net(self) -> IpNet {
        match self {
            IpFamily::V4 => "127.0.0.0/8".parse().expect("valid literal"),
            IpFamily::V6 => "::1/128".parse().expect("valid literal"),
        }
    }

    /// A short lower-case label ("ipv4"/"ipv6"), as used in metrics and names.
    pub fn label(self) -> &'static str {
        match self {
            IpFamily::V4 => "ipv4",
            IpFamily::V6 => "ipv6",
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        })
    }
}

/// A transport protocol a Service port can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// Every protocol a Service port may have.
    pub const ALL: [Protocol; 3] = [Protocol::Tcp, Protocol::Udp, Protocol::Sctp];

    /// Lower-case name as used by iptables and nft (`tcp`, `udp`, `sctp`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    /// Upper-case name as used by the Kubernetes API (`TCP`, `UDP`, `SCTP`).
    pub fn k8s_name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// Parses either spelling, case-insensitively.
    pub fn parse(s: &str) -> Option<Protocol> {
        match s.to_ascii_lowercase().as_str() {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            "sctp" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }

    /// The protocol of IANA number `n`, if a Service port may have it.
    pub fn of_number(n: u8) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.number() == n)
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A host prefix (/32 or /128) for an address.
pub fn host_net(ip: IpAddr) -> IpNet {
    IpNet::from(ip)
}

/// Formats `ip:port`, bracketing IPv6 addresses (`[fd00::1]:80`).
pub fn join_host_port(ip: &IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_parses_both_spellings() {
        assert_eq!(Protocol::parse("TCP"), Some(Protocol::Tcp));
        assert_eq!(Protocol::parse("sctp"), Some(Protocol::Sctp));
        assert_eq!(Protocol::parse("icmp"), None);
    }

    #[test]
    fn join_host_port_brackets_v6() {
        assert_eq!(join_host_port(&"10.0.0.1".parse().unwrap(), 80), "10.0.0.1:80");
        assert_eq!(join_host_port(&"fd00::1".parse().unwrap(), 80), "[fd00::1]:80");
    }
}
