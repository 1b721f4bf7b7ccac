//! Which ZACK attention runs on a CubeCL backend, from the shapes and the device's properties:
//! the reference, the prefill kernel (several query slots) or, for one query slot, the TMA, the
//! `wmma` or the portable decode kernel. The only place that picks a variant.

use burn::tensor::Tensor;
use burn_cubecl::{
    cubecl::{features::Plane, prelude::*},
    BoolElement, CubeRuntime,
};
use burn_kvcompress::{
    cache::{check_attend_shapes, AttendOptions},
    error::CacheError,
    kernels::{float_arg, warp_mma::WARP, CubeF32},
};

use super::{
    decode_step::DecodeInputs,
    mma_kernel::MmaGeometry,
    mma_launch::{mma_geometry, mma_launch, StagedTiles},
    portable_kernel::DecodeGeometry,
    portable_launch::{decode_geometry, load_vector, portable_launch, score_plane, UNITS},
    prefill_launch::{prefill_geometry, prefill_launch},
    reference::zack_attention_reference,
    row_splits::RowSplits,
    tma_kernel::TmaGeometry,
    tma_launch::{tma_geometry, tma_launch},
};
use crate::layout::HeadLayout;

/// Shared memory a cube may use on every backend: 32 KiB on Mesa's software Vulkan (CUDA allows
/// 48 KiB of static shared memory).
const SHARED_BYTES: u32 = 32 * 1024;

/// The fewest 32-slot rounds per cube for which a step runs the TMA kernel. Each of its launches
/// costs the host more (CubeCL encodes the two TMA maps and uploads their shapes with every
/// launch), which shows where the device's step is short: on an H100 the TMA kernel's steps took
/// as long as the `wmma` kernel's at 8 rounds per cube (batch 8 at 4K, batch 1 at 32K) and
/// longer at 4 and 1 (batch 1 at 16K and 4K; `results/decode-zack-tma-h100.md`).
const TMA_MIN_ROUNDS: usize = 8;

/// The decode kernel a step runs, with its compile-time shapes.
enum DecodeKernel {
    /// Rows landed by TMA, warp products read from the landed rows (`tma_kernel`), with the
    /// step's splits.
    Tma(TmaGeometry, RowSplits),
    /// Rows staged by asynchronous copies into per-head tiles, `wmma` products (`mma_kernel`),
    /// with the step's splits.
    Mma(MmaGeometry, StagedTiles, RowSplits),
    /// Units on column blocks of rows, scalar products (`portable_kernel`).
    Portable(DecodeGeometry),
}

/// Whether the kernels handle `group` query heads per KV head of `head_dim` channels (the
/// portable decode kernel's bounds, which the query rotation of every kernel shares): a head's
/// channels fit one cube, the softmax's max runs on 16 units per head, the scratch buffer holds
/// the kernel's partial sums, and the cube's shared memory fits `SHARED_BYTES`.
pub fn supports(group: usize, head_dim: usize) -> bool {
    let geo = decode_geometry(group, head_dim);
    head_dim <= UNITS as usize
        && group <= UNITS as usize / 16
        && geo.scratch_fits()
        && geo.shared_bytes() <= SHARED_BYTES
}

/// ZACK attention of full post-RoPE `q: [batch, heads, q_len, head_dim]` over reduced `keys:
/// [batch, slots, Σ k_qk]` and `values: [batch, slots, Σ k_vo]` (both f32 or both f16) with the
/// packed query/key `basis: [head_dim, Σ k_qk]`; returns `[batch, heads, q_len, head_dim]`. The
/// decode kernels for one query slot and the prefill kernel for several, in the shapes they
/// [`supports`] with no head of rank 0; other shapes run [`zack_attention_reference`].
pub fn attention_select<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    basis: Tensor<CubeF32<R, BT>, 2>,
    keys: Tensor<CubeF32<R, BT>, 3>,
    values: Tensor<CubeF32<R, BT>, 3>,
    layout: &HeadLayout,
    options: &AttendOptions,
) -> Result<Tensor<CubeF32<R, BT>, 4>, CacheError> {
    let [batch, slots, _] = keys.dims();
    let cache_dims = [batch, layout.kv_heads(), slots, layout.head_dim];
    let (_, heads, q_len, head_dim) = check_attend_shapes(q.dims(), cache_dims, options)?;
    let group = heads / layout.kv_heads();
    if layout.has_empty_head() || !supports(group, head_dim) {
        return zack_attention_reference(q, basis, keys, values, layout, options);
    }
    if q_len == 1 {
        let q = float_arg(&q);
        let inputs = DecodeInputs { basis, keys, values, layout, options, dims: [batch, heads, head_dim] };
        return Ok(match decode_kernel(&q.client, &inputs) {
            DecodeKernel::Tma(geo, rows) => tma_launch(q, &inputs, geo, rows),
            DecodeKernel::Mma(geo, tiles, rows) => mma_launch(q, &inputs, (geo, &tiles), rows),
            DecodeKernel::Portable(geo) => portable_launch(q, &inputs, geo),
        });
    }
    match prefill_geometry(group, head_dim) {
        Some(geo) => Ok(prefill_launch(q, basis, keys, values, layout, geo, options)),
        None => zack_attention_reference(q, basis, keys, values, layout, options),
    }
}

/// The decode kernel for `inputs` on `client`'s device. On CUDA: the TMA kernel where the device
/// lands rows by TMA and its cubes take at least `TMA_MIN_ROUNDS` rounds, else the tensor-core
/// kernel where it has warp matrix products and asynchronous copies, else (and elsewhere) the
/// portable kernel. The tensor-core kernels need 32-lane planes (one warp per KV head).
fn decode_kernel<R: CubeRuntime, BT: BoolElement>(
    client: &ComputeClient<R>,
    inputs: &DecodeInputs<'_, R, BT>,
) -> DecodeKernel {
    let ([batch, heads, d], layout, len) = (inputs.dims, inputs.layout, inputs.slots());
    let (group, dtype) = (heads / layout.kv_heads(), inputs.keys.dtype());
    let properties = client.properties();
    let geo = decode_geometry(group, d);
    let widest = client.io_optimized_vector_sizes(dtype.size()).next().unwrap_or(1);
    let vector = load_vector(layout, &geo, widest);
    let plane_size = match properties.features.plane.contains(Plane::Ops) {
        true => properties.hardware.plane_size_min,
        false => 0,
    };
    let geo = DecodeGeometry { vector, plane: score_plane(&geo, plane_size), ..geo };
    let warps = plane_size == 32;
    let tma = tma_geometry(layout, (group, d), dtype, properties)
        .filter(|_| warps)
        .map(|tma| (tma, RowSplits::for_device((tma.heads, tma.shared_bytes()), layout, batch, len, properties)))
        .filter(|(_, rows)| rows.chunk >= TMA_MIN_ROUNDS * WARP as usize);
    match tma {
        Some((tma, rows)) => DecodeKernel::Tma(tma, rows),
        None => match mma_geometry(layout, (group, d), vector, dtype, properties).filter(|_| warps) {
            Some((mma, tiles)) => {
                let rows = RowSplits::for_device((mma.heads, mma.shared_bytes()), layout, batch, len, properties);
                DecodeKernel::Mma(mma, tiles, rows)
            }
            None => DecodeKernel::Portable(geo),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_memory_of_the_common_geometries_fits_a_cube() {
        assert!(!supports(32, 128) && !supports(4, 512) && !supports(32, 16));
        // Llama-3 and Mistral (4 × 128), SmolLM2 (3 × 64), Llama-3-70B (8 × 128), Gemma (1 × 256).
        for (group, head_dim) in [(1, 256), (3, 64), (4, 128), (8, 128), (16, 64), (16, 128), (16, 16)] {
            let geo = decode_geometry(group, head_dim);
            assert!(supports(group, head_dim), "group {group}, head_dim {head_dim}: {} bytes", geo.shared_bytes());
            assert!(geo.scratch_fits() && geo.group * geo.block <= 32 && geo.block.is_power_of_two());
        }
    }
}
