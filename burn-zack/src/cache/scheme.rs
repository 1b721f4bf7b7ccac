//! [`ZackScheme`]: rotations plus ranks, the `KvScheme` the models and CLIs use.

use std::sync::Arc;

use burn::tensor::{backend::Backend, Tensor, TensorData};
use burn_kvcompress::{
    cache::{CacheGeometry, KvScheme},
    model::CausalLm,
};

use super::{HeadLayout, ReducedStorage, ZackCache};
use crate::kernels::ZackBackend;
use crate::{
    fold::fold_value_rotations,
    ranks::Ranks,
    rotation::{Pair, Rotations},
    ZackError,
};

/// ZACK as a cache scheme. The model it runs with must have the value/output rotations folded
/// in ([`ZackScheme::fold`]); keys and queries are rotated by the cache.
#[derive(Debug, Clone)]
pub struct ZackScheme {
    rotations: Arc<Rotations>,
    ranks: Arc<Ranks>,
    storage: ReducedStorage,
}

impl ZackScheme {
    /// The scheme of `rotations` at `ranks` (which must fit the rotations' geometry).
    pub fn new(rotations: Arc<Rotations>, ranks: Ranks) -> Result<Self, ZackError> {
        ranks.check(rotations.geometry)?;
        Ok(Self { rotations, ranks: Arc::new(ranks), storage: ReducedStorage::default() })
    }

    /// The same scheme keeping its reduced keys and values as `storage` (f32 by default).
    pub fn with_storage(self, storage: ReducedStorage) -> Self {
        Self { storage, ..self }
    }

    /// The element type of the cached reduced keys and values.
    pub fn storage(&self) -> ReducedStorage {
        self.storage
    }

    /// The rotations.
    pub fn rotations(&self) -> &Rotations {
        &self.rotations
    }

    /// The per-head ranks.
    pub fn ranks(&self) -> &Ranks {
        &self.ranks
    }

    /// Folds the value/output rotations (and the mean of the dropped value coordinates) into
    /// `model`'s weights: the model this scheme's caches must run with (see
    /// [`fold_value_rotations`]).
    pub fn fold<B: Backend>(&self, model: CausalLm<B>) -> Result<CausalLm<B>, ZackError> {
        fold_value_rotations(model, &self.rotations, &self.ranks)
    }

    /// Layer `layer`'s ranks and packing.
    pub fn layout(&self, layer: usize) -> HeadLayout {
        HeadLayout {
            head_dim: self.ranks.head_dim,
            qk_ranks: self.ranks.query_key[layer].clone(),
            vo_ranks: self.ranks.value_output[layer].clone(),
        }
    }

    /// Layer `layer`'s truncated query/key bases packed side by side, `[head_dim, Σ k_qk]`.
    fn packed_basis<B: Backend>(&self, layer: usize, layout: &HeadLayout, device: &B::Device) -> Tensor<B, 2> {
        let d = layout.head_dim;
        let truncated: Vec<Vec<f32>> = (0..layout.kv_heads())
            .map(|h| self.rotations.head(Pair::QueryKey, layer, h).truncated_basis(layout.qk_ranks[h]))
            .collect();
        let packed: Vec<f32> = (0..d)
            .flat_map(|row| {
                truncated
                    .iter()
                    .zip(&layout.qk_ranks)
                    .flat_map(move |(t, &k)| t[row * k..(row + 1) * k].iter().copied())
            })
            .collect();
        Tensor::from_data(TensorData::new(packed, [d, layout.key_width()]), device)
    }

    /// Layer `layer`'s layout and packed query/key basis `[head_dim, Σ k_qk]` for a cache of
    /// `geometry`, or why these rotations cannot serve it: what a scheme that quantizes the reduced
    /// keys and values further (`burn_kvschemes::compose`) starts from.
    pub fn layer_parts<B: Backend>(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        device: &B::Device,
    ) -> Result<(HeadLayout, Tensor<B, 2>), String> {
        if let Some(problem) = self.mismatch(layer, geometry) {
            return Err(problem);
        }
        let layout = self.layout(layer);
        let basis = self.packed_basis(layer, &layout, device);
        Ok((layout, basis))
    }

    /// Why `geometry` at `layer` cannot use these rotations, if it cannot.
    fn mismatch(&self, layer: usize, geometry: CacheGeometry) -> Option<String> {
        let g = self.rotations.geometry;
        if layer >= g.layers
            || geometry.heads != g.heads
            || geometry.kv_heads != g.kv_heads
            || geometry.head_dim != g.head_dim
        {
            return Some(format!("ZACK rotations for {g} cannot serve layer {layer} of {geometry:?}"));
        }
        None
    }

    /// Why backend `B` cannot hold this scheme's storage, if it cannot.
    fn unsupported_storage<B: ZackBackend>(&self) -> Option<String> {
        (self.storage == ReducedStorage::F16 && !B::HALF_STORAGE)
            .then(|| "ZACK storage f16 needs a backend with f16 tensors (wgpu, cuda); use f32 here".to_string())
    }
}

fn short_hex(digest: [u8; 32]) -> String {
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

impl<B: ZackBackend> KvScheme<B> for ZackScheme {
    type Cache = ZackCache<B>;

    fn new_cache(&self, layer: usize, geometry: CacheGeometry, device: &B::Device) -> ZackCache<B> {
        match self.unsupported_storage::<B>().map_or_else(|| self.layer_parts(layer, geometry, device), Err) {
            Ok((layout, basis)) => ZackCache::new(geometry, layout, basis, self.storage),
            Err(problem) => ZackCache::unusable(geometry, problem, device),
        }
    }

    /// `zack:rate=R,rot=<sha8>,ranks=<sha8>[,store=f16]`: the compression rate, digests of the
    /// rotations and ranks, and the storage if not f32, so that a transfer handshake refuses
    /// caches of other rotations, ranks or storage.
    fn name(&self) -> String {
        let store = match self.storage {
            ReducedStorage::F32 => String::new(),
            other => format!(",store={other}"),
        };
        format!(
            "zack:rate={:.4},rot={},ranks={}{store}",
            self.ranks.compression_rate(),
            short_hex(self.rotations.digest()),
            short_hex(self.ranks.digest())
        )
    }
}
