//! The request path: a hickory [`Request`](hickory_server::server::Request) in, a reply out.
//!
//! [`Core::decide`] is synchronous and makes every decision that needs no network: message
//! checks (opcode, question count, class, EDNS version, ANY and zone transfers), the loop
//! probe, and the cluster zone through [`crate::answer`]. What needs the network — forwarding
//! through the cache, chasing an ExternalName upstream — comes back as a step that
//! [`Core::complete`] finishes asynchronously. [`wire`] turns a reply into bytes (truncating
//! for UDP) and [`hickory`] plugs the same path into hickory-server's `RequestHandler`.

mod budget;
mod core;
mod hickory;
mod loadbalance;
mod probe;
pub mod replay;
mod reply;
#[cfg(test)]
mod tests;
pub mod wire;

pub use self::core::{Core, Options};
pub use self::hickory::DnsHandler;
pub use self::loadbalance::shuffle_addresses;
pub use self::probe::LoopProbe;
pub use self::reply::{Reply, Step, Upstream};
