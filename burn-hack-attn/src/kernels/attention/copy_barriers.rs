//! The barriers on which the tensor-core decode kernel's warps wait for their staged blocks: per
//! group of warps ([`MmaGeometry::copy_groups`]), one per stage region. A group's warps wait for
//! each other's copies (a barrier's phase completes once all of the group's units have arrived
//! and every copy they committed to it has landed); warps of different groups run apart.
//!
//! CubeCL has no arrays of barriers: each is its own shared variable, and a unit reaches its
//! group's through a chain of comparisons with the group indices (compile-time unrolled).

use cubecl::prelude::{barrier::Barrier, *};

use super::mma_geometry::MmaGeometry;

/// The copy barriers of a cube: `first[k]` and `second[k]` for warp group `k`'s first and second
/// stage regions (see `mma_stage`).
#[derive(CubeType)]
pub struct CopyBarriers {
    first: Sequence<Shared<Barrier>>,
    second: Sequence<Shared<Barrier>>,
}

/// The cube's [`CopyBarriers`]; initializing them synchronizes the cube.
#[cube]
pub fn copy_barriers(#[comptime] geo: MmaGeometry) -> CopyBarriers {
    let group_units = comptime!(geo.copy_group_units());
    let mut first = Sequence::new();
    let mut second = Sequence::new();
    #[unroll]
    for k in 0..geo.copy_groups() {
        first.push(Barrier::shared(group_units, UNIT_POS == k * group_units));
        second.push(Barrier::shared(group_units, UNIT_POS == k * group_units));
    }
    CopyBarriers { first, second }
}

#[cube]
impl CopyBarriers {
    /// Makes the calling unit's copies issued since its last commit arrive on its group's barrier
    /// of the first (`second` false) or the second region once they have landed.
    pub fn commit(&self, second: bool, #[comptime] geo: MmaGeometry) {
        let group = UNIT_POS / comptime!(geo.copy_group_units());
        #[unroll]
        for k in 0..geo.copy_groups() {
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
    pub fn wait(&self, second: bool, #[comptime] geo: MmaGeometry) {
        let group = UNIT_POS / comptime!(geo.copy_group_units());
        #[unroll]
        for k in 0..geo.copy_groups() {
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
