//! Launching the rotation kernel on a CubeCL backend.

use burn::tensor::{DType, Tensor, TensorPrimitive};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::kernels::{dense_output_of, float_arg, kernel_float, CubeF32 as Backend};

use super::kernel::{rotate_kernel, RotateGeometry, TILE_ROWS};

/// The most units of a cube.
const MAX_UNITS: u32 = 256;

/// The kernel's shape for heads of `head_dim` channels: the most parts of at least
/// [`super::kernel::LOADS`] channels each that fit [`MAX_UNITS`] (powers of two, so each part is
/// a multiple of `LOADS`); `None` where `head_dim` is not a power of two from 16 to 256.
fn geometry(head_dim: usize) -> Option<RotateGeometry> {
    let d = head_dim as u32;
    if !d.is_power_of_two() || !(16..=MAX_UNITS).contains(&d) {
        return None;
    }
    let parts = (MAX_UNITS / d).min(d / super::kernel::LOADS).max(1);
    Some(RotateGeometry { head_dim: d, parts })
}

/// Whether [`rotate_launch`] takes `x` (its float type, `dtype` and the head dimension).
pub fn rotate_applies(x_dtype: DType, dtype: DType, head_dim: usize) -> bool {
    kernel_float(x_dtype) && kernel_float(dtype) && geometry(head_dim).is_some()
}

/// `x: [batch, heads, n, head_dim]` rotated per KV head by `r: [kv_heads, head_dim, head_dim]`
/// (f32; query heads `h · group ..` share KV head `h`'s), in `dtype`: the f32 sums rounded once.
/// Callers check [`rotate_applies`].
///
/// # Panics
/// If the shapes disagree.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub fn rotate_launch<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<Backend<R, BT>, 4>,
    r: &Tensor<Backend<R, BT>, 3>,
    dtype: DType,
) -> Tensor<Backend<R, BT>, 4> {
    let shape = x.dims();
    let [batch, heads, n, d] = shape;
    let kv_heads = r.dims()[0];
    assert_eq!(r.dims(), [kv_heads, d, d], "rotate: matrices {:?} for heads of {d}", r.dims());
    assert!(heads.is_multiple_of(kv_heads), "rotate: {heads} heads over {kv_heads} KV heads");
    assert_eq!(r.dtype(), DType::F32, "rotate: matrices in {:?}", r.dtype());
    let geo = geometry(d).expect("rotate_applies checked the head dimension");
    let x_dtype = x.dtype();
    let x = float_arg(&x);
    let streams = batch * kv_heads;
    let rows = heads / kv_heads * n;
    let out = dense_output_of(&x, streams * rows * d, dtype);
    if streams * rows > 0 {
        // SAFETY: cube (tile, stream) reads and writes rows `tile · TILE_ROWS + t < rows` (the
        // loops stop at `tile_rows`) of its stream, elements `< streams · rows · head_dim` of `x`
        // and `out` (both that size: `x` is `[batch, heads, n, d]` with `heads · n = kv_heads ·
        // rows`); matrix `stream % kv_heads < kv_heads` of `r`, entries `< head_dim²` in it;
        // shared indices below `TILE_ROWS · head_dim · parts` (units `parts · head_dim`).
        unsafe {
            rotate_kernel::launch_unchecked(
                &x.client.clone(),
                CubeCount::Static(rows.div_ceil(TILE_ROWS as usize) as u32, streams as u32, 1),
                CubeDim::new_1d(geo.units()),
                x.into_array_arg(),
                float_arg(r).into_array_arg(),
                out.clone().into_array_arg(),
                rows as u32,
                kv_heads as u32,
                geo,
                [x_dtype.into(), dtype.into()],
            )
        };
    }
    Tensor::<Backend<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape(shape)
}
