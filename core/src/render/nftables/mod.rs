//! nftables backend: map-based layout ([`lower_plan`]) and `nft -f` text ([`text`]).

pub mod capacity;
mod lower;
pub mod text;

pub use lower::{TABLE, base, lower_plan};
