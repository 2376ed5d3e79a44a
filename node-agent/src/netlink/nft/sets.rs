//! Sets and maps on the wire: declarations (types, lengths, flags, sizes, and the user data
//! `nft` reads back to print them), the anonymous verdict maps of random dispatch, and set
//! deletion. Their elements are in [`elements`](super::elements).

use tideway_core::net::IpFamily;
use tideway_core::program::{DataType, KeyType, Set, Verdict};
use tideway_core::render::nftables::capacity;

use super::batch::{Batch, NLM_F_CREATE, msg};
use super::verdict::verdict;

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

/// `nft` datatype numbers.
const TYPE_INTEGER: u32 = 4;
const TYPE_IPV4: u32 = 7;
const TYPE_IPV6: u32 = 8;
const TYPE_PROTO: u32 = 12;
const TYPE_SERVICE: u32 = 13;
const DATA_VERDICT: u32 = 0xffff_ff00;
/// Bits per component in a concatenated type.
const TYPE_BITS: u32 = 6;

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

/// Declares `s` (id `id` within the batch), sized for `elements` (see [`capacity`]); returns
/// where its size attribute starts, for [`Batch::patch_be32`] once the count is known (`None`
/// for sets declared without one).
pub(super) fn declare(
    b: &mut Batch,
    family: u8,
    table: &str,
    s: &Set,
    id: u32,
    elements: usize,
) -> Option<usize> {
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
    let size_at = capacity::capacity(s, elements).map(|size| {
        let desc = b.nest(attr::SET_DESC);
        let at = b.len();
        b.be32(attr::DESC_SIZE, size);
        b.end(desc);
        at
    });
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
    size_at
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

/// Deletes `set`.
pub(super) fn delete(b: &mut Batch, family: u8, table: &str, set: &str) {
    b.message(msg::DELSET, family, 0, format!("delete set {set}"));
    b.str(attr::SET_TABLE, table);
    b.str(attr::SET_NAME, set);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use tideway_core::program::SetFlags;

    /// A set `s` with this key, data and interval flag.
    pub(in super::super) fn set(key: Vec<KeyType>, data: Option<DataType>, interval: bool) -> Set {
        Set {
            table: "tideway",
            name: "s".into(),
            key,
            data,
            flags: SetFlags { interval, ..SetFlags::default() },
            ipset_type: None,
            shared: false,
            elements: vec![],
            comment: None,
        }
    }

    /// Bytes as lower-case hex.
    pub(in super::super) fn hex(b: &[u8]) -> String {
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
}
