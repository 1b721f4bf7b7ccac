//! Load balancing of the portable decode kernel across uneven heads (the paper's §5.3, adapted).
//! The tensor-core kernels (`wmma`, TMA) balance another way: each of their cubes takes every KV
//! head (or an equal group of them) of a range of slots, so all their cubes do the same work
//! (`RowSplits`).
//!
//! The work of one slot of KV head `g` is proportional to `c_g = k_qk + k_vo + 1` (the score's
//! dot product, the softmax, the `P·V` row). Each head's slots are cut into splits of
//! `base · (2·head_dim + 1) / c_g` slots (clamped to `[base, max]`), so a split of a reduced head
//! is longer and every cube does about the work of `base` full-rank slots. The paper maps tasks to
//! SMs greedily, longest first (LPT). Here the tasks are listed by their first slot, longest first
//! among tasks of the same first slot: a GPU dispatches cubes in index order as SMs free up, so
//! the cubes that run at once read the same rows of the cache, where every head's reduced
//! coordinates of a slot lie side by side (one head's share of a row is 64 to 192 bytes at rank
//! 0.5 and head dim 128). Listed by cost instead, the cubes running at once read one or two
//! heads' shares of every row along the whole sequence: the same bytes, in more DRAM pages.

use crate::layout::HeadLayout;

/// One cube's work: `count` slots of KV head `kv_head` from slot `first`, written as split
/// `split` of that head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeTask {
    /// KV head.
    pub kv_head: u32,
    /// Index of this split among the head's splits.
    pub split: u32,
    /// First slot.
    pub first: u32,
    /// Slots (0 for a padding task that only marks an unused split).
    pub count: u32,
}

/// The tasks of one decode step over `len` slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeSchedule {
    /// Tasks by first slot, most expensive first among equal first slots; every (KV head, split <
    /// `splits`) appears once.
    pub tasks: Vec<DecodeTask>,
    /// Splits per head in the partial buffers: the most any head needs.
    pub splits: usize,
}

/// Slots per split of a head: `base · (2 · head_dim + 1) / (k_qk + k_vo + 1)` in `[base, max]`.
pub fn split_length(layout: &HeadLayout, kv_head: usize, base: usize, max: usize) -> usize {
    let full = 2 * layout.head_dim + 1;
    let cost = layout.qk_ranks[kv_head] + layout.vo_ranks[kv_head] + 1;
    (base * full / cost).clamp(base, max)
}

impl DecodeSchedule {
    /// Plans the tasks over `len` slots with splits of `base` to `max` slots.
    pub fn plan(layout: &HeadLayout, len: usize, base: usize, max: usize) -> Self {
        let per_head: Vec<usize> = (0..layout.kv_heads()).map(|h| split_length(layout, h, base, max)).collect();
        let splits = per_head.iter().map(|&s| len.div_ceil(s)).max().unwrap_or(0);
        let mut tasks = Vec::with_capacity(splits * layout.kv_heads());
        let mut costs = Vec::with_capacity(splits * layout.kv_heads());
        for (h, &length) in per_head.iter().enumerate() {
            let cost = layout.qk_ranks[h] + layout.vo_ranks[h] + 1;
            for split in 0..splits {
                let first = (split * length).min(len);
                let count = length.min(len - first);
                tasks.push(DecodeTask {
                    kv_head: h as u32,
                    split: split as u32,
                    first: first as u32,
                    count: count as u32,
                });
                costs.push(count * cost);
            }
        }
        let mut order: Vec<usize> = (0..tasks.len()).collect();
        order.sort_by_key(|&i| (tasks[i].first, std::cmp::Reverse(costs[i])));
        Self { tasks: order.into_iter().map(|i| tasks[i]).collect(), splits }
    }

    /// The tasks as `[kv_head, split, first, count]` words, the kernel's task table.
    pub fn table(&self) -> Vec<i32> {
        self.tasks.iter().flat_map(|t| [t.kv_head, t.split, t.first, t.count].map(|x| x as i32)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduced_heads_get_longer_splits_and_every_slot_is_covered_once() {
        let layout = HeadLayout { head_dim: 64, qk_ranks: vec![64, 16, 1], vo_ranks: vec![64, 32, 1] };
        assert_eq!(
            (split_length(&layout, 0, 64, 256), split_length(&layout, 1, 64, 256), split_length(&layout, 2, 64, 256)),
            (64, 168, 256)
        );
        for len in [1, 63, 64, 65, 1000] {
            let plan = DecodeSchedule::plan(&layout, len, 64, 256);
            assert_eq!(plan.splits, len.div_ceil(64));
            assert_eq!(plan.tasks.len(), 3 * plan.splits);
            for head in 0..3u32 {
                let mut covered = vec![0; len];
                let mut splits: Vec<u32> = plan.tasks.iter().filter(|t| t.kv_head == head).map(|t| t.split).collect();
                splits.sort_unstable();
                assert_eq!(splits, (0..plan.splits as u32).collect::<Vec<_>>());
                for t in plan.tasks.iter().filter(|t| t.kv_head == head) {
                    (t.first..t.first + t.count).for_each(|s| covered[s as usize] += 1);
                }
                assert!(covered.iter().all(|&c| c == 1), "len {len} head {head}");
            }
            let costs: Vec<usize> = plan
                .tasks
                .iter()
                .map(|t| {
                    t.count as usize * (layout.qk_ranks[t.kv_head as usize] + layout.vo_ranks[t.kv_head as usize] + 1)
                })
                .collect();
            let firsts: Vec<u32> = plan.tasks.iter().map(|t| t.first).collect();
            assert!(firsts.windows(2).all(|w| w[0] <= w[1]), "by first slot");
            let ties = plan.tasks.windows(2).zip(costs.windows(2));
            assert!(ties.filter(|(t, _)| t[0].first == t[1].first).all(|(_, c)| c[0] >= c[1]), "longest first");
        }
        // At 1000 slots the full head needs 16 splits of ≤ 64·129 work; the reduced heads' splits
        // carry about as much (168·49 = 8232; 256·3 = 768, capped by `max`).
        let plan = DecodeSchedule::plan(&layout, 1000, 64, 256);
        assert_eq!(plan.table().len(), 4 * plan.tasks.len());
    }
}
