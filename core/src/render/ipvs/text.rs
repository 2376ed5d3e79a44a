//! IPVS program text: `ipset restore` input, `iptables-restore` input and `ipvsadm`-style
//! virtual server lines.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::net::{IpFamily, join_host_port};
use crate::program::{ChangeSet, Element, Program, Set, SetRef, Value, VirtualServer};
use crate::render::iptables;

use super::lower::DUMMY_INTERFACE;

fn proto_flag(vs: &VirtualServer) -> &'static str {
    match vs.protocol {
        crate::net::Protocol::Tcp => "-t",
        crate::net::Protocol::Udp => "-u",
        crate::net::Protocol::Sctp => "--sctp-service",
    }
}

/// `-A -t 10.96.0.10:80 -s rr [-p 10800]` (ipvsadm syntax).
pub fn virtual_server_line(vs: &VirtualServer) -> String {
    let mut s = format!(
        "-A {} {} -s {}",
        proto_flag(vs),
        join_host_port(&vs.ip, vs.port),
        vs.scheduler.as_str()
    );
    if let Some(t) = vs.persistence {
        let _ = write!(s, " -p {t}");
    }
    if vs.scheduler == crate::config::Scheduler::Mh {
        s.push_str(" -b mh-port");
    }
    s
}

fn real_server_line(verb: &str, vs: &VirtualServer, ip: &std::net::IpAddr, port: u16, weight: u32) -> String {
    format!(
        "{verb} {} {} -r {} -m -w {weight}",
        proto_flag(vs),
        join_host_port(&vs.ip, vs.port),
        join_host_port(ip, port)
    )
}

/// One ipset member in `ipset` syntax (`10.96.0.10,tcp:80`).
pub fn ipset_member(e: &Element) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < e.key.len() {
        if i > 0 {
            out.push(',');
        }
        match (&e.key[i], e.key.get(i + 1)) {
            (Value::Proto(p), Some(Value::Port(port))) => {
                let _ = write!(out, "{p}:{port}");
                i += 2;
                continue;
            }
            (Value::Ip(ip), _) => out.push_str(&ip.to_string()),
            (Value::Net(n), _) => out.push_str(&n.to_string()),
            (Value::Port(p), _) => out.push_str(&p.to_string()),
            (Value::Proto(p), _) => out.push_str(p.as_str()),
            (Value::Int(n), _) => out.push_str(&n.to_string()),
        }
        i += 1;
    }
    out
}

/// `create NAME TYPE ...` for `ipset restore`.
pub fn ipset_create(family: IpFamily, s: &Set) -> String {
    let kind = s.ipset_type.unwrap_or("hash:ip");
    if kind.starts_with("bitmap:") {
        format!("create {} {kind} range 0-65535 -exist", s.name)
    } else {
        let fam = if family == IpFamily::V4 { "inet" } else { "inet6" };
        format!(
            "create {} {kind} family {fam} hashsize 1024 maxelem 65536 -exist",
            s.name
        )
    }
}

/// Every section of a full IPVS program.
pub fn program(p: &Program) -> String {
    let asm = p.assemble();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# addresses on {DUMMY_INTERFACE} are the members of KUBE-IPVS-IPS\n# ipset restore"
    );
    for s in &asm.sets {
        let _ = writeln!(out, "{}", ipset_create(p.family, s.def));
        let mut members: Vec<String> = s.elements.iter().map(|e| ipset_member(e)).collect();
        members.sort();
        for m in members {
            let _ = writeln!(out, "add {} {m}", s.def.name);
        }
    }
    out.push_str("# iptables-restore --noflush\n");
    out.push_str(&iptables::text::program(p, &[]));
    out.push_str("# ipvs virtual servers\n");
    for vs in &asm.virtual_servers {
        out.push_str(&virtual_server_line(vs));
        out.push('\n');
        for rs in &vs.real_servers {
            out.push_str(&real_server_line("-a", vs, &rs.ip, rs.port, rs.weight));
            out.push('\n');
        }
    }
    out
}

/// The operations of a change set, one per line, in a safe order: ipset additions, virtual
/// server changes, ipset removals.
pub fn changes(p: &Program, cs: &ChangeSet) -> String {
    if cs.full {
        return program(p);
    }
    let mut out = String::new();
    fn group(list: &[(SetRef, Element)]) -> BTreeMap<&str, Vec<String>> {
        let mut m: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (s, e) in list {
            m.entry(&*s.name).or_default().push(ipset_member(e));
        }
        m
    }
    for (set, members) in group(&cs.add_elements) {
        for m in members {
            let _ = writeln!(out, "ipset add {set} {m} -exist");
        }
    }
    for vs in &cs.add_virtual_servers {
        let _ = writeln!(out, "ipvs {}", virtual_server_line(vs));
        for rs in &vs.real_servers {
            let _ = writeln!(
                out,
                "ipvs {}",
                real_server_line("-a", vs, &rs.ip, rs.port, rs.weight)
            );
        }
    }
    for (old, new) in &cs.update_virtual_servers {
        if (old.scheduler, old.persistence) != (new.scheduler, new.persistence) {
            let _ = writeln!(out, "ipvs {}", virtual_server_line(new).replacen("-A", "-E", 1));
        }
        for rs in &new.real_servers {
            match old
                .real_servers
                .iter()
                .find(|o| o.ip == rs.ip && o.port == rs.port)
            {
                None => {
                    let _ = writeln!(
                        out,
                        "ipvs {}",
                        real_server_line("-a", new, &rs.ip, rs.port, rs.weight)
                    );
                }
                Some(o) if o.weight != rs.weight => {
                    let _ = writeln!(
                        out,
                        "ipvs {}",
                        real_server_line("-e", new, &rs.ip, rs.port, rs.weight)
                    );
                }
                Some(_) => {}
            }
        }
        for o in old
            .real_servers
            .iter()
            .filter(|o| !new.real_servers.iter().any(|n| n.ip == o.ip && n.port == o.port))
        {
            let _ = writeln!(
                out,
                "ipvs -d {} {} -r {}",
                proto_flag(new),
                join_host_port(&new.ip, new.port),
                join_host_port(&o.ip, o.port)
            );
        }
    }
    for vs in &cs.delete_virtual_servers {
        let _ = writeln!(
            out,
            "ipvs -D {} {}",
            proto_flag(vs),
            join_host_port(&vs.ip, vs.port)
        );
    }
    for (set, members) in group(&cs.delete_elements) {
        for m in members {
            let _ = writeln!(out, "ipset del {set} {m} -exist");
        }
    }
    out
}
