//! What one cube of a ZACK decode kernel works on: its task of the step's
//! [`DecodeSchedule`](crate::kernels::DecodeSchedule) (the portable kernel), its split's chunk of
//! slots (the `wmma` kernel) or its split's interleaved rounds (the TMA kernel), with what it
//! reads of the step's metadata upload.

use burn_kvcompress::kernels::{warp_mma::WARP, SplitOut};
use cubecl::prelude::*;

/// One KV head's columns in the key and value rows.
#[derive(CubeType)]
pub struct HeadColumns {
    pub key_offset: u32,
    pub key_rank: u32,
    pub value_offset: u32,
    pub value_rank: u32,
}

/// A task's slots: `count` from slot `first` of sequences of `len` slots, whose first row is
/// `row0` of the caches; the sequence's first real slot is `start`, its window `window` (0: none).
#[derive(CubeType)]
pub struct TaskSlots {
    pub row0: u32,
    pub first: u32,
    pub count: u32,
    pub len: u32,
    pub start: u32,
    pub window: u32,
}

/// A cube's task: its KV head's columns, its slots, and where its partial results go.
#[derive(CubeType)]
pub struct DecodeTaskView {
    pub columns: HeadColumns,
    pub slots: TaskSlots,
    pub target: SplitOut,
}

/// The task of cube `(CUBE_POS_X, CUBE_POS_Y)` = (task, sequence). `meta` holds per KV head
/// `[key_offset, key_rank, value_offset, value_rank]` (`4 · kv_heads` words), then `key_start`
/// (one word per sequence, `CUBE_COUNT_Y` of them), then per task `[kv_head, split, first,
/// count]`.
#[cube]
pub fn read_task(
    meta: &Array<u32>,
    kv_heads: u32,
    len: u32,
    splits: u32,
    window: u32,
    #[comptime] group: u32,
) -> DecodeTaskView {
    let task = CUBE_POS_X;
    let batch_row = CUBE_POS_Y;
    let tasks = 4 * kv_heads + CUBE_COUNT_Y;
    let kv_head = meta[(tasks + task * 4) as usize];
    let split = meta[(tasks + task * 4 + 1) as usize];
    let first = meta[(tasks + task * 4 + 2) as usize];
    let count = meta[(tasks + task * 4 + 3) as usize];
    let start = sequence_start(meta, kv_heads, batch_row);
    DecodeTaskView {
        columns: HeadColumns {
            key_offset: meta[(kv_head * 4) as usize],
            key_rank: meta[(kv_head * 4 + 1) as usize],
            value_offset: meta[(kv_head * 4 + 2) as usize],
            value_rank: meta[(kv_head * 4 + 3) as usize],
        },
        slots: TaskSlots { row0: batch_row * len + first, first, count, len, start, window },
        target: SplitOut { first_head: (batch_row * kv_heads + kv_head) * group, split, splits },
    }
}

/// The first real slot of sequence `sequence`: `meta`'s word `4 · kv_heads + sequence`, after the
/// head layout (`step_metadata`).
#[cube]
fn sequence_start(meta: &Array<u32>, kv_heads: u32, sequence: u32) -> u32 {
    meta[(4 * kv_heads + sequence) as usize]
}

/// The slots of cube `(split, group, sequence)` of the `wmma` kernel, which splits every sequence
/// into `chunk` slots per cube: slots `split · chunk ..` (fewer in the last split) of sequence
/// `CUBE_POS_Z` of `len` slots (`sequence_start` its first real slot).
#[cube]
pub fn split_slots(meta: &Array<u32>, kv_heads: u32, len: u32, chunk: u32, window: u32) -> TaskSlots {
    let batch_row = CUBE_POS_Z;
    let first = CUBE_POS_X * chunk;
    TaskSlots {
        row0: batch_row * len + first,
        first,
        count: u32::min(chunk, len - first),
        len,
        start: sequence_start(meta, kv_heads, batch_row),
        window,
    }
}

/// The rounds of cube `(split, group, sequence)` of the TMA kernel, which interleaves every
/// sequence's rounds over its splits: round `i` of split `s` of `S` (`CUBE_POS_X` of
/// `CUBE_COUNT_X`) covers slots `32 (s + i S) ..` of sequence `CUBE_POS_Z`, so that at any time a
/// sequence's cubes read neighbouring rows (one sweep over the cache rather than `S` sweeps a
/// chunk apart: steps 2 % shorter at 32K slots and 10–12 % at 40K on an H100, batch 8,
/// `results/decode-zack-interleave-h100.md`). A split's rounds differ from another's by at most
/// one.
#[derive(CubeType)]
pub struct InterleavedRounds {
    /// The whole sequence: `row0` its first row of the caches, `first` 0, `count` its slots.
    pub slots: TaskSlots,
    /// Rounds of this split: `⌈(⌈len / 32⌉ − s) / S⌉`, at least 1 where `S ≤ ⌈len / 32⌉`.
    pub rounds: u32,
}

/// The interleaved rounds of the calling cube for sequences of `len` slots (`sequence_start`
/// their first real slots).
#[cube]
pub fn interleaved_rounds(meta: &Array<u32>, kv_heads: u32, len: u32, window: u32) -> InterleavedRounds {
    let batch_row = CUBE_POS_Z;
    let total = len.div_ceil(WARP);
    InterleavedRounds {
        slots: TaskSlots {
            row0: batch_row * len,
            first: 0,
            count: len,
            len,
            start: sequence_start(meta, kv_heads, batch_row),
            window,
        },
        rounds: split_rounds(total, CUBE_POS_X, CUBE_COUNT_X),
    }
}

#[cube]
impl InterleavedRounds {
    /// The position in the sequence (in rounds of 32 slots) of this split's round `round`.
    pub fn position(&self, round: u32) -> u32 {
        split_position(CUBE_POS_X, CUBE_COUNT_X, round)
    }
}

/// Rounds of split `split` of `splits` (`split < splits`) when a sequence's `total` rounds are
/// dealt out in turn: `⌈(total − split) / splits⌉`.
#[cube]
pub fn split_rounds(total: u32, split: u32, splits: u32) -> u32 {
    (total + splits - 1 - split) / splits
}

/// The position in the sequence of round `round` of split `split` of `splits`.
#[cube]
pub fn split_position(split: u32, splits: u32, round: u32) -> u32 {
    split + round * splits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_splits_take_every_round_once_and_differ_by_at_most_one() {
        for (total, splits) in [(1, 1), (7, 7), (64, 16), (1024, 16), (1001, 16), (33, 5), (5, 4)] {
            let mut taken = vec![0; total as usize];
            let counts: Vec<u32> = (0..splits).map(|s| split_rounds(total, s, splits)).collect();
            for (s, &rounds) in counts.iter().enumerate() {
                for round in 0..rounds {
                    taken[split_position(s as u32, splits, round) as usize] += 1;
                }
            }
            assert!(taken.iter().all(|&t| t == 1), "{total} rounds, {splits} splits: {taken:?}");
            let (least, most) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(*least >= 1 && most - least <= 1, "{total} rounds, {splits} splits: {counts:?}");
        }
    }
}
