//! [`ZackPqScheme`]: ZACK's rotations and ranks followed by product quantization.

use std::sync::Arc;

use burn::tensor::{Tensor, TensorData};
use burn_kvcompress::cache::{CacheGeometry, KvScheme};
use burn_million_pq::kernels::PqBackend;

use super::ComposeError;
use super::{pq_cache::LayerQuantizer, ReducedCodebooks, ZackPqCache};
use burn_zack::{
    cache::{ReducedStorage, ZackScheme},
    kernels::ZackBackend,
};

/// ZACK followed by product quantization of the reduced keys and values with
/// [`ReducedCodebooks`], the newest `window` slots kept in f32 (MILLION's window rule). The model
/// must run with the ZACK part's rotations folded in ([`ZackScheme::fold`]).
#[derive(Debug, Clone)]
pub struct ZackPqScheme {
    zack: ZackScheme,
    books: Arc<ReducedCodebooks>,
    window: usize,
}

impl ZackPqScheme {
    /// The composition of `zack` (f32 storage: the codes replace it) and `books`, which must
    /// have been trained for `zack`'s rotations and ranks.
    pub fn new(zack: ZackScheme, books: Arc<ReducedCodebooks>, window: usize) -> Result<Self, ComposeError> {
        if zack.storage() != ReducedStorage::F32 {
            return Err(ComposeError::Config(format!(
                "ZACK storage {} cannot be composed with PQ: the codes replace the stored elements",
                zack.storage()
            )));
        }
        books.check_fits(&zack)?;
        Ok(Self { zack, books, window })
    }

    /// The ZACK part.
    pub fn zack(&self) -> &ZackScheme {
        &self.zack
    }

    /// The codebooks.
    pub fn books(&self) -> &ReducedCodebooks {
        &self.books
    }

    /// Recent slots kept in f32.
    pub fn window(&self) -> usize {
        self.window
    }

    fn layer_quantizer<B: ZackBackend + PqBackend>(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        device: &B::Device,
    ) -> Result<LayerQuantizer<B>, String> {
        let (layout, basis) = self.zack.layer_parts(layer, geometry, device)?;
        let widths = [layout.key_width(), layout.value_width()];
        let shapes = self.books.shapes(layer);
        let data = [&self.books.keys[layer], &self.books.values[layer]];
        let books = std::array::from_fn(|i| {
            // Allocated flat, then reshaped (as `PqScheme` does): kernels read the books densely.
            Tensor::<B, 1>::from_data(TensorData::new(data[i].clone(), [data[i].len()]), device).reshape(shapes[i])
        });
        let configs = widths.map(|w| self.books.config.packed(w));
        Ok(LayerQuantizer { layout, basis, books, configs, books_bytes: self.books.layer_bytes(layer) })
    }
}

impl<B: ZackBackend + PqBackend> KvScheme<B> for ZackPqScheme {
    type Cache = ZackPqCache<B>;

    fn new_cache(&self, layer: usize, geometry: CacheGeometry, device: &B::Device) -> ZackPqCache<B> {
        ZackPqCache::new(self.window, geometry, self.layer_quantizer(layer, geometry, device), device)
    }

    /// `zack:…+pq:sub_dim=2,nbits=8,window=64,books=<first 8 bytes of the codebooks' SHA-256>`.
    fn name(&self) -> String {
        let digest: String = self.books.digest()[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("{}+pq:{},window={},books={digest}", KvScheme::<B>::name(&self.zack), self.books.config, self.window)
    }
}
