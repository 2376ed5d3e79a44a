//! The table and chains on the wire: their attributes and the messages that add, flush and
//! delete them.

use tideway_core::net::IpFamily;
use tideway_core::render::nftables::TABLE;

use super::batch::{Batch, NLM_F_CREATE, msg};

pub(super) const TABLE_NAME: u16 = 1;
pub(super) const TABLE_FLAGS: u16 = 2;
pub(super) const TABLE_USERDATA: u16 = 6;
pub(super) const CHAIN_TABLE: u16 = 1;
pub(super) const CHAIN_HOOK: u16 = 4;
pub(super) const CHAIN_NAME: u16 = 3;
pub(super) const CHAIN_POLICY: u16 = 5;
pub(super) const CHAIN_TYPE: u16 = 7;
pub(super) const HOOK_NUM: u16 = 1;
pub(super) const HOOK_PRIORITY: u16 = 2;
pub(super) const RULE_TABLE: u16 = 1;
pub(super) const RULE_CHAIN: u16 = 2;
/// The table comment `nft` shows.
pub(super) const TABLE_COMMENT: &str = "rules for tideway";

/// `NFPROTO_IPV4` / `NFPROTO_IPV6`.
pub(super) fn nfproto(f: IpFamily) -> u8 {
    crate::netlink::family_number(f)
}

pub(super) fn table(b: &mut Batch, fam: u8, comment: bool, what: &str) {
    b.message(msg::NEWTABLE, fam, NLM_F_CREATE, what);
    b.str(TABLE_NAME, TABLE);
    b.be32(TABLE_FLAGS, 0);
    if comment {
        let mut u = vec![0u8, (TABLE_COMMENT.len() + 1) as u8];
        u.extend_from_slice(TABLE_COMMENT.as_bytes());
        u.push(0);
        b.put(TABLE_USERDATA, &u);
    }
}

pub(super) fn chain(b: &mut Batch, fam: u8, c: &tideway_core::program::Chain) {
    b.message(msg::NEWCHAIN, fam, NLM_F_CREATE, format!("add chain {}", c.name));
    b.str(CHAIN_TABLE, TABLE);
    b.str(CHAIN_NAME, &c.name);
    if let Some(h) = c.hook {
        b.str(
            CHAIN_TYPE,
            match h.kind {
                tideway_core::program::ChainKind::Filter => "filter",
                tideway_core::program::ChainKind::Nat => "nat",
            },
        );
        b.be32(CHAIN_POLICY, 1);
        let n = b.nest(CHAIN_HOOK);
        let num = match h.hook {
            tideway_core::program::Hook::Prerouting => 0,
            tideway_core::program::Hook::Input => 1,
            tideway_core::program::Hook::Forward => 2,
            tideway_core::program::Hook::Output => 3,
            tideway_core::program::Hook::Postrouting => 4,
        };
        b.be32(HOOK_NUM, num);
        b.be32(HOOK_PRIORITY, h.priority as u32);
        b.end(n);
    }
}

pub(super) fn flush_chain(b: &mut Batch, fam: u8, name: &str) {
    b.message(msg::DELRULE, fam, 0, format!("flush chain {name}"));
    b.str(RULE_TABLE, TABLE);
    b.str(RULE_CHAIN, name);
}

pub(super) fn delete_chain(b: &mut Batch, fam: u8, name: &str) {
    b.message(msg::DELCHAIN, fam, 0, format!("delete chain {name}"));
    b.str(CHAIN_TABLE, TABLE);
    b.str(CHAIN_NAME, name);
}
