//! Launching the encode kernel on a CubeCL backend.

use burn::tensor::{Int, Tensor};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::kernels::{dense_output, float_arg, CubeF32};

use super::kernel::encode_kernel;
use crate::{kernels::PqShape, PqConfig};

/// Encodes `x: [batch, kv_heads, n, head_dim]` with `books: [groups, subspaces, centroids,
/// sub_dim]` into packed words `[batch, kv_heads, n, words_per_vector]` with `encode_kernel`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn encode_launch<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 4>,
    books: &Tensor<CubeF32<R, BT>, 4>,
    config: &PqConfig,
) -> Tensor<CubeF32<R, BT>, 4, Int> {
    let [batch, kv_heads, n, d] = x.dims();
    let groups = books.dims()[0];
    let shape = PqShape::of(config, d);
    let rows = batch * kv_heads * n;
    let x = float_arg(&x);
    let words = dense_output::<R, i32>(&x, rows * config.words_per_vector());
    let units = rows * config.words_per_vector();
    // SAFETY: the kernel serves units `< rows · words_per_vector` (its one guard) and reads the row's
    // `head_dim` floats and its codebook group (`< groups`), writing its own word of `words`, sized
    // above. Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        encode_kernel::launch_unchecked(
            &x.client.clone(),
            CubeCount::Static(units.div_ceil(128) as u32, 1, 1),
            CubeDim::new_1d(128),
            x.into_array_arg(),
            float_arg(books).into_array_arg(),
            words.clone().into_array_arg(),
            rows as u32,
            n as u32,
            kv_heads as u32,
            u32::from(groups > 1),
            shape,
        )
    };
    Tensor::<CubeF32<R, BT>, 1, Int>::from_primitive(words).reshape([batch, kv_heads, n, config.words_per_vector()])
}
