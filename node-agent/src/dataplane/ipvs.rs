//! IPVS: virtual servers over generic netlink, service addresses on the `kube-ipvs0` dummy
//! interface, ipsets through `ipset restore`, and the mode's iptables rules through the
//! iptables backend. IPVS has no transactions: a failed sync is followed by a full one.
//!
//! Removed real servers drain: their weight drops to 0 (no new connections) and they are
//! deleted once they carry no connections, as kube-proxy's graceful termination does.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use tideway_core::config::{IpvsSettings, ProxyMode};
use tideway_core::drain;
use tideway_core::net::Protocol;
use tideway_core::program::{ChangeSet, Program, SetRef, VirtualServer};
use tideway_core::render::ipvs::{DUMMY_INTERFACE, IPVS_IPS, set_name, text};

use super::backend::{Dataplane, DataplaneError, Drift, Retired, Update};
use super::desired::Desired;
use super::iptables::Iptables;
use super::keep::Keep;
use super::observe::Counts;
use crate::exec;
use crate::netlink::ipvs::IpvsNetlink;
use tideway_core::drift::DriftKind;

/// Real servers still draining after this long are removed anyway.
const DRAIN_LIMIT: Duration = Duration::from_secs(15 * 60);

type VsKey = (IpAddr, Protocol, u16);
type RsKey = (IpAddr, u16);

/// The IPVS backend.
pub struct Ipvs {
    iptables: Iptables,
    settings: IpvsSettings,
    netlink: Option<IpvsNetlink>,
    draining: BTreeMap<(VsKey, RsKey), Instant>,
    /// When the cleanup after a mode switch started.
    retiring: Option<Instant>,
    /// How long a cleanup waits for established connections ([`DRAIN_LIMIT`]).
    cleanup_drain: Duration,
    /// The sysctls the last full apply could not set, and why.
    unset_sysctls: Vec<String>,
}

fn key(vs: &VirtualServer) -> VsKey {
    (vs.ip, vs.protocol, vs.port)
}

/// The protocol of an IP protocol number IPVS reports.
fn protocol_of(number: u8) -> Option<Protocol> {
    match number {
        6 => Some(Protocol::Tcp),
        17 => Some(Protocol::Udp),
        132 => Some(Protocol::Sctp),
        _ => None,
    }
}

fn scheduler_module(s: &str) -> String {
    format!("ip_vs_{s}")
}

impl Ipvs {
    /// An IPVS backend writing its rules with `iptables`.
    pub fn new(iptables: Iptables, settings: IpvsSettings) -> Self {
        Ipvs {
            iptables,
            settings,
            netlink: None,
            draining: BTreeMap::new(),
            retiring: None,
            cleanup_drain: DRAIN_LIMIT,
            unset_sysctls: Vec::new(),
        }
    }

    /// A backend whose [`Dataplane::cleanup`] removes everything at once, established
    /// connections or not (`tideway agent --cleanup`).
    pub fn without_drain(mut self) -> Self {
        self.cleanup_drain = Duration::ZERO;
        self
    }

    fn nl(&mut self) -> Result<&mut IpvsNetlink, DataplaneError> {
        if self.netlink.is_none() {
            self.netlink = Some(IpvsNetlink::open()?);
        }
        Ok(self.netlink.as_mut().expect("just opened"))
    }

    /// Kernel modules and sysctls IPVS mode needs (a missing module fails later, with a clearer
    /// error; a sysctl that cannot be set is reported in the node's status).
    fn prepare(&mut self) {
        for m in ["ip_vs", &scheduler_module(self.settings.scheduler.as_str()), "nf_conntrack"] {
            if !std::path::Path::new("/sys/module").join(m).exists() {
                let _ = exec::run("modprobe", &["-q", m], None);
            }
        }
        let mut sysctls = vec![
            ("net/ipv4/vs/conntrack", "1"),
            ("net/ipv4/vs/expire_nodest_conn", "1"),
            ("net/ipv4/vs/expire_quiescent_template", "1"),
            ("net/ipv4/ip_forward", "1"),
        ];
        if self.settings.strict_arp {
            sysctls.push(("net/ipv4/conf/all/arp_ignore", "1"));
            sysctls.push(("net/ipv4/conf/all/arp_announce", "2"));
        }
        self.unset_sysctls.clear();
        for (k, v) in sysctls {
            if let Err(e) = crate::sysctl::ensure(k, v) {
                tracing::error!(error = %e, "cannot set a sysctl IPVS mode needs");
                self.unset_sysctls.push(e.to_string());
            }
        }
        let (t, f, u) = (
            self.settings.tcp_timeout.as_secs() as u32,
            self.settings.tcp_fin_timeout.as_secs() as u32,
            self.settings.udp_timeout.as_secs() as u32,
        );
        if (t, f, u) != (0, 0, 0)
            && let Ok(nl) = self.nl()
        {
            let _ = nl.set_timeouts(t, f, u);
        }
    }

    /// The addresses on the dummy interface, creating it when missing.
    fn ensure_dummy() -> Result<BTreeSet<IpAddr>, DataplaneError> {
        match exec::run("ip", &["-o", "addr", "show", "dev", DUMMY_INTERFACE], None) {
            Ok(out) => Ok(parse_addresses(&out)),
            Err(_) => {
                exec::run("ip", &["link", "add", DUMMY_INTERFACE, "type", "dummy"], None)?;
                Ok(BTreeSet::new())
            }
        }
    }

    fn change_addresses(add: &[IpAddr], del: &[IpAddr]) -> Result<(), DataplaneError> {
        let mut batch = String::new();
        for ip in del {
            let len = if ip.is_ipv4() { 32 } else { 128 };
            batch.push_str(&format!("addr del {ip}/{len} dev {DUMMY_INTERFACE}\n"));
        }
        for ip in add {
            let (len, extra) = if ip.is_ipv4() { (32, "") } else { (128, " nodad") };
            batch.push_str(&format!("addr replace {ip}/{len} dev {DUMMY_INTERFACE}{extra}\n"));
        }
        if !batch.is_empty() {
            exec::run("ip", &["-batch", "-"], Some(&batch))?;
        }
        Ok(())
    }

    fn desired_addresses(desired: [&Program; 2]) -> BTreeSet<IpAddr> {
        desired
            .iter()
            .flat_map(|p| {
                let name = set_name(p.family, IPVS_IPS);
                p.assemble()
                    .set("filter", &name)
                    .map(|s| {
                        s.elements
                            .iter()
                            .filter_map(|e| match e.key.first() {
                                Some(tideway_core::program::Value::Ip(ip)) => Some(*ip),
                                _ => None,
                            })
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default()
            })
            .collect()
    }

    fn ipset_full(p: &Program) -> Result<(), DataplaneError> {
        let asm = p.assemble();
        let mut input = String::new();
        for s in &asm.sets {
            input.push_str(&text::ipset_create(p.family, s.def));
            input.push('\n');
            input.push_str(&format!("flush {}\n", s.def.name));
            for e in &s.elements {
                input.push_str(&format!("add {} {} -exist\n", s.def.name, text::ipset_member(e)));
            }
        }
        exec::run("ipset", &["restore"], Some(&input))?;
        Ok(())
    }

    fn ipset_changes(cs: &ChangeSet) -> Result<(), DataplaneError> {
        let mut input = String::new();
        for (s, e) in &cs.add_elements {
            input.push_str(&format!("add {} {} -exist\n", s.name, text::ipset_member(e)));
        }
        for (s, e) in &cs.delete_elements {
            input.push_str(&format!("del {} {} -exist\n", s.name, text::ipset_member(e)));
        }
        if !input.is_empty() {
            exec::run("ipset", &["restore"], Some(&input))?;
        }
        Ok(())
    }

    /// Makes the kernel's virtual servers match `desired` exactly.
    fn reconcile_services(&mut self, desired: &BTreeMap<VsKey, VirtualServer>) -> Result<(), DataplaneError> {
        let current = self.nl()?.services()?;
        let current: BTreeMap<VsKey, (String, u32)> = current
            .into_iter()
            .filter_map(|s| Some(((s.ip, protocol_of(s.protocol)?, s.port), (s.scheduler, s.timeout))))
            .collect();
        for k in current.keys().filter(|k| !desired.contains_key(*k)) {
            self.nl()?.del_service(&k.0, k.1, k.2)?;
        }
        for (k, vs) in desired {
            match current.get(k) {
                None => self.create(vs)?,
                Some((sched, timeout)) => {
                    if sched != vs.scheduler.as_str() || *timeout != vs.persistence.unwrap_or(0) {
                        self.nl()?.put_service(false, vs)?;
                    }
                    self.sync_dests(vs)?;
                }
            }
        }
        Ok(())
    }

    fn create(&mut self, vs: &VirtualServer) -> Result<(), DataplaneError> {
        self.nl()?.put_service(true, vs)?;
        for rs in &vs.real_servers {
            self.nl()?.add_dest((&vs.ip, vs.protocol, vs.port), &rs.ip, rs.port, rs.weight)?;
        }
        Ok(())
    }

    /// Real servers of one virtual server: add, reweight, and drain the removed ones, as
    /// core's [`drain::steps`] decides.
    fn sync_dests(&mut self, vs: &VirtualServer) -> Result<(), DataplaneError> {
        let svc = (&vs.ip, vs.protocol, vs.port);
        let current = self.nl()?.dests(&vs.ip, vs.protocol, vs.port)?;
        let present: Vec<drain::Present> = current
            .iter()
            .map(|d| drain::Present {
                ip: d.ip,
                port: d.port,
                weight: d.weight,
                connections: d.active + d.inactive,
                draining_for: self.draining.get(&(key(vs), (d.ip, d.port))).map(Instant::elapsed),
            })
            .collect();
        for ((ip, port), step) in drain::steps(vs.protocol, &vs.real_servers, &present, DRAIN_LIMIT) {
            let rk = (key(vs), (ip, port));
            match step {
                drain::Step::Add(w) => self.nl()?.add_dest(svc, &ip, port, w)?,
                drain::Step::Reweight(w) => {
                    self.draining.remove(&rk);
                    self.nl()?.set_dest(svc, &ip, port, w)?;
                }
                drain::Step::Keep => {
                    self.draining.remove(&rk);
                }
                drain::Step::Drain => {
                    self.draining.entry(rk).or_insert_with(Instant::now);
                    if present.iter().any(|p| p.ip == ip && p.port == port && p.weight != 0) {
                        self.nl()?.set_dest(svc, &ip, port, 0)?;
                    }
                }
                drain::Step::Delete => {
                    self.draining.remove(&rk);
                    self.nl()?.del_dest(svc, &ip, port)?;
                }
            }
        }
        Ok(())
    }

    /// Deletes drained real servers that no longer carry connections.
    fn reap(&mut self, desired: &BTreeMap<VsKey, VirtualServer>) -> Result<(), DataplaneError> {
        let pending: BTreeSet<VsKey> = self.draining.keys().map(|(k, _)| *k).collect();
        for k in pending {
            match desired.get(&k) {
                Some(vs) => self.sync_dests(&vs.clone())?,
                None => self.draining.retain(|(v, _), _| *v != k),
            }
        }
        Ok(())
    }

    fn desired_services(desired: [&Program; 2]) -> BTreeMap<VsKey, VirtualServer> {
        desired
            .iter()
            .flat_map(|p| {
                p.assemble().virtual_servers.into_iter().map(|v| (key(v), v.clone())).collect::<Vec<_>>()
            })
            .collect()
    }

    fn address_changes(cs: [&ChangeSet; 2]) -> (Vec<IpAddr>, Vec<IpAddr>) {
        let pick = |list: &[(SetRef, tideway_core::program::Element)]| -> Vec<IpAddr> {
            list.iter()
                .filter(|(s, _)| s.name.ends_with(IPVS_IPS.trim_start_matches("KUBE-")))
                .filter_map(|(_, e)| match e.key.first() {
                    Some(tideway_core::program::Value::Ip(ip)) => Some(*ip),
                    _ => None,
                })
                .collect()
        };
        let add = cs.iter().flat_map(|c| pick(&c.add_elements)).collect();
        let del = cs.iter().flat_map(|c| pick(&c.delete_elements)).collect();
        (add, del)
    }
}

impl Dataplane for Ipvs {
    fn mode(&self) -> ProxyMode {
        ProxyMode::Ipvs
    }

    fn remove_all(&mut self) -> Result<(), DataplaneError> {
        self.cleanup_drain = Duration::ZERO;
        self.cleanup(&Keep::default()).map(|_| ())
    }

    fn apply(&mut self, desired: &Desired<'_>, update: Update<'_>) -> Result<(), DataplaneError> {
        let update = match update {
            Update::Changes(cs) if cs.iter().any(|c| c.full) => Update::Full,
            u => u,
        };
        match update {
            Update::Full => {
                if let Some(seen) = super::peer::kube_proxy() {
                    return Err(seen.into());
                }
                let desired = desired.programs();
                let services = Self::desired_services(desired);
                self.prepare();
                let have = Self::ensure_dummy()?;
                for p in desired {
                    Self::ipset_full(p)?;
                    self.iptables.full(p)?;
                }
                let want = Self::desired_addresses(desired);
                let add: Vec<IpAddr> = want.difference(&have).copied().collect();
                let del: Vec<IpAddr> = have.difference(&want).copied().collect();
                Self::change_addresses(&add, &del)?;
                self.reconcile_services(&services)?;
            }
            Update::Changes(cs) => {
                let (add, del) = Self::address_changes(cs);
                // New addresses and set members first, so a new virtual server is reachable
                // as soon as it exists; removals last.
                Self::change_addresses(&add, &[])?;
                for c in cs {
                    Self::ipset_changes(c)?;
                }
                for c in cs {
                    for vs in &c.add_virtual_servers {
                        self.create(vs)?;
                    }
                    for (old, new) in &c.update_virtual_servers {
                        if (old.scheduler, old.persistence) != (new.scheduler, new.persistence) {
                            self.nl()?.put_service(false, new)?;
                        }
                        self.sync_dests(new)?;
                    }
                    for vs in &c.delete_virtual_servers {
                        self.nl()?.del_service(&vs.ip, vs.protocol, vs.port)?;
                        self.draining.retain(|(k, _), _| *k != key(vs));
                    }
                }
                Self::change_addresses(&[], &del)?;
            }
        }
        // Draining real servers follow their virtual server's desired weights (whole
        // programs are rendered for it only while some drain).
        if self.draining.is_empty() {
            return Ok(());
        }
        self.reap(&Self::desired_services(desired.programs()))
    }

    fn verify(&mut self, desired: &Desired<'_>, deep: bool) -> Result<Vec<Drift>, DataplaneError> {
        let desired = desired.programs();
        let mut drift = Vec::new();
        for p in desired {
            drift.extend(self.iptables.verify_rules(p, &format!("{} ipvs", p.family))?);
        }
        let want = Self::desired_addresses(desired);
        let have = exec::run("ip", &["-o", "addr", "show", "dev", DUMMY_INTERFACE], None)
            .map(|out| parse_addresses(&out))
            .unwrap_or_default();
        if want != have {
            drift.push(Drift {
                kind: DriftKind::Addresses,
                object: format!("interface {DUMMY_INTERFACE}"),
                detail: format!("{} addresses, expected {}", have.len(), want.len()),
            });
        }
        let services = Self::desired_services(desired);
        let kernel: BTreeSet<VsKey> = self
            .nl()?
            .services()?
            .into_iter()
            .filter_map(|s| Some((s.ip, protocol_of(s.protocol)?, s.port)))
            .collect();
        let wanted: BTreeSet<VsKey> = services.keys().copied().collect();
        if kernel != wanted {
            drift.push(Drift {
                kind: DriftKind::VirtualServers,
                object: "ipvs virtual servers".into(),
                detail: format!("{} in the kernel, expected {}", kernel.len(), wanted.len()),
            });
        }
        if deep {
            for (k, vs) in &services {
                let dests = self.nl()?.dests(&k.0, k.1, k.2)?;
                let live: BTreeSet<RsKey> =
                    dests.iter().filter(|d| d.weight > 0).map(|d| (d.ip, d.port)).collect();
                let want: BTreeSet<RsKey> =
                    vs.real_servers.iter().filter(|r| r.weight > 0).map(|r| (r.ip, r.port)).collect();
                if live != want {
                    drift.push(Drift {
                        kind: DriftKind::RealServers,
                        object: format!("ipvs {}", text::virtual_server_line(vs)),
                        detail: format!("{} real servers, expected {}", live.len(), want.len()),
                    });
                }
            }
            let out = exec::run("ipset", &["list", "-t"], None)?;
            let mut observed = Counts::default();
            let mut current: Option<String> = None;
            for line in out.lines() {
                if let Some(n) = line.strip_prefix("Name: ") {
                    current = Some(n.trim().to_string());
                } else if let (Some(n), Some(count)) = (&current, line.strip_prefix("Number of entries: ")) {
                    observed.sets.insert(("filter".into(), n.clone()), count.trim().parse().unwrap_or(0));
                }
            }
            for p in desired {
                let mut want = Counts::of(p);
                want.chains.clear();
                drift.extend(want.compare(&observed, true, &format!("{} ipset", p.family)));
            }
        }
        Ok(drift)
    }

    /// First call: the mode's iptables rules and ipsets go at once, so nothing new reaches
    /// IPVS. The virtual servers and their addresses stay while they carry established
    /// connections (up to [`DRAIN_LIMIT`]), then go too, with the UDP conntrack entries that
    /// only IPVS could translate.
    fn cleanup(&mut self, keep: &Keep) -> Result<Retired, DataplaneError> {
        let since = *self.retiring.get_or_insert_with(Instant::now);
        self.draining.clear();
        self.iptables.remove(keep)?;
        if super::peer::kube_proxy().is_some() {
            // kube-proxy's IPVS mode has the same interface, ipsets and virtual servers.
            self.retiring = None;
            return Ok(Retired::Done);
        }
        if let Ok(names) = exec::run("ipset", &["list", "-n"], None) {
            for n in names.lines().filter(|n| n.starts_with("KUBE-")) {
                exec::run("ipset", &["destroy", n], None)?;
            }
        }
        let services = match self.nl() {
            Ok(nl) => nl.services()?,
            Err(_) => Vec::new(),
        };
        let mut established = 0;
        for s in &services {
            if let Some(proto) = protocol_of(s.protocol) {
                established += self.nl()?.dests(&s.ip, proto, s.port)?.iter().map(|d| d.active).sum::<u32>();
            }
        }
        if established > 0 && since.elapsed() < self.cleanup_drain {
            return Ok(Retired::Draining(format!("{established} established connections through IPVS")));
        }
        for s in services.iter().filter(|s| protocol_of(s.protocol) == Some(Protocol::Udp)) {
            let (ip, port) = (s.ip.to_string(), s.port.to_string());
            let _ = exec::run(
                "conntrack",
                &["-D", "-p", "udp", "--orig-dst", &ip, "--orig-port-dst", &port],
                None,
            );
        }
        if let Ok(nl) = self.nl() {
            nl.flush()?;
        }
        if exec::run("ip", &["link", "show", DUMMY_INTERFACE], None).is_ok() {
            exec::run("ip", &["link", "del", DUMMY_INTERFACE], None)?;
        }
        self.retiring = None;
        Ok(Retired::Done)
    }

    /// Only what Tideway marked as its own: kube-proxy's IPVS mode has the same interface and
    /// ipsets.
    fn present(&mut self) -> Result<bool, DataplaneError> {
        Ok(self.iptables.marked()? && self.has_objects()?)
    }

    fn unset_sysctls(&self) -> Vec<String> {
        self.unset_sysctls.clone()
    }
}

impl Ipvs {
    /// True when IPVS mode's interface or ipsets exist, whoever made them.
    pub(super) fn has_objects(&mut self) -> Result<bool, DataplaneError> {
        if exec::run("ip", &["link", "show", DUMMY_INTERFACE], None).is_ok() {
            return Ok(true);
        }
        let sets = exec::run("ipset", &["list", "-n"], None).unwrap_or_default();
        Ok(sets.lines().any(|n| n.starts_with("KUBE-") && (n.contains("CLUSTER-IP") || n.contains("IPVS"))))
    }
}

/// Addresses in `ip -o addr show` output.
fn parse_addresses(out: &str) -> BTreeSet<IpAddr> {
    out.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            words.find(|w| *w == "inet" || *w == "inet6")?;
            words.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}
