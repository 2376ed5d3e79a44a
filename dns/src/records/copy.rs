//! A Service copied from the part it was in, unchanged: when a change rebuilds a part, only
//! the Services it touched are read from the view again (their namespace, their slices, their
//! rows); every other Service's records come from the old part, already flat, their labels
//! and port lists interned again in the new one. The copy claims its addresses in the same
//! order a build from the view does, so the part answers as one built whole.

use std::net::{IpAddr, Ipv4Addr};

use super::{Builder, len32};
use crate::records::layout::{EndpointRecord, Kind, Port, ServiceRecords, Span};
use crate::records::reverse::Target;
use crate::records::shard::Shard;

impl Builder {
    /// Adds Service `svc` of part `old` as that part holds it.
    pub(in crate::records) fn copy_service(&mut self, old: &Shard, svc: &ServiceRecords) {
        let kind = match svc.kind {
            Kind::ExternalName(i) => {
                let Some(target) = old.external_names.get(i as usize) else { return };
                self.part.external_names.push(target.clone());
                Kind::ExternalName(len32(self.part.external_names.len() - 1))
            }
            kind => kind,
        };
        let ips = self.copy_ips(Span::of(&old.ips, svc.ips));
        let ports = self.copy_ports(old, svc.ports);
        let external = self.copy_ips(Span::of(&old.ips, svc.external));
        let eps_start = len32(self.part.endpoints.len());
        for record in Span::of(&old.endpoints, svc.endpoints) {
            self.copy_endpoint(old, record);
        }
        let record = ServiceRecords {
            ns: self.intern(old.text(svc.ns)),
            name: self.intern(old.text(svc.name)),
            kind,
            ips,
            ports,
            endpoints: Span { start: eps_start, len: len32(self.part.endpoints.len()) - eps_start },
            external,
            spec_version: svc.spec_version,
        };
        self.part.services.push(record);
    }

    fn copy_ips(&mut self, ips: &[IpAddr]) -> Span {
        let start = len32(self.part.ips.len());
        self.part.ips.extend_from_slice(ips);
        Span { start, len: len32(ips.len()) }
    }

    /// The ports at `span` of `old`, their names interned here.
    fn copy_ports(&mut self, old: &Shard, span: Span) -> Span {
        let start = len32(self.part.ports.len());
        for port in Span::of(&old.ports, span) {
            let name = self.intern(old.text(port.name));
            self.part.ports.push(Port { name, ..*port });
        }
        Span { start, len: len32(self.part.ports.len()) - start }
    }

    /// Endpoint `record` of `old`, claiming its address.
    fn copy_endpoint(&mut self, old: &Shard, record: &EndpointRecord) {
        let host = match old.hosts.get(record.host as usize) {
            Some(span) => self.host_of(old.text(*span)),
            None => EndpointRecord::DASHED,
        };
        let v6 = record.port_set & EndpointRecord::V6;
        let port_set = self.copy_port_set(old, record.port_set & !EndpointRecord::V6) | v6;
        let (ip, addr) = if v6 == 0 {
            (record.ip, IpAddr::V4(Ipv4Addr::from(record.ip)))
        } else {
            let Some(addr) = old.v6.get(record.ip as usize).copied() else { return };
            self.part.v6.push(addr);
            (len32(self.part.v6.len() - 1), IpAddr::V6(addr))
        };
        self.reverse.push(addr, Target::Endpoint(len32(self.part.endpoints.len())));
        self.part.endpoints.push(EndpointRecord { host, port_set, ip });
    }

    /// The place here of port list `i` of `old`, copying it the first time.
    fn copy_port_set(&mut self, old: &Shard, i: u32) -> u32 {
        if let Some(at) = self.copied_port_sets.get(&i) {
            return *at;
        }
        let span = old.port_sets.get(i as usize).copied().unwrap_or_default();
        let ports = self.copy_ports(old, span);
        let at = len32(self.part.port_sets.len());
        self.part.port_sets.push(ports);
        self.copied_port_sets.insert(i, at);
        at
    }
}
