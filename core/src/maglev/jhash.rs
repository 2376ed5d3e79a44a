//! The kernel's `jhash` (Bob Jenkins' lookup3, as in the kernel's `jhash.h`) and the scaling
//! nftables' `jhash ... mod N` applies to it (`nft_hash.c`).
//!
//! The tracer must name the bucket the kernel picks for a packet, so this is a bit-exact port:
//! bytes are read as the kernel reads them (native-endian 32-bit words on the little-endian
//! machines this runs on, then byte by byte for the tail), and the result is scaled with
//! `reciprocal_scale`, not `%`.

/// The kernel's `JHASH_INITVAL`.
const INITVAL: u32 = 0xdead_beef;

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

fn word(k: &[u8]) -> u32 {
    u32::from_le_bytes([k[0], k[1], k[2], k[3]])
}

/// `jhash(key, key.len(), initval)`.
pub fn jhash(key: &[u8], initval: u32) -> u32 {
    let len = key.len() as u32;
    let init = INITVAL.wrapping_add(len).wrapping_add(initval);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut k = key;
    while k.len() > 12 {
        a = a.wrapping_add(word(k));
        b = b.wrapping_add(word(&k[4..]));
        c = c.wrapping_add(word(&k[8..]));
        mix(&mut a, &mut b, &mut c);
        k = &k[12..];
    }
    if k.is_empty() {
        return c;
    }
    // The tail, byte by byte: bytes 0-3 go to a, 4-7 to b, 8-11 to c, little end first.
    for (i, byte) in k.iter().enumerate() {
        let v = u32::from(*byte) << (8 * (i % 4));
        match i / 4 {
            0 => a = a.wrapping_add(v),
            1 => b = b.wrapping_add(v),
            _ => c = c.wrapping_add(v),
        }
    }
    finish(&mut a, &mut b, &mut c);
    c
}

/// The kernel's `reciprocal_scale`: maps a 32-bit hash onto `0..n` (what `mod n` in an nft
/// `jhash` expression does).
pub fn reciprocal_scale(hash: u32, n: u32) -> u32 {
    ((u64::from(hash) * u64::from(n)) >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_keys_hash_to_the_initial_value() {
        assert_eq!(jhash(b"", 0), 0xdead_beef);
        assert_ne!(jhash(&[1, 2, 3, 4, 5, 6, 7, 8], 1), jhash(&[1, 2, 3, 4, 5, 6, 7, 8], 2));
    }

    #[test]
    fn scaling_stays_in_range() {
        assert_eq!(reciprocal_scale(0, 251), 0);
        assert_eq!(reciprocal_scale(u32::MAX, 251), 250);
        assert_eq!(reciprocal_scale(1 << 31, 10), 5);
    }
}
