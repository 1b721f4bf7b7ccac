//! The channel layout's decode attention with both products on tensor cores (CUDA's `mma.sync`
//! `16 × 8 × 32` integer warp products): the kernel a decode step runs where the device has them
//! ([`channel_mma_geometry`](super::channel_mma_geometry)); elsewhere the portable kernel
//! ([`super::portable_kernel`]) runs. Each warp takes a share of one stream's (a sequence's KV
//! head's) float slots (sinks and tail, [`super::float_warp`]), then a run of its closed blocks,
//! serving the KV head's query heads, and writes its split's partial outputs for the merge. The
//! float slots are spread over every warp rather than given cubes of their own: such cubes took SMs
//! from the blocks' cubes (each cube takes an SM's shared memory), so that some blocks' cubes
//! waited for them.
//!
//! Per closed block, the same quantizations as the reference
//! ([`channel_attention_reference`](super::channel_attention_reference)):
//!
//! - **Scores**, `Sᵀ = K̂ · Q̂′ᵀ`: rows are 16 slots of the block, depth 32 channels, columns the
//!   query heads (padded to 8 with zero queries). The first operand comes from the slots' key rows
//!   (`PackedRows`: a word holds consecutive channels of one slot), the second from `q′ = q ⊙ s_b`
//!   quantized to signed 8-bit codes per head (`u8 × i8` products), `σ` and `q · m_b` the
//!   corrections.
//! - **Outputs**, `Oᵀ = V̂ᵀ · P̂′ᵀ`: rows are 16 channels, depth 32 slots, columns the heads. The
//!   first operand comes from the channels' value rows (a word holds consecutive slots of one
//!   channel), the second from `p′ = p ⊙ s_t` quantized per head and value group to 8-bit codes
//!   from 0, `τ` and `Σ_t p_t m_t` the corrections.
//!
//! **Operands from packed words** ([`PackedDepth`]): lane `4g + t` holds an operand register of
//! four depth indices `4t .. 4t + 4` of a 16-deep half. It takes words `4j + t` of each packed
//! row, and a product's register is one field of one word under a mask: `word & (0x03030303 ≪
//! 2f)` for 2-bit codes, `word & (0x0F0F0F0F ≪ 4f)` for 4-bit, whose bytes are the word's codes
//! `4b + f` (`2b + f`), each `2^(bits · f)` times its code. Every lane takes the same field in a
//! product; each field sums in its own accumulators (independent chains of products), joined at
//! the end by Horner's rule, times `2^bits` before each next field, so that every term ends up
//! weighing 64 (2-bit) or 16 (4-bit), undone in the corrections exactly. The other
//! operand (query or weight codes) is built in the same order, at the depth positions
//! [`position`] names: a dot product does not depend on the order of its terms. (The paper
//! layout's kernel lifts each lane's own field with a multiply and a mask, two instructions a
//! register where this takes one.)
//!
//! **Who holds what.** The products' accumulators leave lane `4g + t` rows `g` and `g + 8` of
//! columns `2t` and `2t + 1`: the lane scores slots `16i + g`, `16i + g + 8` and keeps the
//! outputs of channels `16c + g`, `16c + g + 8`, both for heads `2t` and `2t + 1`. So the lane's
//! running max, mass and outputs are those two heads', and the log-sum-exp merge of a block is
//! lane-local. The second operands are per head `g` (the lane's column), so the lane quantizes
//! head `g`'s query over its channels and head `g`'s weights over its slots; the numerators reach
//! it through the warp's shared tile (8 heads × Π, padded: [`TILE_PAD`]), and the heads' scales
//! through shuffles.
//!
//! **Two blocks a product** where a KV head has at most 4 query heads
//! ([`ChannelMmaGeometry::paired`]; Llama's and SmolLM2's GQA): with one block a product, half the
//! columns are padding, and so are half the lanes' query and weight quantizations and half their
//! scores' softmax. Instead a warp takes its blocks two at a time, side by side in the depth: a
//! 32-deep product holds 16 channels (scores) or 16 slots (outputs) of each, and columns `4s ..
//! 4s + 4` are block `s`'s heads, their second operand zero in the other block's half, so each
//! column sums over its own block only. Quad `g` quantizes head `g mod 4` of block `g / 4`;
//! lanes `t < 2` hold the pair's first block's scores and running outputs, lanes `t ≥ 2` the
//! second's, so the even and odd blocks of a warp's run keep separate running softmaxes, joined
//! over the lanes `t`, `t ± 2` at the end. The products and their operand loads are the same per
//! block; the work outside them halves.
//!
//! **Staged steps** where a warp's stage fits in shared memory ([`StagePlan`]; 2-bit values at Π
//! up to 128, not 4-bit keys and values at Π = 128): each warp copies its next blocks into shared
//! memory with asynchronous copies while it attends the current ones ([`super::mma_stage`],
//! [`super::mma_runs`]) and waits on barriers of its own, so that its loads are in flight during
//! its products and softmax instead of between them. Its tile lies in the key rows of the region
//! it reads, which it has scored by the time it writes the numerators there
//! ([`ChannelMmaGeometry::tile_fits_keys`]): the tiles of 8 warps would take the shared memory
//! that `hack3`'s stage needs.

use burn_kvcompress::kernels::{first_visible_slot, masked_score, warp_mma::WARP, SplitOut};
use cubecl::prelude::*;

use crate::kernels::warp_codes::join_tops;

use super::{
    float_slots::FloatSlotRows,
    float_warp::float_warp,
    mma_block::RunningSoftmax,
    mma_operands::{position, PackedDepth, PRODUCT_COLUMNS, PRODUCT_ROWS},
    mma_runs::{direct_run, halves_run, steps_run, RunLanes},
    mma_stage::{pair_stage, stage_buffer_words, warp_key_start, PairStage},
};

/// Floats after each column's Π numerators in a warp's tile, so that few lanes meet in one shared
/// memory bank (32 banks of 4 bytes). Lane `4g + t` writes column `2t + e` at slot `16i + 8r + g`:
/// with a stride of Π + 4 (≡ 4 banks mod 32, Π a multiple of 32) column `2t` starts `8t` banks
/// on, and the warp's 32 writes take 32 banks, where a stride of Π put 4 lanes in each of 8 banks.
/// It reads column `g` at its slots in 16-byte vectors, 8 lanes at a time: for 2-bit values
/// (slots `16t + 4m`) two of them share banks, four with a stride of Π; for 4-bit values (`8t +
/// 4m`) none. On an H200 the padded tile and its vector reads took `hack2`'s step from 73–79 to
/// 68–70 µs at 32K batch 8 (`results/hack-decode-channel-h200.md`, session 62).
pub const TILE_PAD: u32 = 4;

/// Shapes fixed at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChannelMmaGeometry {
    /// Query heads per KV head (at most 8, the products' columns).
    pub group: u32,
    /// Channels per head (a multiple of 32).
    pub head_dim: u32,
    /// Π: slots per block (a multiple of 32).
    pub partition: u32,
    /// Key code width (2 or 4).
    pub key_bits: u32,
    /// Value code width (2 or 4).
    pub value_bits: u32,
    /// Channels per value group (a multiple of 16).
    pub value_group: u32,
    /// Warps per cube, each on its own run of blocks.
    pub warps: u32,
    /// Where a warp's lanes read a step's blocks: the caches, or its stage in shared memory.
    pub stage: StagePlan,
}

/// Where a warp of the tensor-core channel kernel reads its product steps' blocks (module
/// `mma_stage`): the largest stage that fits an SM's shared memory at 8 warps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StagePlan {
    /// Two regions a warp, each a whole step's keys and values: the next step's copies land
    /// while the warp attends the current one.
    Steps,
    /// A key region and a value region a warp, each refilled with the next step's keys (or
    /// values) once the lanes have read it: the keys land while the warp attends the values, the
    /// values while it scores the next keys. Half the shared memory of [`Self::Steps`] (two
    /// 128-slot 2-bit blocks take 18 KiB a step) and a shorter lead: at 64-slot 2-bit blocks
    /// 7–9 % slower than `Steps` on an H200 (`results/hack-decode-channel-h200.md`, session 55).
    Halves,
    /// No stage: the lanes load a step's codes and metadata from the caches as the products need
    /// them.
    Direct,
}

impl StagePlan {
    /// Stage regions a warp holds, each one step's keys and values.
    pub fn regions(&self) -> u32 {
        match self {
            Self::Steps => 2,
            Self::Halves => 1,
            Self::Direct => 0,
        }
    }
}

impl ChannelMmaGeometry {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.warps * WARP
    }

    /// Whether a product step takes two blocks side by side: where the query heads fill at most
    /// half the products' columns, columns `4s .. 4s + 4` serve block `s` of a pair and each
    /// 32-deep product takes 16 channels (or slots) of each block. Every lane then quantizes and
    /// scores for a real head instead of half of them for padding, which halves a block's
    /// per-lane work outside the products.
    pub fn paired(&self) -> bool {
        self.group <= PRODUCT_COLUMNS / 2
    }

    /// Blocks a warp takes per step of its run (2 where [`Self::paired`]).
    pub fn blocks_per_step(&self) -> u32 {
        if self.paired() {
            2
        } else {
            1
        }
    }

    /// Words of a slot's key row.
    pub fn key_row_words(&self) -> u32 {
        self.head_dim * self.key_bits / 32
    }

    /// Words of a channel's value row in a block.
    pub fn value_row_words(&self) -> u32 {
        self.partition * self.value_bits / 32
    }

    /// How key rows enter the score products' depth.
    pub fn key_depth(&self) -> PackedDepth {
        PackedDepth { bits: self.key_bits, row_words: self.key_row_words(), paired: self.paired() }
    }

    /// How value rows enter the output products' depth.
    pub fn value_depth(&self) -> PackedDepth {
        PackedDepth { bits: self.value_bits, row_words: self.value_row_words(), paired: self.paired() }
    }

    /// Value groups per head.
    pub fn value_groups(&self) -> u32 {
        self.head_dim / self.value_group
    }

    /// Key row words of one step's blocks.
    pub fn step_key_words(&self) -> u32 {
        self.blocks_per_step() * self.partition * self.key_row_words()
    }

    /// Key (min, scale) words of one step's blocks.
    pub fn step_key_params(&self) -> u32 {
        self.blocks_per_step() * self.head_dim
    }

    /// Value row words of one step's blocks.
    pub fn step_value_words(&self) -> u32 {
        self.blocks_per_step() * self.head_dim * self.value_row_words()
    }

    /// Value (min, scale) words of one step's blocks.
    pub fn step_value_params(&self) -> u32 {
        self.blocks_per_step() * self.partition * self.value_groups()
    }

    /// Floats between two columns' numerators in a warp's tile: Π and [`TILE_PAD`].
    pub fn tile_stride(&self) -> u32 {
        self.partition + TILE_PAD
    }

    /// Floats of a warp's tile: its float slots' outputs, `[group × head_dim]`, then each block
    /// step's numerators, 8 columns of [`Self::tile_stride`].
    pub fn tile_floats(&self) -> u32 {
        (self.group * self.head_dim).max(PRODUCT_COLUMNS * self.tile_stride())
    }

    /// Whether a step's key rows can hold a warp's tile: staged, the tile lives in the key rows of
    /// the region the warp reads (the float slots' outputs in its first region, before any copy
    /// lands there; a step's numerators once its lanes have scored the region's keys), so that
    /// the tiles take no shared memory of their own.
    pub fn tile_fits_keys(&self) -> bool {
        self.step_key_words() >= self.tile_floats()
    }

    /// Words of a warp's part of the stage's key rows buffer (`PairStage::key_words`): its
    /// regions' key rows (holding its tile), or unstaged its tile alone.
    pub fn warp_key_words(&self) -> u32 {
        match self.stage {
            StagePlan::Direct => self.tile_floats(),
            plan => plan.regions() * self.step_key_words(),
        }
    }

    /// Bytes of shared memory: the stage's buffers as the kernel allocates them (staged, each
    /// warp's regions, which hold its tile; unstaged, each warp's tile and one 16-byte copy's
    /// words of each other buffer, unused) and, staged, each warp's two copy barriers (8 bytes
    /// each).
    pub fn shared_bytes(&self) -> u32 {
        let buffers: u32 = stage_buffer_words(*self).iter().sum();
        let barriers = match self.stage {
            StagePlan::Direct => 0,
            _ => 16 * self.warps,
        };
        4 * buffers + barriers
    }
}

/// One cube of channel-layout decode attention on tensor cores; see the module documentation.
///
/// - `q`: the step's queries, `[streams · group · head_dim]`;
/// - `k_words`: `[streams · blocks · Π, key_row_words]`; `k_params`: `[streams · blocks ·
///   head_dim]`; `v_words`: `[streams · blocks · head_dim, value_row_words]`; `v_params`:
///   `[streams · blocks · Π · groups]`; `sinks_k`, `sinks_v`: `[streams · sink_rows, head_dim]`;
///   `tail_k`, `tail_v`: `[streams · tail_rows, head_dim]` (buffers whose first `sinks`, `tail`
///   rows of a stream are filled), in `F`; `key_start`: `[batch]`;
/// - cube `(x, stream)`: warp `w` is split `x · warps + w` of `CUBE_COUNT_X · warps`; it takes an
///   even share of the stream's float slots ([`float_warp`]), then closed blocks `split ·
///   warp_blocks ..` (at most `warp_blocks`), and writes its split.
#[allow(clippy::too_many_arguments)]
// `AllowReciprocal` and `UnsignedZero` with the others make CUDA's float divisions approximate
// (`__fdividef`, a reciprocal and a multiply) instead of IEEE divisions with a range check and a
// slow path on every step's quantization chain; the scales they divide by are floored to normal
// floats (`block_query`, `block_weights`).
#[cube(
    launch_unchecked,
    address_type = "u64",
    fast_math = FastMath::ReducedPrecision
        | FastMath::NotNaN
        | FastMath::NotInf
        | FastMath::AllowReciprocal
        | FastMath::UnsignedZero
)]
pub fn channel_mma_decode_kernel<F: Float>(
    q: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    sinks_k: &Array<F>,
    sinks_v: &Array<F>,
    tail_k: &Array<F>,
    tail_v: &Array<F>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    len: u32,
    sinks: u32,
    blocks: u32,
    tail: u32,
    sink_rows: u32,
    tail_rows: u32,
    kv_heads: u32,
    warp_blocks: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: ChannelMmaGeometry,
    #[define(F)] _float: StorageType,
) {
    let (group, pi) = comptime!((geo.group, geo.partition));
    let warp = UNIT_POS / WARP;
    let stream = CUBE_POS_Y;
    let split = CUBE_POS_X * geo.warps + warp;
    let target = SplitOut { first_head: stream * group, split, splits: CUBE_COUNT_X * geo.warps };
    let visible_from = first_visible_slot(len - 1, key_start[(stream / kv_heads) as usize], window);
    // The warps' stage regions, whose key rows hold each warp's tile (unstaged, the tiles alone).
    let mut stage = pair_stage(geo);
    let float_count = sinks + tail;
    let float_chunk = float_count.div_ceil(target.splits);
    let float_first = u32::min(split * float_chunk, float_count);
    let slots = FloatSlotRows { stream, sinks, sink_rows, tail_rows, first_tail: sinks + blocks * pi };
    let floats = FloatShare { first: float_first, end: u32::min(float_first + float_chunk, float_count) };
    let first = u32::min(split * warp_blocks, blocks);
    let end = u32::min(first + warp_blocks, blocks);
    let run = BlockRun { first, end, blocks, sinks, visible_from, scale };
    let mut state = float_start(q, sinks_k, sinks_v, tail_k, tail_v, &slots, &floats, &run, &mut stage.key_words, geo);
    block_warp(
        q, k_words, k_params, v_words, v_params, &mut stage, &run, &mut state, &target, out, out_max, out_sum, geo,
    );
}

/// A warp's share `first .. end` of its stream's float slots.
#[derive(CubeType)]
pub(super) struct FloatShare {
    pub first: u32,
    pub end: u32,
}

/// The running softmax the calling warp begins its closed blocks with: its share of the stream's
/// float slots ([`float_warp`], the query's visibility and score scale those of its `run`), moved
/// into the products' lane layout (lane `4g + t`: heads `2t + e`, channels `16c + g + 8r`,
/// [`RunningSoftmax`]) through the warp's tile; empty where the share is. Paired, lanes `t ≥ 2`
/// (the odd blocks' side, heads `2t + e ≥ 4`) start empty, so the float slots count once when the
/// sides join.
#[allow(clippy::too_many_arguments)]
#[cube]
fn float_start<F: Float>(
    q: &Array<f32>,
    sinks_k: &Array<F>,
    sinks_v: &Array<F>,
    tail_k: &Array<F>,
    tail_v: &Array<F>,
    slots: &FloatSlotRows,
    share: &FloatShare,
    run: &BlockRun,
    tile: &mut SharedMemory<u32>,
    #[comptime] geo: ChannelMmaGeometry,
) -> RunningSoftmax {
    let (group, d) = comptime!((geo.group, geo.head_dim));
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    let mut state = RunningSoftmax {
        acc: Array::<f32>::new(comptime!((d / 4) as usize)),
        top: Array::<f32>::new(2usize),
        mass: Array::<f32>::new(2usize),
    };
    #[unroll]
    for i in 0..comptime!(d / 4) {
        state.acc[i as usize] = 0.0;
    }
    #[unroll]
    for e in 0..2u32 {
        state.top[e as usize] = masked_score();
        state.mass[e as usize] = 0.0;
    }
    // Uniform over the warp (its share depends on its split only).
    if share.first < share.end {
        let first_query = CUBE_POS_Y * comptime!(group * d);
        let partial = float_warp::<F>(
            q,
            first_query,
            sinks_k,
            sinks_v,
            tail_k,
            tail_v,
            slots,
            share.first,
            share.end,
            run.visible_from,
            run.scale,
            group,
            d,
        );
        let tile_base = warp_key_start(geo);
        let per_lane = comptime!(d / WARP);
        #[unroll]
        for h in 0..group {
            #[unroll]
            for k in 0..per_lane {
                tile[(tile_base + h * d + lane + WARP * k) as usize] =
                    u32::reinterpret(partial.acc[comptime!((h * per_lane + k) as usize)]);
            }
        }
        sync_plane();
        #[unroll]
        for e in 0..2u32 {
            let head = 2 * t + e;
            if head < group {
                #[unroll]
                for h in 0..group {
                    state.top[e as usize] = select(head == h, partial.top[h as usize], state.top[e as usize]);
                    state.mass[e as usize] = select(head == h, partial.mass[h as usize], state.mass[e as usize]);
                }
                #[unroll]
                for c in 0..comptime!(d / PRODUCT_ROWS) {
                    #[unroll]
                    for r in 0..2u32 {
                        let channel = PRODUCT_ROWS * c + g + 8 * r;
                        state.acc[comptime!((4 * c + 2 * r + e) as usize)] =
                            f32::reinterpret(tile[(tile_base + head * d + channel) as usize]);
                    }
                }
            }
        }
        // Every lane has read the tile before the blocks' numerators overwrite it.
        sync_plane();
    }
    state
}

/// A warp's run of closed blocks `first .. end` of its stream's `blocks`, after `sinks` float
/// slots, the step's query seeing positions from `visible_from`, its scores scaled by `scale`.
#[derive(CubeType)]
pub(super) struct BlockRun {
    pub first: u32,
    pub end: u32,
    pub blocks: u32,
    pub sinks: u32,
    pub visible_from: u32,
    pub scale: f32,
}

/// Attention of the calling warp over its run of closed blocks, joined to `state` (its float
/// slots', [`float_start`]); writes its split of `target`. Paired
/// ([`ChannelMmaGeometry::paired`]), lanes `t < 2` hold the run's even blocks' running outputs and
/// lanes `t ≥ 2` its odd blocks', for the same heads, joined at the end.
#[allow(clippy::too_many_arguments)]
#[cube]
fn block_warp(
    q: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    stage: &mut PairStage,
    run: &BlockRun,
    state: &mut RunningSoftmax,
    target: &SplitOut,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let (group, d, per) = comptime!((geo.group, geo.head_dim, geo.blocks_per_step()));
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    // The pair's block of the lane's operand column and its head; the block of its result columns.
    let side = g / comptime!(PRODUCT_COLUMNS / per);
    let column_head = g % comptime!(PRODUCT_COLUMNS / per);
    let result_side = t / comptime!(4 / per);
    let stream = CUBE_POS_Y;

    // The query of the lane's column head at the lane's channels (zero for the padding columns).
    let keys = comptime!(geo.key_depth());
    let mut own_q = Array::<f32>::new(comptime!(keys.lane_codes() as usize));
    let head = u32::min(column_head, comptime!(group - 1));
    #[unroll]
    for i in 0..comptime!(keys.lane_codes()) {
        let x = q[((stream * group + head) * d + position(t, i, keys)) as usize];
        own_q[i as usize] = select(column_head < group, x, 0.0);
    }
    let lanes = RunLanes { side, result_side, g, t };
    if comptime!(geo.stage == StagePlan::Steps) {
        steps_run(&own_q, k_words, k_params, v_words, v_params, stage, run, state, &lanes, geo);
    } else if comptime!(geo.stage == StagePlan::Halves) {
        halves_run(&own_q, k_words, k_params, v_words, v_params, stage, run, state, &lanes, geo);
    } else {
        direct_run(&own_q, k_words, k_params, v_words, v_params, stage, run, state, &lanes, geo);
    }
    if comptime!(geo.paired()) {
        join_sides(state, geo);
    }

    #[unroll]
    for c in 0..comptime!(d / PRODUCT_ROWS) {
        #[unroll]
        for r in 0..2u32 {
            #[unroll]
            for e in 0..2u32 {
                // Paired, heads `2t + e` of lanes `t ≥ 2` are at least 4, past the group.
                let head = 2 * t + e;
                if head < group {
                    let channel = PRODUCT_ROWS * c + g + 8 * r;
                    target.write_output(out, head, channel, state.acc[comptime!((4 * c + 2 * r + e) as usize)], d);
                }
            }
        }
    }
    if g == 0 {
        #[unroll]
        for e in 0..2u32 {
            let head = 2 * t + e;
            if head < group {
                target.write_stats(out_max, out_sum, head, state.top[e as usize], state.mass[e as usize]);
            }
        }
    }
}

/// Paired, joins the running softmaxes of lanes `t` and `t ± 2` (the even and odd blocks' of the
/// same heads) under their larger max, in both lanes.
#[cube]
fn join_sides(state: &mut RunningSoftmax, #[comptime] geo: ChannelMmaGeometry) {
    #[unroll]
    for e in 0..2u32 {
        let other_mass = plane_shuffle_xor(state.mass[e as usize], 2);
        let join = join_tops(state.top[e as usize], plane_shuffle_xor(state.top[e as usize], 2));
        state.mass[e as usize] = state.mass[e as usize] * join.first + other_mass * join.second;
        state.top[e as usize] = join.max;
        #[unroll]
        for c in 0..comptime!(geo.head_dim / PRODUCT_ROWS) {
            #[unroll]
            for r in 0..2u32 {
                let at = comptime!((4 * c + 2 * r + e) as usize);
                state.acc[at] = state.acc[at] * join.first + plane_shuffle_xor(state.acc[at], 2) * join.second;
            }
        }
    }
}
