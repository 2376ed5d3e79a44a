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
//! index or options).
//!
//! What a copy may take is bounded for all workers together ([`ReplayBudget`], 16 MiB unless
//! told otherwise), not per worker: the workers are one per CPU and a node's CPUs are not the
//! pod's memory. Every name in the zone has an answer (NXDOMAIN for the ones that do not
//! exist), and the key keeps the case, so what clients may make a worker keep has no end: a
//! pod asking for random names, or one name in random cases, asks for new copies at will.
//! So a copy has to earn its room by being replayed. Every [`SWEEP_EVERY`], and whenever the
//! budget is used up, a worker keeps only the copies replayed since the last sweep, moved into
//! allocations of their own size, and gives the rest back to the allocator and the budget;
//! when that frees less than a quarter, it starts over with nothing. A flood of names asked
//! once (or twice) is gone within two sweeps, and the copies of the names the cluster's pods
//! keep asking for outlive it.
//!
//! The lookup is laid out for the cache, since a worker's copies outgrow it: a small table
//! from the hash of the query's bytes to a copy's place in one arena, where the copies lie
//! one after another: a short head (lengths, what the metrics need), the query's bytes
//! (compared, so two queries whose hashes collide never share a reply), the reply's. A
//! replayed answer reads the table's slot and one run of bytes, and nothing in the arena is
//! rounded up to an allocator's size class.

use std::hash::Hasher;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use rustc_hash::{FxHashMap, FxHasher};

#[path = "replay_addresses.rs"]
mod addresses;

use self::addresses::{Addresses, shuffled_addresses};
pub use super::budget::ReplayBudget;
use super::core::Core;
use super::wire::{self, Decided, Handled};
use crate::metrics::{Proto, Source};

/// The memory all workers' copies may take together unless told otherwise.
pub const BUDGET: usize = 16 << 20;
/// How often a worker drops the copies not replayed since the last time.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// The arena's first allocation; it then doubles, within the budget.
const MIN_ARENA: usize = 16 << 10;
/// Longer queries are not worth keeping (they carry options such as cookies).
const MAX_QUERY: usize = 512;
/// The header's TC bit (in its third byte).
const TC: u8 = 0x02;
/// The length of a [`Head`] in the arena.
const HEAD: usize = 12;
/// A [`Head`]'s `shuffle` when there is nothing to shuffle.
const NO_SHUFFLE: u32 = u32::MAX;
/// The DO bit, kept beside the response code (12 bits) in a [`Head`].
const HEAD_DO: u16 = 0x8000;
/// The copy was replayed since the last sweep, kept beside the response code in a [`Head`].
const HEAD_REPLAYED: u16 = 0x4000;
/// Where the response code and its bits lie in a [`Head`].
const HEAD_CODE_AT: usize = 6;

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
    /// What the offsets of `shuffles` take.
    offsets_bytes: usize,
    /// What this store holds of the budget: what its allocations take.
    held: usize,
    budget: Arc<ReplayBudget>,
    /// When the copies not replayed were last dropped.
    swept: Instant,
    hits: u64,
    /// When the burst being answered arrived.
    burst_arrived: Instant,
    /// The places of the burst's copies, while [`Replay::arrived`] reads them.
    warming: Vec<u32>,
}

impl Default for Replay {
    fn default() -> Self {
        Replay::new(ReplayBudget::new(BUDGET, 1))
    }
}

impl Drop for Replay {
    fn drop(&mut self) {
        self.budget.give(self.held);
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
    /// Replayed since the last sweep.
    replayed: bool,
}

/// A copy as found in the arena.
struct Kept<'a> {
    head: Head,
    /// The query's bytes after the ID.
    query: &'a [u8],
    reply: &'a [u8],
}

impl Replay {
    /// A store taking its room from `budget`, shared with the other workers'.
    pub fn new(budget: Arc<ReplayBudget>) -> Self {
        Replay {
            generation: 0,
            places: FxHashMap::default(),
            arena: Vec::new(),
            shuffles: Vec::new(),
            offsets_bytes: 0,
            held: 0,
            budget,
            swept: Instant::now(),
            hits: 0,
            burst_arrived: Instant::now(),
            warming: Vec::new(),
        }
    }

    /// A store of its own that keeps about `budget` bytes at most.
    pub fn with_budget(budget: usize) -> Self {
        Replay::new(ReplayBudget::new(budget, 1))
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
        let found = self.places.get(&hash).copied().filter(|&at| self.kept(at).query == key);
        if let Some(at) = found {
            let reply = self.replay(&self.kept(at), core, query, src);
            self.mark_replayed(at);
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
        self.tick(self.burst_arrived);
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

    /// Sweeps when [`SWEEP_EVERY`] has passed since the last sweep: after each burst, and
    /// when the worker has waited for one for a while.
    pub fn tick(&mut self, now: Instant) {
        if now.saturating_duration_since(self.swept) >= SWEEP_EVERY {
            self.sweep();
            self.swept = now;
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

    /// Notes that the copy at `at` was replayed: it outlives the next sweep.
    fn mark_replayed(&mut self, at: u32) {
        let i = at as usize + HEAD_CODE_AT;
        let code = u16::from_ne_bytes([self.arena[i], self.arena[i + 1]]);
        if code & HEAD_REPLAYED == 0 {
            self.arena[i..i + 2].copy_from_slice(&(code | HEAD_REPLAYED).to_ne_bytes());
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
    /// replayed by copying or there is no room for it. A copy already under `hash` (another
    /// query whose hash collides) is replaced; its bytes stay in the arena until the next
    /// sweep.
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
        let extra = addresses.as_ref().map_or(0, Addresses::heap_size);
        if !self.make_room(HEAD + query.len() + reply.len(), extra) {
            return;
        }
        let (Ok(at), Ok(next_shuffle)) =
            (u32::try_from(self.arena.len()), u32::try_from(self.shuffles.len()))
        else {
            return;
        };
        let shuffle = match addresses {
            Some(addresses) => {
                self.shuffles.push(addresses);
                self.offsets_bytes += extra;
                next_shuffle
            }
            None => NO_SHUFFLE,
        };
        Head { query_len, reply_len, decided, shuffle, replayed: false }.write(&mut self.arena);
        self.arena.extend_from_slice(query);
        self.arena.extend_from_slice(reply);
        self.places.insert(hash, at);
        // The table may have grown past what was reserved for it.
        self.account();
    }

    /// Takes room from the budget for a copy of `size` bytes in the arena and `extra` beside
    /// it, and grows the arena for it. Without room, keeps only the copies replayed since the
    /// last sweep; failing that, starts over. False when even an empty store has no room.
    fn make_room(&mut self, size: usize, extra: usize) -> bool {
        for attempt in 0..3 {
            match attempt {
                0 => {}
                1 => {
                    let before = self.held;
                    self.sweep();
                    if self.held > before - before / 4 {
                        continue;
                    }
                }
                _ => self.clear(),
            }
            let table = table_bytes(self.places.capacity(), self.places.len() + 1);
            let shuffles = (self.shuffles.len() + 1).max(self.shuffles.capacity()) * size_of::<Addresses>();
            let others = table + shuffles + self.offsets_bytes + extra;
            let arena = self.arena_capacity_for(size, others);
            let want = arena + others;
            if want <= self.held || self.budget.take(want - self.held, self.held) {
                self.held = self.held.max(want);
                self.arena.reserve_exact(arena - self.arena.len());
                return true;
            }
        }
        false
    }

    /// The arena's capacity once it holds `size` bytes more, beside `others` bytes of the
    /// rest: as it is, else doubled, or near the end of the budget as far as it has room
    /// (leaving a fifth for the table, which grows with the copies), but at least enough.
    fn arena_capacity_for(&self, size: usize, others: usize) -> usize {
        let (len, cap) = (self.arena.len(), self.arena.capacity());
        if len + size <= cap {
            return cap;
        }
        let room = self.budget.room(self.held).saturating_add(self.held).saturating_sub(others);
        (cap * 2).max(MIN_ARENA).min(room / 5 * 4).max(len + size)
    }

    /// What the store's allocations take.
    fn footprint(&self) -> usize {
        self.arena.capacity()
            + table_bytes(self.places.capacity(), self.places.len())
            + self.shuffles.capacity() * size_of::<Addresses>()
            + self.offsets_bytes
    }

    /// Makes what the store holds of the budget what its allocations take.
    fn account(&mut self) {
        let now = self.footprint();
        if now > self.held {
            self.budget.force(now - self.held);
        } else {
            self.budget.give(self.held - now);
        }
        self.held = now;
    }

    /// Keeps only the copies replayed since the last sweep, each now marked as not replayed,
    /// in allocations of their size; the rest of the memory goes back.
    fn sweep(&mut self) {
        let (mut count, mut bytes) = (0, 0);
        for &at in self.places.values() {
            let kept = self.kept(at);
            if kept.head.replayed {
                count += 1;
                bytes += HEAD + kept.query.len() + kept.reply.len();
            }
        }
        let mut arena = Vec::with_capacity(bytes);
        let mut places = FxHashMap::with_capacity_and_hasher(count, Default::default());
        let mut shuffles = Vec::new();
        let mut offsets_bytes = 0;
        for (&hash, &at) in &self.places {
            let kept = self.kept(at);
            if !kept.head.replayed {
                continue;
            }
            let mut head = Head { replayed: false, ..kept.head };
            if let Some(addresses) = self.shuffles.get(head.shuffle as usize) {
                offsets_bytes += addresses.heap_size();
                head.shuffle = u32::try_from(shuffles.len()).unwrap_or(NO_SHUFFLE);
                shuffles.push(addresses.clone());
            }
            let Ok(new_at) = u32::try_from(arena.len()) else { break };
            head.write(&mut arena);
            arena.extend_from_slice(kept.query);
            arena.extend_from_slice(kept.reply);
            places.insert(hash, new_at);
        }
        shuffles.shrink_to_fit();
        (self.places, self.arena, self.shuffles, self.offsets_bytes) =
            (places, arena, shuffles, offsets_bytes);
        self.account();
    }

    /// Drops every copy and gives their memory back.
    fn clear(&mut self) {
        (self.places, self.arena, self.shuffles, self.offsets_bytes) = Default::default();
        self.account();
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

    /// What the store holds of the budget.
    pub fn held(&self) -> usize {
        self.held
    }
}

/// About what a hash table of `(u64, u32)` with room for `capacity` entries takes (its
/// buckets and their control bytes), or will take once it holds `len`: it doubles when full.
fn table_bytes(capacity: usize, len: usize) -> usize {
    let capacity = if len > capacity { capacity.max(3) * 2 + 1 } else { capacity };
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity * 8 / 7).next_power_of_two()
    };
    buckets * (size_of::<(u64, u32)>() + 1) + 16
}

impl Head {
    fn write(&self, arena: &mut Vec<u8>) {
        let code = u16::from(self.decided.rcode)
            | if self.decided.dnssec_ok { HEAD_DO } else { 0 }
            | if self.replayed { HEAD_REPLAYED } else { 0 };
        arena.extend_from_slice(&self.query_len.to_ne_bytes());
        arena.extend_from_slice(&self.reply_len.to_ne_bytes());
        arena.extend_from_slice(&u16::from(self.decided.qtype).to_ne_bytes());
        arena.extend_from_slice(&code.to_ne_bytes());
        arena.extend_from_slice(&self.shuffle.to_ne_bytes());
    }

    /// The head written at the start of `bytes` (at least [`HEAD`] of them).
    fn read(bytes: &[u8]) -> Head {
        let u16_at = |i: usize| u16::from_ne_bytes([bytes[i], bytes[i + 1]]);
        let code = u16_at(HEAD_CODE_AT);
        Head {
            query_len: u16_at(0),
            reply_len: u16_at(2),
            decided: Decided {
                qtype: RecordType::from(u16_at(4)),
                rcode: <ResponseCode as From<u16>>::from(code & !(HEAD_DO | HEAD_REPLAYED)),
                dnssec_ok: code & HEAD_DO != 0,
            },
            shuffle: u32::from_ne_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]),
            replayed: code & HEAD_REPLAYED != 0,
        }
    }
}

/// The hash a copy is found by.
fn hash(query: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(query);
    h.finish()
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
