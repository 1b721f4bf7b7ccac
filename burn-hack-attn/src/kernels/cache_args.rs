//! A HACK cache's tensors as kernel arguments, shared by the decode and prefill launches.

use burn::tensor::{Int, Tensor};
use burn_cubecl::{kernel::into_contiguous, tensor::CubeTensor, BoolElement, CubeRuntime};
use burn_kvcompress::kernels::{
    dense_output, float_arg as float, int_arg as int, pitched_rows_arg, CubeF32 as Backend,
};

use crate::kernels::CacheView;

/// The buffers a HACK attention kernel reads: key codes and metadata (one row of `parts` words
/// per slot, every `key_meta_pitch` elements), the closed value blocks' codes and metadata, and the
/// float tail. Absent values or tail are one-element placeholders the kernels never read.
pub struct CacheArgs<R: CubeRuntime> {
    /// Packed key codes, `[batch · kv_heads · len, words per key]`.
    pub k_words: CubeTensor<R>,
    /// Key (min, scale) words and code sums, `[batch · kv_heads · len, key_meta_pitch]`.
    pub k_meta: [CubeTensor<R>; 2],
    /// Elements between two slots' key metadata rows.
    pub key_meta_pitch: usize,
    /// Closed value blocks per stream.
    pub blocks: usize,
    /// Packed value codes, `[batch · kv_heads · blocks · head_dim, words per block]`.
    pub v_words: CubeTensor<R>,
    /// Value (min, scale) words and code sums, `[batch · kv_heads · blocks · head_dim]`.
    pub v_meta: [CubeTensor<R>; 2],
    /// The float tail, `[batch · kv_heads · (len − blocks · Π), head_dim]`.
    pub tail: CubeTensor<R>,
}

impl<R: CubeRuntime> CacheArgs<R> {
    /// `cache`'s buffers, with `parts` key channel groups per slot; `like` gives the device.
    pub fn new<BT: BoolElement>(cache: &CacheView<'_, Backend<R, BT>>, like: &CubeTensor<R>, parts: usize) -> Self {
        let device = &like.device;
        let empty = |n: usize| dense_output::<R, f32>(like, n);
        let dummy_int = || into_contiguous(Tensor::<Backend<R, BT>, 1, Int>::zeros([1], device).into_primitive());
        let keys = cache.keys;
        // Key metadata rows (`parts` values per slot) may be padded on CUDA: read them in place,
        // with their pitch, unless the two differ.
        let key_meta = [keys.params.clone().into_primitive(), keys.sums.clone().into_primitive()].map(pitched_rows_arg);
        let first_pitch = key_meta[0].1;
        let (k_meta, key_meta_pitch) = if key_meta.iter().all(|(_, pitch)| *pitch == first_pitch) {
            (key_meta.map(|(t, _)| t), first_pitch)
        } else {
            (key_meta.map(|(t, _)| into_contiguous(t)), parts)
        };
        let (blocks, v_words, v_meta) = match cache.values {
            Some(v) => (cache.blocks(), int(&v.words), [int(&v.params), int(&v.sums)]),
            None => (0, dummy_int(), [dummy_int(), dummy_int()]),
        };
        let tail = cache.tail.map_or_else(|| empty(1), float);
        Self { k_words: int(&keys.words), k_meta, key_meta_pitch, blocks, v_words, v_meta, tail }
    }
}
