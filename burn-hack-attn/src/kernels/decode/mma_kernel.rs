//! HACK decode attention with its integer products on tensor cores: the kernel a decode step runs
//! where the backend has `u8 × u8 → i32` warp products of shape `16 × 8 × 32` with registers
//! managed by the kernel (CUDA's `mma.sync`) and the shapes allow ([`MmaGeometry`],
//! `mma_geometry`); elsewhere the scalar kernel ([`decode_kernel`](super::kernel::decode_kernel))
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
//! 12 + t`, each at the top of its byte, that is 64 times the code ([`lifted_codes`]). A warp
//! product's operand register holds four consecutive depth indices `4t .. 4t + 4` for lane
//! `4g + t`, so depth index `4t + b` of a 16-deep half stands for code `4b + t` of the word. The
//! other operand (the Q codes, held by each lane for the whole kernel, or the P codes) is laid out in
//! the same order, and a dot product does not depend on the order of its terms. Every K/V code
//! enters the products 64 times over, so every dot product and every code sum the products give
//! is 64 times the codes' own; the factor `1/64` (exact in floating point) sits in the Q rows'
//! and the P metadata that multiply them ([`LIFTED`]). The lift is a multiply, which the GPU
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
use cubecl::{cmma::MmaDefinition, prelude::*};

use super::copy_barriers::copy_barriers;
use super::mma_geometry::{MmaGeometry, PRODUCT_COLUMNS, PRODUCT_DEPTH, PRODUCT_ROWS};
use super::mma_stage::{block_stage, copy_block, BlockStage, WarpBlocks};
use super::query_kernel::{stream_queries, StreamQueries};
use crate::kernels::{
    eight_bit::{numerator, scale8},
    params_word::params_pair,
    warp_codes::{lane_lift, lifted_codes, quad_max, quad_min, quad_sum, LIFT, ROUNDER, ROUNDER_BITS, VISIBLE_FLOOR},
};

/// One operand register: four byte codes.
type Codes = Vector<u8, Const<4>>;
/// Half an accumulator fragment: two `i32` dot products.
type Dots = Vector<i32, Const<2>>;

/// What undoes the lift: the factor of a dot product or code sum of lifted codes (exact).
const LIFTED: f32 = 1.0 / LIFT as f32;
/// An operand register of four codes 1: a row or column that sums the other operand's codes.
const ONE_CODES: u32 = 0x0101_0101;

/// The calling lane's query operand and its rows' metadata, fixed for the kernel: `operand[(tile ·
/// channel_steps + step) · 4 + r]`, and per lane row `i` (see [`MmaGeometry::lane_rows`]) its Q
/// run's scale, min, and `scale · code sum + key_group · min`, Eq. 4's factor of the key's min
/// (zero for padding rows), each times the attention's scale.
#[derive(CubeType)]
struct QueryRows {
    operand: Array<Codes>,
    step: Array<f32>,
    lo: Array<f32>,
    fixed: Array<f32>,
}

/// The key group of score row `row` (that of the last group for padding rows past them).
#[cube]
fn key_part(row: u32, #[comptime] geo: MmaGeometry) -> u32 {
    u32::min(row / comptime!(geo.padded_group()), comptime!(geo.parts() - 1))
}

/// The head slot (see [`MmaGeometry::lane_heads`]) that lane row `i` adds to.
fn head_slot(i: u32, geo: MmaGeometry) -> u32 {
    if geo.padded_group() >= PRODUCT_COLUMNS {
        i % geo.lane_heads()
    } else {
        0
    }
}

/// Whether lane row `i` is the first whose scores go to its head slot.
fn first_row_of_slot(i: u32, geo: MmaGeometry) -> bool {
    (0..i).all(|earlier| head_slot(earlier, geo) != head_slot(i, geo))
}

/// The calling lane's share of the output products' corrections ([`MmaGeometry::value_fold`]):
/// columns `2 pair, 2 pair + 1` (heads `8h + 2 pair + e` of head slot `h`) of tiles `fold · q +
/// offset`, whose lane rows start at channel `first_channel = 16 offset + g` (lane `4g + t`).
#[derive(CubeType)]
struct OutputShare {
    pair: u32,
    offset: u32,
    first_channel: u32,
}

/// The calling lane's [`OutputShare`].
#[cube]
fn output_share(#[comptime] geo: MmaGeometry) -> OutputShare {
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    let offset = t / comptime!(geo.lane_columns());
    OutputShare { pair: t % comptime!(geo.lane_columns()), offset, first_channel: PRODUCT_ROWS * offset + g }
}

/// The channel of the share's row `row` (0, or 1 for 8 channels on) in its `q`-th tile.
#[cube]
fn share_channel(share: &OutputShare, q: u32, row: u32, #[comptime] geo: MmaGeometry) -> u32 {
    share.first_channel + PRODUCT_ROWS * geo.value_fold() * q + 8 * row
}

/// The lane whose softmax holds the head of the share's column `2 pair + e`: lane `4 (2 pair +
/// e)`, whose `g` is that column.
#[cube]
fn column_owner(share: &OutputShare, e: u32) -> u32 {
    4 * (2 * share.pair + e)
}

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
    let copies = copy_barriers(geo);
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
    copies.commit(false, geo);
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
        copies.commit(!second, geo);
        copies.wait(second, geo);
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

/// The calling lane's [`QueryRows`] from its stream's quantized queries.
#[cube]
fn query_rows(stream_codes: &StreamQueries, scale: f32, #[comptime] geo: MmaGeometry) -> QueryRows {
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    let d = geo.head_dim;
    let gp = comptime!(geo.padded_group());
    let runs = comptime!(geo.queries().runs());
    let rows = comptime!(geo.lane_rows() as usize);
    let mut queries = QueryRows {
        operand: Array::<Codes>::new(comptime!((geo.score_tiles() * geo.channel_steps() * 4) as usize)),
        step: Array::<f32>::new(rows),
        lo: Array::<f32>::new(rows),
        fixed: Array::<f32>::new(rows),
    };
    #[unroll]
    for i in 0..geo.lane_rows() {
        let row = 8 * i + g;
        let (head, part) = (row % gp, row / gp);
        let valid = head < geo.group && part < geo.parts();
        let run = head * geo.parts() + part;
        let at = u32::min(run, runs - 1);
        let lo = select(valid, stream_codes.meta[at as usize], 0.0);
        let step = select(valid, stream_codes.meta[(at + runs) as usize], 0.0);
        let total = select(valid, stream_codes.meta[(at + 2 * runs) as usize], 0.0);
        // The dot products come lifted, and so do the key sums where the products give them.
        queries.step[i as usize] = step * scale * LIFTED;
        queries.lo[i as usize] = lo * scale * comptime!(if geo.key_sums_from_products() { LIFTED } else { 1.0 });
        queries.fixed[i as usize] = (step * total + f32::cast_from(geo.key_group) * lo) * scale;
    }
    #[unroll]
    for mt in 0..geo.score_tiles() {
        #[unroll]
        for step in 0..geo.channel_steps() {
            #[unroll]
            for r in 0..4u32 {
                // Register r: row `g + 8 (r mod 2)`, depth half `r / 2`; byte b is channel
                // `32 step + 16 (r / 2) + 4b + t`. Key groups are multiples of 16 channels
                // (`mma_geometry`), so the register's 16 channels lie in one, `register_part`.
                let register_part = comptime!((PRODUCT_DEPTH * step + 16 * (r / 2)) / geo.key_group);
                let mut word = 0u32;
                if comptime!(geo.key_sums_from_products() && PRODUCT_ROWS * mt + 8 * (r % 2) >= 8) {
                    // Padding row `8 + g`: ones on the key group of row `g`, whose code sums it
                    // takes.
                    word = select(key_part(g, geo) == register_part, ONE_CODES, 0);
                } else {
                    let row = PRODUCT_ROWS * mt + g + 8 * (r % 2);
                    let (head, part) = (row % gp, row / gp);
                    if head < geo.group && part == register_part {
                        #[unroll]
                        for b in 0..4u32 {
                            let channel = PRODUCT_DEPTH * step + 16 * (r / 2) + 4 * b + t;
                            let code =
                                (stream_codes.codes[((head / 2) * d + channel) as usize] >> (16 * (head % 2))) & 0xFF;
                            word |= code << (8 * b);
                        }
                    }
                }
                queries.operand[((mt * geo.channel_steps() + step) * 4 + r) as usize] = Codes::reinterpret(word);
            }
        }
    }
    queries
}

/// Writes to `s` the scores of the block from slot `block_first`, staged in the calling warp's
/// `stage`: `s[(h · slot_tiles + j) · 2 + c]` for head slot `h` and slot `8j + 4c + t` of the
/// block (lane `4g + t`), scaled, or [`masked_score`] for a slot the lane's sequence does not see.
///
/// The lane reads the stage through slices that start at its own first element, so that every
/// read's offset from them is a compile-time constant.
#[cube]
fn block_scores(
    s: &mut Array<f32>,
    stage: &BlockStage,
    region: u32,
    queries: &QueryRows,
    slots: &WarpBlocks,
    block_first: u32,
    #[comptime] geo: MmaGeometry,
) {
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    let gp = comptime!(geo.padded_group());
    let product = MmaDefinition::<u8, u8, i32>::new(16usize, 8usize, 32usize);
    let count = comptime!((geo.lane_heads() * geo.slot_tiles() * 2) as usize);
    // This lane's column of the key operand in slot tile `j`: slot `8j + 4 (g mod 2) + g / 2`.
    let words_end = (region + 1) * comptime!(geo.warp_key_vectors());
    let words_at = words_end - comptime!(geo.warp_key_vectors()) + (4 * (g % 2) + g / 2) * comptime!(geo.key_stride());
    let lane_words = stage.key_words.slice(words_at as usize, words_end as usize);
    let meta_at = region * comptime!(geo.key_meta());
    let lift = lane_lift();
    #[unroll]
    for j in 0..geo.slot_tiles() {
        let mut key = Array::<Codes>::new(comptime!(geo.key_words() as usize));
        #[unroll]
        for w4 in 0..comptime!(geo.key_words() / 4) {
            let four = lane_words[comptime!((PRODUCT_COLUMNS * j * geo.key_stride() + w4) as usize)];
            #[unroll]
            for w in 0..4u32 {
                key[(4 * w4 + w) as usize] = lifted_codes(four[w as usize], lift);
            }
        }
        #[unroll]
        for mt in 0..geo.score_tiles() {
            let mut dots = Array::<Dots>::new(2usize);
            dots[0] = Dots::new(0i32);
            dots[1] = Dots::new(0i32);
            #[unroll]
            for step in 0..geo.channel_steps() {
                let mut a = Array::<Codes>::new(4usize);
                #[unroll]
                for r in 0..4u32 {
                    a[r as usize] = queries.operand[((mt * geo.channel_steps() + step) * 4 + r) as usize];
                }
                let mut b = Array::<Codes>::new(2usize);
                b[0] = key[(2 * step) as usize];
                b[1] = key[(2 * step + 1) as usize];
                product.execute_inplace(&a, &b, &mut dots);
            }
            // Eq. 4's corrections of the lane's rows `8i + g`, `i = 2 mt + half`, for its slots
            // `8j + 4c + t`.
            #[unroll]
            for half in 0..2u32 {
                let i = 2 * mt + half;
                if comptime!(8 * i < geo.score_rows()) {
                    let part = key_part(8 * i + g, geo);
                    let h = comptime!(head_slot(i, geo));
                    // The metadata of the lane's slot `t` of the block from its key group.
                    let meta = t * comptime!(geo.parts()) + part;
                    let params_end = meta_at + comptime!(geo.key_meta());
                    let lane_params = stage.key_params.slice((meta_at + meta) as usize, params_end as usize);
                    #[unroll]
                    for c in 0..2u32 {
                        // Slot `8j + 4c + t`.
                        let own = comptime!(((PRODUCT_COLUMNS * j + 4 * c) * geo.parts()) as usize);
                        let k_params = params_pair(lane_params[own]);
                        let (k_lo, k_step) = (k_params[0], k_params[1]);
                        // The key group's code sum: from the padding row `8 + g`, or staged.
                        let k_total = if comptime!(geo.key_sums_from_products()) {
                            f32::cast_from(dots[1][c as usize])
                        } else {
                            let sums_end = meta_at + comptime!(geo.key_meta());
                            let lane_sums = stage.key_sums.slice((meta_at + meta) as usize, sums_end as usize);
                            f32::cast_from(lane_sums[own])
                        };
                        let dot = f32::cast_from(dots[half as usize][c as usize]);
                        let q = i as usize;
                        let at = ((h * geo.slot_tiles() + j) * 2 + c) as usize;
                        let term = k_step * (queries.step[q] * dot + queries.lo[q] * k_total) + k_lo * queries.fixed[q];
                        // The head slot's first row sets its score (an add to 0 would cost an
                        // instruction: `0 + x` is not `x` for `x = −0`).
                        if comptime!(first_row_of_slot(i, geo)) {
                            s[at] = term;
                        } else {
                            s[at] += term;
                        }
                    }
                }
            }
        }
    }
    // Key groups of a head held by other lanes (groups below 8).
    #[unroll]
    for x in 0..count {
        #[unroll]
        for k in 0..comptime!(geo.lane_group_shuffles()) {
            s[x] += plane_shuffle_xor(s[x], (4 * gp) << k);
        }
    }
    // The mask, in the blocks that hold the window's edge or the split's end.
    if block_first < slots.visible_from || block_first + geo.partition > slots.end {
        #[unroll]
        for x in 0..count {
            let x32 = x as u32;
            let j = (x32 / 2) % comptime!(geo.slot_tiles());
            let own = block_first + PRODUCT_COLUMNS * j + 4 * (x32 % 2) + t;
            let visible = own >= slots.visible_from && own < slots.end;
            s[x] = select(visible, s[x], masked_score());
        }
    }
}

/// A P code is rounded by [`ROUNDER`] with no clamp: its argument is at least 0 and below 255.5
/// (see `MIN_P_STEP`). `code8` (and the reference) round ties up; a tie needs `(p − lo) / step`
/// to fall exactly on a half, which float noise of an ulp decides either way.
///
/// The least step of a block's P codes, `2⁻²⁰`: four times the fast exponential's largest excess
/// over 1 (`2⁻²²`), so that no code's argument reaches 255.5. It only coarsens blocks whose
/// numerators all lie within `255 · 2⁻²⁰ ≈ 2.4e-4` of 1 (`code8`'s step would be smaller), where
/// a code's error stays below `2⁻²¹`.
const MIN_P_STEP: f32 = 1.0 / 1_048_576.0;

/// A block's softmax for one head slot: its max score, and (for a closed block) the 8-bit
/// quantization of its numerators.
#[derive(CubeType)]
struct BlockNumerators {
    top: f32,
    mass: f32,
    lo: f32,
    step: f32,
    code_sum: f32,
}

/// Replaces head slot `h`'s scores in `s` by their numerators `exp(s − m_b)` under the block's max
/// `m_b`, and for a closed block packs their 8-bit codes into `codes`: `s` indices `4x .. 4x + 4`
/// of the head slot, the lane's slots of slot tiles `2x` and `2x + 1`, are the bytes of
/// `codes[h · slot_tiles / 2 + x]`, the value product's operand register for depth half `x`.
#[cube]
fn block_softmax(
    s: &mut Array<f32>,
    codes: &mut Array<u32>,
    #[comptime] h: u32,
    closed: bool,
    #[comptime] geo: MmaGeometry,
) -> BlockNumerators {
    let first = comptime!(h * geo.slot_tiles() * 2);
    let count = comptime!(geo.slot_tiles() * 2);
    let mut m = masked_score();
    #[unroll]
    for x in 0..count {
        m = f32::max(m, s[(first + x) as usize]);
    }
    let top = quad_max(m);
    // The numerators' reference: the block's max, or where the lanes see no slot of the block, a
    // floor between the masked score and any real one, so that a masked score's numerator is 0
    // with no comparison per score.
    let reference = f32::max(top, VISIBLE_FLOOR);
    let mut l = 0.0f32;
    let mut lo = 1.0f32;
    #[unroll]
    for x in 0..count {
        let score = s[(first + x) as usize];
        let p = f32::exp(score - reference);
        s[(first + x) as usize] = p;
        l += p;
        lo = f32::min(lo, p);
    }
    let mut numerators = BlockNumerators { top, mass: quad_sum(l), lo: 0.0, step: 1.0, code_sum: 0.0 };
    if closed {
        // The block's largest numerator is `exp(0) = 1`, or 0 where it sees no slot. The fast
        // exponential may return up to `2⁻²²` above 1 for an argument just below 0: the step's
        // floor ([`MIN_P_STEP`]) keeps that within a quarter code of the top.
        let lo = quad_min(lo);
        let step = f32::max(scale8(lo, numerator(top, top)), MIN_P_STEP);
        // A multiply by the reciprocal instead of `code8`'s division: one more rounding of a
        // code's argument (an ulp), of the order of the scores' own float noise, which the decode
        // test's bound measures (`tests/integration/kernels_gpu.rs`, `reference_sensitivity`).
        // `(p − lo) · per_step + ROUNDER` in one multiply-add rounds `(p − lo) / step`, in `[0,
        // 255.25]` for `lo ≤ p ≤ 1 + 2⁻²²`, to the nearest integer, the code, which then lies
        // in the result's low byte (see [`ROUNDER`]). (Folding `lo` into the addend instead would
        // round `lo · per_step`, which nearly equal numerators make large, by up to half a code.)
        let per_step = 1.0 / step;
        // Each rounded value's bits are `ROUNDER_BITS` + its code: the sum starts `count` of them
        // below 0 (wrapping), so that it ends at the codes' sum.
        let mut sum = u32::new(comptime!(0u32.wrapping_sub(ROUNDER_BITS.wrapping_mul(count)) as i64));
        #[unroll]
        for x in 0..comptime!(geo.slot_tiles() / 2) {
            let mut word = 0u32;
            #[unroll]
            for k in 0..4u32 {
                let rounded = u32::reinterpret(fma(s[(first + 4 * x + k) as usize] - lo, per_step, ROUNDER));
                word |= (rounded & 0xFF) << (8 * k);
                sum += rounded;
            }
            codes[(h * comptime!(geo.slot_tiles() / 2) + x) as usize] = word;
        }
        numerators.lo = lo;
        numerators.step = step;
        numerators.code_sum = quad_sum(f32::cast_from(sum));
    }
    numerators
}

/// The closed block staged in the calling warp's `stage`: per tile of 16 channels, the value
/// products with the P codes (`codes`, as [`block_softmax`] wrote them) and Eq. 4's corrections,
/// joined to `total` with the heads' `p_meta` (lo, step, code sum, keep, join per head slot).
/// Each lane corrects the values of its pair of columns in the tiles it takes
/// ([`MmaGeometry::value_fold`]), fetched from the lane whose accumulator holds them.
#[cube]
fn closed_block_values(
    stage: &BlockStage,
    region: u32,
    codes: &Array<u32>,
    p_meta: &Array<f32>,
    total: &mut Array<f32>,
    #[comptime] geo: MmaGeometry,
) {
    let g = (UNIT_POS % WARP) / 4;
    let d = geo.head_dim;
    let product = MmaDefinition::<u8, u8, i32>::new(16usize, 8usize, 32usize);
    let fold = comptime!(geo.value_fold());
    let share = output_share(geo);
    // The lane holding this lane's columns `2 pair, 2 pair + 1` in its accumulator.
    let holder = 4 * g + share.pair;
    // The rows of the lane's products start at channel `g`, those of its corrections at the
    // share's first channel: slices from its first element of each buffer.
    let pairs_end = (region + 1) * comptime!(geo.warp_value_pairs());
    let pairs_at = pairs_end - comptime!(geo.warp_value_pairs()) + g * comptime!(geo.value_words() / 2);
    let lane_words = stage.value_words.slice(pairs_at as usize, pairs_end as usize);
    let lane_params =
        stage.value_params.slice((region * d + share.first_channel) as usize, ((region + 1) * d) as usize);
    let lift = lane_lift();
    // Lanes of the padding columns `padded_group ..` put ones there where those give the sums.
    let mut ones = false;
    if comptime!(geo.value_sums_from_products()) {
        ones = g >= comptime!(geo.padded_group());
    }
    #[unroll]
    for h in 0..geo.lane_heads() {
        // The P operand: depth half `r` of step `step` holds slots `32 step + 16 r + 4b + t`,
        // lane `4g + t`'s own codes of slot tiles `4 step + 2r` and `4 step + 2r + 1`.
        let mut weights = Array::<Codes>::new(comptime!((2 * geo.slot_steps()) as usize));
        #[unroll]
        for x in 0..comptime!(2 * geo.slot_steps()) {
            let own = codes[(h * comptime!(geo.slot_tiles() / 2) + x) as usize];
            weights[x as usize] = Codes::reinterpret(select(ones, ONE_CODES, own));
        }
        // Each column's head metadata, from the lanes that own the head; the factors of the dot
        // products and (where the products give them) of the code sums undo the lift.
        let mut meta = Array::<f32>::new(8usize);
        #[unroll]
        for e in 0..2u32 {
            #[unroll]
            for k in 0..4u32 {
                let owned = plane_shuffle(p_meta[(4 * h + k) as usize], column_owner(&share, e));
                let factor = comptime!(if k == 0 || (k == 1 && geo.value_sums_from_products()) { LIFTED } else { 1.0 });
                meta[(4 * e + k) as usize] = owned * factor;
            }
        }
        #[unroll]
        for q in 0..comptime!(geo.channel_tiles() / fold) {
            // The lane's dot products `[2 half + e]` of tile `fold · q + offset`, and (where the
            // products give them) its rows' code sums `[half]`.
            let mut lane_dots = Array::<i32>::new(4usize);
            let mut lane_sums = Array::<i32>::new(2usize);
            #[unroll]
            for f in 0..fold {
                let mt = fold * q + f;
                let mut dots = Array::<Dots>::new(2usize);
                dots[0] = Dots::new(0i32);
                dots[1] = Dots::new(0i32);
                #[unroll]
                for step in 0..geo.slot_steps() {
                    let mut a = Array::<Codes>::new(4usize);
                    #[unroll]
                    for half in 0..2u32 {
                        // Channel `16 mt + 8 half + g`.
                        let words = lane_words
                            [comptime!(((PRODUCT_ROWS * mt + 8 * half) * (geo.value_words() / 2) + step) as usize)];
                        #[unroll]
                        for k in 0..2u32 {
                            a[(half + 2 * k) as usize] = lifted_codes(words[k as usize], lift);
                        }
                    }
                    let mut b = Array::<Codes>::new(2usize);
                    b[0] = weights[(2 * step) as usize];
                    b[1] = weights[(2 * step + 1) as usize];
                    product.execute_inplace(&a, &b, &mut dots);
                }
                #[unroll]
                for x in 0..4u32 {
                    let dot = dots[(x / 2) as usize][(x % 2) as usize];
                    if comptime!(f == 0) {
                        // Lanes with offset 0 hold their own columns (`pair = t`).
                        lane_dots[x as usize] = dot;
                    } else {
                        lane_dots[x as usize] =
                            select(share.offset == f, plane_shuffle(dot, holder), lane_dots[x as usize]);
                    }
                }
                if comptime!(geo.value_sums_from_products()) {
                    // Column 7 (lane `4g + 3`'s second) is a ones column; so is the own first
                    // column of every lane whose offset is not 0 (`2t ≥ padded_group`).
                    #[unroll]
                    for half in 0..2u32 {
                        if comptime!(f == 0) {
                            lane_sums[half as usize] = plane_shuffle(dots[half as usize][1], 4 * g + 3);
                        } else {
                            lane_sums[half as usize] =
                                select(share.offset == f, dots[half as usize][0], lane_sums[half as usize]);
                        }
                    }
                }
            }
            #[unroll]
            for half in 0..2u32 {
                // Channel `16 (fold · q + offset) + 8 half + g`.
                let channel = comptime!((PRODUCT_ROWS * fold * q + 8 * half) as usize);
                let v_params = params_pair(lane_params[channel]);
                let (v_lo, v_step) = (v_params[0], v_params[1]);
                let v_total = if comptime!(geo.value_sums_from_products()) {
                    f32::cast_from(lane_sums[half as usize])
                } else {
                    let sums_at = region * d + share.first_channel;
                    let staged = stage.value_sums.slice(sums_at as usize, ((region + 1) * d) as usize);
                    f32::cast_from(staged[channel])
                };
                #[unroll]
                for e in 0..2u32 {
                    let m = 4 * e;
                    let dot = f32::cast_from(lane_dots[(2 * half + e) as usize]);
                    let block = v_step * (meta[m as usize] * dot + meta[(m + 1) as usize] * v_total)
                        + v_lo * meta[(m + 2) as usize];
                    let at = ((q * geo.lane_heads() + h) * 4 + 2 * half + e) as usize;
                    total[at] = total[at] * meta[(m + 3) as usize] + block;
                }
            }
        }
    }
}

/// The tail block from slot `block_first`: `Σ p · v` in f32 over its slots before the split's
/// end, the numerators `p` (in `s`) fetched from the lanes that hold them, joined to `total` with
/// `p_meta`'s keep and join.
#[cube]
fn tail_values(
    tail: &Array<f32>,
    slots: &WarpBlocks,
    block_first: u32,
    s: &Array<f32>,
    p_meta: &Array<f32>,
    total: &mut Array<f32>,
    #[comptime] geo: MmaGeometry,
) {
    let share = output_share(geo);
    let d = geo.head_dim;
    let stream_row0 = slots.stream * (slots.len - slots.quantized);
    // The lane's rows `x`: row `x mod 2` of the share's tile `x / 2`.
    let rows = comptime!(2 * geo.channel_tiles() / geo.value_fold());
    #[unroll]
    for h in 0..geo.lane_heads() {
        let mut join = Array::<f32>::new(2usize);
        #[unroll]
        for e in 0..2u32 {
            let owner = column_owner(&share, e);
            join[e as usize] = plane_shuffle(p_meta[(4 * h) as usize], owner);
            let keep = plane_shuffle(p_meta[(4 * h + 3) as usize], owner);
            #[unroll]
            for x in 0..rows {
                let at = (((x / 2) * geo.lane_heads() + h) * 4 + 2 * (x % 2) + e) as usize;
                total[at] *= keep;
            }
        }
        #[unroll]
        for j in 0..geo.slot_tiles() {
            #[unroll]
            for o in 0..PRODUCT_COLUMNS {
                // Slot `8j + o` of the block: held by lanes `4g' + o mod 4` at `c = o / 4`.
                let slot = block_first + PRODUCT_COLUMNS * j + o;
                let held = s[((h * geo.slot_tiles() + j) * 2 + o / 4) as usize];
                let mut p = Array::<f32>::new(2usize);
                #[unroll]
                for e in 0..2u32 {
                    p[e as usize] = join[e as usize] * plane_shuffle(held, column_owner(&share, e) + o % 4);
                }
                if slot < slots.end {
                    let row = stream_row0 + slot - slots.quantized;
                    #[unroll]
                    for x in 0..rows {
                        let channel = share_channel(&share, x / 2, x % 2, geo);
                        let v = tail[(row * d + channel) as usize];
                        #[unroll]
                        for e in 0..2u32 {
                            let at = (((x / 2) * geo.lane_heads() + h) * 4 + 2 * (x % 2) + e) as usize;
                            total[at] += p[e as usize] * v;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::warp_codes::TOP_CODES;

    #[test]
    fn a_lifted_register_is_64_times_the_shifted_codes() {
        // Lane t's register of a word: codes t, 4 + t, 8 + t, 12 + t in its bytes, lifted to the
        // tops of the bytes by `4^(3 − t)`; the same as the shift by 2t and the low mask, times 64.
        let mut word = 0x9e37_79b9u32;
        for _ in 0..1000 {
            word = word.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            for t in 0..4u32 {
                let lifted = word.wrapping_mul(LIFT >> (2 * t)) & TOP_CODES;
                let shifted = (word >> (2 * t)) & 0x0303_0303;
                assert_eq!(lifted, shifted * LIFT, "word {word:#x}, lane {t}");
            }
        }
        assert_eq!(LIFTED * LIFT as f32, 1.0);
    }

    #[test]
    fn every_head_slot_has_one_first_score_row() {
        for group in [1, 2, 3, 4, 6, 8, 12, 16] {
            for (head_dim, key_group) in [(64, 32), (128, 64), (128, 128), (128, 32)] {
                let geo = MmaGeometry { group, head_dim, key_group, partition: 64, warps: 4, meta_vector: 1 };
                let rows: Vec<u32> = (0..geo.lane_rows()).filter(|i| 8 * i < geo.score_rows()).collect();
                for h in 0..geo.lane_heads() {
                    let firsts = rows.iter().filter(|&&i| head_slot(i, geo) == h && first_row_of_slot(i, geo)).count();
                    assert_eq!(firsts, 1, "group {group}, {head_dim} channels, key group {key_group}, slot {h}");
                }
            }
        }
    }

    #[test]
    fn the_floor_zeroes_masked_numerators_only() {
        let masked = burn_kvcompress::kernels::MASKED_SCORE;
        let argument = masked - VISIBLE_FLOOR;
        assert!(argument.is_finite() && argument.exp() == 0.0);
        assert_eq!(f32::max(masked, VISIBLE_FLOOR), VISIBLE_FLOOR);
        assert_eq!(f32::max(-1.0e30, VISIBLE_FLOOR), -1.0e30);
    }

    #[test]
    fn the_rounder_leaves_each_p_code_in_the_low_byte_and_the_sum_exact() {
        assert_eq!(ROUNDER.to_bits(), ROUNDER_BITS);
        // Arguments over [0, 255.25], halves (ties) included.
        let arguments: Vec<f32> = (0..=1021).map(|i| i as f32 * 0.25).chain([0.4999, 0.5001, 254.5, 255.2]).collect();
        for chunk in arguments.chunks(16) {
            let count = chunk.len() as u32;
            let mut sum = 0u32.wrapping_sub(ROUNDER_BITS.wrapping_mul(count));
            let mut codes = 0u32;
            for &x in chunk {
                let rounded = (x + ROUNDER).to_bits();
                let code = x.round_ties_even() as u32;
                assert_eq!((rounded & 0xFF, rounded - ROUNDER_BITS), (code, code), "argument {x}");
                sum = sum.wrapping_add(rounded);
                codes += code;
            }
            assert_eq!(sum, codes);
        }
    }

    #[test]
    fn the_least_p_step_keeps_the_top_code_at_255() {
        // The fast exponential's largest excess over 1, against blocks whose numerators all lie
        // close to 1 (at the least step's threshold and closer) or spread out.
        let top = 1.0 + 2f32.powi(-22);
        for lo in [1.0 - 255.0 * MIN_P_STEP, 1.0 - MIN_P_STEP, 1.0 - 2f32.powi(-23), 0.999, 0.5, 0.0] {
            let step = f32::max((1.0 - lo) / 255.0, MIN_P_STEP);
            let per_step = 1.0 / step;
            let argument = (top - lo) * per_step;
            let rounded = (top - lo).mul_add(per_step, ROUNDER).to_bits();
            assert!(argument < 255.5 && rounded - ROUNDER_BITS <= 255, "lo {lo}: argument {argument}");
            assert_eq!((lo - lo).mul_add(per_step, ROUNDER).to_bits(), ROUNDER_BITS);
        }
    }

    #[test]
    fn slot_columns_give_each_lane_its_value_operand() {
        // Column n of a slot tile is slot 4 (n mod 2) + n / 2; the accumulator gives lane t
        // columns 2t and 2t + 1: slots t and 4 + t, the value product's depth 4t + b pairs.
        for t in 0..4u32 {
            let slots: Vec<u32> = (0..2)
                .map(|c| {
                    let n = 2 * t + c;
                    4 * (n % 2) + n / 2
                })
                .collect();
            assert_eq!(slots, [t, 4 + t]);
        }
    }
}
