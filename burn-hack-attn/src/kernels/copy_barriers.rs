//! The barriers on which the tensor-core decode kernels' warps wait for the blocks they stage in
//! shared memory: per group of warps ([`CopyGroups`]), one per stage region. A group's warps wait
//! for each other's copies (a barrier's phase completes once all of the group's units have arrived
//! and every copy they committed to it has landed); warps of different groups run apart.
//!
//! CubeCL has no arrays of barriers: each is its own shared variable, and a unit reaches its
//! group's by halving the range of group indices (compile-time unrolled), `log2(groups)`
//! branches an operation. A chain of one comparison per group took 4 × 8 branch regions a
//! product step of the channel kernel at 8 warps; halving took its `hack2` step at 32K batch 8
//! on an H200 from 69–73 to 63–68 µs (`results/hack-decode-channel-h200.md`, session 63).

use cubecl::prelude::{barrier::Barrier, *};

/// How a cube's units split into groups that wait for their copies together: `groups` groups of
/// `units` consecutive units each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopyGroups {
    /// Groups of a cube.
    pub groups: u32,
    /// Units of a group.
    pub units: u32,
}

/// The copy barriers of a cube: `first[k]` and `second[k]` for group `k`'s first and second
/// stage regions.
#[derive(CubeType)]
pub struct CopyBarriers {
    first: Sequence<Shared<Barrier>>,
    second: Sequence<Shared<Barrier>>,
}

/// The cube's [`CopyBarriers`]; initializing them synchronizes the cube.
#[cube]
pub fn copy_barriers(#[comptime] split: CopyGroups) -> CopyBarriers {
    let mut first = Sequence::new();
    let mut second = Sequence::new();
    #[unroll]
    for k in 0..split.groups {
        first.push(Barrier::shared(split.units, UNIT_POS == k * split.units));
        second.push(Barrier::shared(split.units, UNIT_POS == k * split.units));
    }
    CopyBarriers { first, second }
}

#[cube]
impl CopyBarriers {
    /// Makes the calling unit's copies issued since its last commit arrive on its group's barrier
    /// of the first (`second` false) or the second region once they have landed.
    pub fn commit(&self, second: bool, #[comptime] split: CopyGroups) {
        self.on_group(second, split, true);
    }

    /// Arrives on the calling unit's group's barrier of the first (`second` false) or the second
    /// region and waits for its phase to complete: every copy its group committed there has
    /// landed.
    pub fn wait(&self, second: bool, #[comptime] split: CopyGroups) {
        self.on_group(second, split, false);
    }

    /// [`group_barrier`] on the calling unit's group's barrier of the first or second region.
    fn on_group(&self, second: bool, #[comptime] split: CopyGroups, #[comptime] commit: bool) {
        let group = UNIT_POS / split.units;
        if second {
            group_barrier(&self.second, group, 0u32, split.groups, commit);
        } else {
            group_barrier(&self.first, group, 0u32, split.groups, commit);
        }
    }
}

/// Commits the calling unit's copies to (`commit`), or arrives and waits on, barrier `group` of
/// `barriers`, found among groups `lo .. hi` by halving the range: `log2(groups)` branches a
/// call instead of one per group.
#[cube]
fn group_barrier(
    barriers: &Sequence<Shared<Barrier>>,
    group: u32,
    #[comptime] lo: u32,
    #[comptime] hi: u32,
    #[comptime] commit: bool,
) {
    if comptime!(hi - lo == 1) {
        if comptime!(commit) {
            barriers.index(lo as usize).commit_copy_async();
        } else {
            barriers.index(lo as usize).arrive_and_wait();
        }
    } else {
        let mid = comptime!((lo + hi) / 2);
        if group < mid {
            group_barrier(barriers, group, lo, mid, commit);
        } else {
            group_barrier(barriers, group, mid, hi, commit);
        }
    }
}
