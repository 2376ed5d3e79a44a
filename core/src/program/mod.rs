//! Programs: what a renderer produces from a [`Ruleset`](crate::plan::Ruleset) for one family.
//!
//! A [`Program`] is a base [`Fragment`] (constant chains, hooks, shared sets) plus one fragment
//! per service port. Fragments are what incremental syncs replace; [`diff`] turns a set of
//! replaced fragments into the minimal [`ChangeSet`]. Between syncs a node keeps only a
//! [`ProgramState`] (the base and the counts shared objects need): the fragments a change
//! replaces are rendered again from the plans they came from.

mod complete;
mod diff;
mod intern;
mod ir;
mod state;

pub use complete::{Assembled, AssembledChain, AssembledSet, Program};
pub use diff::{ChangeSet, ProgramState, diff};
pub use intern::name;
pub use ir::*;
pub use state::{KernelState, Refused};
