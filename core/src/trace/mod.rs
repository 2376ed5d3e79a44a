//! The packet tracer: walks a [`Program`](crate::program::Program) with one new connection and reports every path it can
//! take (random endpoint choices are all explored) and where it ends up.
//!
//! Hooks are visited as the kernel does for a first packet: prerouting, then input (local
//! destination) or forward, then postrouting; node-originated packets start at output. Rules
//! that depend on history (affinity lists, conntrack other than NEW) do not match.

mod interp;
mod packet;
mod path;
mod report;

pub use interp::trace;
pub use packet::{Origin, Packet, TraceEnv, UnknownOrigin, packet_family};
pub use path::{Outcome, Step, Trace, TracePath, Verdict};
pub use report::render_trace;
