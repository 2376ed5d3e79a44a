//! Set elements on the wire: keys and data as bytes, the two interval encodings (start/end
//! elements for single-field ranges, key/key-end pairs for concatenated ranges), and the
//! messages that add, remove or flush them.

use std::net::IpAddr;

use tideway_core::net::IpNet;
use tideway_core::program::{ElemData, Element, Set, Value};

use super::batch::{Batch, NLM_F_CREATE, msg};
use super::sets::attr;
use super::verdict::verdict;

const ELEM_INTERVAL_END: u32 = 0x1;
/// Elements converted to their wire form at a time.
const WIRE_CHUNK: usize = 512;
/// Elements per message: a message's element list is one nested attribute (at most 64 KiB).
const ELEMENTS_BYTES: usize = 48 * 1024;

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

#[cfg(test)]
mod tests {
    use super::super::sets::tests::{hex, set};
    use super::*;
    use tideway_core::net::{IpFamily, Protocol};
    use tideway_core::program::KeyType;

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
