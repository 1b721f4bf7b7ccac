//! [`ZackCache`]: one layer's reduced keys and values.

use burn::tensor::{backend::Backend, Tensor};
use burn_kvcompress::{
    cache::{append_slots, AttendOptions, CacheGeometry, KvCache},
    error::CacheError,
};

use super::{reduce_keys, reduce_values, HeadLayout, ReducedStorage};
use crate::kernels::ZackBackend;

/// One layer's ZACK cache: keys `[batch, slots, Σ k_qk]` (post-RoPE keys times each head's
/// truncated basis) and values `[batch, slots, Σ k_vo]` (each head's leading coordinates of the
/// values the folded `W_V` produced), heads packed side by side as [`HeadLayout`] says, held as
/// the scheme's [`ReducedStorage`].
#[derive(Debug)]
pub struct ZackCache<B: Backend> {
    pub(super) geometry: CacheGeometry,
    pub(super) layout: HeadLayout,
    /// `[head_dim, Σ k_qk]`.
    pub(super) basis: Tensor<B, 2>,
    pub(super) keys: Option<Tensor<B, 3>>,
    pub(super) values: Option<Tensor<B, 3>>,
    pub(super) storage: ReducedStorage,
    /// Set when the scheme cannot serve this geometry; every call then fails with it.
    problem: Option<String>,
}

impl<B: Backend> ZackCache<B> {
    pub(super) fn new(
        geometry: CacheGeometry,
        layout: HeadLayout,
        basis: Tensor<B, 2>,
        storage: ReducedStorage,
    ) -> Self {
        Self { geometry, layout, basis, keys: None, values: None, storage, problem: None }
    }

    pub(super) fn unusable(geometry: CacheGeometry, problem: String, device: &B::Device) -> Self {
        let layout = HeadLayout { head_dim: geometry.head_dim, qk_ranks: Vec::new(), vo_ranks: Vec::new() };
        Self {
            geometry,
            layout,
            basis: Tensor::zeros([geometry.head_dim, 0], device),
            keys: None,
            values: None,
            storage: ReducedStorage::F32,
            problem: Some(problem),
        }
    }

    pub(super) fn check_usable(&self) -> Result<(), CacheError> {
        self.problem.as_ref().map_or(Ok(()), |p| Err(CacheError::Request(p.clone())))
    }

    /// This layer's ranks and packing.
    pub fn layout(&self) -> &HeadLayout {
        &self.layout
    }

    /// The element type the keys and values are held in.
    pub fn storage(&self) -> ReducedStorage {
        self.storage
    }

    /// The cached keys and values, `[batch, slots, Σ k_qk]` and `[batch, slots, Σ k_vo]`, in the
    /// dtype of [`ZackCache::storage`].
    pub fn keys_values(&self) -> Option<(Tensor<B, 3>, Tensor<B, 3>)> {
        Some((self.keys.clone()?, self.values.clone()?))
    }
}

impl<B: ZackBackend> KvCache<B> for ZackCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.check_usable()?;
        self.geometry.check_append(k.dims(), v.dims())?;
        let dtype = self.storage.dtype();
        let (k, v) =
            (reduce_keys(k, &self.basis, &self.layout).cast(dtype), reduce_values(v, &self.layout).cast(dtype));
        self.keys = Some(append_slots(self.keys.take(), k));
        self.values = Some(append_slots(self.values.take(), v));
        Ok(())
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.check_usable()?;
        let (k, v) = self.keys_values().ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
        B::zack_attention(q, self.basis.clone(), k, v, &self.layout, options)
    }

    fn len(&self) -> usize {
        self.keys.as_ref().map_or(0, |k| k.dims()[1])
    }

    /// The cached keys and values (elements of [`ZackCache::storage`]); the basis is per-layer
    /// model state, like the weights, and is not counted.
    fn memory_bytes(&self) -> usize {
        self.geometry.batch * self.len() * (self.layout.key_width() + self.layout.value_width()) * self.storage.bytes()
    }
}
