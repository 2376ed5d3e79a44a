//! Set capacities: the size each set is declared with, and when a change no longer fits.
//!
//! A set declared with a size gets a hash table of that size from the start (the kernel
//! chooses its fixed-size hash for it) instead of a resizable one that rehashes again and
//! again while a full sync fills it: at 100,000 Services that halves the kernel's share of a
//! full sync. The size is also a limit (the kernel refuses elements beyond it with `ENFILE`),
//! so every set is declared with room to grow, and [`Room`] follows how full each one is: the
//! netlink backend applies a change set that would overflow a set as a full sync instead, which declares the
//! sets again with room for what they then hold.

use std::collections::HashMap;

use crate::program::{ChangeSet, Program, Set};

/// The least room a set is declared with (a small cluster grows by this much between full
/// syncs; its fixed-size table costs the kernel a few KiB).
pub const MIN_CAPACITY: usize = 1024;

/// The size `set` is declared with when it holds `elements`: twice that, at least
/// [`MIN_CAPACITY`]. `None` for sets the kernel keeps in other structures (intervals), fills
/// itself (timeouts) or that grow from nothing as elements move in from other sets
/// (resizable), which are declared without one.
pub fn capacity(set: &Set, elements: usize) -> Option<u32> {
    if set.flags.interval || set.flags.dynamic_timeout.is_some() || set.flags.resizable {
        return None;
    }
    Some(u32::try_from((2 * elements).max(MIN_CAPACITY)).unwrap_or(u32::MAX))
}

/// How full each sized set of one family's table is: `(elements, capacity)` by set name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Room {
    sets: HashMap<String, (usize, u32)>,
}

impl Room {
    /// The sets of `p` as a full apply declares them.
    pub fn of(p: &Program) -> Room {
        let mut room = Room::default();
        for s in p.assemble().sets {
            room.declare(s.def, s.elements.len());
        }
        room
    }

    /// Notes `set` declared for `elements` (a full apply that counts them as it writes them).
    pub fn declare(&mut self, set: &Set, elements: usize) {
        if let Some(cap) = capacity(set, elements) {
            self.sets.insert(set.name.to_string(), (elements, cap));
        }
    }

    /// Follows a repair that declared the sets `names` again, sized for what `p` puts in them
    /// (a set refilled keeps its declaration, and `p` holds no more than it had room for).
    pub fn redeclared<'n>(&mut self, p: &Program, names: impl IntoIterator<Item = &'n String>) {
        let asm = p.assemble();
        for name in names {
            let Some(s) = asm.sets.iter().find(|s| *s.def.name == **name) else { continue };
            if let Some(cap) = capacity(s.def, s.elements.len()) {
                self.sets.insert(name.clone(), (s.elements.len(), cap));
            }
        }
    }

    /// True when `cs` leaves every set within its capacity.
    pub fn fits(&self, cs: &ChangeSet) -> bool {
        let mut added: HashMap<&str, usize> = HashMap::new();
        for (s, _) in &cs.add_elements {
            *added.entry(&s.name).or_default() += 1;
        }
        added.into_iter().all(|(name, n)| match self.sets.get(name) {
            Some((held, cap)) => held + n <= *cap as usize,
            None => true,
        })
    }

    /// Follows `cs` (applied).
    pub fn apply(&mut self, cs: &ChangeSet) {
        for s in &cs.delete_sets {
            self.sets.remove(&*s.name);
        }
        for s in &cs.add_sets {
            if let Some(cap) = capacity(s, s.elements.len()) {
                self.sets.insert(s.name.to_string(), (s.elements.len(), cap));
            }
        }
        for (s, _) in &cs.delete_elements {
            if let Some((held, _)) = self.sets.get_mut(&*s.name) {
                *held = held.saturating_sub(1);
            }
        }
        for (s, _) in &cs.add_elements {
            if let Some((held, _)) = self.sets.get_mut(&*s.name) {
                *held += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{Element, SetFlags, SetRef, Value};

    fn set(name: &str, flags: SetFlags) -> Set {
        Set {
            table: "tideway",
            name: name.into(),
            key: Vec::new(),
            data: None,
            flags,
            ipset_type: None,
            shared: false,
            elements: Vec::new(),
            comment: None,
        }
    }

    fn elems(name: &str, n: u16) -> Vec<(SetRef, Element)> {
        let r = SetRef { table: "tideway", name: name.into() };
        (0..n)
            .map(|i| (r.clone(), Element { key: [Value::Port(i)].into_iter().collect(), data: None }))
            .collect()
    }

    #[test]
    fn sets_get_twice_their_size_at_least_the_minimum_and_kernel_kept_ones_none() {
        let plain = set("service-ips", SetFlags::default());
        assert_eq!(capacity(&plain, 0), Some(MIN_CAPACITY as u32));
        assert_eq!(capacity(&plain, 100_000), Some(200_000));
        assert_eq!(
            capacity(&set("firewall-allow", SetFlags { interval: true, ..SetFlags::default() }), 5),
            None
        );
        assert_eq!(
            capacity(&set("affinity", SetFlags { dynamic_timeout: Some(10), ..SetFlags::default() }), 0),
            None
        );
        let per_count = set("cluster-lb-3-frontends", SetFlags { resizable: true, ..SetFlags::default() });
        assert_eq!(capacity(&per_count, 100_000), None);
    }

    #[test]
    fn a_change_that_would_overflow_a_set_does_not_fit() {
        let mut room = Room { sets: [("service-ips".to_string(), (1020, 1024))].into() };
        let four = ChangeSet { add_elements: elems("service-ips", 4), ..ChangeSet::default() };
        let five = ChangeSet { add_elements: elems("service-ips", 5), ..ChangeSet::default() };
        assert!(room.fits(&four));
        assert!(!room.fits(&five));
        // Deleting makes room; sets without a capacity never overflow.
        room.apply(&ChangeSet { delete_elements: elems("service-ips", 3), ..ChangeSet::default() });
        assert!(room.fits(&five));
        room.apply(&five);
        assert_eq!(room.sets["service-ips"], (1022, 1024));
        assert!(
            room.fits(&ChangeSet { add_elements: elems("firewall-allow", 5000), ..ChangeSet::default() })
        );
    }
}
