//! The index after a few Services changed: their parts rebuilt, every other part shared with
//! the index before. In a rebuilt part only the changed Services are read from the view; the
//! others (a few hundred) are copied from the part as it was, already flat, so one Service's
//! change costs a copy of a few hundred Services' records, not the cluster's work; and the
//! index is swapped in whole, so a query sees each name's old version or its new one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::build::{Builder, has_capitals, part_of_service, soa_of, suffix_len};
use super::external::ExternalIndex;
use super::rows::Rows;
use super::{IndexSettings, Namespace, PodsMode, RecordIndex};
use crate::view::{ClusterView, Named};

/// A part grown past this many Services, while the index could still be cut finer, makes
/// the update a full build instead (which cuts it again).
const PART_LIMIT: usize = 1536;

/// The Services a change touched, by namespace and name (as the view spells them).
type Touched = BTreeSet<(Box<str>, Box<str>)>;

impl RecordIndex {
    /// This index with the Services in `touched` as `view` has them now (changed, added or
    /// gone): their parts rebuilt, the rest shared. `None` when only a full build will do: an
    /// index not synced, a name with capitals, a part grown too large.
    pub fn updated(
        &self,
        view: &ClusterView,
        settings: &IndexSettings,
        serial: u32,
        touched: &Touched,
    ) -> Option<RecordIndex> {
        let capitals = touched.iter().any(|(ns, name)| has_capitals(ns) || has_capitals(name));
        if !self.synced || self.capitals || capitals {
            return None;
        }
        let mut by_part: BTreeMap<usize, Vec<(&str, &str)>> = BTreeMap::new();
        for (ns, name) in touched {
            by_part.entry(part_of_service(ns, name, self.part_bits)).or_default().push((ns, name));
        }
        let mut ix = self.clone();
        let rows_of = Rows::looking_up(view, suffix_len(&self.svc_zone), settings.endpoint_pod_names);
        for (at, keys) in by_part {
            let part = self.rebuilt_part(at, &keys, view, settings, &rows_of);
            if part.services.len() > PART_LIMIT && self.part_bits < super::build::MAX_PART_BITS {
                return None;
            }
            ix.parts[at] = Arc::new(part);
        }
        ix.update_namespaces(view, settings, touched);
        let dns = settings.dns_service.as_ref();
        if dns.is_some_and(|d| touched.iter().any(|(ns, name)| **ns == d.namespace && **name == d.name)) {
            let addrs = dns.and_then(|d| ix.published_addresses(view, &d.namespace, &d.name));
            ix.set_ns_addrs(settings, addrs);
        }
        ix.serial = serial;
        ix.soa = soa_of(&ix.zone, &ix.ns_name, settings, serial);
        if let (Some(ext), Some(zone)) = (&mut ix.external, &settings.external) {
            let ns_addrs = std::mem::take(&mut ext.ns_addrs);
            *ext = ExternalIndex::new(zone, serial);
            ext.ns_addrs = ns_addrs;
        }
        Some(ix)
    }

    /// Part `at` again: the Services in `keys` as `view` has them now, every other Service
    /// the part held copied from it (`copy.rs`), in namespace, then name order, as a full
    /// build writes them. Only the changed Services are looked up in the view.
    fn rebuilt_part(
        &self,
        at: usize,
        keys: &[(&str, &str)],
        view: &ClusterView,
        settings: &IndexSettings,
        rows_of: &Rows<'_>,
    ) -> super::shard::Shard {
        let old = &self.parts[at];
        let changed: BTreeSet<(&[u8], &[u8])> =
            keys.iter().map(|(ns, name)| (ns.as_bytes(), name.as_bytes())).collect();
        let names_of =
            |i: &u32| old.services.get(*i as usize).map(|s| (s, (old.text(s.ns), old.text(s.name))));
        let mut kept =
            old.by_name.iter().filter_map(names_of).filter(|(_, key)| !changed.contains(key)).peekable();
        let mut b =
            Builder::new(suffix_len(&self.svc_zone), settings.external.is_some(), old.endpoints.len());
        let mut rows = Vec::new();
        for key in &changed {
            while let Some((svc, _)) = kept.next_if(|(_, k)| k < key) {
                b.copy_service(old, svc);
            }
            let (Ok(ns), Ok(name)) = (std::str::from_utf8(key.0), std::str::from_utf8(key.1)) else {
                continue;
            };
            let Some((ns, namespace)) = view.namespaces.get_key_value(ns) else { continue };
            let Some(facts) = namespace.services.get(name) else { continue };
            let slices = namespace.slices_of(name);
            rows.clear();
            rows_of.service((ns, facts.name()), facts, &slices, &mut rows);
            b.service((ns, facts.name(), facts), &rows);
        }
        for (svc, _) in kept {
            b.copy_service(old, svc);
        }
        b.finish()
    }

    /// The namespaces `touched` names, present or gone as in `view` (a Service alone can make
    /// one, from a manifest without its Namespace object).
    fn update_namespaces(&mut self, view: &ClusterView, settings: &IndexSettings, touched: &Touched) {
        let names: BTreeSet<&str> = touched.iter().map(|(ns, _)| &**ns).collect();
        for ns in names {
            let in_view = view.namespaces.get(ns);
            if in_view.is_some() == self.namespaces.contains_key(ns.as_bytes()) {
                continue;
            }
            let namespaces = Arc::make_mut(&mut self.namespaces);
            match in_view {
                Some(namespace) => {
                    let mut entry = Namespace::default();
                    if settings.pods == PodsMode::Verified {
                        entry.pod_ips.extend(namespace.pods.iter().flat_map(|p| p.ips.iter().copied()));
                    }
                    namespaces.insert(ns.as_bytes().into(), entry);
                }
                None => {
                    namespaces.remove(ns.as_bytes());
                }
            }
        }
    }

    /// The ClusterIPs and external addresses of Service `name` in `ns`, when it is published.
    fn published_addresses(
        &self,
        view: &ClusterView,
        ns: &str,
        name: &str,
    ) -> Option<(Vec<std::net::IpAddr>, Vec<std::net::IpAddr>)> {
        self.service(ns.as_bytes(), name.as_bytes())?;
        let facts = view.namespaces.get(ns)?.services.get(name)?.read();
        Some((facts.cluster_ips.collect(), facts.external.collect()))
    }
}

#[cfg(test)]
#[path = "update_tests.rs"]
mod tests;
