//! The allocator: who holds which address, and the decisions of `restore`, `assign`,
//! `release` and `set_pools`.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use smallvec::SmallVec;

use super::error::{AllocError, PoolError};
use super::pool::PoolStats;
use super::pool::{PoolEntry, PoolSet, families_of};
use super::range::UsedRuns;
use super::request::{Assignment, ClearReason, Cleared, LbRequest};
use super::share::Terms;
use crate::model::Pool;
use crate::model::ServiceName;
use crate::net::IpFamily;

/// What [`Allocator::set_pools`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolsReport {
    /// Invalid pools and why (each pool's `Valid` condition).
    pub invalid: BTreeMap<String, PoolError>,
    /// Services whose addresses no configured pool holds any more: call
    /// [`Allocator::assign`] for each, which replaces the addresses (MetalLB >= 0.14).
    pub orphaned: Vec<ServiceName>,
    /// Services that keep addresses of a pool that is now invalid.
    pub kept_in_invalid: Vec<ServiceName>,
}

/// One pool's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStatus {
    /// The pool.
    pub name: String,
    /// Why it is invalid, if it is.
    pub error: Option<PoolError>,
    /// Usage.
    pub stats: PoolStats,
}

/// What one Service holds.
#[derive(Debug, Clone)]
struct Held {
    ips: Vec<IpAddr>,
    pool: String,
    /// No configured pool holds `ips` any more.
    orphaned: bool,
    terms: Terms,
}

/// LoadBalancer address allocator (see the module documentation for the rules).
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    pools: PoolSet,
    held: BTreeMap<ServiceName, Held>,
    /// Who holds each address in use.
    users: BTreeMap<IpAddr, SmallVec<[ServiceName; 1]>>,
    /// The same addresses, as runs, for the lowest-free lookup.
    used: UsedRuns,
    /// Sharing key -> addresses held under it.
    keyed: BTreeMap<String, BTreeSet<IpAddr>>,
}

impl Allocator {
    /// An allocator with no pools.
    pub fn new() -> Allocator {
        Allocator::default()
    }

    /// Replaces the pools, validating them together. No address is taken away: Services
    /// whose addresses left every pool are reported (and replaced by their next `assign`),
    /// Services holding addresses of invalid pools keep them.
    pub fn set_pools(&mut self, pools: impl IntoIterator<Item = Pool>) -> PoolsReport {
        self.pools = PoolSet::new(pools);
        let mut report = PoolsReport { invalid: self.pools.errors(), ..PoolsReport::default() };
        for (service, held) in &mut self.held {
            match self.pools.holding(&held.ips) {
                Some(pool) => {
                    held.pool = pool.name().to_string();
                    held.orphaned = false;
                    if !pool.is_valid() {
                        report.kept_in_invalid.push(service.clone());
                    }
                }
                None => {
                    held.orphaned = true;
                    report.orphaned.push(service.clone());
                }
            }
        }
        report
    }

    /// Records addresses a Service already has (its `status.loadBalancer.ingress`), at
    /// start-up, before any `assign`. They must lie in one configured pool (an invalid one
    /// too: what it gave out is kept) and not clash with what was restored before; otherwise
    /// the Service holds nothing and its next `assign` allocates afresh. Whether the addresses
    /// still suit the request is for that `assign` to decide.
    pub fn restore(&mut self, req: &LbRequest, ips: &[IpAddr]) -> Result<Assignment, AllocError> {
        self.release(&req.service);
        let (families, repeats) = families_of(ips);
        if ips.is_empty() || ips.len() > 2 || repeats {
            return Err(AllocError::BadFamilies { families });
        }
        let pool = self.locate(ips)?.name().to_string();
        let terms = Terms::of(req);
        self.check_sharing(ips, &req.service, &terms)?;
        Ok(self.hold(&req.service, ips.to_vec(), pool, terms))
    }

    /// The Service's addresses: the ones it holds while they stay valid, else new ones. On
    /// error the Service holds nothing.
    pub fn assign(&mut self, req: &LbRequest) -> Result<Assignment, AllocError> {
        if let Err(e) = check_request(req) {
            self.release(&req.service);
            return Err(e);
        }
        let cleared = match self.review(req) {
            None => None,
            Some(Ok(())) => return Ok(self.keep(req)),
            Some(Err(reason)) => self.release(&req.service).map(|a| Cleared { ips: a.ips, reason }),
        };
        let terms = Terms::of(req);
        let (pool, ips) = if req.requested.is_empty() {
            self.pick(req, &terms)?
        } else {
            self.take_requested(req, &terms)?
        };
        let assignment = self.hold(&req.service, ips, pool, terms);
        Ok(Assignment { cleared, ..assignment })
    }

    /// Gives the Service's addresses back.
    pub fn release(&mut self, service: &ServiceName) -> Option<Assignment> {
        let held = self.held.remove(service)?;
        for ip in &held.ips {
            if let Entry::Occupied(mut users) = self.users.entry(*ip) {
                users.get_mut().retain(|s| s != service);
                if users.get().is_empty() {
                    users.remove();
                    self.used.remove(*ip);
                }
            }
            if let Some(key) = &held.terms.key {
                self.forget_key(*ip, key);
            }
        }
        Some(Assignment { ips: held.ips, pool: held.pool, cleared: None })
    }

    /// What the Service holds.
    pub fn assignment(&self, service: &ServiceName) -> Option<Assignment> {
        self.held.get(service).map(|h| Assignment { ips: h.ips.clone(), pool: h.pool.clone(), cleared: None })
    }

    /// Every Service holding something, sorted.
    pub fn services(&self) -> impl Iterator<Item = &ServiceName> {
        self.held.keys()
    }

    /// The Services holding `ip`, sorted.
    pub fn holders(&self, ip: IpAddr) -> Vec<ServiceName> {
        let mut holders: Vec<ServiceName> = self.users.get(&ip).map(|u| u.to_vec()).unwrap_or_default();
        holders.sort();
        holders
    }

    /// Every pool's validity and usage, by name.
    pub fn pool_status(&self) -> Vec<PoolStatus> {
        self.pools
            .by_name
            .values()
            .map(|p| PoolStatus {
                name: p.name().into(),
                error: p.error.clone(),
                stats: p.stats(&self.users),
            })
            .collect()
    }

    /// One pool's usage.
    pub fn pool_stats(&self, pool: &str) -> Option<PoolStats> {
        self.pools.get(pool).map(|p| p.stats(&self.users))
    }

    /// None when the Service holds nothing; else whether its assignment is still valid.
    fn review(&self, req: &LbRequest) -> Option<Result<(), ClearReason>> {
        let held = self.held.get(&req.service)?;
        Some(self.still_valid(held, req))
    }

    fn still_valid(&self, held: &Held, req: &LbRequest) -> Result<(), ClearReason> {
        let pool = self.pools.get(&held.pool).filter(|_| !held.orphaned).ok_or(ClearReason::LeftPools)?;
        if sorted(families_of(&held.ips).0) != sorted(req.families.clone()) {
            return Err(ClearReason::FamiliesChanged);
        }
        if !req.requested.is_empty() && sorted(req.requested.clone()) != sorted(held.ips.clone()) {
            return Err(ClearReason::RequestedChanged);
        }
        if req.pool.as_ref().is_some_and(|p| *p != held.pool) {
            return Err(ClearReason::PoolChanged);
        }
        if !pool.admits(req) {
            return Err(ClearReason::NotAdmitted { pool: held.pool.clone() });
        }
        let terms = Terms::of(req);
        self.check_sharing(&held.ips, &req.service, &terms).map_err(|e| ClearReason::Sharing(Box::new(e)))
    }

    /// Re-records a valid assignment under the request's current terms and family order.
    fn keep(&mut self, req: &LbRequest) -> Assignment {
        let old = self.release(&req.service).expect("reviewed assignment exists");
        self.hold(&req.service, in_family_order(old.ips, &req.families), old.pool, Terms::of(req))
    }

    /// The requested addresses, if their pool admits the Service and they are free or
    /// shareable.
    fn take_requested(&self, req: &LbRequest, terms: &Terms) -> Result<(String, Vec<IpAddr>), AllocError> {
        let ips = in_family_order(req.requested.clone(), &req.families);
        let pool = match &req.pool {
            Some(name) => self.requested_in_named(&ips, name)?,
            None => self.locate(&ips)?,
        };
        if let Some(error) = &pool.error {
            return Err(AllocError::InvalidPool { pool: pool.name().into(), error: error.clone() });
        }
        if !pool.admits(req) {
            return Err(AllocError::NotAdmitted { pool: pool.name().into() });
        }
        self.check_sharing(&ips, &req.service, terms)?;
        Ok((pool.name().to_string(), ips))
    }

    fn requested_in_named(&self, ips: &[IpAddr], name: &str) -> Result<&PoolEntry, AllocError> {
        let pool = self.pools.get(name).ok_or_else(|| AllocError::UnknownPool { pool: name.into() })?;
        match ips.iter().find(|ip| !pool.contains(**ip)) {
            Some(ip) => Err(AllocError::NotInNamedPool { ip: *ip, pool: name.into() }),
            None => Ok(pool),
        }
    }

    /// The pool holding all of `ips`, or why there is none.
    fn locate(&self, ips: &[IpAddr]) -> Result<&PoolEntry, AllocError> {
        self.pools.holding(ips).ok_or_else(|| match ips.iter().find(|ip| !self.pools.any_holds(**ip)) {
            Some(ip) => AllocError::NotInAnyPool { ip: *ip },
            None => AllocError::SplitAcrossPools { ips: ips.to_vec() },
        })
    }

    /// Automatic choice: candidate pools in order; with a sharing key, a pool where the
    /// Service can join compatible holders first; then the lowest free addresses.
    fn pick(&self, req: &LbRequest, terms: &Terms) -> Result<(String, Vec<IpAddr>), AllocError> {
        let candidates = match &req.pool {
            Some(name) => vec![self.named_pool(name, req)?],
            None => self.pools.automatic(req),
        };
        if candidates.is_empty() {
            return Err(AllocError::NoMatchingPool);
        }
        let fitting: Vec<&PoolEntry> =
            candidates.iter().copied().filter(|p| req.families.iter().all(|f| p.has_family(*f))).collect();
        if fitting.is_empty() {
            let pools = candidates.iter().map(|p| p.name().to_string()).collect();
            return Err(AllocError::FamilyUnavailable { families: req.families.clone(), pools });
        }
        let joined = terms.key.as_ref().and_then(|key| {
            fitting.iter().find_map(|p| {
                self.fill(p, req, terms, Some(key)).filter(|(_, shared)| *shared).map(|f| (p, f.0))
            })
        });
        let fresh = || fitting.iter().find_map(|p| Some((p, self.fill(p, req, terms, None)?.0)));
        match joined.or_else(fresh) {
            Some((pool, ips)) => Ok((pool.name().to_string(), ips)),
            None => {
                Err(AllocError::Exhausted { pools: fitting.iter().map(|p| p.name().to_string()).collect() })
            }
        }
    }

    fn named_pool(&self, name: &str, req: &LbRequest) -> Result<&PoolEntry, AllocError> {
        let pool = self.pools.get(name).ok_or_else(|| AllocError::UnknownPool { pool: name.into() })?;
        if let Some(error) = &pool.error {
            return Err(AllocError::InvalidPool { pool: name.into(), error: error.clone() });
        }
        if !pool.admits(req) {
            return Err(AllocError::NotAdmitted { pool: name.into() });
        }
        Ok(pool)
    }

    /// One address per family from `pool`: shareable under `key` first (when given), else
    /// the lowest free. The flag says whether any address is shared.
    fn fill(
        &self,
        pool: &PoolEntry,
        req: &LbRequest,
        terms: &Terms,
        key: Option<&String>,
    ) -> Option<(Vec<IpAddr>, bool)> {
        let mut shared = false;
        let mut ips = Vec::with_capacity(req.families.len());
        for family in &req.families {
            let joined = key.and_then(|k| self.shareable(pool, *family, k, &req.service, terms));
            shared |= joined.is_some();
            ips.push(joined.or_else(|| self.lowest_free(pool, *family))?);
        }
        Some((ips, shared))
    }

    fn shareable(
        &self,
        pool: &PoolEntry,
        family: IpFamily,
        key: &str,
        service: &ServiceName,
        terms: &Terms,
    ) -> Option<IpAddr> {
        self.keyed.get(key)?.iter().copied().find(|ip| {
            IpFamily::of(ip) == family
                && pool.contains(*ip)
                && self.check_sharing(&[*ip], service, terms).is_ok()
        })
    }

    fn lowest_free(&self, pool: &PoolEntry, family: IpFamily) -> Option<IpAddr> {
        let avoid = pool.spec.avoid_buggy_ips;
        pool.ranges.iter().filter(|r| r.family == family).find_map(|r| self.used.lowest_free(r, avoid))
    }

    /// Whether `service` with `terms` may hold each of `ips` next to their current holders.
    fn check_sharing(&self, ips: &[IpAddr], service: &ServiceName, terms: &Terms) -> Result<(), AllocError> {
        for ip in ips {
            for other in self.users.get(ip).into_iter().flatten().filter(|o| *o != service) {
                terms.may_join(&self.held[other].terms, *ip, other)?;
            }
        }
        Ok(())
    }

    fn hold(&mut self, service: &ServiceName, ips: Vec<IpAddr>, pool: String, terms: Terms) -> Assignment {
        for ip in &ips {
            let users = self.users.entry(*ip).or_default();
            if users.is_empty() {
                self.used.insert(*ip);
            }
            users.push(service.clone());
            if let Some(key) = &terms.key {
                self.keyed.entry(key.clone()).or_default().insert(*ip);
            }
        }
        let assignment = Assignment { ips: ips.clone(), pool: pool.clone(), cleared: None };
        self.held.insert(service.clone(), Held { ips, pool, orphaned: false, terms });
        assignment
    }

    /// Drops `ip` from the addresses under `key` once no holder uses that key.
    fn forget_key(&mut self, ip: IpAddr, key: &String) {
        let mut holders = self.users.get(&ip).into_iter().flatten();
        if holders.any(|s| self.held[s].terms.key.as_ref() == Some(key)) {
            return;
        }
        if let Entry::Occupied(mut set) = self.keyed.entry(key.clone()) {
            set.get_mut().remove(&ip);
            if set.get().is_empty() {
                set.remove();
            }
        }
    }
}

/// Families must be one or two different ones; requested addresses, one per family.
fn check_request(req: &LbRequest) -> Result<(), AllocError> {
    let distinct: BTreeSet<_> = req.families.iter().collect();
    if req.families.is_empty() || req.families.len() > 2 || distinct.len() != req.families.len() {
        return Err(AllocError::BadFamilies { families: req.families.clone() });
    }
    if !req.requested.is_empty() && sorted(families_of(&req.requested).0) != sorted(req.families.clone()) {
        return Err(AllocError::RequestedFamilies {
            requested: req.requested.clone(),
            families: req.families.clone(),
        });
    }
    Ok(())
}

fn in_family_order(mut ips: Vec<IpAddr>, families: &[IpFamily]) -> Vec<IpAddr> {
    ips.sort_by_key(|ip| families.iter().position(|f| *f == IpFamily::of(ip)));
    ips
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}
