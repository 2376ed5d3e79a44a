//! The envelope around every gossip datagram: who may speak, and only once. Pure: the clock is
//! a parameter, no socket.
//!
//! ```text
//!  "TWG1" | key id (4) | epoch (8) | counter (8) | sent, ms since 1970 (8) | SWIM message | HMAC-SHA256 (32)
//! ```
//!
//! The tag covers everything before it, with the key of the cluster's shared secret (the chart
//! keeps it in a Secret). A member sends with the first key of its key file and accepts the
//! first and the second, so a key is rotated without a partition: add the new key second
//! everywhere, then first, then drop the old one. Without the key nobody can make a message a
//! member takes; the message itself is not secret (names and addresses of Nodes).
//!
//! Against replay: a message sent more than [`WINDOW`] from the receiver's clock is refused,
//! and within it each sender's (epoch, counter) must be new: the epoch is the sender's start
//! time (a restart sends from a higher one), the counter grows with each datagram, and the
//! receiver keeps the highest seen and which of the 64 below it were seen (UDP reorders).

use std::collections::HashMap;
use std::net::SocketAddr;

use ring::hmac;
use sha2::{Digest, Sha256};

/// How far from the receiver's clock a message's send time may be (clock skew plus delivery).
pub const WINDOW: u64 = 30_000;

const MAGIC: &[u8; 4] = b"TWG1";
const HEADER: usize = 4 + 4 + 8 + 8 + 8;
const TAG: usize = 32;
/// What the envelope adds to a message.
pub const OVERHEAD: usize = HEADER + TAG;
/// The shortest secret taken (32 random characters: far beyond guessing).
pub const MIN_SECRET: usize = 32;
/// Senders remembered for replay (the oldest is forgotten beyond it).
const MAX_SENDERS: usize = 16_384;

/// A key file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// No key in it.
    #[error(
        "the gossip key file holds no key (one secret a line: the key to send with, then an older one still accepted)"
    )]
    Empty,
    /// A key too short to resist guessing.
    #[error("gossip key on line {line} is {len} characters long; at least {MIN_SECRET} are needed")]
    TooShort {
        /// Its line in the file (from 1).
        line: usize,
        /// Its length.
        len: usize,
    },
    /// More than the two a rotation needs.
    #[error(
        "the gossip key file holds {0} keys; at most 2 (the key to send with, then an older one still accepted)"
    )]
    TooMany(usize),
}

/// One key: its HMAC key and a short id that says which key sealed a message.
#[derive(Clone)]
struct Key {
    id: [u8; 4],
    mac: hmac::Key,
}

impl Key {
    fn new(secret: &str) -> Key {
        let digest = Sha256::digest(secret.as_bytes());
        let mut id = [0u8; 4];
        id.copy_from_slice(&digest[..4]);
        Key { id, mac: hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()) }
    }
}

/// The keys of a member: the first seals, every one opens.
#[derive(Clone)]
pub struct Keys(Vec<Key>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<String> = self.0.iter().map(|k| format!("{:02x?}", k.id)).collect();
        f.debug_tuple("Keys").field(&ids).finish()
    }
}

impl Keys {
    /// Parses a key file: one secret a line (blank lines and `#` comments skipped), the first
    /// to send with, a second still accepted during a rotation.
    pub fn parse(text: &str) -> Result<Keys, KeyError> {
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
            .collect();
        if lines.is_empty() {
            return Err(KeyError::Empty);
        }
        if lines.len() > 2 {
            return Err(KeyError::TooMany(lines.len()));
        }
        if let Some((line, l)) = lines.iter().find(|(_, l)| l.len() < MIN_SECRET) {
            return Err(KeyError::TooShort { line: *line, len: l.len() });
        }
        Ok(Keys(lines.iter().map(|(_, l)| Key::new(l)).collect()))
    }

    fn sealing(&self) -> &Key {
        &self.0[0]
    }
}

/// Why a datagram was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Too short, or not an envelope of ours.
    #[error("not a sealed gossip message")]
    Malformed,
    /// Sealed with a key this member does not hold.
    #[error("sealed with an unknown key")]
    UnknownKey,
    /// The tag does not match: forged or altered.
    #[error("bad tag")]
    BadTag,
    /// Sent too long ago or too far in the future.
    #[error("outside the time window")]
    Stale,
    /// Seen before, or older than what the window remembers.
    #[error("replayed")]
    Replayed,
}

impl Refused {
    /// A short label (for counters).
    pub fn label(&self) -> &'static str {
        match self {
            Refused::Malformed => "malformed",
            Refused::UnknownKey => "unknown_key",
            Refused::BadTag => "bad_tag",
            Refused::Stale => "stale",
            Refused::Replayed => "replayed",
        }
    }
}

/// A sender's place in its own sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The sender's start (a restart sends from a higher one).
    pub epoch: u64,
    /// Grows with each datagram of the epoch.
    pub counter: u64,
    /// When it was sent (ms since 1970, the sender's clock).
    pub sent_ms: u64,
}

/// Seals `message` with the first of `keys`.
pub fn seal(keys: &Keys, stamp: Stamp, message: &[u8]) -> Vec<u8> {
    let key = keys.sealing();
    let mut out = Vec::with_capacity(message.len() + OVERHEAD);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&key.id);
    out.extend_from_slice(&stamp.epoch.to_be_bytes());
    out.extend_from_slice(&stamp.counter.to_be_bytes());
    out.extend_from_slice(&stamp.sent_ms.to_be_bytes());
    out.extend_from_slice(message);
    let tag = hmac::sign(&key.mac, &out);
    out.extend_from_slice(tag.as_ref());
    out
}

/// Opens a sealed datagram: its stamp and message once the tag matches one of `keys` and the
/// send time is within [`WINDOW`] of `now_ms`. Replay is the [`Replay`] window's to judge.
pub fn open<'a>(keys: &Keys, datagram: &'a [u8], now_ms: u64) -> Result<(Stamp, &'a [u8]), Refused> {
    if datagram.len() < OVERHEAD || &datagram[..4] != MAGIC {
        return Err(Refused::Malformed);
    }
    let (signed, tag) = datagram.split_at(datagram.len() - TAG);
    let key = keys.0.iter().find(|k| k.id == signed[4..8]).ok_or(Refused::UnknownKey)?;
    hmac::verify(&key.mac, signed, tag).map_err(|_| Refused::BadTag)?;
    let word = |at: usize| u64::from_be_bytes(signed[at..at + 8].try_into().unwrap_or_default());
    let stamp = Stamp { epoch: word(8), counter: word(16), sent_ms: word(24) };
    if stamp.sent_ms.abs_diff(now_ms) > WINDOW {
        return Err(Refused::Stale);
    }
    Ok((stamp, &signed[HEADER..]))
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    epoch: u64,
    highest: u64,
    /// Bit i: counter `highest - 1 - i` was seen.
    below: u64,
    last_ms: u64,
}

/// Per sender, what was already taken.
#[derive(Debug, Default)]
pub struct Replay {
    seen: HashMap<SocketAddr, Seen>,
}

impl Replay {
    /// Takes `stamp` from `sender` (an authenticated identity, not the datagram's source)
    /// unless it was seen before or is older than the window remembers.
    pub fn check(&mut self, sender: SocketAddr, stamp: Stamp, now_ms: u64) -> Result<(), Refused> {
        let fresh = Seen { epoch: stamp.epoch, highest: stamp.counter, below: 0, last_ms: now_ms };
        let Some(s) = self.seen.get_mut(&sender) else {
            self.forget_old(now_ms);
            self.seen.insert(sender, fresh);
            return Ok(());
        };
        if stamp.epoch < s.epoch {
            return Err(Refused::Replayed);
        }
        if stamp.epoch > s.epoch {
            *s = fresh;
            return Ok(());
        }
        if stamp.counter > s.highest {
            let shift = stamp.counter - s.highest;
            s.below = if shift >= 64 { 0 } else { (s.below << shift) | (1 << (shift - 1)) };
            s.highest = stamp.counter;
        } else {
            let back = s.highest - stamp.counter;
            if back == 0 || back > 64 || s.below & (1 << (back - 1)) != 0 {
                return Err(Refused::Replayed);
            }
            s.below |= 1 << (back - 1);
        }
        s.last_ms = now_ms;
        Ok(())
    }

    /// Drops senders silent for longer than the window (their old messages are stale anyway),
    /// and the oldest when too many remain.
    fn forget_old(&mut self, now_ms: u64) {
        if self.seen.len() < MAX_SENDERS {
            return;
        }
        self.seen.retain(|_, s| now_ms.saturating_sub(s.last_ms) <= 2 * WINDOW);
        if self.seen.len() >= MAX_SENDERS
            && let Some(oldest) = self.seen.iter().min_by_key(|(_, s)| s.last_ms).map(|(a, _)| *a)
        {
            self.seen.remove(&oldest);
        }
    }

    /// Senders remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
#[path = "envelope_tests.rs"]
mod tests;
