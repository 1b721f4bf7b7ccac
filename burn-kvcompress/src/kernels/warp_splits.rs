//! How a decode step's slots are shared among warps that each attend on their own split (the
//! tensor-core decode kernels of MILLION and HACK): one wave of cubes fills the GPU.

use cubecl::ir::DeviceProperties;

use super::SM_UNITS;

/// 32-bit registers of an SM: 64 Ki on A100 and H100 (a cube of `units` lanes taking `r` each
/// fits `SM_REGISTERS / (units · r)` times).
pub const SM_REGISTERS: u32 = 65536;

/// How a decode step's slots are split: each warp of a cube takes `warp_chunk` slots (a multiple
/// of the kernel's granule: its rounds, or its blocks), `cubes` cubes per stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarpSplits {
    /// Slots per warp (the last warps of a stream may have fewer, or none).
    pub warp_chunk: usize,
    /// Cubes per stream.
    pub cubes: usize,
}

impl WarpSplits {
    /// The splits of `len` slots of `streams` streams among cubes of `warps` warps such that the
    /// step's cubes fill a GPU of `sms` multiprocessors, `per_sm` cubes on each, once; a warp's
    /// slots are a multiple of `granule` (at least one granule).
    pub fn plan(len: usize, streams: usize, warps: usize, sms: usize, per_sm: usize, granule: usize) -> Self {
        let cubes = (sms * per_sm / streams.max(1)).max(1);
        let warp_chunk = len.div_ceil(cubes * warps).next_multiple_of(granule).max(granule);
        Self { warp_chunk, cubes: len.div_ceil(warp_chunk * warps).max(1) }
    }

    /// The splits of a step of `streams` streams of `len` slots for cubes of `warps` warps using
    /// `shared_bytes` of shared memory each, and (where known) `lane_registers` registers per
    /// lane, on a device with `properties`: the cubes an SM holds are limited by its shared memory,
    /// its units ([`SM_UNITS`]) and its registers ([`SM_REGISTERS`]).
    pub fn for_device(
        warps: u32,
        shared_bytes: u32,
        lane_registers: Option<u32>,
        granule: usize,
        (streams, len): (usize, usize),
        properties: &DeviceProperties,
    ) -> Self {
        let hardware = &properties.hardware;
        let units = warps * hardware.plane_size_max.max(1);
        let per_sm = cubes_per_sm(units, shared_bytes, lane_registers, hardware.max_shared_memory_size);
        let sms = hardware.num_streaming_multiprocessors.unwrap_or(1) as usize;
        Self::plan(len, streams, warps as usize, sms, per_sm, granule)
    }
}

/// Cubes of `units` lanes, `shared_bytes` of shared memory and (where known) `lane_registers`
/// registers per lane that an SM with `sm_shared_bytes` of shared memory holds at once (at least
/// one).
fn cubes_per_sm(units: u32, shared_bytes: u32, lane_registers: Option<u32>, sm_shared_bytes: usize) -> usize {
    let by_registers = lane_registers.map_or(u32::MAX, |r| SM_REGISTERS / (units * r).max(1));
    (sm_shared_bytes / shared_bytes.max(1) as usize).clamp(1, (SM_UNITS / units).min(by_registers).max(1) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubes_per_sm_are_limited_by_registers_where_given() {
        // 16 warps in 112 KiB of shared memory: two cubes fit an H100's shared memory and units,
        // one its registers at 128 a lane, two at 64.
        let per_sm = |registers| cubes_per_sm(512, 112 * 1024, registers, 227 * 1024);
        assert_eq!([per_sm(None), per_sm(Some(128)), per_sm(Some(64))], [2, 1, 2]);
        // 4 warps at 128: four cubes, as their units allow; never fewer than one.
        assert_eq!(
            [cubes_per_sm(128, 1024, Some(128), 227 * 1024), cubes_per_sm(1024, 1024, Some(255), 227 * 1024)],
            [4, 1]
        );
    }

    #[test]
    fn one_wave_of_warp_splits_rounded_to_granules() {
        // 132 SMs, one cube of 5 warps each: 64 streams take 2 cubes, 8 streams 16.
        assert_eq!(WarpSplits::plan(32768, 64, 5, 132, 1, 32), WarpSplits { warp_chunk: 3296, cubes: 2 });
        assert_eq!(WarpSplits::plan(32768, 8, 5, 132, 1, 32), WarpSplits { warp_chunk: 416, cubes: 16 });
        // Blocks of 64: 8 streams, 2 cubes of 8 warps per SM: 33 cubes, 124 slots rounded to 128.
        assert_eq!(WarpSplits::plan(32768, 8, 8, 132, 2, 64), WarpSplits { warp_chunk: 128, cubes: 32 });
        // Short sequences: one granule per warp, never an empty cube.
        assert_eq!(WarpSplits::plan(5, 1, 4, 132, 1, 32), WarpSplits { warp_chunk: 32, cubes: 1 });
        for granule in [32, 64, 128] {
            for (len, streams) in [(1, 1), (31, 2), (33, 7), (4097, 3), (65536, 64), (1000, 500)] {
                let plan = WarpSplits::plan(len, streams, 3, 132, 2, granule);
                assert!(plan.warp_chunk.is_multiple_of(granule));
                assert!(plan.cubes * 3 * plan.warp_chunk >= len && (plan.cubes - 1) * 3 * plan.warp_chunk < len);
            }
        }
    }
}
