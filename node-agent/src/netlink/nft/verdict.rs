//! Verdicts on the wire (`NFTA_DATA_VERDICT`): in a verdict map's elements and in an
//! `immediate` expression.

use tideway_core::program::Verdict;

use super::batch::Batch;

const DATA_VERDICT: u16 = 2;
const VERDICT_CODE: u16 = 1;
const VERDICT_CHAIN: u16 = 2;

const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;
const NFT_JUMP: i32 = -3;
const NFT_GOTO: i32 = -4;
const NFT_RETURN: i32 = -5;

/// `NFTA_DATA_VERDICT` (inside element data or an immediate).
pub(super) fn verdict(b: &mut Batch, v: &Verdict) {
    let (code, chain) = match v {
        Verdict::Jump(c) => (NFT_JUMP, Some(c)),
        Verdict::Goto(c) => (NFT_GOTO, Some(c)),
        Verdict::Return => (NFT_RETURN, None),
        Verdict::Accept => (NF_ACCEPT, None),
        Verdict::Drop | Verdict::Reject => (NF_DROP, None),
    };
    verdict_code(b, code, chain.map(|c| &**c));
}

pub(super) fn verdict_code(b: &mut Batch, code: i32, chain: Option<&str>) {
    let n = b.nest(DATA_VERDICT);
    b.be32(VERDICT_CODE, code as u32);
    if let Some(c) = chain {
        b.str(VERDICT_CHAIN, c);
    }
    b.end(n);
}
