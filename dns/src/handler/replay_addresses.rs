//! Reading a reply's answer section for what a replayed copy must shuffle: the offsets of
//! its addresses, when they can be shuffled in place.

use hickory_proto::rr::RecordType;

use super::super::loadbalance::shuffled_from;

/// Compression pointers followed before a name is taken as malformed.
const MAX_HOPS: usize = 16;

/// Where the addresses to shuffle lie: `len` bytes at each offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Addresses {
    pub(super) offsets: Box<[usize]>,
    pub(super) len: usize,
}

impl Addresses {
    /// What the offsets take on the heap.
    pub(super) fn heap_size(&self) -> usize {
        self.offsets.len() * size_of::<usize>()
    }

    /// Puts the addresses in a random order (Fisher–Yates).
    pub(super) fn shuffle(&self, bytes: &mut [u8]) {
        for i in (1..self.offsets.len()).rev() {
            let j = rand::random_range(0..=i);
            if j != i {
                let (a, b) = (self.offsets[j], self.offsets[i]);
                let (head, tail) = bytes.split_at_mut(b);
                head[a..a + self.len].swap_with_slice(&mut tail[..self.len]);
            }
        }
    }
}

/// The end of the name at `at` (a compression pointer ends it), and the name itself in wire
/// form with the pointers followed; `None` when malformed.
pub(super) fn read_name(msg: &[u8], at: usize) -> Option<(usize, Vec<u8>)> {
    let mut name = Vec::with_capacity(64);
    let (mut pos, mut end, mut hops) = (at, None, 0);
    loop {
        let len = *msg.get(pos)?;
        match len {
            0 => {
                name.push(0);
                return Some((end.unwrap_or(pos + 1), name));
            }
            l if l & 0xc0 == 0xc0 => {
                let target = usize::from(u16::from_be_bytes([l & 0x3f, *msg.get(pos + 1)?]));
                end.get_or_insert(pos + 2);
                hops += 1;
                if hops > MAX_HOPS || target >= pos {
                    return None;
                }
                pos = target;
            }
            l if l & 0xc0 != 0 => return None,
            l => {
                let label = msg.get(pos..pos + 1 + usize::from(l))?;
                name.extend_from_slice(label);
                pos += label.len();
            }
        }
    }
}

/// One resource record of the answer section.
#[derive(Debug)]
struct Rr {
    owner: Vec<u8>,
    /// Type, class and TTL.
    fixed: [u8; 8],
    rdata: usize,
    rdlen: usize,
}

impl Rr {
    fn rtype(&self) -> RecordType {
        RecordType::from(u16::from_be_bytes([self.fixed[0], self.fixed[1]]))
    }
}

/// The answer section of `reply`.
fn answer_records(reply: &[u8]) -> Option<Vec<Rr>> {
    if reply.get(4..6)? != [0, 1] {
        return None;
    }
    let count = u16::from_be_bytes([*reply.get(6)?, *reply.get(7)?]);
    let mut at = read_name(reply, 12)?.0 + 4;
    let mut records = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let (owner_end, owner) = read_name(reply, at)?;
        let fixed: [u8; 10] = reply.get(owner_end..owner_end + 10)?.try_into().ok()?;
        let rdlen = usize::from(u16::from_be_bytes([fixed[8], fixed[9]]));
        let rdata = owner_end + 10;
        if rdata + rdlen > reply.len() {
            return None;
        }
        let fixed: [u8; 8] = fixed[..8].try_into().ok()?;
        records.push(Rr { owner, fixed, rdata, rdlen });
        at = rdata + rdlen;
    }
    Some(records)
}

/// What a copy of `reply` must shuffle, as [`super::shuffle_addresses`] would: `Some(None)`
/// when nothing, `Some(Some(addresses))` for addresses to shuffle in place, `None` when the
/// reply needs a shuffle that moving addresses cannot do.
pub(super) fn shuffled_addresses(reply: &[u8]) -> Option<Option<Addresses>> {
    let records = answer_records(reply)?;
    let Some(start) = shuffled_from(&records, Rr::rtype) else { return Some(None) };
    let tail = &records[start..];
    let first = &tail[0];
    let movable = matches!(first.rtype(), RecordType::A | RecordType::AAAA)
        && tail.iter().all(|r| r.fixed == first.fixed && r.owner == first.owner && r.rdlen == first.rdlen);
    let offsets = tail.iter().map(|r| r.rdata).collect();
    movable.then_some(Some(Addresses { offsets, len: first.rdlen }))
}
