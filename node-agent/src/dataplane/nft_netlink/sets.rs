//! Sets and maps on the wire: declarations (types, lengths, flags, and the user data `nft` reads
//! back to print them), and elements, including the two interval encodings (start/end
//! elements for single-field ranges, key/key-end pairs for concatenated ranges).

use std::net::IpAddr;

use tideway_core::net::{IpFamily, IpNet};
use tideway_core::program::{DataType, ElemData, Element, KeyType, Set, Value, Verdict};

use super::batch::{Batch, NLM_F_CREATE, msg};
use super::expr::verdict;

pub(super) mod attr {
    pub(in super::super) const SET_TABLE: u16 = 1;
    pub(in super::super) const SET_NAME: u16 = 2;
    pub(in super::super) const SET_FLAGS: u16 = 3;
    pub(in super::super) const SET_KEY_TYPE: u16 = 4;
    pub(in super::super) const SET_KEY_LEN: u16 = 5;
    pub(in super::super) const SET_DATA_TYPE: u16 = 6;
    pub(in super::super) const SET_DATA_LEN: u16 = 7;
    pub(in super::super) const SET_DESC: u16 = 9;
    pub(in super::super) const SET_ID: u16 = 10;
    pub(in super::super) const SET_TIMEOUT: u16 = 11;
    pub(in super::super) const SET_USERDATA: u16 = 13;
    pub(in super::super) const DESC_SIZE: u16 = 1;
    pub(in super::super) const DESC_CONCAT: u16 = 2;
    pub(in super::super) const FIELD_LEN: u16 = 1;
    pub(in super::super) const LIST_ELEM: u16 = 1;
    pub(in super::super) const ELEM_LIST_TABLE: u16 = 1;
    pub(in super::super) const ELEM_LIST_SET: u16 = 2;
    pub(in super::super) const ELEM_LIST_ELEMENTS: u16 = 3;
    pub(in super::super) const ELEM_LIST_SET_ID: u16 = 4;
    pub(in super::super) const ELEM_KEY: u16 = 1;
    pub(in super::super) const ELEM_DATA: u16 = 2;
    pub(in super::super) const ELEM_FLAGS: u16 = 3;
    pub(in super::super) const ELEM_KEY_END: u16 = 10;
    pub(in super::super) const DATA_VALUE: u16 = 1;
}

const F_ANONYMOUS: u32 = 0x1;
const F_CONSTANT: u32 = 0x2;
const F_INTERVAL: u32 = 0x4;
const F_MAP: u32 = 0x8;
const F_TIMEOUT: u32 = 0x10;
const F_EVAL: u32 = 0x20;
const F_CONCAT: u32 = 0x80;
const ELEM_INTERVAL_END: u32 = 0x1;

/// `nft` datatype numbers.
const TYPE_INTEGER: u32 = 4;
const TYPE_IPV4: u32 = 7;
const TYPE_IPV6: u32 = 8;
const TYPE_PROTO: u32 = 12;
const TYPE_SERVICE: u32 = 13;
const DATA_VERDICT: u32 = 0xffff_ff00;
/// Bits per component in a concatenated type.
const TYPE_BITS: u32 = 6;

/// Elements converted to their wire form at a time.
const WIRE_CHUNK: usize = 512;
/// Elements per message: a message's element list is one nested attribute (at most 64 KiB).
const ELEMENTS_BYTES: usize = 48 * 1024;

fn addr_type(f: IpFamily) -> u32 {
    if f == IpFamily::V4 { TYPE_IPV4 } else { TYPE_IPV6 }
}

fn addr_len(f: IpFamily) -> usize {
    if f == IpFamily::V4 { 4 } else { 16 }
}

fn component_type(k: KeyType) -> u32 {
    match k {
        KeyType::Addr(f) | KeyType::Net(f) => addr_type(f),
        KeyType::Proto => TYPE_PROTO,
        KeyType::Port => TYPE_SERVICE,
        KeyType::Slot => TYPE_INTEGER,
    }
}

/// Byte length of a key component.
fn component_len(k: KeyType) -> usize {
    match k {
        KeyType::Addr(f) | KeyType::Net(f) => addr_len(f),
        KeyType::Proto => 1,
        KeyType::Port => 2,
        KeyType::Slot => 4,
    }
}

fn concat_type(types: impl Iterator<Item = u32>) -> u32 {
    types.fold(0, |acc, t| (acc << TYPE_BITS) | t)
}

/// Key length in the kernel: one component as is, concatenations padded to 32 bits each.
fn key_len(key: &[KeyType]) -> usize {
    match key {
        [one] => component_len(*one),
        many => many.iter().map(|k| component_len(*k).next_multiple_of(4)).sum(),
    }
}

fn data_type(d: DataType) -> (u32, usize) {
    match d {
        DataType::Verdict => (DATA_VERDICT, 0),
        DataType::AddrPort(f) => (concat_type([addr_type(f), TYPE_SERVICE].into_iter()), addr_len(f) + 4),
    }
}

/// `nft`'s set user data: type-length-value records (u8 type, u8 length) it uses to print the
/// set back the way it was declared.
mod udata {
    pub(super) const KEY_BYTEORDER: u8 = 0;
    pub(super) const DATA_BYTEORDER: u8 = 1;
    pub(super) const KEY_TYPEOF: u8 = 3;
    pub(super) const DATA_TYPEOF: u8 = 4;
    pub(super) const DATA_INTERVAL: u8 = 6;
    pub(super) const COMMENT: u8 = 7;
    pub(super) const BYTEORDER_INVALID: u32 = 0;
    pub(super) const BYTEORDER_HOST: u32 = 1;
    pub(super) const BYTEORDER_BIG: u32 = 2;
    /// Expression kinds in `typeof` records.
    pub(super) const EXPR_VERDICT: u32 = 1;
    pub(super) const EXPR_PAYLOAD: u32 = 7;
    pub(super) const EXPR_META: u32 = 9;
    pub(super) const EXPR_CONCAT: u32 = 13;
    pub(super) const EXPR_NUMGEN: u32 = 23;
    /// Payload protocol descriptions and fields.
    pub(super) const DESC_IP: u32 = 12;
    pub(super) const DESC_IP6: u32 = 13;
    pub(super) const DESC_TH: u32 = 11;
    pub(super) const IP_DADDR: u32 = 12;
    pub(super) const IP6_DADDR: u32 = 9;
    pub(super) const TH_DPORT: u32 = 2;
    pub(super) const META_L4PROTO: u32 = 16;
    pub(super) const NUMGEN_RANDOM: u32 = 1;

    /// One record.
    pub(super) fn tlv(out: &mut Vec<u8>, ty: u8, value: &[u8]) {
        out.push(ty);
        out.push(value.len() as u8);
        out.extend_from_slice(value);
    }

    pub(super) fn u32(out: &mut Vec<u8>, ty: u8, v: u32) {
        tlv(out, ty, &v.to_ne_bytes());
    }
}

/// A `typeof` component: the expression `nft` would print for the key part.
fn typeof_component(k: KeyType) -> Vec<u8> {
    let mut inner = Vec::new();
    let kind = match k {
        KeyType::Addr(f) | KeyType::Net(f) => {
            let (desc, field) = if f == IpFamily::V4 {
                (udata::DESC_IP, udata::IP_DADDR)
            } else {
                (udata::DESC_IP6, udata::IP6_DADDR)
            };
            udata::u32(&mut inner, 0, desc);
            udata::u32(&mut inner, 1, field);
            udata::EXPR_PAYLOAD
        }
        KeyType::Port => {
            udata::u32(&mut inner, 0, udata::DESC_TH);
            udata::u32(&mut inner, 1, udata::TH_DPORT);
            udata::EXPR_PAYLOAD
        }
        KeyType::Proto => {
            udata::u32(&mut inner, 0, udata::META_L4PROTO);
            udata::EXPR_META
        }
        KeyType::Slot => {
            udata::u32(&mut inner, 0, udata::NUMGEN_RANDOM);
            udata::u32(&mut inner, 1, 1);
            udata::u32(&mut inner, 2, 0);
            udata::EXPR_NUMGEN
        }
    };
    let mut out = Vec::new();
    udata::u32(&mut out, 0, kind);
    udata::tlv(&mut out, 1, &inner);
    out
}

/// A `typeof` concatenation record (an empty component list for `type a . b` declarations).
fn typeof_concat(components: &[KeyType]) -> Vec<u8> {
    let mut list = Vec::new();
    for (i, k) in components.iter().enumerate() {
        udata::tlv(&mut list, i as u8, &typeof_component(*k));
    }
    let mut out = Vec::new();
    udata::u32(&mut out, 0, udata::EXPR_CONCAT);
    udata::tlv(&mut out, 1, &list);
    out
}

fn set_udata(s: &Set) -> Vec<u8> {
    let mut out = Vec::new();
    let typeof_key = s.key.contains(&KeyType::Slot);
    if s.key.len() == 1 {
        let order = if s.key[0] == KeyType::Slot { udata::BYTEORDER_HOST } else { udata::BYTEORDER_BIG };
        udata::u32(&mut out, udata::KEY_BYTEORDER, order);
    } else {
        udata::u32(&mut out, udata::KEY_BYTEORDER, udata::BYTEORDER_INVALID);
    }
    if s.data.is_some() {
        udata::u32(&mut out, udata::DATA_BYTEORDER, udata::BYTEORDER_INVALID);
    }
    if s.key.len() > 1 {
        let components: &[KeyType] = if typeof_key { &s.key } else { &[] };
        udata::tlv(&mut out, udata::KEY_TYPEOF, &typeof_concat(components));
    }
    if let Some(d) = s.data {
        if typeof_key && let DataType::AddrPort(f) = d {
            udata::tlv(&mut out, udata::DATA_TYPEOF, &typeof_concat(&[KeyType::Addr(f), KeyType::Port]));
        }
        udata::u32(&mut out, udata::DATA_INTERVAL, 0);
    }
    if let Some(c) = &s.comment {
        let mut v = c.as_bytes().to_vec();
        v.push(0);
        udata::tlv(&mut out, udata::COMMENT, &v);
    }
    out
}

/// Declares `s` (id `id` within the batch).
/// Declares `s`, sized for `elements` (see [`capacity`](super::capacity)).
pub(super) fn declare(b: &mut Batch, family: u8, table: &str, s: &Set, id: u32, elements: usize) {
    b.message(msg::NEWSET, family, NLM_F_CREATE, format!("add set {}", s.name));
    b.str(attr::SET_TABLE, table);
    b.str(attr::SET_NAME, &s.name);
    let concat_interval = s.flags.interval && s.key.len() > 1;
    let mut flags = 0;
    if s.data.is_some() {
        flags |= F_MAP;
    }
    if s.flags.interval {
        flags |= F_INTERVAL;
    }
    if concat_interval {
        flags |= F_CONCAT;
    }
    if s.flags.dynamic_timeout.is_some() {
        flags |= F_TIMEOUT | F_EVAL;
    }
    b.be32(attr::SET_FLAGS, flags);
    b.be32(attr::SET_KEY_TYPE, concat_type(s.key.iter().map(|k| component_type(*k))));
    b.be32(attr::SET_KEY_LEN, key_len(&s.key) as u32);
    if let Some(d) = s.data {
        let (t, len) = data_type(d);
        b.be32(attr::SET_DATA_TYPE, t);
        b.be32(attr::SET_DATA_LEN, len as u32);
    }
    b.be32(attr::SET_ID, id);
    if let Some(t) = s.flags.dynamic_timeout {
        b.be64(attr::SET_TIMEOUT, u64::from(t) * 1000);
    }
    if let Some(size) = super::capacity::capacity(s, elements) {
        let desc = b.nest(attr::SET_DESC);
        b.be32(attr::DESC_SIZE, size);
        b.end(desc);
    }
    if concat_interval {
        let desc = b.nest(attr::SET_DESC);
        let list = b.nest(attr::DESC_CONCAT);
        for k in &s.key {
            let e = b.nest(attr::LIST_ELEM);
            b.be32(attr::FIELD_LEN, component_len(*k) as u32);
            b.end(e);
        }
        b.end(list);
        b.end(desc);
    }
    b.put(attr::SET_USERDATA, &set_udata(s));
}

/// Declares the anonymous constant verdict map of `numgen random mod N vmap { .. }`.
pub(super) fn declare_random_vmap(b: &mut Batch, family: u8, table: &str, n: usize, id: u32) {
    b.message(msg::NEWSET, family, NLM_F_CREATE, "add anonymous verdict map");
    b.str(attr::SET_TABLE, table);
    b.str(attr::SET_NAME, ANON_MAP);
    b.be32(attr::SET_FLAGS, F_ANONYMOUS | F_CONSTANT | F_MAP);
    b.be32(attr::SET_KEY_TYPE, TYPE_INTEGER);
    b.be32(attr::SET_KEY_LEN, 4);
    b.be32(attr::SET_DATA_TYPE, DATA_VERDICT);
    b.be32(attr::SET_DATA_LEN, 0);
    b.be32(attr::SET_ID, id);
    let desc = b.nest(attr::SET_DESC);
    b.be32(attr::DESC_SIZE, n as u32);
    b.end(desc);
    let mut u = Vec::new();
    udata::u32(&mut u, udata::KEY_BYTEORDER, udata::BYTEORDER_HOST);
    udata::u32(&mut u, udata::DATA_BYTEORDER, udata::BYTEORDER_INVALID);
    let mut verdict_expr = Vec::new();
    udata::u32(&mut verdict_expr, 0, udata::EXPR_VERDICT);
    udata::tlv(&mut verdict_expr, 1, &[]);
    udata::tlv(&mut u, udata::DATA_TYPEOF, &verdict_expr);
    udata::u32(&mut u, udata::DATA_INTERVAL, 0);
    b.put(attr::SET_USERDATA, &u);
}

/// The kernel names anonymous sets from this template.
pub(super) const ANON_MAP: &str = "__map%d";

/// Elements of the anonymous map: slot `i` maps to `verdicts[i]`.
pub(super) fn random_vmap_elements(b: &mut Batch, family: u8, table: &str, verdicts: &[Verdict], id: u32) {
    b.message(msg::NEWSETELEM, family, NLM_F_CREATE, "add anonymous verdict map elements");
    b.str(attr::ELEM_LIST_TABLE, table);
    b.str(attr::ELEM_LIST_SET, ANON_MAP);
    b.be32(attr::ELEM_LIST_SET_ID, id);
    let list = b.nest(attr::ELEM_LIST_ELEMENTS);
    for (i, v) in verdicts.iter().enumerate() {
        let e = b.nest(i as u16 + 1);
        let k = b.nest(attr::ELEM_KEY);
        b.put(attr::DATA_VALUE, &(i as u32).to_ne_bytes());
        b.end(k);
        let d = b.nest(attr::ELEM_DATA);
        verdict(b, v);
        b.end(d);
        b.end(e);
    }
    b.end(list);
}

fn ip_bytes(out: &mut Vec<u8>, ip: &IpAddr) {
    match ip {
        IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
        IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
    }
}

/// One key component's bytes; `end` picks the last address of a network.
fn value_bytes(out: &mut Vec<u8>, v: &Value, end: bool) {
    match v {
        Value::Ip(ip) => ip_bytes(out, ip),
        Value::Net(n) => ip_bytes(out, &if end { last_addr(n) } else { n.network() }),
        Value::Proto(p) => out.push(p.number()),
        Value::Port(p) => out.extend_from_slice(&p.to_be_bytes()),
        Value::Int(i) => out.extend_from_slice(&i.to_ne_bytes()),
    }
}

fn last_addr(n: &IpNet) -> IpAddr {
    n.broadcast()
}

/// The key as the kernel stores it (concatenation components padded to 32 bits).
pub(super) fn key_bytes(e: &Element, end: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(e.key.len() * 4);
    let concat = e.key.len() > 1;
    for v in &e.key {
        value_bytes(&mut out, v, end);
        if concat {
            out.resize(out.len().next_multiple_of(4), 0);
        }
    }
    out
}

fn elem_data(b: &mut Batch, d: &ElemData) {
    let n = b.nest(attr::ELEM_DATA);
    match d {
        ElemData::Verdict(v) => verdict(b, v),
        ElemData::AddrPort(ip, port) => {
            let mut v = Vec::with_capacity(20);
            ip_bytes(&mut v, ip);
            v.extend_from_slice(&port.to_be_bytes());
            v.resize(v.len().next_multiple_of(4), 0);
            b.put(attr::DATA_VALUE, &v);
        }
    }
    b.end(n);
}

/// What one kernel element looks like: key, optional key end, data, flags.
struct Wire<'a> {
    key: Vec<u8>,
    key_end: Option<Vec<u8>>,
    data: Option<&'a ElemData>,
    interval_end: bool,
}

/// Kernel elements for `elements` of `set`. Single-field interval sets take `nft`'s range
/// encoding: each range is a start element and an end element just past it (none when the
/// range reaches the top of the address space), after an end element at zero when the first
/// range does not start there. Ranges must not overlap (the planner aggregates them).
fn wire<'a>(set: &Set, elements: &[&'a Element]) -> Vec<Wire<'a>> {
    if !set.flags.interval {
        return elements
            .iter()
            .map(|e| Wire {
                key: key_bytes(e, false),
                key_end: None,
                data: e.data.as_ref(),
                interval_end: false,
            })
            .collect();
    }
    if set.key.len() > 1 {
        return elements
            .iter()
            .map(|e| Wire {
                key: key_bytes(e, false),
                key_end: Some(key_bytes(e, true)),
                data: e.data.as_ref(),
                interval_end: false,
            })
            .collect();
    }
    let mut ranges: Vec<(u128, u128, usize, &Element)> = elements
        .iter()
        .map(|e| {
            let (start, end, width) = match e.key.first() {
                Some(Value::Net(n)) => {
                    (addr_num(&n.network()), addr_num(&last_addr(n)), addr_width(&n.network()))
                }
                Some(Value::Ip(ip)) => (addr_num(ip), addr_num(ip), addr_width(ip)),
                _ => (0, 0, 4),
            };
            (start, end, width, *e)
        })
        .collect();
    ranges.sort_by_key(|r| r.0);
    let mut out = Vec::new();
    if let Some(first) = ranges.first()
        && first.0 != 0
    {
        out.push(Wire { key: num_bytes(0, first.2), key_end: None, data: None, interval_end: true });
    }
    for (start, end, width, e) in ranges {
        out.push(Wire {
            key: num_bytes(start, width),
            key_end: None,
            data: e.data.as_ref(),
            interval_end: false,
        });
        let max = if width == 4 { u128::from(u32::MAX) } else { u128::MAX };
        if end < max {
            out.push(Wire { key: num_bytes(end + 1, width), key_end: None, data: None, interval_end: true });
        }
    }
    out
}

fn addr_num(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(*a)),
        IpAddr::V6(a) => u128::from(*a),
    }
}

fn addr_width(ip: &IpAddr) -> usize {
    if ip.is_ipv4() { 4 } else { 16 }
}

fn num_bytes(n: u128, width: usize) -> Vec<u8> {
    if width == 4 { (n as u32).to_be_bytes().to_vec() } else { n.to_be_bytes().to_vec() }
}

/// Adds (or, with `delete`, removes) `elements` of `set`, in as many messages as needed.
/// `set_id` names a set declared in the same batch.
pub(super) fn elements(
    b: &mut Batch,
    family: u8,
    table: &str,
    set: &Set,
    elements: &[&Element],
    set_id: Option<u32>,
    delete: bool,
) {
    // Elements are converted a few hundred at a time, so a large set's wire form is never
    // held whole beside the batch; single-field intervals need the whole list (sorted ranges).
    let mut wires: Box<dyn Iterator<Item = Wire<'_>>> = if set.flags.interval && set.key.len() == 1 {
        Box::new(wire(set, elements).into_iter())
    } else {
        Box::new(elements.chunks(WIRE_CHUNK).flat_map(|chunk| wire(set, chunk)))
    };
    let verb = if delete { "delete" } else { "add" };
    let mut next = wires.next();
    while next.is_some() {
        let kind = if delete { msg::DELSETELEM } else { msg::NEWSETELEM };
        b.message(
            kind,
            family,
            if delete { 0 } else { NLM_F_CREATE },
            format!("{verb} elements of {}", set.name),
        );
        b.str(attr::ELEM_LIST_TABLE, table);
        b.str(attr::ELEM_LIST_SET, &set.name);
        if let Some(id) = set_id {
            b.be32(attr::ELEM_LIST_SET_ID, id);
        }
        let list = b.nest(attr::ELEM_LIST_ELEMENTS);
        let start = b.message_len();
        let mut n = 0u16;
        while let Some(w) = next.as_ref()
            && b.message_len() - start < ELEMENTS_BYTES
        {
            n += 1;
            let e = b.nest(n);
            if w.interval_end {
                b.be32(attr::ELEM_FLAGS, ELEM_INTERVAL_END);
            }
            let k = b.nest(attr::ELEM_KEY);
            b.put(attr::DATA_VALUE, &w.key);
            b.end(k);
            if let Some(end) = &w.key_end {
                let k = b.nest(attr::ELEM_KEY_END);
                b.put(attr::DATA_VALUE, end);
                b.end(k);
            }
            if !delete && let Some(d) = w.data {
                elem_data(b, d);
            }
            b.end(e);
            next = wires.next();
        }
        b.end(list);
    }
}

/// Removes every element of `set` (one message, no element list).
pub(super) fn flush(b: &mut Batch, family: u8, table: &str, set: &str) {
    b.message(msg::DELSETELEM, family, 0, format!("flush {set}"));
    b.str(attr::ELEM_LIST_TABLE, table);
    b.str(attr::ELEM_LIST_SET, set);
}

/// Deletes `set`.
pub(super) fn delete(b: &mut Batch, family: u8, table: &str, set: &str) {
    b.message(msg::DELSET, family, 0, format!("delete set {set}"));
    b.str(attr::SET_TABLE, table);
    b.str(attr::SET_NAME, set);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tideway_core::net::Protocol;
    use tideway_core::program::SetFlags;

    fn set(key: Vec<KeyType>, data: Option<DataType>, interval: bool) -> Set {
        Set {
            table: "tideway",
            name: "s".into(),
            key,
            data,
            flags: SetFlags { interval, dynamic_timeout: None },
            ipset_type: None,
            shared: false,
            elements: vec![],
            comment: None,
        }
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn types_and_lengths_match_nft() {
        // Captured from `nft --debug=mnl` for the same declarations.
        let eps = [KeyType::Addr(IpFamily::V4), KeyType::Proto, KeyType::Port, KeyType::Slot];
        assert_eq!(concat_type(eps.iter().map(|k| component_type(*k))), 0x001c_c344);
        assert_eq!(key_len(&eps), 16);
        assert_eq!(data_type(DataType::AddrPort(IpFamily::V4)), (0x1cd, 8));
        assert_eq!(data_type(DataType::AddrPort(IpFamily::V6)), (0x20d, 20));
        let six = [KeyType::Addr(IpFamily::V6), KeyType::Proto, KeyType::Port];
        assert_eq!(concat_type(six.iter().map(|k| component_type(*k))), 0x830d);
        assert_eq!(key_len(&six), 24);
        assert_eq!(key_len(&[KeyType::Addr(IpFamily::V6)]), 16);
    }

    #[test]
    fn user_data_matches_nft() {
        let eps = set(
            vec![KeyType::Addr(IpFamily::V4), KeyType::Proto, KeyType::Port, KeyType::Slot],
            Some(DataType::AddrPort(IpFamily::V4)),
            false,
        );
        assert_eq!(
            hex(&set_udata(&eps)),
            "000400000000010400000000036000040d00000001580014000407000000010c00040c00000001040c000000010e0004090000\
             0001060004100000000214000407000000010c00040b000000010402000000031a00041700000001120004010000000104010000\
             00020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c00040b\
             000000010402000000060400000000"
        );
        let vmap = set(
            vec![KeyType::Addr(IpFamily::V4), KeyType::Proto, KeyType::Port],
            Some(DataType::Verdict),
            false,
        );
        assert_eq!(hex(&set_udata(&vmap)), "000400000000010400000000030800040d0000000100060400000000");
        let fw = set(
            vec![KeyType::Addr(IpFamily::V4), KeyType::Proto, KeyType::Port, KeyType::Net(IpFamily::V4)],
            None,
            true,
        );
        assert_eq!(hex(&set_udata(&fw)), "000400000000030800040d0000000100");
        let cidrs = set(vec![KeyType::Net(IpFamily::V4)], None, true);
        assert_eq!(hex(&set_udata(&cidrs)), "000402000000");
    }

    #[test]
    fn interval_ranges_take_nfts_encoding() {
        let cidrs = set(vec![KeyType::Net(IpFamily::V4)], None, true);
        let e =
            Element { key: [Value::Net("10.244.0.0/16".parse().unwrap())].into_iter().collect(), data: None };
        let w = wire(&cidrs, &[&e]);
        let got: Vec<(String, bool)> = w.iter().map(|w| (hex(&w.key), w.interval_end)).collect();
        assert_eq!(
            got,
            vec![("00000000".into(), true), ("0af40000".into(), false), ("0af50000".into(), true)]
        );
        let all =
            Element { key: [Value::Net("0.0.0.0/0".parse().unwrap())].into_iter().collect(), data: None };
        let w = wire(&cidrs, &[&all]);
        assert_eq!(w.len(), 1);
        // Concatenated ranges: key and key end.
        let fw = set(
            vec![KeyType::Addr(IpFamily::V4), KeyType::Proto, KeyType::Port, KeyType::Net(IpFamily::V4)],
            None,
            true,
        );
        let e = Element {
            key: [
                Value::Ip("10.0.0.1".parse().unwrap()),
                Value::Proto(Protocol::Tcp),
                Value::Port(80),
                Value::Net("192.168.0.0/24".parse().unwrap()),
            ]
            .into_iter()
            .collect(),
            data: None,
        };
        let w = wire(&fw, &[&e]);
        assert_eq!(hex(&w[0].key), "0a0000010600000000500000c0a80000");
        assert_eq!(hex(w[0].key_end.as_deref().unwrap()), "0a0000010600000000500000c0a800ff");
    }
}
