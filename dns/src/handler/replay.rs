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
//! from the hash of the query's bytes to a copy's place in one arena, where the copies lie
//! one after another: a short head (lengths, what the metrics need), the query's bytes
//! (compared, so two queries whose hashes collide never share a reply), the reply's. A
//! replayed answer reads the table's slot and one run of bytes, and nothing in the arena is
//! rounded up to an allocator's size class.

use std::hash::Hasher;
use std::net::SocketAddr;
use std::time::Instant;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use rustc_hash::{FxHashMap, FxHasher};

use super::wire::{self, Decided, Handled};
use super::{Core, shuffled_from};
use crate::metrics::{Proto, Source};

/// About the memory one worker's copies take before it starts over.
pub const BUDGET: usize = 16 << 20;
/// What one copy costs beyond its bytes in the arena: the table's slot and control byte,
/// rounded up.
const SLOT_COST: usize = 24;
/// Longer queries are not worth keeping (they carry options such as cookies).
const MAX_QUERY: usize = 512;
/// The header's TC bit (in its third byte).
const TC: u8 = 0x02;
/// Compression pointers followed before a name is taken as malformed.
const MAX_HOPS: usize = 16;
/// The length of a [`Head`] in the arena.
const HEAD: usize = 12;
/// A [`Head`]'s `shuffle` when there is nothing to shuffle.
const NO_SHUFFLE: u32 = u32::MAX;
/// The DO bit, kept beside the response code (12 bits) in a [`Head`].
const HEAD_DO: u16 = 0x8000;

/// One worker's replies.
pub struct Replay {
    generation: u64,
    /// Where each copy starts in `arena`, by the hash of its query's bytes after the ID.
    places: FxHashMap<u64, u32>,
    /// The copies one after another, each a [`Head`], the query's bytes after the ID and the
    /// reply's bytes: one place to read per answer, nothing of the allocator's between them.
    arena: Vec<u8>,
    /// The addresses to shuffle of the copies that have some.
    shuffles: Vec<Addresses>,
    /// What the copies take: the arena, the table's slots and the addresses to shuffle.
    bytes: usize,
    budget: usize,
    hits: u64,
    /// When the burst being answered arrived.
    burst_arrived: Instant,
    /// The places of the burst's copies, while [`Replay::arrived`] reads them.
    warming: Vec<u32>,
}

impl Default for Replay {
    fn default() -> Self {
        Replay::with_budget(BUDGET)
    }
}

/// What a copy needs beyond its bytes, written before them in the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Head {
    query_len: u16,
    reply_len: u16,
    decided: Decided,
    /// The copy's addresses in [`Replay::shuffles`], or [`NO_SHUFFLE`].
    shuffle: u32,
}

/// A copy as found in the arena.
struct Kept<'a> {
    head: Head,
    /// The query's bytes after the ID.
    query: &'a [u8],
    reply: &'a [u8],
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
        Replay {
            generation: 0,
            places: FxHashMap::default(),
            arena: Vec::new(),
            shuffles: Vec::new(),
            bytes: 0,
            budget,
            hits: 0,
            burst_arrived: Instant::now(),
            warming: Vec::new(),
        }
    }

    /// Answers `query` from `src` over UDP: a copy of an earlier reply when there is one,
    /// else through [`wire::handle`], keeping the reply when it may be replayed. A copy's
    /// answer time counts from the last [`Replay::arrived`].
    pub fn handle(&mut self, core: &Core, query: &[u8], src: SocketAddr) -> Handled {
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
        let found = self.places.get(&hash).map(|&at| self.kept(at)).filter(|kept| kept.query == key);
        if let Some(kept) = found {
            let reply = self.replay(&kept, core, query, src);
            self.hits += 1;
            return Handled::Respond(reply);
        }
        let (handled, decided) = wire::handle(core, query, src, Proto::Udp);
        if let (Handled::Respond(reply), Some(decided)) = (&handled, decided) {
            self.keep(hash, key, reply, decided, core.options().shuffle);
        }
        handled
    }

    /// Notes that a burst of `queries` arrived, and reads where their copies lie so that
    /// answering them finds them in the cache. The reads go in stages over the whole burst
    /// (the table, then each copy's head, then the rest of it), so that the burst's waits for
    /// memory overlap instead of each answer waiting for its own chain of them. A copy's
    /// answer time counts from here.
    pub fn arrived<'q>(&mut self, queries: impl IntoIterator<Item = &'q [u8]>) {
        self.burst_arrived = Instant::now();
        self.warming.clear();
        for query in queries {
            if let Some(&at) = query.get(2..).and_then(|key| self.places.get(&hash(key))) {
                self.warming.push(at);
            }
        }
        for &at in &self.warming {
            std::hint::black_box(self.arena[at as usize]);
        }
        for &at in &self.warming {
            // The query's bytes, compared, and the reply's, copied: a few cache lines.
            let kept = self.kept(at);
            for line in kept.query.iter().chain(kept.reply).step_by(64) {
                std::hint::black_box(*line);
            }
            std::hint::black_box(kept.reply.last());
        }
    }

    /// The copy starting at `at` in the arena.
    fn kept(&self, at: u32) -> Kept<'_> {
        let at = at as usize;
        let head = Head::read(&self.arena[at..at + HEAD]);
        let query_at = at + HEAD;
        let reply_at = query_at + usize::from(head.query_len);
        Kept {
            head,
            query: &self.arena[query_at..reply_at],
            reply: &self.arena[reply_at..reply_at + usize::from(head.reply_len)],
        }
    }

    /// `kept`'s reply for `query`: its ID, the addresses in a new order; counted in the
    /// metrics, its answer time from the burst's arrival.
    fn replay(&self, kept: &Kept<'_>, core: &Core, query: &[u8], src: SocketAddr) -> Vec<u8> {
        let mut out = kept.reply.to_vec();
        out[..2].copy_from_slice(&query[..2]);
        if let Some(addresses) = self.shuffles.get(kept.head.shuffle as usize) {
            addresses.shuffle(&mut out);
        }
        let Decided { qtype, rcode, dnssec_ok } = kept.head.decided;
        let metrics = core.metrics();
        metrics.replayed.inc();
        metrics.request(Proto::Udp, src.is_ipv6(), qtype, query.len(), dnssec_ok);
        let elapsed = self.burst_arrived.elapsed().as_secs_f64();
        metrics.response(Proto::Udp, qtype, rcode, Source::Kubernetes, out.len(), elapsed);
        out
    }

    /// Keeps `reply` to `query` (its bytes after the ID) under `hash`, unless it cannot be
    /// replayed by copying. A copy already under `hash` (another query whose hash collides)
    /// is replaced; its bytes stay in the arena until the store starts over.
    fn keep(&mut self, hash: u64, query: &[u8], reply: &[u8], decided: Decided, shuffle: bool) {
        if reply.len() < 12 || reply[2] & TC != 0 {
            return;
        }
        let (Ok(query_len), Ok(reply_len)) = (u16::try_from(query.len()), u16::try_from(reply.len())) else {
            return;
        };
        let addresses = if shuffle {
            let Some(addresses) = shuffled_addresses(reply) else { return };
            addresses
        } else {
            None
        };
        let size =
            HEAD + query.len() + reply.len() + SLOT_COST + addresses.as_ref().map_or(0, Addresses::size);
        if self.bytes + size > self.budget {
            self.clear();
        }
        let (Ok(at), Ok(next_shuffle)) =
            (u32::try_from(self.arena.len()), u32::try_from(self.shuffles.len()))
        else {
            return;
        };
        let shuffle = match addresses {
            Some(addresses) => {
                self.shuffles.push(addresses);
                next_shuffle
            }
            None => NO_SHUFFLE,
        };
        Head { query_len, reply_len, decided, shuffle }.write(&mut self.arena);
        self.arena.extend_from_slice(query);
        self.arena.extend_from_slice(reply);
        self.bytes += size;
        self.places.insert(hash, at);
    }

    fn clear(&mut self) {
        self.places.clear();
        self.arena.clear();
        self.shuffles.clear();
        self.bytes = 0;
    }

    /// Queries answered with a copy.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Replies kept.
    pub fn len(&self) -> usize {
        self.places.len()
    }

    /// True when none is kept.
    pub fn is_empty(&self) -> bool {
        self.places.is_empty()
    }
}

impl Head {
    fn write(&self, arena: &mut Vec<u8>) {
        let code = u16::from(self.decided.rcode) | if self.decided.dnssec_ok { HEAD_DO } else { 0 };
        arena.extend_from_slice(&self.query_len.to_ne_bytes());
        arena.extend_from_slice(&self.reply_len.to_ne_bytes());
        arena.extend_from_slice(&u16::from(self.decided.qtype).to_ne_bytes());
        arena.extend_from_slice(&code.to_ne_bytes());
        arena.extend_from_slice(&self.shuffle.to_ne_bytes());
    }

    /// The head written at the start of `bytes` (at least [`HEAD`] of them).
    fn read(bytes: &[u8]) -> Head {
        let u16_at = |i: usize| u16::from_ne_bytes([bytes[i], bytes[i + 1]]);
        let code = u16_at(6);
        Head {
            query_len: u16_at(0),
            reply_len: u16_at(2),
            decided: Decided {
                qtype: RecordType::from(u16_at(4)),
                rcode: <ResponseCode as From<u16>>::from(code & !HEAD_DO),
                dnssec_ok: code & HEAD_DO != 0,
            },
            shuffle: u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
        }
    }
}

impl Addresses {
    /// What these take in memory.
    fn size(&self) -> usize {
        std::mem::size_of::<Addresses>() + self.offsets.len() * std::mem::size_of::<usize>()
    }

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
