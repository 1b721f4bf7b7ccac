//! Up to [`MAX_WEIGHTS`] weights in one launch of a row-product kernel (a layer's query, key and
//! value projections, or its gate and up projections): the grid's cubes along `x` parted among
//! the weights in their order, and each weight's columns placed one after the other in the
//! partial sums. The two row-product kernels (CUDA cores, tensor cores) share this; they differ
//! in the unit of a size (column vectors, columns) and in the columns a cube takes.

use burn_cubecl::{tensor::CubeTensor, CubeRuntime};
use cubecl::prelude::*;

use super::row_product::MAX_WEIGHTS;

/// The launch's weight slots: each weight's size and cubes (zero for the slots past the weights
/// given, which repeat the first weight's buffer and are never read).
#[derive(Debug, Clone, Copy)]
pub(super) struct WeightSlots {
    /// Each weight's size, in the kernel's unit.
    pub sizes: [u32; MAX_WEIGHTS],
    /// Cubes taking each weight: its size over `per_cube`, rounded up.
    pub cubes: [u32; MAX_WEIGHTS],
}

impl WeightSlots {
    /// The slots of weights of `sizes` (at most [`MAX_WEIGHTS`]), `per_cube` of a size to a cube.
    pub fn new(sizes: impl IntoIterator<Item = u32>, per_cube: u32) -> Self {
        let mut all = [0; MAX_WEIGHTS];
        all.iter_mut().zip(sizes).for_each(|(slot, size)| *slot = size);
        Self { sizes: all, cubes: all.map(|size| size.div_ceil(per_cube)) }
    }

    /// Cubes along the grid's `x`, all weights'.
    pub fn column_cubes(&self) -> u32 {
        self.cubes.iter().sum()
    }

    /// The first cube of weights 1 and 2.
    pub fn first_cubes(&self) -> [u32; 2] {
        [self.cubes[0], self.cubes[0] + self.cubes[1]]
    }

    /// The kernel argument of slot `slot` of `args` (the weights, or the outputs per weight): its
    /// own, or for a slot past them the first (no cube reads or writes it).
    pub fn arg<R: CubeRuntime>(args: &[CubeTensor<R>], slot: usize) -> ArrayArg<R> {
        args.get(slot).unwrap_or(&args[0]).clone().into_array_arg()
    }
}

/// The weight a cube takes ([`cube_weight`]).
#[derive(CubeType, Clone, Copy)]
pub(super) struct CubeWeight {
    /// The weight's slot: 0, 1 or 2.
    pub slot: u32,
    /// The cube's place among the weight's cubes.
    pub cube: u32,
    /// The weight's size.
    pub size: u32,
    /// The sizes of the weights before it: where its columns start in the partial sums.
    pub offset: u32,
}

/// The weight cube `CUBE_POS_X` takes, of weights of sizes `size_0`, `size_1`, `size_2` taken by
/// the cubes from 0, `first_cube_1` and `first_cube_2` (uniform over the cube: each kernel
/// branches on the slot, each arm its own loop over that weight).
#[cube]
pub(super) fn cube_weight(size_0: u32, size_1: u32, size_2: u32, first_cube_1: u32, first_cube_2: u32) -> CubeWeight {
    let in_0 = CUBE_POS_X < first_cube_1;
    let in_1 = !in_0 && CUBE_POS_X < first_cube_2;
    let first_cube = select(in_0, 0u32, select(in_1, first_cube_1, first_cube_2));
    CubeWeight {
        slot: select(in_0, 0u32, select(in_1, 1u32, 2u32)),
        cube: CUBE_POS_X - first_cube,
        size: select(in_0, size_0, select(in_1, size_1, size_2)),
        offset: select(in_0, 0u32, select(in_1, size_0, size_0 + size_1)),
    }
}

#[cfg(test)]
mod tests {
    use super::WeightSlots;

    #[test]
    fn slots_past_the_weights_have_no_cubes() {
        let slots = WeightSlots::new([4096, 1024], 128);
        assert_eq!((slots.sizes, slots.cubes), ([4096, 1024, 0], [32, 8, 0]));
        assert_eq!((slots.column_cubes(), slots.first_cubes()), (40, [32, 40]));
        let slots = WeightSlots::new([40, 8, 296], 32);
        assert_eq!((slots.cubes, slots.first_cubes()), ([2, 1, 10], [2, 3]));
    }
}
