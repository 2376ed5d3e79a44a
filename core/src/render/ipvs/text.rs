//! IPVS program text: `ipset restore` input, `iptables-restore` input and `ipvsadm`-style
//! virtual server lines.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::net::{IpFamily, join_host_port};
use crate::program::{ChangeSet, Element, Program, Set, SetRef, Value, VirtualServer};
use crate::render::fmt;
use crate::render::iptables;

use super::lower::DUMMY_INTERFACE;

fn proto_flag(vs: &VirtualServer) -> &'static str {
    match vs.protocol {
        crate::net::Protocol::Tcp => "-t",
        crate::net::Protocol::Udp => "-u",
        crate::net::Protocol::Sctp => "--sctp-service",
    }
}

/// Appends `-A -t 10.96.0.10:80 -s rr [-p 10800]` (ipvsadm syntax).
pub fn write_virtual_server(out: &mut String, vs: &VirtualServer) {
    out.push_str("-A ");
    out.push_str(proto_flag(vs));
    out.push(' ');
    fmt::push_host_port(out, &vs.ip, vs.port);
    out.push_str(" -s ");
    out.push_str(vs.scheduler.as_str());
    if let Some(t) = vs.persistence {
        out.push_str(" -p ");
        fmt::push_u32(out, t);
    }
    if vs.scheduler == crate::config::Scheduler::Mh {
        out.push_str(" -b mh-port");
    }
}

/// `-A -t 10.96.0.10:80 -s rr [-p 10800]` (ipvsadm syntax).
pub fn virtual_server_line(vs: &VirtualServer) -> String {
    let mut s = String::with_capacity(48);
    write_virtual_server(&mut s, vs);
    s
}

fn write_real_server(
    out: &mut String,
    verb: &str,
    vs: &VirtualServer,
    ip: &std::net::IpAddr,
    port: u16,
    weight: u32,
) {
    out.push_str(verb);
    out.push(' ');
    out.push_str(proto_flag(vs));
    out.push(' ');
    fmt::push_host_port(out, &vs.ip, vs.port);
    out.push_str(" -r ");
    fmt::push_host_port(out, ip, port);
    out.push_str(" -m -w ");
    fmt::push_u32(out, weight);
}

fn real_server_line(verb: &str, vs: &VirtualServer, ip: &std::net::IpAddr, port: u16, weight: u32) -> String {
    let mut s = String::with_capacity(64);
    write_real_server(&mut s, verb, vs, ip, port, weight);
    s
}

/// Appends one ipset member in `ipset` syntax (`10.96.0.10,tcp:80`).
pub fn write_ipset_member(out: &mut String, e: &Element) {
    let mut i = 0;
    while i < e.key.len() {
        if i > 0 {
            out.push(',');
        }
        match (&e.key[i], e.key.get(i + 1)) {
            (Value::Proto(p), Some(Value::Port(port))) => {
                out.push_str(p.as_str());
                out.push(':');
                fmt::push_u32(out, (*port).into());
                i += 2;
                continue;
            }
            (Value::Ip(ip), _) => fmt::push_ip(out, ip),
            (Value::Net(n), _) => fmt::push_net(out, n),
            (Value::Port(p), _) => fmt::push_u32(out, (*p).into()),
            (Value::Proto(p), _) => out.push_str(p.as_str()),
            (Value::Int(n), _) => fmt::push_u32(out, *n),
        }
        i += 1;
    }
}

/// One ipset member in `ipset` syntax (`10.96.0.10,tcp:80`).
pub fn ipset_member(e: &Element) -> String {
    let mut s = String::with_capacity(40);
    write_ipset_member(&mut s, e);
    s
}

/// `create NAME TYPE ...` for `ipset restore`.
pub fn ipset_create(family: IpFamily, s: &Set) -> String {
    let kind = s.ipset_type.unwrap_or("hash:ip");
    if kind.starts_with("bitmap:") {
        format!("create {} {kind} range 0-65535 -exist", s.name)
    } else {
        let fam = if family == IpFamily::V4 { "inet" } else { "inet6" };
        format!("create {} {kind} family {fam} hashsize 1024 maxelem 65536 -exist", s.name)
    }
}

/// Every section of a full IPVS program.
pub fn program(p: &Program) -> String {
    let asm = p.assemble();
    let mut out = String::with_capacity(asm.sets.iter().map(|s| s.elements.len() * 48).sum::<usize>() + 4096);
    let _ =
        writeln!(out, "# addresses on {DUMMY_INTERFACE} are the members of KUBE-IPVS-IPS\n# ipset restore");
    for s in &asm.sets {
        let _ = writeln!(out, "{}", ipset_create(p.family, s.def));
        for e in &s.elements {
            out.push_str("add ");
            out.push_str(&s.def.name);
            out.push(' ');
            write_ipset_member(&mut out, e);
            out.push('\n');
        }
    }
    out.push_str("# iptables-restore --noflush\n");
    out.push_str(&iptables::text::program(p, &[]));
    out.push_str("# ipvs virtual servers\n");
    for vs in &asm.virtual_servers {
        write_virtual_server(&mut out, vs);
        out.push('\n');
        for rs in &vs.real_servers {
            write_real_server(&mut out, "-a", vs, &rs.ip, rs.port, rs.weight);
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
            let _ = writeln!(out, "ipvs {}", real_server_line("-a", vs, &rs.ip, rs.port, rs.weight));
        }
    }
    for (old, new) in &cs.update_virtual_servers {
        if (old.scheduler, old.persistence) != (new.scheduler, new.persistence) {
            let _ = writeln!(out, "ipvs {}", virtual_server_line(new).replacen("-A", "-E", 1));
        }
        for rs in &new.real_servers {
            match old.real_servers.iter().find(|o| o.ip == rs.ip && o.port == rs.port) {
                None => {
                    let _ = writeln!(out, "ipvs {}", real_server_line("-a", new, &rs.ip, rs.port, rs.weight));
                }
                Some(o) if o.weight != rs.weight => {
                    let _ = writeln!(out, "ipvs {}", real_server_line("-e", new, &rs.ip, rs.port, rs.weight));
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
        let _ = writeln!(out, "ipvs -D {} {}", proto_flag(vs), join_host_port(&vs.ip, vs.port));
    }
    for (set, members) in group(&cs.delete_elements) {
        for m in members {
            let _ = writeln!(out, "ipset del {set} {m} -exist");
        }
    }
    out
}
