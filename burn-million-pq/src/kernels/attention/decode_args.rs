//! What both decode variants read, prepared once per step ([`DecodeArgs`]).

use burn::tensor::{Int, Tensor};
use burn_cubecl::{tensor::CubeTensor, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, int_arg, key_start_arg, CubeF32},
};

use crate::kernels::PqView;

/// A decode step's kernel arguments, with their elements where the kernels index them.
#[derive(Debug)]
pub struct DecodeArgs<R: CubeRuntime> {
    /// The last slot's queries, `[batch, heads, 1, head_dim]`.
    pub q: CubeTensor<R>,
    /// Packed key and value codes, `[batch, kv_heads, coded, words]` each; one-element
    /// placeholders when no slot is coded.
    pub codes: (CubeTensor<R>, CubeTensor<R>),
    /// The recent window's keys and values, `[batch, kv_heads, recent, head_dim]` each;
    /// one-element placeholders when the window is empty.
    pub recent: (CubeTensor<R>, CubeTensor<R>),
    /// Each sequence's first real slot, `[batch]`.
    pub key_start: CubeTensor<R>,
}

impl<R: CubeRuntime> DecodeArgs<R> {
    /// The arguments of `q: [batch, heads, 1, head_dim]` over `view` under `options`. A
    /// placeholder stands in only for a range that is empty, so no kernel reads it.
    pub fn new<BT: BoolElement>(
        q: &Tensor<CubeF32<R, BT>, 4>,
        view: &PqView<'_, CubeF32<R, BT>>,
        options: &AttendOptions,
    ) -> Self {
        let device = q.device();
        let q = float_arg(q);
        let placeholder_int = || int_arg(&Tensor::<CubeF32<R, BT>, 1, Int>::zeros([1], &device));
        let codes =
            view.codes.map_or_else(|| (placeholder_int(), placeholder_int()), |(k, v)| (int_arg(k), int_arg(v)));
        let recent = view.recent.map_or_else(
            || (dense_output::<R, f32>(&q, 1), dense_output::<R, f32>(&q, 1)),
            |(k, v)| (float_arg(k), float_arg(v)),
        );
        let key_start = key_start_arg::<R, BT>(&options.key_start, &q);
        Self { q, codes, recent, key_start }
    }
}
