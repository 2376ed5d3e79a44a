//! LoadBalancer IP allocation with MetalLB `IPAddressPool` semantics, deterministic.
//!
//! ```text
//!  Pools (spec.addresses, autoAssign, avoidBuggyIPs, serviceAllocation)
//!        | Allocator::set_pools: validate the whole set (malformed, overlapping -> invalid)
//!        v
//!  Allocator  <-- restore(request, status IPs)   start-up, before anything new is assigned
//!             <-- assign(request)                 every Service change; stable
//!             <-- release(service)                Service deleted or no longer LoadBalancer
//!        |
//!        v
//!  Assignment { ips, pool }  /  AllocError (the Kubernetes Event message)
//!  pool_status(): assigned / available per family, and why a pool is invalid
//! ```
//!
//! Rules, in MetalLB's terms:
//! * An assignment is kept while it stays valid (same families, same requested IPs and
//!   pool annotation, its pool still admits the Service, sharing still compatible; the pool's
//!   `autoAssign`, priority and validity do not matter): nothing is ever reshuffled because a
//!   better pool appeared. Otherwise it is cleared and replaced in the same call
//!   ([`Assignment::cleared`] says why); when no replacement is found the Service holds
//!   nothing.
//! * With a sharing key, finding a joinable address walks the addresses held under that key,
//!   so a key shared by thousands of Services costs a scan per allocation.
//! * Requested IPs (`spec.loadBalancerIP`, [`crate::model::ANNOTATION_LOAD_BALANCER_IPS`])
//!   must all lie in one valid pool that admits the Service (`autoAssign` does not matter)
//!   and be free or shareable.
//! * Otherwise the pool annotation names the only pool to use (`autoAssign` does not
//!   matter); without it the valid `autoAssign` pools that admit the Service are tried:
//!   pools with a `serviceAllocation` by priority (lower first, unset after set), then pools
//!   without, ties by name (MetalLB breaks ties at random). The lowest free address wins.
//! * Dual-stack takes one address of each family from one pool, as MetalLB does.
//! * Services share an address only with the same sharing key, no common (protocol, port),
//!   and all `externalTrafficPolicy: Cluster` or all the same pod selector. With a key, an
//!   address already held by compatible Services is reused before a free one is taken.
//! * Of two overlapping pools, the one whose name sorts later is invalid. Invalid pools
//!   assign nothing new, but addresses they gave out stay with their Services.
//!
//! Addresses are never materialised: used addresses are kept as runs, so finding the lowest
//! free one is a logarithmic lookup, and an IPv6 `/64` costs no more than a `/30`.

mod alloc;
mod error;
mod pool;
mod range;
mod request;
mod share;

#[cfg(test)]
mod tests;

pub use crate::model::{AddrRange, RangeError, is_buggy};
pub use crate::model::{Pool, ServiceAllocation};
pub use alloc::{Allocator, PoolStatus, PoolsReport};
pub use error::{AllocError, PoolError, SharingConflict};
pub use pool::PoolStats;
pub use request::{Assignment, ClearReason, Cleared, LbRequest};
