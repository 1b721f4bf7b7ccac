//! [`HackConfig`] as a [`KvScheme`]: one [`HackCache`] per layer.

use burn_kvcompress::cache::{CacheGeometry, KvScheme};

use super::HackCache;
use crate::{kernels::HackBackend, HackConfig};

impl<B: HackBackend> KvScheme<B> for HackConfig {
    type Cache = HackCache<B>;

    fn new_cache(&self, layer: usize, geometry: CacheGeometry, _device: &B::Device) -> HackCache<B> {
        HackCache::new(*self, layer, geometry)
    }

    /// The configuration's text form, e.g. `hack:bits=2,pi=64,round=stochastic,seed=0`.
    fn name(&self) -> String {
        self.to_string()
    }
}
