//! A bounded map of answers that expire: each entry has its own deadline, and when the map is
//! full the entry used longest ago makes room (one at a time, never the whole map). Pure: the
//! caller says what time it is.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Instant;

/// Answers by key, each until its deadline, at most `capacity` of them.
#[derive(Debug)]
pub struct TtlLru<K, V> {
    capacity: usize,
    entries: HashMap<K, Entry<V>>,
    /// Keys by when they were last used (a counter, not a clock).
    order: BTreeMap<u64, K>,
    tick: u64,
}

#[derive(Debug)]
struct Entry<V> {
    value: V,
    until: Instant,
    used: u64,
}

impl<K: Clone + Hash + Eq, V: Clone> TtlLru<K, V> {
    /// An empty map holding at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        TtlLru { capacity: capacity.max(1), entries: HashMap::new(), order: BTreeMap::new(), tick: 0 }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The answer for `key` if it is still good at `now` (it then counts as just used); an
    /// expired one is dropped.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        let tick = self.next_tick();
        let entry = self.entries.get_mut(key)?;
        if now >= entry.until {
            let used = entry.used;
            self.entries.remove(key);
            self.order.remove(&used);
            return None;
        }
        self.order.remove(&entry.used);
        entry.used = tick;
        self.order.insert(tick, key.clone());
        Some(entry.value.clone())
    }

    /// Keeps `value` for `key` until `until`; a full map first drops the entry used longest ago.
    pub fn insert(&mut self, key: K, value: V, until: Instant) {
        let tick = self.next_tick();
        if let Some(old) = self.entries.remove(&key) {
            self.order.remove(&old.used);
        } else if self.entries.len() >= self.capacity
            && let Some((_, oldest)) = self.order.pop_first()
        {
            self.entries.remove(&oldest);
        }
        self.order.insert(tick, key.clone());
        self.entries.insert(key, Entry { value, until, used: tick });
    }

    /// How many entries are kept (expired ones included until looked up or pushed out).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No entry kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The keys kept.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.entries.keys()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_answer_is_good_until_its_deadline() {
        let t0 = Instant::now();
        let mut c = TtlLru::new(4);
        c.insert("a", 1, t0 + Duration::from_secs(10));
        c.insert("b", 2, t0 + Duration::from_secs(5));
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(9)), Some(1));
        assert_eq!(c.get(&"b", t0 + Duration::from_secs(5)), None, "expired at its deadline");
        assert_eq!(c.len(), 1, "the expired one is dropped");
        assert_eq!(c.get(&"a", t0 + Duration::from_secs(10)), None);
        assert!(c.is_empty());
    }

    #[test]
    fn a_full_map_drops_the_entry_used_longest_ago_one_at_a_time() {
        let t0 = Instant::now();
        let until = t0 + Duration::from_secs(60);
        let mut c = TtlLru::new(3);
        for (k, v) in [("a", 1), ("b", 2), ("c", 3)] {
            c.insert(k, v, until);
        }
        assert_eq!(c.get(&"a", t0), Some(1), "a is now the most recent");
        c.insert("d", 4, until);
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&"b", t0), None, "b was used longest ago");
        for k in ["a", "c", "d"] {
            assert!(c.get(&k, t0).is_some(), "{k} kept");
        }
        c.insert("c", 30, until);
        assert_eq!((c.len(), c.get(&"c", t0)), (3, Some(30)), "a new answer replaces the old in place");
    }

    #[test]
    fn many_keys_never_grow_it_past_its_capacity() {
        let t0 = Instant::now();
        let mut c = TtlLru::new(100);
        for i in 0..10_000 {
            c.insert(i, i, t0 + Duration::from_secs(1));
            assert!(c.len() <= 100);
        }
        assert_eq!(c.order.len(), c.entries.len());
        assert_eq!(c.get(&9_999, t0), Some(9_999), "the newest are kept");
        assert_eq!(c.get(&0, t0), None);
    }
}
