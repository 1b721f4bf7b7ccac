//! The dense caches: keys and values kept as they are, in f32 ([`DenseScheme`]) or rounded to
//! IEEE half precision ([`HalfDenseScheme`], what an fp16 serving stack caches and sends).
//! Prefill-then-decode through the f32 cache equals one full forward pass up to float summation
//! order (tested within 1e-5 per logit).

use burn::tensor::{
    backend::{Backend, DTypeUsage},
    DType, FloatDType, Tensor,
};
use serde::{Deserialize, Serialize};

use super::{
    dense_attention, half_attention, slot_buffer::SlotBuffer, AttendOptions, CacheGeometry, KvCache, KvScheme,
    LayerState, StateTensor, TransferableCache, TransferableScheme,
};
use crate::error::CacheError;

/// The scheme that compresses nothing (`--kv dense`): f32 keys and values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenseScheme;

/// Keys and values stored in IEEE half precision (`--kv dense:storage=f16`): half the bytes of
/// [`DenseScheme`] in memory and on the wire, the baseline a transfer of an fp16 model's cache
/// sends. On a CUDA device with warp matrix instructions, attention runs on tensor cores as an
/// fp16 serving stack's does ([`half_attention`]; the queries and the weights are rounded to f16
/// too, within the bound `kernels::flash_attention` states); elsewhere it computes in f32 on the
/// stored values (cast back per call).
///
/// Error bound: every stored element is rounded to nearest f16, a relative error of at most
/// `u = 2^-11` within f16's normal range (`|x| ≥ 6.1e-5`; smaller values move by at most `2^-25`,
/// larger than 65504 overflow to infinity). A score `s = Σ_j q_j k_j` then moves by at most
/// `δ = u Σ_j |q_j k_j|` (plus `2^-25 Σ_j |q_j|`), the softmax weights by a factor within
/// `e^(±2δ)`, and the output by at most `(e^(2δ) − 1 + u) · max|v|` (tested on wgpu in
/// `tests/integration/dense_half.rs`). Needs a backend with f16 tensors (wgpu, cuda; not ndarray).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HalfDenseScheme;

/// Uncompressed K/V of one layer, `[batch, kv_heads, len, head_dim]` each, in f32 or f16, held
/// in [`SlotBuffer`]s: a decode step writes its slots in place.
#[derive(Debug, Clone)]
pub struct DenseCache<B: Backend> {
    geometry: CacheGeometry,
    storage: FloatDType,
    k: Option<SlotBuffer<B>>,
    v: Option<SlotBuffer<B>>,
}

impl<B: Backend> DenseCache<B> {
    /// An empty f32 cache for the given geometry.
    pub fn new(geometry: CacheGeometry) -> Self {
        Self { geometry, storage: FloatDType::F32, k: None, v: None }
    }

    /// An empty cache that stores its keys and values in f16.
    pub fn half(geometry: CacheGeometry) -> Self {
        Self { storage: FloatDType::F16, ..Self::new(geometry) }
    }

    /// The cached keys and values as f32, `[batch, kv_heads, len, head_dim]` each (None while
    /// empty).
    pub fn keys_values(&self) -> Option<(Tensor<B, 4>, Tensor<B, 4>)> {
        let (k, v) = self.stored()?;
        match self.storage {
            FloatDType::F32 => Some((k, v)),
            _ => Some((k.cast(FloatDType::F32), v.cast(FloatDType::F32))),
        }
    }

    /// The cached keys and values in their storage type.
    fn stored(&self) -> Option<(Tensor<B, 4>, Tensor<B, 4>)> {
        Some((self.k.as_ref()?.filled(), self.v.as_ref()?.filled()))
    }
}

/// `new` appended to `old` along the slot axis, or `new` alone when `old` is None. The slot axis
/// is the one before the last: `[batch, kv_heads, slots, head_dim]` for a cache's keys,
/// `[batch, slots, width]` for heads packed side by side (ZACK's reduced coordinates).
pub fn append_slots<B: Backend, const D: usize>(old: Option<Tensor<B, D>>, new: Tensor<B, D>) -> Tensor<B, D> {
    match old {
        Some(old) => Tensor::cat(vec![old, new], D - 2),
        None => new,
    }
}

impl<B: Backend> KvCache<B> for DenseCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.geometry.check_append(k.dims(), v.dims())?;
        if self.storage != FloatDType::F32 {
            check_storage::<B>(self.storage, &k.device())?;
        }
        let (k, v) = (k.cast(self.storage), v.cast(self.storage));
        let [k, v] = match (self.k.take(), self.v.take()) {
            (Some(k_buffer), Some(v_buffer)) => SlotBuffer::appended_pair([k_buffer, v_buffer], [k, v]),
            _ => [SlotBuffer::new(k), SlotBuffer::new(v)],
        };
        (self.k, self.v) = (Some(k), Some(v));
        Ok(())
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        let empty = || CacheError::Request("attention over an empty cache".into());
        let (k, v) = (self.k.as_ref().ok_or_else(empty)?, self.v.as_ref().ok_or_else(empty)?);
        match self.storage {
            FloatDType::F32 => dense_attention(q, k.filled(), v.filled(), options),
            _ => half_attention(q, k.buffer().clone(), v.buffer().clone(), k.len(), options),
        }
    }

    fn len(&self) -> usize {
        self.k.as_ref().map_or(0, SlotBuffer::len)
    }

    fn input_dtype(&self) -> FloatDType {
        self.storage
    }

    /// The bytes of the buffers, room for later slots included.
    fn memory_bytes(&self) -> usize {
        let g = self.geometry;
        let capacity = self.k.as_ref().map_or(0, SlotBuffer::capacity);
        2 * g.batch * g.kv_heads * capacity * g.head_dim * DType::from(self.storage).size()
    }
}

impl<B: Backend> TransferableCache<B> for DenseCache<B> {
    /// Tensors `k` and `v`, `[batch, kv_heads, len, head_dim]` each in the cache's storage type
    /// (none while empty).
    fn export_state(&self) -> LayerState {
        let tensors = match self.stored() {
            Some((k, v)) => vec![StateTensor::from_float("k", &k), StateTensor::from_float("v", &v)],
            None => Vec::new(),
        };
        LayerState { tokens: self.len(), tensors }
    }
}

/// Whether `B` holds `storage` tensors on `device`, as a typed error if not.
fn check_storage<B: Backend>(storage: FloatDType, device: &B::Device) -> Result<(), CacheError> {
    let dtype = DType::from(storage);
    match B::dtype_usage(device, dtype).contains(DTypeUsage::Storage) {
        true => Ok(()),
        false => Err(CacheError::Unsupported(format!(
            "dense storage {dtype:?} needs a backend with {dtype:?} tensors (wgpu, cuda), not {}",
            B::name(device)
        ))),
    }
}

/// `cache` with the keys and values of `state` appended (an f32 cache takes f16 states and the
/// other way round; a value f16 cannot hold is rounded).
fn import_into<B: Backend>(
    mut cache: DenseCache<B>,
    state: &LayerState,
    device: &B::Device,
) -> Result<DenseCache<B>, CacheError> {
    if state.tokens == 0 {
        return Ok(cache);
    }
    check_storage::<B>(cache.storage, device)?;
    let uploaded = state.upload::<B>(device);
    let (k, v) = (uploaded.to_float_as::<4>("k", cache.storage)?, uploaded.to_float_as::<4>("v", cache.storage)?);
    if k.dims()[2] != state.tokens {
        return Err(CacheError::State(format!("`k` holds {} slots, the state says {}", k.dims()[2], state.tokens)));
    }
    cache.append(k, v).map_err(|e| CacheError::State(e.to_string()))?;
    Ok(cache)
}

/// `KvScheme` and `TransferableScheme` for a dense scheme named `$name` whose layers' caches
/// `$empty(geometry)` builds.
macro_rules! dense_scheme {
    ($scheme:ty, $name:literal, $empty:path) => {
        impl<B: Backend> KvScheme<B> for $scheme {
            type Cache = DenseCache<B>;

            fn new_cache(&self, _layer: usize, geometry: CacheGeometry, _device: &B::Device) -> Self::Cache {
                $empty(geometry)
            }

            fn name(&self) -> String {
                $name.into()
            }
        }

        impl<B: Backend> TransferableScheme<B> for $scheme {
            fn import_state(
                &self,
                _layer: usize,
                geometry: CacheGeometry,
                state: &LayerState,
                device: &B::Device,
            ) -> Result<DenseCache<B>, CacheError> {
                import_into($empty(geometry), state, device)
            }
        }
    };
}

dense_scheme!(DenseScheme, "dense", DenseCache::new);
dense_scheme!(HalfDenseScheme, "dense:storage=f16", DenseCache::half);
