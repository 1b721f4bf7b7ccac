//! [`ZackHackScheme`]: ZACK's rotations and ranks followed by HACK quantization.

use burn_hack_attn::{cache::key_partitions_fit, kernels::HackBackend, Axes, HackConfig, RotationSpec};
use burn_kvcompress::cache::{CacheGeometry, KvScheme};

use super::ComposeError;
use super::ZackHackCache;
use burn_zack::{
    cache::{ReducedStorage, ZackScheme},
    kernels::ZackBackend,
};

/// ZACK followed by HACK quantization of the reduced keys and values. The model must run with
/// the ZACK part's rotations folded in ([`ZackScheme::fold`]).
///
/// Keys are quantized per slot in partitions of Π of each KV head's own `k_qk` coordinates, so
/// every key rank must be a multiple of 16 that is below Π or a multiple of it (what
/// [`ZackHackScheme::rank_multiple`] guarantees); values are quantized per channel in blocks of Π
/// slots, every head's channels alike, with the newest `< Π` slots in f32.
#[derive(Debug, Clone)]
pub struct ZackHackScheme {
    zack: ZackScheme,
    hack: HackConfig,
}

impl ZackHackScheme {
    /// The composition of `zack` (f32 storage: the codes replace it) and `hack`, checking that
    /// every key rank fits HACK's key partitions.
    pub fn new(zack: ZackScheme, hack: HackConfig) -> Result<Self, ComposeError> {
        hack.validate().map_err(|e| ComposeError::Config(e.to_string()))?;
        if hack.axes != Axes::Paper || hack.rotation != RotationSpec::None {
            return Err(ComposeError::Config(format!(
                "{hack}: ZACK composes with HACK's paper axes without rotation (ZACK's own rotations come first)"
            )));
        }
        if zack.storage() != ReducedStorage::F32 {
            return Err(ComposeError::Config(format!(
                "ZACK storage {} cannot be composed with HACK: the codes replace the stored elements",
                zack.storage()
            )));
        }
        for (layer, ranks) in zack.ranks().query_key.iter().enumerate() {
            if let Some((head, rank)) = ranks.iter().enumerate().find(|(_, &r)| !key_partitions_fit(r, hack.partition))
            {
                return Err(ComposeError::Config(format!(
                    "layer {layer}, KV head {head} keeps {rank} key coordinates; HACK's key partitions (Π = {}) \
                     need a nonzero multiple of 16 below Π or a multiple of Π: choose ranks with \
                     RankRule {{ multiple: {} }}",
                    hack.partition,
                    Self::rank_multiple(zack.ranks().head_dim, &hack)
                )));
            }
        }
        Ok(Self { zack, hack })
    }

    /// The rank multiple whose ranks always fit `hack`'s key partitions at `head_dim`: 16 when
    /// no rank can exceed Π, Π otherwise.
    pub fn rank_multiple(head_dim: usize, hack: &HackConfig) -> usize {
        if head_dim <= hack.partition {
            16
        } else {
            hack.partition
        }
    }

    /// The ZACK part.
    pub fn zack(&self) -> &ZackScheme {
        &self.zack
    }

    /// The HACK part.
    pub fn hack(&self) -> &HackConfig {
        &self.hack
    }
}

impl<B: ZackBackend + HackBackend> KvScheme<B> for ZackHackScheme {
    type Cache = ZackHackCache<B>;

    fn new_cache(&self, layer: usize, geometry: CacheGeometry, device: &B::Device) -> ZackHackCache<B> {
        let parts = self.zack.layer_parts(layer, geometry, device);
        ZackHackCache::new(self.hack.clone(), layer, geometry, parts, device)
    }

    /// The two names joined by `+`: `zack:rate=…,rot=…,ranks=…+hack:bits=2,pi=64,…`.
    fn name(&self) -> String {
        format!("{}+{}", KvScheme::<B>::name(&self.zack), self.hack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ranks_fit_partitions_below_or_multiples_of_pi() {
        let fits = |rank, pi| key_partitions_fit(rank, pi);
        assert!(fits(16, 64) && fits(48, 64) && fits(64, 32) && fits(96, 32));
        assert!(!fits(0, 64) && !fits(40, 64) && !fits(48, 32));
        let hack = |pi| HackConfig { partition: pi, ..HackConfig::default() };
        assert_eq!(ZackHackScheme::rank_multiple(64, &hack(64)), 16);
        assert_eq!(ZackHackScheme::rank_multiple(128, &hack(32)), 32);
    }
}
