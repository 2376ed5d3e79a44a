//! How many forwarded queries may wait for an upstream at once: in all (CoreDNS's
//! `max_concurrent`, REFUSED above it) and per client address, so that one client asking for
//! names an upstream never answers cannot take every slot and get every other pod REFUSED.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The queries in flight, in all and by client.
#[derive(Debug, Default)]
pub struct Limits {
    total: AtomicUsize,
    /// Keyed with the standard library's seeded hash: the addresses are the clients'.
    by_client: Mutex<HashMap<IpAddr, usize>>,
}

/// Which limit refused a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `max_concurrent`.
    Total,
    /// The per-client limit.
    Client,
}

/// A query's place among those in flight, given back when dropped.
#[derive(Debug)]
pub struct Slot<'a> {
    limits: &'a Limits,
    client: IpAddr,
}

impl Limits {
    /// Takes a slot for a query from `client`, within `max` in all and `per_client` for
    /// the client (0: no per-client limit).
    pub fn enter(&self, client: IpAddr, max: usize, per_client: usize) -> Result<Slot<'_>, Refused> {
        if self.total.fetch_add(1, Ordering::Relaxed) >= max {
            self.total.fetch_sub(1, Ordering::Relaxed);
            return Err(Refused::Total);
        }
        let mut by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
        let mine = by_client.entry(client).or_insert(0);
        if per_client > 0 && *mine >= per_client {
            drop(by_client);
            self.total.fetch_sub(1, Ordering::Relaxed);
            return Err(Refused::Client);
        }
        *mine += 1;
        Ok(Slot { limits: self, client })
    }

    /// Queries in flight, in all and from `client`.
    pub fn in_flight(&self, client: IpAddr) -> (usize, usize) {
        let by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
        (self.total.load(Ordering::Relaxed), by_client.get(&client).copied().unwrap_or(0))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut by_client = self.limits.by_client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = by_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                by_client.remove(&self.client);
            }
        }
        drop(by_client);
        self.limits.total.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_cannot_take_every_slot() {
        let limits = Limits::default();
        let (a, b): (IpAddr, IpAddr) = ("10.244.1.5".parse().unwrap(), "10.244.2.9".parse().unwrap());
        let held: Vec<Slot<'_>> = (0..3).map(|_| limits.enter(a, 10, 3).unwrap()).collect();
        assert_eq!(limits.enter(a, 10, 3).unwrap_err(), Refused::Client);
        let others: Vec<Slot<'_>> = (0..7).map(|_| limits.enter(b, 10, 0).unwrap()).collect();
        assert_eq!(limits.enter(b, 10, 0).unwrap_err(), Refused::Total, "the total still holds");
        assert_eq!(limits.in_flight(a), (10, 3));
        drop(held);
        assert_eq!(limits.in_flight(a), (7, 0));
        assert!(limits.enter(a, 10, 3).is_ok(), "slots come back");
        drop(others);
        assert_eq!(limits.in_flight(b), (0, 0));
        assert!(limits.by_client.lock().unwrap().is_empty(), "no client is remembered without queries");
    }
}
