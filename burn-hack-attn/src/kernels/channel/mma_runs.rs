//! A warp's run of closed blocks in the tensor-core channel kernel, one loop per
//! [`StagePlan`]: product steps ([`attend_keys`], then [`attend_values`]) over blocks read from
//! the caches, or from the warp's stage (`mma_stage`) filled with asynchronous copies ahead of
//! the step that reads them.

use burn_kvcompress::kernels::warp_mma::WARP;
use cubecl::prelude::*;

use crate::kernels::copy_barriers::{copy_barriers, CopyGroups};

use super::{
    mma_block::{attend_keys, attend_values, block_pair, exchange_numerators, BlockPair, RunningSoftmax},
    mma_kernel::{BlockRun, ChannelMmaGeometry},
    mma_stage::{copy_keys, copy_values, pair_at, warp_key_start, PairStage, KEY_BARRIER, VALUE_BARRIER},
};

/// Where lane `4g + t` sits in a product step: the block of its operand column (`side`) and of
/// its result columns (`result_side`) in a pair.
#[derive(CubeType)]
pub(super) struct RunLanes {
    pub side: u32,
    pub result_side: u32,
    pub g: u32,
    pub t: u32,
}

/// The pair of blocks of product step `step` of the calling warp's `run`.
#[cube]
fn step_pair(run: &BlockRun, lanes: &RunLanes, step: u32, #[comptime] geo: ChannelMmaGeometry) -> BlockPair {
    let base = CUBE_POS_Y * run.blocks;
    let first = run.first + comptime!(geo.blocks_per_step()) * step;
    block_pair(base, first, run.end, run.sinks, lanes.side, lanes.result_side, geo)
}

/// Product steps of the calling warp's `run`.
#[cube]
fn run_steps(run: &BlockRun, #[comptime] geo: ChannelMmaGeometry) -> u32 {
    (run.end - run.first).div_ceil(comptime!(geo.blocks_per_step()))
}

/// [`StagePlan::Direct`](super::StagePlan::Direct): every step's blocks from the caches.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn direct_run(
    own_q: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    stage: &mut PairStage,
    run: &BlockRun,
    state: &mut RunningSoftmax,
    lanes: &RunLanes,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let (side, g, t) = (lanes.side, lanes.g, lanes.t);
    let tile_base = warp_key_start(geo);
    for step in 0..run_steps(run, geo) {
        let pair = step_pair(run, lanes, step, geo);
        let at = pair_at(pair.first, pair.second, pair.own, geo);
        let scored = attend_keys::<Array<u32>>(own_q, k_words, k_params, &at, &pair, state, run, side, g, t, geo);
        let numerators = exchange_numerators(&mut stage.key_words, tile_base, scored, g, t, geo);
        attend_values::<Array<u32>>(v_words, v_params, &at, &numerators, state, side, g, t, geo);
    }
}

/// [`StagePlan::Steps`](super::StagePlan::Steps): step `i` reads the warp's region `i mod 2`
/// while the copies of step `i + 1` land in the other, each region on its own barrier.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn steps_run(
    own_q: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    stage: &mut PairStage,
    run: &BlockRun,
    state: &mut RunningSoftmax,
    lanes: &RunLanes,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let (side, g, t, per) = (lanes.side, lanes.g, lanes.t, comptime!(geo.blocks_per_step()));
    // The warp's own pair of barriers (initializing them synchronizes the cube).
    let split = comptime!(CopyGroups { groups: geo.warps, units: WARP });
    let copies = copy_barriers(split);
    let first_region = 2 * (UNIT_POS / WARP);
    let first_keys = warp_key_start(geo);
    let steps = run_steps(run, geo);
    if steps > 0 {
        let pair = step_pair(run, lanes, 0u32, geo);
        copy_keys(k_words, k_params, stage, first_region, pair.first, pair.second, geo);
        copy_values(v_words, v_params, stage, first_region, pair.first, pair.second, geo);
        copies.commit(false, split);
    }
    for step in 0..steps {
        let second = step % 2 == 1;
        // Every lane has read the region the next copies overwrite (the last step's).
        sync_plane();
        if step + 1 < steps {
            let next = step_pair(run, lanes, step + 1, geo);
            let next_region = first_region + (step + 1) % 2;
            copy_keys(k_words, k_params, stage, next_region, next.first, next.second, geo);
            copy_values(v_words, v_params, stage, next_region, next.first, next.second, geo);
            copies.commit(!second, split);
        }
        copies.wait(second, split);
        let pair = step_pair(run, lanes, step, geo);
        let staged = per * (first_region + step % 2);
        let at = pair_at(staged, staged + per - 1, staged + side, geo);
        let scored = attend_keys::<SharedMemory<u32>>(
            own_q,
            &stage.key_words,
            &stage.key_params,
            &at,
            &pair,
            state,
            run,
            side,
            g,
            t,
            geo,
        );
        let tile_base = first_keys + (step % 2) * comptime!(geo.step_key_words());
        let numerators = exchange_numerators(&mut stage.key_words, tile_base, scored, g, t, geo);
        attend_values::<SharedMemory<u32>>(
            &stage.value_words,
            &stage.value_params,
            &at,
            &numerators,
            state,
            side,
            g,
            t,
            geo,
        );
    }
}

/// [`StagePlan::Halves`](super::StagePlan::Halves): the warp's key region is refilled with the
/// next step's keys once every lane has scored the current ones, and its value region with the
/// next values once every lane has added the current outputs, each on its own barrier.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn halves_run(
    own_q: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    stage: &mut PairStage,
    run: &BlockRun,
    state: &mut RunningSoftmax,
    lanes: &RunLanes,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let (side, g, t, per) = (lanes.side, lanes.g, lanes.t, comptime!(geo.blocks_per_step()));
    // The warp's own pair of barriers (initializing them synchronizes the cube).
    let split = comptime!(CopyGroups { groups: geo.warps, units: WARP });
    let copies = copy_barriers(split);
    let region = UNIT_POS / WARP;
    let tile_base = warp_key_start(geo);
    let staged = per * region;
    let at = pair_at(staged, staged + per - 1, staged + side, geo);
    let steps = run_steps(run, geo);
    if steps > 0 {
        let pair = step_pair(run, lanes, 0u32, geo);
        copy_keys(k_words, k_params, stage, region, pair.first, pair.second, geo);
        copies.commit(KEY_BARRIER, split);
        copy_values(v_words, v_params, stage, region, pair.first, pair.second, geo);
        copies.commit(VALUE_BARRIER, split);
    }
    for step in 0..steps {
        let pair = step_pair(run, lanes, step, geo);
        let next = step_pair(run, lanes, step + 1, geo);
        let more = step + 1 < steps;
        copies.wait(KEY_BARRIER, split);
        let scored = attend_keys::<SharedMemory<u32>>(
            own_q,
            &stage.key_words,
            &stage.key_params,
            &at,
            &pair,
            state,
            run,
            side,
            g,
            t,
            geo,
        );
        // Returns once every lane has read the key region (the step's keys, then its tile).
        let numerators = exchange_numerators(&mut stage.key_words, tile_base, scored, g, t, geo);
        if more {
            copy_keys(k_words, k_params, stage, region, next.first, next.second, geo);
            copies.commit(KEY_BARRIER, split);
        }
        copies.wait(VALUE_BARRIER, split);
        attend_values::<SharedMemory<u32>>(
            &stage.value_words,
            &stage.value_params,
            &at,
            &numerators,
            state,
            side,
            g,
            t,
            geo,
        );
        // Every lane has read the value region before the next copies overwrite it.
        sync_plane();
        if more {
            copy_values(v_words, v_params, stage, region, next.first, next.second, geo);
            copies.commit(VALUE_BARRIER, split);
        }
    }
}
