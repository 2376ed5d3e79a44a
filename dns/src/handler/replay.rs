//! Replaying encoded answers: a UDP worker's own copy of the replies it sent, keyed by the
//! query's bytes.
//!
//! A cluster zone answer depends on the query (its question, flags and EDNS record) and the
//! index; not on the client's address (unless `--require-programmed` is on, when nothing is
//! replayed) nor on the message ID. So a worker keeps each such reply as it went out, keyed
//! by the query's bytes after the ID, and answers the same query again by copying the bytes
//! and writing in:
//!
//! * the ID;
//! * a new order of the addresses, when the server shuffles them (CoreDNS's `loadbalance`):
//!   the records of a run of A or AAAA records share name, class and TTL, so shuffling
//!   their addresses in place is shuffling the records. A reply whose shuffling cannot be
//!   done that way (mixed types, MX) is not kept.
//!
//! The key keeps the name's case: replies echo it, in owner names and in the names built from
//! the question's zone labels, so a query in another case is another key (a client that
//! randomizes the case takes the full path, as before).
//!
//! What is kept is only what [`super::wire::handle`] says the zone alone decided: no
//! forwarded or cached upstream answer (their TTLs count down), no error of the server's
//! own, no truncated reply. Every copy is dropped when [`Core::generation`] moves (a new
//! index or options), and the whole store when it outgrows [`BUDGET`] (about 16 MiB).
//!
//! The lookup is laid out for the cache, since a worker's copies outgrow it: a small table
//! from the hash of the query's bytes to a copy's place, and each copy in one allocation, the
//! query's bytes first (compared, so two queries whose hashes collide never share a reply)
//! and the reply after them.

use std::hash::Hasher;
use std::net::SocketAddr;
use std::time::Instant;

use hickory_proto::rr::RecordType;
use rustc_hash::{FxHashMap, FxHasher};

use super::wire::{self, Decided, Handled};
use super::{Core, shuffled_from};
use crate::metrics::{Proto, Source};

/// About the memory one worker's copies take before it starts over.
pub const BUDGET: usize = 16 << 20;
/// What one copy costs beyond its query and reply bytes (the entry, the table's slot and
/// control byte, rounded up).
const ENTRY_OVERHEAD: usize = 96;
/// Longer queries are not worth keeping (they carry options such as cookies).
const MAX_QUERY: usize = 512;
/// The header's TC bit (in its third byte).
const TC: u8 = 0x02;
/// Compression pointers followed before a name is taken as malformed.
const MAX_HOPS: usize = 16;

/// One worker's replies.
pub struct Replay {
    generation: u64,
    /// Where each copy is in `entries`, by the hash of its query's bytes after the ID.
    places: FxHashMap<u64, u32>,
    entries: Vec<Entry>,
    bytes: usize,
    budget: usize,
    hits: u64,
}

impl Default for Replay {
    fn default() -> Self {
        Replay::with_budget(BUDGET)
    }
}

/// A reply as sent, with the query it answered and what must change for the next client.
struct Entry {
    /// The query's bytes after the ID, then the reply's.
    bytes: Box<[u8]>,
    /// Where the reply starts in `bytes`.
    reply_at: usize,
    addresses: Option<Addresses>,
    decided: Decided,
}

/// Where the addresses to shuffle lie: `len` bytes at each offset.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Addresses {
    offsets: Box<[usize]>,
    len: usize,
}

impl Replay {
    /// A store that starts over once its copies take about `budget` bytes.
    pub fn with_budget(budget: usize) -> Self {
        Replay { generation: 0, places: FxHashMap::default(), entries: Vec::new(), bytes: 0, budget, hits: 0 }
    }

    /// Answers `query` from `src` over UDP: a copy of an earlier reply when there is one,
    /// else through [`wire::handle`], keeping the reply when it may be replayed.
    pub fn handle(&mut self, core: &Core, query: &[u8], src: SocketAddr) -> Handled {
        let started = Instant::now();
        let generation = core.generation();
        if generation != self.generation {
            self.clear();
            self.generation = generation;
        }
        // A sampled query takes the full path so that its trace span is written.
        if query.len() < 12 || query.len() > MAX_QUERY || tideway_telemetry::sampled() {
            return wire::handle(core, query, src, Proto::Udp).0;
        }
        let key = &query[2..];
        let hash = hash(key);
        let place = self.places.get(&hash).map(|&i| i as usize);
        if let Some(entry) = place.map(|i| &self.entries[i])
            && entry.query() == key
        {
            self.hits += 1;
            return Handled::Respond(entry.replay(core, query, src, started));
        }
        let (handled, decided) = wire::handle(core, query, src, Proto::Udp);
        if let (Handled::Respond(reply), Some(decided)) = (&handled, decided)
            && let Some(entry) = Entry::keep(key, reply, decided, core.options().shuffle)
        {
            self.insert(hash, place, entry);
        }
        handled
    }

    /// Reads where the copies for `queries` lie, so that answering them finds them in the
    /// cache: a burst's lookups overlap here, where one by one each would wait for memory.
    pub fn warm<'q>(&self, queries: impl IntoIterator<Item = &'q [u8]>) {
        for query in queries {
            let Some(key) = query.get(2..) else { continue };
            if let Some(&i) = self.places.get(&hash(key)) {
                // The query's bytes, compared, and the reply's, copied: a few cache lines.
                for line in self.entries[i as usize].bytes.iter().step_by(64) {
                    std::hint::black_box(*line);
                }
            }
        }
    }

    /// Keeps `entry` under `hash`, in the place of the copy found there (`place`: another
    /// query with the same hash) if any.
    fn insert(&mut self, hash: u64, place: Option<usize>, entry: Entry) {
        let size = entry.bytes.len() + ENTRY_OVERHEAD;
        if let Some(i) = place {
            self.bytes -= self.entries[i].bytes.len() + ENTRY_OVERHEAD;
            self.entries[i] = entry;
            self.bytes += size;
            return;
        }
        if self.bytes + size > self.budget {
            self.clear();
        }
        let Ok(i) = u32::try_from(self.entries.len()) else { return };
        self.bytes += size;
        self.entries.push(entry);
        self.places.insert(hash, i);
    }

    fn clear(&mut self) {
        self.places.clear();
        self.entries.clear();
        self.bytes = 0;
    }

    /// Queries answered with a copy.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Replies kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when none is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Entry {
    /// `reply` to `query` (its bytes after the ID) as an entry, or `None` when it cannot be
    /// replayed by copying.
    fn keep(query: &[u8], reply: &[u8], decided: Decided, shuffle: bool) -> Option<Entry> {
        if reply.len() < 12 || reply[2] & TC != 0 {
            return None;
        }
        let addresses = if shuffle { shuffled_addresses(reply)? } else { None };
        let bytes = [query, reply].concat().into_boxed_slice();
        Some(Entry { bytes, reply_at: query.len(), addresses, decided })
    }

    /// The query's bytes after the ID.
    fn query(&self) -> &[u8] {
        &self.bytes[..self.reply_at]
    }

    /// This reply for `query`: its ID, the addresses in a new order; counted in the metrics.
    fn replay(&self, core: &Core, query: &[u8], src: SocketAddr, started: Instant) -> Vec<u8> {
        let mut out = self.bytes[self.reply_at..].to_vec();
        out[..2].copy_from_slice(&query[..2]);
        if let Some(addresses) = &self.addresses {
            addresses.shuffle(&mut out);
        }
        let Decided { qtype, rcode, dnssec_ok } = self.decided;
        let metrics = core.metrics();
        metrics.replayed.inc();
        metrics.request(Proto::Udp, src.is_ipv6(), qtype, query.len(), dnssec_ok);
        let elapsed = started.elapsed().as_secs_f64();
        metrics.response(Proto::Udp, qtype, rcode, Source::Kubernetes, out.len(), elapsed);
        out
    }
}

impl Addresses {
    /// Puts the addresses in a random order (Fisher–Yates).
    fn shuffle(&self, bytes: &mut [u8]) {
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

/// The hash a copy is found by.
fn hash(query: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(query);
    h.finish()
}

/// The end of the name at `at` (a compression pointer ends it), and the name itself in wire
/// form with the pointers followed; `None` when malformed.
fn read_name(msg: &[u8], at: usize) -> Option<(usize, Vec<u8>)> {
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
fn shuffled_addresses(reply: &[u8]) -> Option<Option<Addresses>> {
    let records = answer_records(reply)?;
    let Some(start) = shuffled_from(&records, Rr::rtype) else { return Some(None) };
    let tail = &records[start..];
    let first = &tail[0];
    let movable = matches!(first.rtype(), RecordType::A | RecordType::AAAA)
        && tail.iter().all(|r| r.fixed == first.fixed && r.owner == first.owner && r.rdlen == first.rdlen);
    let offsets = tail.iter().map(|r| r.rdata).collect();
    movable.then_some(Some(Addresses { offsets, len: first.rdlen }))
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
