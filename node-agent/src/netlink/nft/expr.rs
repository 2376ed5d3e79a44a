//! Rules on the wire: each IR match and action becomes the `nf_tables` expressions `nft` would
//! generate for the same rule text (payload and meta loads into registers, `cmp`, `bitwise`,
//! `lookup`, `immediate`, `nat`, ...), so listings read the same whichever way a rule arrived.

use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;

use tideway_core::net::IpFamily;
use tideway_core::program::{Action, CtState, Field, Match, Rule, Set, Verdict};

use super::batch::{Batch, NLM_F_APPEND, NLM_F_CREATE, msg};
use super::sets;
use super::verdict::{verdict, verdict_code};

const LIST_ELEM: u16 = 1;
const EXPR_NAME: u16 = 1;
const EXPR_DATA: u16 = 2;
const RULE_TABLE: u16 = 1;
const RULE_CHAIN: u16 = 2;
const RULE_EXPRESSIONS: u16 = 4;
const RULE_USERDATA: u16 = 7;
const DATA_VALUE: u16 = 1;

const NFT_CONTINUE: i32 = -1;

const BASE_NETWORK: u32 = 1;
const BASE_TRANSPORT: u32 = 2;
const META_MARK: u32 = 3;
const META_L4PROTO: u32 = 16;
const META_IIFNAME: u32 = 6;
/// `IFNAMSIZ`: the bytes of an interface name, its NUL included.
const IFNAMSIZ: usize = 16;
const CT_STATE: u32 = 0;
const CT_STATUS: u32 = 2;
const CMP_EQ: u32 = 0;
const CMP_NEQ: u32 = 1;
const LOOKUP_INVERT: u32 = 1;
const NAT_DNAT: u32 = 1;
const NAT_PROTO_SPECIFIED: u32 = 0x2;
const MASQ_FULLY_RANDOM: u32 = 0x10;
const FIB_SADDR: u32 = 1;
const FIB_DADDR: u32 = 2;
const FIB_ADDRTYPE: u32 = 3;
const RTN_LOCAL: u32 = 2;
const NUMGEN_RANDOM: u32 = 1;
const DYNSET_UPDATE: u32 = 1;
const BYTEORDER_HTON: u32 = 1;
const REJECT_ICMP_UNREACH: u32 = 0;
const ICMP_PORT_UNREACH: u8 = 3;
const ICMPV6_PORT_UNREACH: u8 = 4;

/// Connection-tracking state bits (`NF_CT_STATE_*_BIT`).
const CT_INVALID: u32 = 1;
const CT_ESTABLISHED: u32 = 2;
const CT_RELATED: u32 = 4;
const CT_NEW: u32 = 8;
/// `IPS_DST_NAT`.
const CT_STATUS_DNAT: u32 = 0x20;

/// The verdict register.
const REG_VERDICT: u32 = 0;
const SOCKET_KEY: u16 = 1;
const SOCKET_DREG: u16 = 2;
const SOCKET_TRANSPARENT: u32 = 0;

/// The register holding the 32-bit word `word` of a key: a 128-bit register name when the
/// word starts one (as `nft` picks them), else a 32-bit register name.
fn reg(word: usize) -> u32 {
    if word.is_multiple_of(4) { 1 + (word / 4) as u32 } else { 8 + word as u32 }
}

/// What a rule needs to know about the sets it names.
pub(super) struct SetIndex<'a> {
    /// Set definitions by name, with their id when declared in the same batch.
    pub(super) sets: HashMap<&'a str, (&'a Set, Option<u32>)>,
}

impl SetIndex<'_> {
    fn id(&self, name: &str) -> Option<u32> {
        self.sets.get(name).and_then(|(_, id)| *id)
    }

    fn concat_interval(&self, name: &str) -> bool {
        self.sets.get(name).is_some_and(|(s, _)| s.flags.interval && s.key.len() > 1)
    }
}

fn expr(b: &mut Batch, name: &str, body: impl FnOnce(&mut Batch)) {
    let e = b.nest(LIST_ELEM);
    b.str(EXPR_NAME, name);
    let d = b.nest(EXPR_DATA);
    body(b);
    b.end(d);
    b.end(e);
}

fn data_value(b: &mut Batch, ty: u16, value: &[u8]) {
    let n = b.nest(ty);
    b.put(DATA_VALUE, value);
    b.end(n);
}

fn payload(b: &mut Batch, dreg: u32, base: u32, offset: u32, len: u32) {
    expr(b, "payload", |b| {
        b.be32(1, dreg);
        b.be32(2, base);
        b.be32(3, offset);
        b.be32(4, len);
    });
}

fn meta_load(b: &mut Batch, dreg: u32, key: u32) {
    expr(b, "meta", |b| {
        b.be32(2, key);
        b.be32(1, dreg);
    });
}

fn cmp(b: &mut Batch, op: u32, value: &[u8]) {
    expr(b, "cmp", |b| {
        b.be32(1, 1);
        b.be32(2, op);
        data_value(b, 3, value);
    });
}

fn bitwise(b: &mut Batch, mask: &[u8], xor: &[u8], with_op: bool) {
    expr(b, "bitwise", |b| {
        b.be32(1, 1);
        b.be32(2, 1);
        if with_op {
            b.be32(6, 0);
        }
        b.be32(3, mask.len() as u32);
        data_value(b, 4, mask);
        data_value(b, 5, xor);
    });
}

fn ct_load(b: &mut Batch, key: u32) {
    expr(b, "ct", |b| {
        b.be32(2, key);
        b.be32(1, 1);
    });
}

/// `ct state` / `ct status` flag tests: `(reg & bits) != 0`, or `== 0` when `none`.
fn ct_flags(b: &mut Batch, key: u32, bits: u32, none: bool) {
    ct_load(b, key);
    bitwise(b, &bits.to_ne_bytes(), &0u32.to_ne_bytes(), false);
    cmp(b, if none { CMP_EQ } else { CMP_NEQ }, &0u32.to_ne_bytes());
}

fn immediate_value(b: &mut Batch, dreg: u32, value: &[u8]) {
    expr(b, "immediate", |b| {
        b.be32(1, dreg);
        data_value(b, 2, value);
    });
}

fn immediate_verdict(b: &mut Batch, code: i32, chain: Option<&str>) {
    expr(b, "immediate", |b| {
        b.be32(1, REG_VERDICT);
        let d = b.nest(2);
        verdict_code(b, code, chain);
        b.end(d);
    });
}

fn ip_bytes(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn addr_offset(family: IpFamily, src: bool) -> (u32, u32) {
    match (family, src) {
        (IpFamily::V4, true) => (12, 4),
        (IpFamily::V4, false) => (16, 4),
        (IpFamily::V6, true) => (8, 16),
        (IpFamily::V6, false) => (24, 16),
    }
}

fn field_words(family: IpFamily, f: &Field) -> usize {
    match f {
        Field::SrcIp | Field::DstIp if family == IpFamily::V6 => 4,
        _ => 1,
    }
}

/// Loads `fields` into consecutive registers from register 1. Lookups into concatenated
/// ranges need host-order components in network order (`nft` adds the same conversion).
fn load_key(b: &mut Batch, family: IpFamily, fields: &[Field], ranges: bool) {
    let mut word = 0;
    for f in fields {
        let r = reg(word);
        match f {
            Field::SrcIp | Field::DstIp => {
                let (off, len) = addr_offset(family, matches!(f, Field::SrcIp));
                payload(b, r, BASE_NETWORK, off, len);
            }
            Field::Proto => {
                meta_load(b, r, META_L4PROTO);
                if ranges {
                    expr(b, "byteorder", |b| {
                        b.be32(1, r);
                        b.be32(2, r);
                        b.be32(3, BYTEORDER_HTON);
                        b.be32(4, 1);
                        b.be32(5, 2);
                    });
                }
            }
            Field::DstPort => payload(b, r, BASE_TRANSPORT, 2, 2),
            Field::Random(n) => numgen(b, r, *n),
            Field::Jhash { modulus, seed, address_only } => {
                jhash(b, family, r, *modulus, *seed, *address_only)
            }
        }
        word += field_words(family, f);
    }
}

/// Where a hash's inputs are loaded: past any key (7 words at most), as `nft` places them.
const HASH_INPUT_WORD: usize = 8;
const HASH_JENKINS: u32 = 0;

/// `jhash <family> saddr [. th sport] mod N seed S` into `dreg`: the inputs are laid out in
/// consecutive registers (the port zero-padded to a word by the payload load), as
/// [`tideway_core::maglev::flow_key`] assumes.
fn jhash(b: &mut Batch, family: IpFamily, dreg: u32, modulus: u32, seed: u32, address_only: bool) {
    let (off, len) = addr_offset(family, true);
    payload(b, reg(HASH_INPUT_WORD), BASE_NETWORK, off, len);
    let mut bytes = len;
    if !address_only {
        payload(b, reg(HASH_INPUT_WORD + field_words(family, &Field::SrcIp)), BASE_TRANSPORT, 0, 2);
        bytes += 4;
    }
    expr(b, "hash", |b| {
        b.be32(1, reg(HASH_INPUT_WORD));
        b.be32(2, dreg);
        b.be32(3, bytes);
        b.be32(4, modulus);
        b.be32(5, seed);
        b.be32(7, HASH_JENKINS);
    });
}

fn numgen(b: &mut Batch, dreg: u32, modulus: u32) {
    expr(b, "numgen", |b| {
        b.be32(1, dreg);
        b.be32(2, modulus);
        b.be32(3, NUMGEN_RANDOM);
        b.be32(4, 0);
    });
}

fn lookup(b: &mut Batch, set: &str, id: Option<u32>, dreg: Option<u32>, invert: bool) {
    expr(b, "lookup", |b| {
        b.be32(2, 1);
        if let Some(d) = dreg {
            b.be32(3, d);
        }
        b.str(1, set);
        if let Some(id) = id {
            b.be32(4, id);
        }
        if invert {
            b.be32(5, LOOKUP_INVERT);
        }
    });
}

fn nat_family(family: IpFamily) -> u32 {
    u32::from(crate::netlink::family_number(family))
}

/// The bytes `meta iifname` is compared with, as nft writes them: a whole name padded with
/// NULs to `IFNAMSIZ`, or just a prefix's bytes (`iifname "veth*"` compares its first ones).
fn interface_name(name: &str, prefix: bool) -> Vec<u8> {
    let mut out = name.as_bytes().to_vec();
    if !prefix {
        out.resize(IFNAMSIZ, 0);
    }
    out
}

/// Prefix mask bytes for an address of `len` bytes.
fn prefix_mask(prefix: u8, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut left = u32::from(prefix);
    for byte in &mut out {
        let take = left.min(8);
        *byte = if take == 0 { 0 } else { 0xffu8 << (8 - take) };
        left -= take;
    }
    out
}

fn write_match(b: &mut Batch, family: IpFamily, sets: &SetIndex<'_>, m: &Match) {
    match m {
        Match::Proto(p) => {
            meta_load(b, 1, META_L4PROTO);
            cmp(b, CMP_EQ, &[p.number()]);
        }
        Match::Src(net, neg) | Match::Dst(net, neg) => {
            let (off, len) = addr_offset(family, matches!(m, Match::Src(..)));
            payload(b, 1, BASE_NETWORK, off, len);
            if u32::from(net.prefix_len()) < len * 8 {
                bitwise(b, &prefix_mask(net.prefix_len(), len as usize), &vec![0; len as usize], false);
            }
            cmp(b, if *neg { CMP_NEQ } else { CMP_EQ }, &ip_bytes(&net.network()));
        }
        Match::DstPort(p) | Match::SrcPort(p) => {
            let offset = if matches!(m, Match::SrcPort(_)) { 0 } else { 2 };
            payload(b, 1, BASE_TRANSPORT, offset, 2);
            cmp(b, CMP_EQ, &p.to_be_bytes());
        }
        Match::TransparentSocket => {
            expr(b, "socket", |b| {
                b.be32(SOCKET_KEY, SOCKET_TRANSPARENT);
                b.be32(SOCKET_DREG, 1);
            });
            cmp(b, CMP_EQ, &[1]);
        }
        Match::InInterface { name, prefix, neg } => {
            meta_load(b, 1, META_IIFNAME);
            cmp(b, if *neg { CMP_NEQ } else { CMP_EQ }, &interface_name(name, *prefix));
        }
        Match::SrcLocal(yes) | Match::DstLocal(yes) => {
            let flag = if matches!(m, Match::SrcLocal(_)) { FIB_SADDR } else { FIB_DADDR };
            expr(b, "fib", |b| {
                b.be32(3, flag);
                b.be32(2, FIB_ADDRTYPE);
                b.be32(1, 1);
            });
            cmp(b, if *yes { CMP_EQ } else { CMP_NEQ }, &RTN_LOCAL.to_ne_bytes());
        }
        Match::Mark(mask, unset) => {
            meta_load(b, 1, META_MARK);
            bitwise(b, &mask.to_ne_bytes(), &0u32.to_ne_bytes(), false);
            if *unset {
                cmp(b, CMP_EQ, &0u32.to_ne_bytes());
            } else {
                cmp(b, CMP_EQ, &mask.to_ne_bytes());
            }
        }
        Match::Ct(CtState::New) => ct_flags(b, CT_STATE, CT_NEW, false),
        Match::Ct(CtState::Invalid) => ct_flags(b, CT_STATE, CT_INVALID, false),
        Match::Ct(CtState::RelatedEstablished) => ct_flags(b, CT_STATE, CT_ESTABLISHED | CT_RELATED, false),
        Match::Ct(CtState::NotRelatedEstablishedDnat) => {
            ct_flags(b, CT_STATE, CT_ESTABLISHED | CT_RELATED, true);
            ct_flags(b, CT_STATUS, CT_STATUS_DNAT, true);
        }
        Match::CtDnat => ct_flags(b, CT_STATUS, CT_STATUS_DNAT, false),
        Match::InSet { set, key, neg } => {
            load_key(b, family, key, sets.concat_interval(set));
            lookup(b, set, sets.id(set), None, *neg);
        }
        Match::Comment(_) => {}
        Match::Recent { .. } | Match::RecentSet(_) | Match::Probability(_) => {
            unreachable!("iptables-only match in an nftables program")
        }
    }
}

fn write_action(b: &mut Batch, family: IpFamily, sets: &SetIndex<'_>, a: &Action, anon: &mut Option<u32>) {
    match a {
        Action::Verdict(Verdict::Reject) => expr(b, "reject", |b| {
            b.be32(1, REJECT_ICMP_UNREACH);
            b.put(2, &[if family == IpFamily::V4 { ICMP_PORT_UNREACH } else { ICMPV6_PORT_UNREACH }]);
        }),
        Action::Verdict(v) => {
            expr(b, "immediate", |b| {
                b.be32(1, REG_VERDICT);
                let d = b.nest(2);
                verdict(b, v);
                b.end(d);
            });
        }
        Action::Dnat(ip, port) => {
            immediate_value(b, 1, &ip_bytes(ip));
            immediate_value(b, 2, &port.to_be_bytes());
            expr(b, "nat", |b| {
                b.be32(1, NAT_DNAT);
                b.be32(2, nat_family(family));
                b.be32(3, 1);
                b.be32(5, 2);
                b.be32(7, NAT_PROTO_SPECIFIED);
            });
        }
        Action::DnatMap { map, key } => {
            load_key(b, family, key, false);
            lookup(b, map, sets.id(map), Some(1), false);
            let port_reg = reg(if family == IpFamily::V4 { 1 } else { 4 });
            expr(b, "nat", |b| {
                b.be32(1, NAT_DNAT);
                b.be32(2, nat_family(family));
                b.be32(3, 1);
                b.be32(5, port_reg);
            });
        }
        Action::VerdictMap { map, key } => {
            load_key(b, family, key, false);
            lookup(b, map, sets.id(map), Some(REG_VERDICT), false);
        }
        Action::RandomVerdict(vs) => {
            numgen(b, 1, vs.len() as u32);
            lookup(b, sets::ANON_MAP, anon.take(), Some(REG_VERDICT), false);
        }
        Action::MarkOr(m) | Action::MarkXor(m) => {
            meta_load(b, 1, META_MARK);
            let mask = if matches!(a, Action::MarkOr(_)) { !m } else { u32::MAX };
            bitwise(b, &mask.to_ne_bytes(), &m.to_ne_bytes(), true);
            expr(b, "meta", |b| {
                b.be32(2, META_MARK);
                b.be32(3, 1);
            });
        }
        Action::Masquerade { fully_random } => expr(b, "masq", |b| {
            if *fully_random {
                b.be32(1, MASQ_FULLY_RANDOM);
            }
        }),
        Action::UpdateSet(set) => {
            let (off, len) = addr_offset(family, true);
            payload(b, 1, BASE_NETWORK, off, len);
            expr(b, "dynset", |b| {
                b.be32(4, 1);
                b.be32(3, DYNSET_UPDATE);
                b.str(1, set);
                if let Some(id) = sets.id(set) {
                    b.be32(2, id);
                }
            });
        }
        Action::Notrack => {
            // No data: the kernel's notrack takes none and dumps none.
            let e = b.nest(LIST_ELEM);
            b.str(EXPR_NAME, "notrack");
            b.end(e);
        }
        Action::Nothing => immediate_verdict(b, NFT_CONTINUE, None),
    }
}

/// Appends `r` to `chain` (after declaring the anonymous map a random verdict needs, with id
/// `*next_id`, which is then advanced).
#[allow(clippy::too_many_arguments)]
pub(super) fn rule(
    b: &mut Batch,
    fam: u8,
    family: IpFamily,
    table: &str,
    chain: &str,
    r: &Rule,
    sets: &SetIndex<'_>,
    next_id: &mut u32,
) {
    let mut anon = None;
    if let Some(Action::RandomVerdict(vs)) = r.actions.iter().find(|a| matches!(a, Action::RandomVerdict(_)))
    {
        let id = *next_id;
        *next_id += 1;
        sets::declare_random_vmap(b, fam, table, vs.len(), id);
        sets::random_vmap_elements(b, fam, table, vs, id);
        anon = Some(id);
    }
    b.message(msg::NEWRULE, fam, NLM_F_CREATE | NLM_F_APPEND, format!("add rule to chain {chain}"));
    b.str(RULE_TABLE, table);
    b.str(RULE_CHAIN, chain);
    let list = b.nest(RULE_EXPRESSIONS);
    for m in &r.matches {
        write_match(b, family, sets, m);
    }
    for a in &r.actions {
        write_action(b, family, sets, a, &mut anon);
    }
    b.end(list);
    if let Some(c) = &r.comment {
        let text = c.replace('"', "'");
        let mut u = vec![0u8, (text.len() + 1) as u8];
        u.extend_from_slice(text.as_bytes());
        u.push(0);
        b.put(RULE_USERDATA, &u);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_follow_nft() {
        // ip daddr . meta l4proto . th dport . numgen: reg 1, 9, 10, 11.
        assert_eq!([0, 1, 2, 3].map(reg), [1, 9, 10, 11]);
        // ip6 daddr . meta l4proto . th dport: reg 1, 2, 13; ip6 saddr after them: 14.
        assert_eq!([0, 4, 5, 6].map(reg), [1, 2, 13, 14]);
    }

    #[test]
    fn prefix_masks() {
        assert_eq!(prefix_mask(16, 4), vec![0xff, 0xff, 0, 0]);
        assert_eq!(prefix_mask(12, 4), vec![0xff, 0xf0, 0, 0]);
        assert_eq!(prefix_mask(0, 4), vec![0, 0, 0, 0]);
        assert_eq!(prefix_mask(64, 16)[..9], [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0]);
    }
}
