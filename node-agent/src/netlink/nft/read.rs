//! Reading a table back over netlink, by content: chains with their base-chain headers, a
//! digest of each chain's rules (in order), and a digest of each set's elements (in any
//! order), without the `nft` tool and without building a ruleset text.
//!
//! Rule digests are compared with the ones learnt right after the rules were applied (the
//! kernel returns expressions in its own form, so they are learnt, not predicted); element
//! digests are compared with the program's elements passed through the same parser as the
//! kernel's answer, so a replaced element is found even when the count is unchanged.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use tideway_core::drift::{ChainSeen, Digest, Header, Observed};
use tideway_core::program::{BaseHook, ChainKind, Element, Hook, Set};
use tideway_core::render::nftables::TABLE;

use super::batch::Batch;
use super::objects::{
    CHAIN_HOOK, CHAIN_NAME, CHAIN_POLICY, CHAIN_TABLE, CHAIN_TYPE, HOOK_NUM, HOOK_PRIORITY, RULE_CHAIN,
    RULE_TABLE, TABLE_NAME,
};
use super::sets::attr;
use super::socket::NftNetlink;
use crate::dataplane::backend::{DataplaneError, NetlinkError};
use crate::netlink::{Attrs, Dumped, NLM_F_DUMP, NLM_F_REQUEST, attrs, dump, messages};

const SUBSYS_NFTABLES: u16 = 10;
const GETTABLE: u8 = 1;
const GETCHAIN: u8 = 4;
const GETRULE: u8 = 7;
pub(super) const GETSET: u8 = 10;
pub(super) const GETSETELEM: u8 = 13;
const GETGEN: u8 = 16;
const NEWGEN: u16 = 15;
const GEN_ID: u16 = 1;
const NEWCHAIN: u16 = 3;
const NEWRULE: u16 = 6;
pub(super) const NEWSET: u16 = 9;
pub(super) const NEWSETELEM: u16 = 12;
const NLM_F_ACK: u16 = 0x4;
const RULE_EXPRESSIONS: u16 = 4;
const RULE_USERDATA: u16 = 7;
const SET_ANONYMOUS: u32 = 0x1;
pub(super) const SET_TIMEOUT: u32 = 0x10;
const NF_DROP: u32 = 0;
const DATA_VERDICT: u16 = 2;
const ENOENT: i32 = 2;

/// True when the kernel refused because the object asked for does not exist.
pub(super) fn is_missing(e: &DataplaneError) -> bool {
    matches!(e, DataplaneError::Netlink(NetlinkError::Refused(r)) if r.iter().all(|r| r.errno == ENOENT))
}
/// Dumps torn by a concurrent change are asked again this many times.
const ATTEMPTS: usize = 3;
/// Elements asked for by key per message (each answer is a message of its own; the socket's
/// receive buffer must hold a message's worth).
const LOOKUP_BATCH: usize = 256;

/// How to read one set's elements back.
#[derive(Debug, Clone)]
pub enum ElementRead<'a> {
    /// Not at all (sets the packet path fills, or a check without elements).
    Skip,
    /// A dump of the whole set: finds extra elements too, but costs the kernel time
    /// quadratic in the set's size (each answer restarts the walk of the set).
    Dump,
    /// Each of these elements asked for by key: linear in the set's size, finds missing and
    /// replaced elements, not extra ones.
    Lookup(&'a Set, Vec<&'a Element>),
}

fn digest(v: impl Hash) -> Digest {
    let mut h = std::hash::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// Appends one rule to a chain's running digest.
fn chain_step(chain: Digest, rule: Digest) -> Digest {
    digest((chain, rule))
}

/// The digest of a chain with no rules.
pub(super) const EMPTY_CHAIN: Digest = 0;

/// The nfgenmsg header is followed by the attributes.
pub(super) fn body(payload: &[u8]) -> &[u8] {
    payload.get(4..).unwrap_or(&[])
}

pub(super) fn string(v: &[u8]) -> String {
    String::from_utf8_lossy(v).trim_end_matches('\0').to_string()
}

pub(super) fn be32(v: &[u8]) -> u32 {
    v.get(..4).map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn hook_of(num: u32) -> Option<Hook> {
    Some(match num {
        0 => Hook::Prerouting,
        1 => Hook::Input,
        2 => Hook::Forward,
        3 => Hook::Output,
        4 => Hook::Postrouting,
        _ => return None,
    })
}

/// A chain message: `(table, name, header)`. A header the model cannot express (another
/// hook or type) reads as a hooked chain with an impossible priority, so it never matches.
fn parse_chain(payload: &[u8]) -> (String, String, Option<Header>) {
    let (mut table, mut name, mut kind, mut policy, mut hook) = (String::new(), String::new(), None, 1, None);
    for (ty, v) in attrs(body(payload)) {
        match ty {
            CHAIN_TABLE => table = string(v),
            CHAIN_NAME => name = string(v),
            CHAIN_TYPE => kind = Some(string(v)),
            CHAIN_POLICY => policy = be32(v),
            CHAIN_HOOK => {
                let (mut num, mut priority) = (u32::MAX, 0);
                for (t, v) in attrs(v) {
                    match t {
                        HOOK_NUM => num = be32(v),
                        HOOK_PRIORITY => priority = be32(v) as i32,
                        _ => {}
                    }
                }
                hook = Some((num, priority));
            }
            _ => {}
        }
    }
    let header = hook.map(|(num, priority)| {
        let kind = match kind.as_deref() {
            Some("nat") => Some(ChainKind::Nat),
            Some("filter") => Some(ChainKind::Filter),
            _ => None,
        };
        match (hook_of(num), kind) {
            (Some(hook), Some(kind)) => {
                Header { hook: BaseHook { hook, kind, priority }, drops: policy == NF_DROP }
            }
            _ => Header {
                hook: BaseHook { hook: Hook::Prerouting, kind: ChainKind::Filter, priority: i32::MIN },
                drops: policy == NF_DROP,
            },
        }
    });
    (table, name, header)
}

/// A rule message: `(table, chain, digest of its expressions and comment)`.
fn parse_rule(payload: &[u8]) -> (String, String, Digest) {
    let (mut table, mut chain, mut exprs, mut comment): (String, String, &[u8], &[u8]) =
        (String::new(), String::new(), &[], &[]);
    for (ty, v) in attrs(body(payload)) {
        match ty {
            RULE_TABLE => table = string(v),
            RULE_CHAIN => chain = string(v),
            RULE_EXPRESSIONS => exprs = v,
            RULE_USERDATA => comment = v,
            _ => {}
        }
    }
    (table, chain, digest((exprs, comment)))
}

/// One element in comparable form: key, key end, data (a value or a verdict), interval end.
#[derive(Hash)]
struct ElementSeen<'a> {
    key: &'a [u8],
    key_end: &'a [u8],
    value: &'a [u8],
    verdict: Option<(u32, String)>,
    interval_end: bool,
}

pub(super) fn inner_value(v: &[u8]) -> &[u8] {
    attrs(v).find(|(t, _)| *t == attr::DATA_VALUE).map_or(&[], |(_, v)| v)
}

/// The order-independent digest of the elements in a set-element message's body, added to
/// `sum`.
fn add_elements(body: &[u8], sum: &mut Digest) {
    let Some((_, list)) = attrs(body).find(|(t, _)| *t == attr::ELEM_LIST_ELEMENTS) else { return };
    for (_, elem) in attrs(list) {
        let mut e = ElementSeen { key: &[], key_end: &[], value: &[], verdict: None, interval_end: false };
        for (t, v) in attrs(elem) {
            match t {
                attr::ELEM_KEY => e.key = inner_value(v),
                attr::ELEM_KEY_END => e.key_end = inner_value(v),
                attr::ELEM_FLAGS => e.interval_end = be32(v) & 1 != 0,
                attr::ELEM_DATA => {
                    e.value = inner_value(v);
                    if let Some((_, verdict)) = attrs(v).find(|(t, _)| *t == DATA_VERDICT) {
                        let (mut code, mut chain) = (0, String::new());
                        for (t, v) in attrs(verdict) {
                            match t {
                                1 => code = be32(v),
                                2 => chain = string(v),
                                _ => {}
                            }
                        }
                        e.verdict = Some((code, chain));
                    }
                }
                _ => {}
            }
        }
        *sum = sum.wrapping_add(digest(&e));
    }
}

/// The digest the kernel would answer for `elements` of `set`: the program's elements encoded
/// as they are sent, then read with the kernel answer's parser.
pub(super) fn expected_elements(set: &Set, elements: &[&Element]) -> Digest {
    let mut b = Batch::new(0);
    super::elements::elements(&mut b, 0, TABLE, set, elements, None, false);
    let (bytes, _) = b.finish();
    let mut sum: Digest = 0;
    for m in messages(&bytes) {
        if m.kind == (SUBSYS_NFTABLES << 8) | NEWSETELEM {
            add_elements(body(m.payload), &mut sum);
        }
    }
    sum
}

impl NftNetlink {
    fn request(&mut self, kind: u8, family: u8, flags: u16, a: &Attrs) -> (Vec<u8>, u32) {
        self.seq = self.seq.wrapping_add(1);
        let len = 20 + a.0.len();
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&((SUBSYS_NFTABLES << 8) | u16::from(kind)).to_ne_bytes());
        m.extend_from_slice(&(NLM_F_REQUEST | flags).to_ne_bytes());
        m.extend_from_slice(&self.seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[family, 0, 0, 0]);
        m.extend_from_slice(&a.0);
        (m, self.seq)
    }

    /// Runs a dump until it completes untorn; `each` sees every answer of the last attempt
    /// (it is reset by `start` before each attempt).
    pub(super) fn dump_all<S>(
        &mut self,
        kind: u8,
        family: u8,
        a: &Attrs,
        what: &str,
        start: impl Fn() -> S,
        mut each: impl FnMut(&mut S, u16, &[u8]),
    ) -> Result<S, DataplaneError> {
        for _ in 0..ATTEMPTS {
            let (m, seq) = self.request(kind, family, NLM_F_DUMP, a);
            let mut state = start();
            if dump(&self.socket, &m, seq, what, |k, p| each(&mut state, k & 0xff, p))? == Dumped::Complete {
                return Ok(state);
            }
        }
        Err(NetlinkError::Protocol(format!("{what}: the objects kept changing during the dump")).into())
    }

    /// The ruleset generation: every committed nf_tables transaction in this network
    /// namespace, ours or anyone's, moves it on by one.
    pub(super) fn read_generation(&mut self) -> Result<u32, DataplaneError> {
        let (m, seq) = self.request(GETGEN, 0, NLM_F_ACK, &Attrs::default());
        let mut generation = None;
        dump(&self.socket, &m, seq, "reading the ruleset generation", |kind, p| {
            if kind & 0xff == NEWGEN {
                generation = attrs(body(p)).find(|(t, _)| *t == GEN_ID).map(|(_, v)| be32(v));
            }
        })?;
        generation.ok_or_else(|| NetlinkError::Protocol("no ruleset generation in the answer".into()).into())
    }

    /// True when our table exists in `family`.
    pub(super) fn table_exists(&mut self, family: u8) -> Result<bool, DataplaneError> {
        let (m, seq) = self.request(GETTABLE, family, NLM_F_ACK, &Attrs::default().string(TABLE_NAME, TABLE));
        match dump(&self.socket, &m, seq, "reading the table", |_, _| {}) {
            Ok(_) => Ok(true),
            Err(e) if is_missing(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Rule digests per chain of our table in `family`: every chain, or only `chain`.
    pub(super) fn read_rules(
        &mut self,
        family: u8,
        chain: Option<&str>,
    ) -> Result<HashMap<String, Digest>, DataplaneError> {
        let mut a = Attrs::default().string(RULE_TABLE, TABLE);
        if let Some(c) = chain {
            a = a.string(RULE_CHAIN, c);
        }
        let mut rules =
            self.dump_all(GETRULE, family, &a, "reading rules", HashMap::new, |acc, kind, p| {
                if kind == NEWRULE {
                    let (table, chain, rule) = parse_rule(p);
                    if table == TABLE {
                        let d = acc.entry(chain).or_insert(EMPTY_CHAIN);
                        *d = chain_step(*d, rule);
                    }
                }
            })?;
        if let Some(c) = chain {
            rules.entry(c.to_string()).or_insert(EMPTY_CHAIN);
        }
        Ok(rules)
    }

    /// Our table in `family` as the kernel holds it (`None` when it is gone); each set's
    /// elements are read as `elements` says (not at all when it does not name the set).
    pub(super) fn read_table(
        &mut self,
        family: u8,
        elements: &HashMap<String, ElementRead<'_>>,
    ) -> Result<Option<Observed>, DataplaneError> {
        if !self.table_exists(family)? {
            return Ok(None);
        }
        let table = Attrs::default().string(CHAIN_TABLE, TABLE);
        let chains =
            self.dump_all(GETCHAIN, family, &table, "reading chains", Vec::new, |acc, kind, p| {
                if kind == NEWCHAIN {
                    let (t, name, header) = parse_chain(p);
                    if t == TABLE {
                        acc.push((name, header));
                    }
                }
            })?;
        let rules = self.read_rules(family, None)?;
        let mut observed = Observed::default();
        for (name, header) in chains {
            let rules = rules.get(&name).copied().unwrap_or(EMPTY_CHAIN);
            observed.chains.insert(name, ChainSeen { header, rules });
        }
        let sets = self.dump_all(GETSET, family, &table, "reading sets", Vec::new, |acc, kind, p| {
            if kind != NEWSET {
                return;
            }
            let (mut t, mut name, mut flags) = (String::new(), String::new(), 0);
            for (ty, v) in attrs(body(p)) {
                match ty {
                    attr::SET_TABLE => t = string(v),
                    attr::SET_NAME => name = string(v),
                    attr::SET_FLAGS => flags = be32(v),
                    _ => {}
                }
            }
            if t == TABLE && flags & SET_ANONYMOUS == 0 {
                acc.push((name, flags & SET_TIMEOUT != 0));
            }
        })?;
        for (name, filled_by_packets) in sets {
            let read = if filled_by_packets { None } else { elements.get(&name) };
            let digest = match read {
                None | Some(ElementRead::Skip) => None,
                Some(ElementRead::Dump) => Some(self.read_elements(family, &name)?),
                Some(ElementRead::Lookup(set, wanted)) => Some(self.look_up_elements(family, set, wanted)?),
            };
            observed.sets.insert(name, digest);
        }
        Ok(Some(observed))
    }

    /// The digest of `wanted` as the kernel holds them, asked for by key. A missing element
    /// makes a digest no program can have.
    fn look_up_elements(
        &mut self,
        family: u8,
        set: &Set,
        wanted: &[&Element],
    ) -> Result<Digest, DataplaneError> {
        let what = format!("looking up the elements of {}", set.name);
        let mut sum: Digest = 0;
        for chunk in wanted.chunks(LOOKUP_BATCH) {
            let mut list = Attrs::default();
            for (i, e) in chunk.iter().enumerate() {
                let key = Attrs::default().put(attr::DATA_VALUE, &super::elements::key_bytes(e, false));
                list = list.nested(i as u16 + 1, Attrs::default().nested(attr::ELEM_KEY, key));
            }
            let a = Attrs::default()
                .string(attr::ELEM_LIST_TABLE, TABLE)
                .string(attr::ELEM_LIST_SET, &set.name)
                .nested(attr::ELEM_LIST_ELEMENTS, list);
            let (m, seq) = self.request(GETSETELEM, family, NLM_F_ACK, &a);
            let answered = dump(&self.socket, &m, seq, &what, |kind, p| {
                if kind & 0xff == NEWSETELEM {
                    add_elements(body(p), &mut sum);
                }
            });
            match answered {
                Ok(_) => {}
                Err(e) if is_missing(&e) => return Ok(sum ^ digest("an element is missing")),
                Err(e) => return Err(e),
            }
        }
        Ok(sum)
    }

    fn read_elements(&mut self, family: u8, set: &str) -> Result<Digest, DataplaneError> {
        let a = Attrs::default().string(attr::ELEM_LIST_TABLE, TABLE).string(attr::ELEM_LIST_SET, set);
        let what = format!("reading the elements of {set}");
        self.dump_all(
            GETSETELEM,
            family,
            &a,
            &what,
            || 0,
            |sum, kind, p| {
                if kind == NEWSETELEM {
                    add_elements(body(p), sum);
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tideway_core::net::IpFamily;
    use tideway_core::program::{DataType, ElemData, KeyType, SetFlags, Value, Verdict};

    fn vmap() -> Set {
        Set {
            table: "tideway",
            name: "service-ips".into(),
            key: vec![KeyType::Addr(IpFamily::V4), KeyType::Proto, KeyType::Port],
            data: Some(DataType::Verdict),
            flags: SetFlags::default(),
            ipset_type: None,
            shared: false,
            elements: vec![],
            comment: None,
        }
    }

    fn element(ip: &str, chain: &str) -> Element {
        Element {
            key: [
                Value::Ip(ip.parse().unwrap()),
                Value::Proto(tideway_core::net::Protocol::Tcp),
                Value::Port(80),
            ]
            .into_iter()
            .collect(),
            data: Some(ElemData::Verdict(Verdict::Goto(chain.into()))),
        }
    }

    #[test]
    fn element_digests_see_replacements_not_order() {
        let s = vmap();
        let (a, b, c) =
            (element("10.96.0.1", "svc-a"), element("10.96.0.2", "svc-b"), element("10.96.0.2", "svc-c"));
        assert_eq!(expected_elements(&s, &[&a, &b]), expected_elements(&s, &[&b, &a]));
        // Same count, one verdict replaced.
        assert_ne!(expected_elements(&s, &[&a, &b]), expected_elements(&s, &[&a, &c]));
        assert_ne!(expected_elements(&s, &[&a]), expected_elements(&s, &[&a, &b]));
        assert_eq!(expected_elements(&s, &[]), 0);
    }

    #[test]
    fn chain_headers_read_back() {
        let mut b = Batch::new(0);
        b.message(0, 2, 0, "chain");
        b.str(CHAIN_TABLE, TABLE);
        b.str(CHAIN_NAME, "nat-prerouting");
        b.str(CHAIN_TYPE, "nat");
        b.be32(CHAIN_POLICY, 0);
        let n = b.nest(CHAIN_HOOK);
        b.be32(HOOK_NUM, 0);
        b.be32(HOOK_PRIORITY, (-100i32) as u32);
        b.end(n);
        let (bytes, _) = b.finish();
        let m = messages(&bytes)[1];
        let (table, name, header) = parse_chain(m.payload);
        assert_eq!((table.as_str(), name.as_str()), (TABLE, "nat-prerouting"));
        let want = BaseHook { hook: Hook::Prerouting, kind: ChainKind::Nat, priority: -100 };
        assert_eq!(header, Some(Header { hook: want, drops: true }));
    }
}
