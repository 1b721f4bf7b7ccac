//! What one cube of a ZACK decode kernel works on: its task of the step's
//! [`DecodeSchedule`](crate::kernels::DecodeSchedule), read from the step's metadata upload (the
//! scalar kernel and the tensor-core kernel read it the same way).

use burn_kvcompress::kernels::SplitOut;
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
    let start = meta[(4 * kv_heads + batch_row) as usize];
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

/// The slots of cube `(split, group, sequence)` of the tensor-core kernels, which split every
/// sequence into `chunk` slots per cube: slots `split · chunk ..` (fewer in the last split) of
/// sequence `CUBE_POS_Z` of `len` slots, whose first real slot is `meta`'s word `4 · kv_heads +
/// sequence` (after the head layout).
#[cube]
pub fn split_slots(meta: &Array<u32>, kv_heads: u32, len: u32, chunk: u32, window: u32) -> TaskSlots {
    let batch_row = CUBE_POS_Z;
    let first = CUBE_POS_X * chunk;
    TaskSlots {
        row0: batch_row * len + first,
        first,
        count: u32::min(chunk, len - first),
        len,
        start: meta[(4 * kv_heads + batch_row) as usize],
        window,
    }
}
