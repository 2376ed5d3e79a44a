//! A member's identity: where it listens, which node's agent it is (or the operator), and a
//! number that grows with each restart.

use std::net::SocketAddr;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// What a member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// A node's agent.
    Agent,
    /// The operator (decides, announces nothing).
    Operator,
}

/// A member's identity: where it listens, which node's agent it is, and a number that grows
/// with each restart (a restarted agent wins its address back from its former self).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub(super) addr: SocketAddr,
    pub(super) node: String,
    pub(super) role: Role,
    pub(super) bump: u64,
}

impl Member {
    /// Member `node` (the operator: any name) in `role`, listening on `addr`.
    pub fn new(addr: SocketAddr, node: &str, role: Role) -> Member {
        let bump =
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        Member { addr, node: node.to_string(), role, bump }
    }

    /// Someone at `addr` whose identity is learnt when it answers.
    pub(super) fn somebody_at(addr: SocketAddr) -> Member {
        Member { addr, node: String::new(), role: Role::Agent, bump: 0 }
    }
}

impl foca::Identity for Member {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Member { bump: self.bump.wrapping_add(1), ..self.clone() })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.bump > adversary.bump
    }
}
