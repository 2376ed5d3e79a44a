use std::net::{IpAddr, Ipv4Addr};

use super::*;

fn names(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| backend_name(&IpAddr::V4(Ipv4Addr::new(10, 1, (i / 250) as u8, (i % 250) as u8 + 1)), 8080))
        .collect()
}

fn counts(t: &MaglevTable, n: usize) -> Vec<u32> {
    let mut c = vec![0u32; n];
    for e in t.entries() {
        c[*e as usize] += 1;
    }
    c
}

/// Fraction of buckets whose backend (by name) differs between two tables.
fn moved(a: &MaglevTable, a_names: &[Vec<u8>], b: &MaglevTable, b_names: &[Vec<u8>]) -> f64 {
    let changed = a
        .entries()
        .iter()
        .zip(b.entries())
        .filter(|(x, y)| a_names[**x as usize] != b_names[**y as usize])
        .count();
    changed as f64 / f64::from(a.size())
}

#[test]
fn every_bucket_is_filled_and_shares_differ_by_at_most_one() {
    for n in [1usize, 2, 3, 7, 20, 100] {
        for size in [DEFAULT_TABLE_SIZE, 251, 13] {
            if n > size as usize {
                continue;
            }
            let t = MaglevTable::build(&names(n), size);
            assert_eq!(t.size(), size);
            let c = counts(&t, n);
            let (lo, hi) = (c.iter().min().unwrap(), c.iter().max().unwrap());
            assert!(hi - lo <= 1, "n={n} size={size}: shares {lo}..{hi}");
            assert_eq!(c.iter().sum::<u32>(), size);
        }
    }
}

#[test]
fn removing_or_adding_one_backend_moves_little_more_than_its_share() {
    for n in 2..=20usize {
        let all = names(n + 1);
        let base = &all[..n];
        let t = MaglevTable::build(base, DEFAULT_TABLE_SIZE);
        let bound = 1.0 / n as f64 + 0.03;
        for gone in 0..n {
            let rest: Vec<Vec<u8>> =
                base.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, b)| b.clone()).collect();
            let r = MaglevTable::build(&rest, DEFAULT_TABLE_SIZE);
            let f = moved(&t, base, &r, &rest);
            assert!(f <= bound, "removing {gone} of {n} moved {f:.4} > {bound:.4}");
        }
        let grown = MaglevTable::build(&all, DEFAULT_TABLE_SIZE);
        let f = moved(&t, base, &grown, &all);
        let bound = 1.0 / (n + 1) as f64 + 0.03;
        assert!(f <= bound, "adding one to {n} moved {f:.4} > {bound:.4}");
    }
}

#[test]
fn a_surviving_backends_buckets_only_move_to_fill_the_gap() {
    // Buckets of the removed backend must go somewhere; the paper's property is that few
    // others move. Every bucket that kept a surviving backend in place counts as stable.
    let all = names(10);
    let t = MaglevTable::build(&all, DEFAULT_TABLE_SIZE);
    let rest = all[1..].to_vec();
    let r = MaglevTable::build(&rest, DEFAULT_TABLE_SIZE);
    let survivors_moved = t
        .entries()
        .iter()
        .zip(r.entries())
        .filter(|(a, b)| **a != 0 && all[**a as usize] != rest[**b as usize])
        .count();
    assert!(
        (survivors_moved as f64) < 0.03 * f64::from(DEFAULT_TABLE_SIZE),
        "{survivors_moved} buckets moved"
    );
}

#[test]
fn the_table_does_not_depend_on_the_order_backends_arrive_in() {
    let n = names(9);
    let mut rev = n.clone();
    rev.reverse();
    let a = MaglevTable::build(&n, DEFAULT_TABLE_SIZE);
    let b = MaglevTable::build(&rev, DEFAULT_TABLE_SIZE);
    let by_name = |t: &MaglevTable, ns: &[Vec<u8>]| -> Vec<Vec<u8>> {
        t.entries().iter().map(|i| ns[*i as usize].clone()).collect()
    };
    assert_eq!(by_name(&a, &n), by_name(&b, &rev));
}

#[test]
fn golden_table() {
    // Three backends, 13 buckets: pinned so that a change of hash, seed or population order
    // (which would move every flow on every node) cannot pass unnoticed.
    let t = MaglevTable::build(&names(3), 13);
    assert_eq!(t.entries(), GOLDEN);
}

const GOLDEN: &[u32] = &[2, 0, 0, 2, 1, 1, 0, 0, 0, 1, 1, 2, 2];

#[test]
fn table_size_is_fixed_until_the_endpoints_outgrow_it() {
    assert_eq!(table_size(DEFAULT_TABLE_SIZE, 1), DEFAULT_TABLE_SIZE);
    assert_eq!(table_size(DEFAULT_TABLE_SIZE, 409), DEFAULT_TABLE_SIZE);
    let grown = table_size(DEFAULT_TABLE_SIZE, 410);
    assert!(is_prime(grown) && (8186..8250).contains(&grown), "{grown}");
    assert_eq!(table_size(DEFAULT_TABLE_SIZE, 1_000_000), MAX_TABLE_SIZE);
    assert!(is_prime(MAX_TABLE_SIZE) && is_prime(DEFAULT_TABLE_SIZE) && is_prime(MIN_TABLE_SIZE));
    assert_eq!(next_prime(1022), 1031);
}

#[test]
fn the_settable_sizes_are_the_largest_primes_below_powers_of_two() {
    let expected: Vec<u32> =
        (3..=16).map(|k| (1..1u32 << k).rev().find(|n| is_prime(*n)).expect("a prime")).collect();
    assert_eq!(TABLE_SIZES.to_vec(), expected);
    assert!(TABLE_SIZES.contains(&DEFAULT_TABLE_SIZE));
}

#[test]
fn flow_keys_are_laid_out_like_nft_registers() {
    let src: IpAddr = "10.0.0.1".parse().unwrap();
    assert_eq!(flow_key(&src, 0x1234, false), [10, 0, 0, 1, 0x12, 0x34, 0, 0]);
    assert_eq!(flow_key(&src, 0x1234, true), [10, 0, 0, 1]);
    let v6: IpAddr = "fd00::1".parse().unwrap();
    assert_eq!(flow_key(&v6, 80, false).len(), 20);
}

#[test]
fn flow_hashes_match_the_kernel() {
    // Read back from a kernel: `ct mark set jhash ip saddr . udp sport mod 4294967295 seed
    // 0x74696465` stores hash - 1 (reciprocal_scale by 2^32 - 1), and `... mod 4093` the bucket.
    let src: IpAddr = "10.9.8.7".parse().unwrap();
    let kernel =
        [(1000u16, 1_428_483_896u32, 1361u32), (40000, 2_508_122_982, 2390), (65535, 4_192_871_214, 3995)];
    for (sport, mark, bucket) in kernel {
        assert_eq!(jhash(&flow_key(&src, sport, false), FLOW_SEED), mark + 1, "sport {sport}");
        assert_eq!(flow_bucket(&src, sport, false, 4093), bucket, "sport {sport}");
    }
    assert_eq!(jhash(&flow_key(&src, 1, true), FLOW_SEED), 3_449_250_457 + 1);
}
