//! HACK decode attention with its integer products on tensor cores: the kernel a decode step runs
//! where the backend has `u8 × u8 → i32` warp products of shape `16 × 8 × 32` with registers
//! managed by the kernel (CUDA's `mma.sync`) and the shapes allow ([`MmaGeometry`],
//! `mma_geometry`); elsewhere the scalar kernel ([`decode_kernel`](super::portable_kernel::decode_kernel))
//! runs.
//!
//! The products are HACK's own: 2-bit K/V codes times 8-bit Q/P codes, summed exactly in `i32`,
//! then Eq. 4's corrections in f32, as in the scalar kernel.
//!
//! **Staging.** Each warp copies its block of Π slots (key words and metadata, value words and
//! metadata) into its own part of shared memory with asynchronous copies
//! ([`mma_stage`](super::mma_stage)), two blocks in flight: while it attends a block in one of
//! its two regions, the next block lands in the other, and once its lanes have read the region
//! (a warp synchronization) it copies the block after the next into it. Each group of warps waits
//! for its round's copies on its own barrier per region ([`copy_barriers`]), so that groups run
//! apart. Each lane builds its operand registers from the staged packed words.
//!
//! **Operands from packed words.** A 32-bit word holds 16 two-bit codes, code `j` at bits `2j`.
//! `(word · 4^(3 − t)) & 0xC0C0C0C0` is a register of four byte codes: codes `t, 4 + t, 8 + t,
//! 12 + t`, each at the top of its byte, that is 64 times the code ([`lifted_codes`](crate::kernels::warp_codes::lifted_codes)). A warp
//! product's operand register holds four consecutive depth indices `4t .. 4t + 4` for lane
//! `4g + t`, so depth index `4t + b` of a 16-deep half stands for code `4b + t` of the word. The
//! other operand (the Q codes, held by each lane for the whole kernel, or the P codes) is laid out in
//! the same order, and a dot product does not depend on the order of its terms. Every K/V code
//! enters the products 64 times over, so every dot product and every code sum the products give
//! is 64 times the codes' own; the factor `1/64` (exact in floating point) sits in the Q rows'
//! and the P metadata that multiply them ([`LIFTED`](super::mma_operands::LIFTED)). The lift is a multiply, which the GPU
//! issues to its FMA pipe, where a right shift took a second instruction on the integer pipe
//! beside the mask; the integer pipe is the kernel's busiest (`results/decode-hack-lift-h100.md`).
//!
//! **Scores, `Sᵀ = Q̂ · K̂ᵀ`.** The first operand's rows are `(key group, head)` pairs, `row = part ·
//! padded_group + head`: the head's Q codes restricted to that key group's channels (zero
//! elsewhere), so one accumulator holds every key group's dot product apart, which Eq. 4 needs.
//! The second operand's 8 columns are 8 slots: column `n` of slot tile `j` is slot `8j + 4(n mod 2)
//! + n / 2` of the block, so that the accumulator leaves lane `4g + t` the scores of slots `8j + t`
//! and `8j + 4 + t` for its rows' head, which is exactly what it needs as the second operand of
//! the value product (below). Each lane applies the corrections of its rows, and the key groups of
//! a head are summed within the lane (padded groups of 8 or more) or across lanes `4g + t` with
//! the same `g mod padded_group` (smaller groups).
//!
//! **Outputs, `Oᵀ = V̂ᵀ · P̂ᵀ`.** The first operand's rows are 16 channels, its depth the block's
//! slots, from the value words of those channels (a word holds 16 slots of one channel); the
//! second operand's columns are 8 heads, its depth the same slots, built from the lane's own P
//! codes with no exchange: lane `4g + t` holds head `g`'s codes of slots `8j + t` and `8j + 4 + t`,
//! which are depth indices `4t .. 4t + 4` of the value product's halves.
//!
//! **Code sums from padding.** Eq. 4 needs each key group's and each value channel's code sum.
//! Where the products have padding, they give them: with at most 8 score rows, padding row `8 +
//! g` holds ones on the channels of row `g`'s key group, so lane `4g + t`'s accumulator holds its
//! rows' key sums beside their dot products; with a padded group below 8, the output product's
//! padding columns hold ones, and column 7 is each channel's code sum over the block. The cached
//! sums are then neither copied nor read (`MmaGeometry::key_sums_from_products`,
//! `value_sums_from_products`): the products compute them exactly, in the tensor-core work the
//! padding costs anyway.
//!
//! Per block of Π slots, a warp: scores its slots; takes the block's max per head `m_b`, the
//! numerators `p = exp(s − m_b)` and their mass; for a closed block quantizes P to 8 bits against
//! the block's min and max of `p` (the codes of the normalized P up to float rounding: quantization
//! is scale-invariant) and takes the value products with Eq. 4's corrections; for the tail block
//! weighs the float V rows by unquantized `p`; and joins the block to its running outputs and mass
//! under the larger max (log-sum-exp). Each warp attends on its own split of whole blocks and
//! writes its split's partials for `merge_kernel`.

use burn_kvcompress::kernels::{first_visible_slot, masked_score, warp_mma::WARP, SplitOut};
use cubecl::prelude::*;

use super::mma_geometry::{MmaGeometry, PRODUCT_COLUMNS};
use super::mma_scores::{block_scores, query_rows};
use super::mma_softmax::block_softmax;
use super::mma_stage::{block_stage, copy_block, WarpBlocks};
use super::mma_values::{closed_block_values, output_share, share_channel, tail_values};
use super::query_kernel::stream_queries;
use crate::kernels::copy_barriers::copy_barriers;

/// One cube of HACK decode attention on tensor cores; see the module documentation.
///
/// - `q`: the step's queries, `[streams · group · head_dim]`, which each cube quantizes for its
///   stream ([`stream_queries`]);
/// - `k_words`: `[streams · len, key_words]`; `k_params` (fp16 (min, scale) words), `k_sums`: one
///   row of `key_meta_pitch` per slot (`k_sums` unread where the score product gives the sums);
///   `v_words`: `[streams · blocks · head_dim, value_words]`; `v_params`, `v_sums`: `[streams ·
///   blocks · head_dim]` (`v_sums` unread likewise); `tail`: `[streams · (len −
///   blocks · Π), head_dim]`; `key_start`: `[batch]`;
/// - outputs per (query head, split = cube · warps + warp): `out` (`head_dim` each), `out_max`,
///   `out_sum`;
/// - cube `(x, stream)`: warp `w` takes slots `(x · warps + w) · warp_chunk ..` (at most
///   `warp_chunk`, a multiple of Π).
///
/// The kernel's float modes make `exp` the device's fast exponential (`__expf`: a multiply and one
/// `ex2.approx`, relative error about `2⁻²¹ · (2 + 1.2 |x|)`, far below the 8-bit quantization of P
/// that follows; the precise `expf` takes nine instructions). Its arguments are a score minus its
/// block's or the running max (at most 0, finite), or the masked score's, whose exponential is 0
/// either way; the kernel calls no other function these modes change (`log`, `sqrt`, `powf`, the
/// trigonometric ones), and division keeps its precise form. (MILLION's tensor-core kernel under
/// the same modes measured 7 % slower steps, `results/decode-hack-diet-h100.md`.)
///
/// Its indices are 64-bit (`address_type = "u64"`). With 32-bit ones the CUDA compiler could not
/// fold a constant offset into a shared-memory load (a 32-bit index may wrap before it is widened
/// to an address) and spent one or two instructions on each load's address; with 64-bit ones a
/// load takes its offset from the slice's start as an immediate (at 32K batch 8 on an H100, 44.9 M
/// → 41.3 M instructions a step, `results/decode-hack-lift-h100.md`).
#[allow(clippy::too_many_arguments)]
#[cube(
    launch_unchecked,
    address_type = "u64",
    fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf
)]
pub fn mma_decode_kernel(
    q: &Array<f32>,
    k_words: &Array<Vector<u32, Const<4>>>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    v_words: &Array<Vector<u32, Const<2>>>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    tail: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    key_meta_pitch: u32,
    len: u32,
    blocks: u32,
    warp_chunk: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: MmaGeometry,
) {
    let stream = CUBE_POS_Y;
    let kv_heads = CUBE_COUNT_Y / key_start.len() as u32;
    let warp = UNIT_POS / WARP;
    let split = CUBE_POS_X * geo.warps + warp;
    let first = u32::min(split * warp_chunk, len);
    let slots = WarpBlocks {
        stream,
        row0: stream * len,
        first,
        end: u32::min(first + warp_chunk, len),
        len,
        quantized: blocks * geo.partition,
        visible_from: first_visible_slot(len - 1, key_start[(stream / kv_heads) as usize], window),
    };
    let heads = comptime!(geo.lane_heads() as usize);
    let outputs = comptime!(geo.lane_outputs() as usize);
    let mut total = Array::<f32>::new(outputs);
    #[unroll]
    for o in 0..outputs {
        total[o] = 0.0;
    }
    let mut top = Array::<f32>::new(heads);
    let mut mass = Array::<f32>::new(heads);
    #[unroll]
    for h in 0..heads {
        top[h] = masked_score();
        mass[h] = 0.0;
    }

    let count = comptime!((geo.lane_heads() * geo.slot_tiles() * 2) as usize);
    let mut s = Array::<f32>::new(count);
    let mut codes = Array::<u32>::new(comptime!((geo.lane_heads() * geo.slot_tiles() / 2) as usize));
    let mut p_meta = Array::<f32>::new(comptime!(4 * geo.lane_heads() as usize));
    let mut stage = block_stage(geo);
    // The copies of the blocks staged in the first and the second of each warp's two regions, per
    // group of warps (initializing the barriers synchronizes the cube).
    let copies = copy_barriers(comptime!(geo.copy_groups()));
    let first_region = warp;
    let second_region = comptime!(geo.warps) + warp;
    copy_block(
        k_words,
        k_params,
        k_sums,
        v_words,
        v_params,
        v_sums,
        key_meta_pitch,
        &mut stage,
        first_region,
        &slots,
        blocks,
        slots.first,
        geo,
    );
    copies.commit(false, comptime!(geo.copy_groups()));
    // The queries are quantized and their operands loaded while the first block lands.
    let stream_codes = stream_queries(q, stream, geo.queries());
    let queries = query_rows(&stream_codes, scale, geo);

    // Each warp goes through its blocks round by round, two blocks in flight: a round first
    // copies the next block into the region the warp's lanes read last round (once they all have:
    // a warp synchronization), then attends its own block from the other region. The warps of a
    // copy group wait for each round's copies together.
    let rounds = warp_chunk / geo.partition;
    let mut round = 0u32;
    while round < rounds {
        let block_first = slots.first + round * geo.partition;
        let attends = block_first < slots.end;
        let closed = block_first < slots.quantized;
        let second = round % 2 == 1;
        let region = select(second, second_region, first_region);
        let next_region = select(second, first_region, second_region);
        sync_plane();
        copy_block(
            k_words,
            k_params,
            k_sums,
            v_words,
            v_params,
            v_sums,
            key_meta_pitch,
            &mut stage,
            next_region,
            &slots,
            blocks,
            block_first + geo.partition,
            geo,
        );
        copies.commit(!second, comptime!(geo.copy_groups()));
        copies.wait(second, comptime!(geo.copy_groups()));
        if attends {
            block_scores(&mut s, &stage, region, &queries, &slots, block_first, geo);
            // The block's numerators (in `s`), P codes and their metadata per head slot; `keep`
            // and `join` weigh the running and the block's own outputs under the larger max.
            #[unroll]
            for h in 0..geo.lane_heads() {
                let numerators = block_softmax(&mut s, &mut codes, h, closed, geo);
                let m = f32::max(top[h as usize], numerators.top);
                let keep = f32::exp(top[h as usize] - m);
                let join = f32::exp(numerators.top - m);
                mass[h as usize] = mass[h as usize] * keep + numerators.mass * join;
                top[h as usize] = m;
                // Eq. 4's P terms of a closed block, weighed by `join`: the output is `v_step · (dot
                // · [0] + v_total · [1]) + v_lo · [2]`, added to the running one times `keep` ([3]).
                // The tail block's `step` is 1, so its [0] is `join`.
                p_meta[(4 * h) as usize] = numerators.step * join;
                p_meta[(4 * h + 1) as usize] = numerators.lo * join;
                p_meta[(4 * h + 2) as usize] =
                    (numerators.step * numerators.code_sum + f32::cast_from(geo.partition) * numerators.lo) * join;
                p_meta[(4 * h + 3) as usize] = keep;
            }
            if closed {
                closed_block_values(&stage, region, &codes, &p_meta, &mut total, geo);
            } else {
                tail_values(tail, &slots, block_first, &s, &p_meta, &mut total, geo);
            }
        }
        round += 1;
    }

    let target = SplitOut { first_head: stream * geo.group, split, splits: CUBE_COUNT_X * geo.warps };
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    let share = output_share(geo);
    #[unroll]
    for q in 0..comptime!(geo.channel_tiles() / geo.value_fold()) {
        #[unroll]
        for h in 0..geo.lane_heads() {
            #[unroll]
            for e in 0..4u32 {
                let head = PRODUCT_COLUMNS * h + 2 * share.pair + e % 2;
                if head < geo.group {
                    let channel = share_channel(&share, q, e / 2, geo);
                    target.write_output(
                        out,
                        head,
                        channel,
                        total[((q * geo.lane_heads() + h) * 4 + e) as usize],
                        geo.head_dim,
                    );
                }
            }
        }
    }
    let own_head = g % comptime!(geo.padded_group().min(PRODUCT_COLUMNS));
    if t == 0 && own_head == g {
        #[unroll]
        for h in 0..geo.lane_heads() {
            let head = own_head + PRODUCT_COLUMNS * h;
            if head < geo.group {
                target.write_stats(out_max, out_sum, head, top[h as usize], mass[h as usize]);
            }
        }
    }
}
