//! Which rotation runs on a CubeCL backend: one launch of the model's rotary kernel without RoPE
//! (`burn_kvcompress::kernels::rotate_heads_kernel`) in f32 arithmetic, where Burn's product of
//! the expanded matrices takes several (and CUDA's runs in TF32); Burn's product for head
//! dimensions the kernel does not take.

use burn::tensor::{DType, Tensor};
use burn_cubecl::{BoolElement, CubeRuntime};
use burn_kvcompress::kernels::{rotary_applies, rotate_heads_kernel, CubeF32 as Backend};

use crate::rotation::rotate_heads;

/// `x: [batch, heads, n, head_dim]` rotated per KV head by `r: [kv_heads, head_dim, head_dim]`
/// (f32), in `dtype`, by the kernel where it applies (see the module documentation).
pub fn rotate_select<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<Backend<R, BT>, 4>,
    r: &Tensor<Backend<R, BT>, 3>,
    dtype: DType,
) -> Tensor<Backend<R, BT>, 4> {
    match rotary_applies(x.dtype(), dtype, x.dims()[3], true) {
        true => rotate_heads_kernel(x, r, dtype),
        false => rotate_heads(x.cast(DType::F32), r).cast(dtype),
    }
}
