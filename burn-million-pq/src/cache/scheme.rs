//! [`PqScheme`]: trained codebooks plus a recent-window size, as a [`KvScheme`].

use std::sync::Arc;

use burn::tensor::{Tensor, TensorData};
use burn_kvcompress::cache::{CacheGeometry, KvScheme};

use super::PqCache;
use crate::{
    codebook::{Codebooks, KvKind},
    kernels::PqBackend,
};

/// MILLION's scheme: every layer's K/V encoded with its codebooks, the newest slots kept in f32.
///
/// The window: when `n` tokens are appended, the cache keeps the newest `max(window, n)` slots in
/// f32 and encodes the older ones. So the tokens of a call are always attended in f32 by that
/// call (prefill runs in full precision, and at `window = 0` a decode step sees its own key and
/// value unquantized, as the paper's Eq. 6 has it), and encoding happens at the next append.
#[derive(Debug, Clone)]
pub struct PqScheme {
    /// The codebooks (shared by every cache the scheme builds).
    pub codebooks: Arc<Codebooks>,
    /// Recent slots kept in f32.
    pub window: usize,
}

impl PqScheme {
    /// A scheme over `codebooks` with a recent window of `window` slots.
    pub fn new(codebooks: Arc<Codebooks>, window: usize) -> Self {
        Self { codebooks, window }
    }
}

impl<B: PqBackend> KvScheme<B> for PqScheme {
    type Cache = PqCache<B>;

    fn new_cache(&self, layer: usize, geometry: CacheGeometry, device: &B::Device) -> PqCache<B> {
        let books = &self.codebooks;
        let fits = layer < books.geometry.layers
            && geometry.kv_heads == books.geometry.kv_heads
            && geometry.head_dim == books.geometry.head_dim;
        let shape = books.shape();
        // Allocated flat, then reshaped: a backend may pad the rows of a 4-D allocation (CUDA's
        // optimized layout does, for 2-float centroids), and kernels would copy such a tensor on
        // every step to read it densely.
        let floats: usize = shape.iter().product();
        let tensor = |kind| {
            let data = match fits {
                true => books.layer(layer, kind).to_vec(),
                false => vec![0.0; floats],
            };
            Tensor::<B, 1>::from_data(TensorData::new(data, [floats]), device).reshape(shape)
        };
        let problem = (!fits)
            .then(|| format!("codebooks for {} do not fit layer {layer} of geometry {geometry:?}", books.geometry));
        PqCache::new(
            books.config,
            self.window,
            geometry,
            [tensor(KvKind::Key), tensor(KvKind::Value)],
            books.layer_bytes(),
            problem,
        )
    }

    /// `pq:m=32,nbits=8,scope=layer,window=64,books=<first 8 bytes of the codebooks' SHA-256>`:
    /// two schemes with the same name encode and attend identically.
    fn name(&self) -> String {
        let digest: String = self.codebooks.digest()[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("pq:{},window={},books={digest}", self.codebooks.config, self.window)
    }
}
