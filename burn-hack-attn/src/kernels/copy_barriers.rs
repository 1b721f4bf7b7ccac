//! The barriers on which the tensor-core decode kernels' warps wait for the blocks they stage in
//! shared memory: per group of warps ([`CopyGroups`]), one per stage region. A group's warps wait
//! for each other's copies (a barrier's phase completes once all of the group's units have arrived
//! and every copy they committed to it has landed); warps of different groups run apart.
//!
//! CubeCL has no arrays of barriers: each is its own shared variable, and a unit reaches its
//! group's through a chain of comparisons with the group indices (compile-time unrolled).

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
        let group = UNIT_POS / split.units;
        #[unroll]
        for k in 0..split.groups {
            if group == k {
                if second {
                    self.second.index(k as usize).commit_copy_async();
                } else {
                    self.first.index(k as usize).commit_copy_async();
                }
            }
        }
    }

    /// Arrives on the calling unit's group's barrier of the first (`second` false) or the second
    /// region and waits for its phase to complete: every copy its group committed there has
    /// landed.
    pub fn wait(&self, second: bool, #[comptime] split: CopyGroups) {
        let group = UNIT_POS / split.units;
        #[unroll]
        for k in 0..split.groups {
            if group == k {
                if second {
                    self.second.index(k as usize).arrive_and_wait();
                } else {
                    self.first.index(k as usize).arrive_and_wait();
                }
            }
        }
    }
}
