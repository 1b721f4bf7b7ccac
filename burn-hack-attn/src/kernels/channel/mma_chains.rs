//! Reductions of a lane's many terms (a block's scores, a head's channels) in independent chains:
//! term `i` goes into running value `i mod CHAINS`, and the chains are joined at the end. One
//! running value makes every term wait for the previous one's result; the tensor-core kernel runs
//! 2 warps a scheduler (it takes every register), too few to hide that wait, which was the largest
//! stall of its product steps (`results/hack-decode-channel-h200.md`, session 57).
//!
//! The sum's terms are added in another order than one chain's: the result can differ in its
//! last bits, well inside the kernel's tolerance against the reference.

use cubecl::prelude::*;

/// Running values a reduction keeps.
pub(super) const CHAINS: u32 = 4;
const _: () = assert!(CHAINS == 4, "chains_max and chains_sum join four chains");

/// The chain term `term` of a reduction goes into.
pub(super) fn chain(term: u32) -> usize {
    (term % CHAINS) as usize
}

/// [`CHAINS`] running values, each `start`.
#[cube]
pub(super) fn chains(start: f32) -> Array<f32> {
    let mut out = Array::<f32>::new(comptime!(CHAINS as usize));
    #[unroll]
    for c in 0..CHAINS {
        out[c as usize] = start;
    }
    out
}

/// The max of a reduction's chains.
#[cube]
pub(super) fn chains_max(chains: &Array<f32>) -> f32 {
    f32::max(f32::max(chains[0], chains[1]), f32::max(chains[2], chains[3]))
}

/// The sum of a reduction's chains.
#[cube]
pub(super) fn chains_sum(chains: &Array<f32>) -> f32 {
    (chains[0] + chains[1]) + (chains[2] + chains[3])
}
