//! [`ReducedCodebooks`]: product-quantization codebooks of ZACK's reduced keys and values.

use std::{fmt, str::FromStr};

use burn_kvcompress::fingerprint::ModelFingerprint;
use burn_million_pq::{CodebookScope, PqConfig};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use burn_zack::cache::ZackScheme;

use super::ComposeError;

/// The product quantizer of reduced coordinates: sub-vectors of `sub_dim` channels, each
/// replaced by one of `2^nbits` centroids.
///
/// A head keeping `k` coordinates has `k / sub_dim` subspaces, so the ranks must be multiples of
/// `sub_dim`, and every element costs `nbits / sub_dim` bits whatever its head's rank (the same
/// rate as `pq:m=head_dim/sub_dim,nbits=…` on full heads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReducedPqConfig {
    /// Channels per subspace.
    pub sub_dim: usize,
    /// Bits per code (1 to 12).
    pub nbits: u8,
}

impl ReducedPqConfig {
    /// Checks the ranges.
    pub fn validate(&self) -> Result<(), ComposeError> {
        if self.sub_dim == 0 || !(1..=12).contains(&self.nbits) {
            return Err(ComposeError::Config(format!(
                "reduced PQ needs sub_dim >= 1 and nbits in 1..=12 (got {self})"
            )));
        }
        Ok(())
    }

    /// Centroids per subspace, `2^nbits`.
    pub fn centroids(&self) -> usize {
        1 << self.nbits
    }

    /// The quantizer of one layer's packed reduced vectors of `width` channels, as MILLION's
    /// kernels take it: `width / sub_dim` subspaces, one codebook group.
    pub fn packed(&self, width: usize) -> PqConfig {
        PqConfig { subspaces: width / self.sub_dim, nbits: self.nbits, scope: CodebookScope::Layer }
    }
}

impl fmt::Display for ReducedPqConfig {
    /// `sub_dim=2,nbits=8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sub_dim={},nbits={}", self.sub_dim, self.nbits)
    }
}

impl FromStr for ReducedPqConfig {
    type Err = ComposeError;

    /// Parses [`Display`](fmt::Display)'s form.
    fn from_str(s: &str) -> Result<Self, ComposeError> {
        let (mut sub_dim, mut nbits) = (None, None);
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let bad = || ComposeError::Config(format!("`{pair}`: expected sub_dim=N or nbits=N"));
            let (key, value) = pair.split_once('=').ok_or_else(bad)?;
            match key {
                "sub_dim" => sub_dim = Some(value.parse().map_err(|_| bad())?),
                "nbits" => nbits = Some(value.parse().map_err(|_| bad())?),
                _ => return Err(bad()),
            }
        }
        let missing = |key: &str| ComposeError::Config(format!("reduced PQ needs `{key}`"));
        let config =
            Self { sub_dim: sub_dim.ok_or_else(|| missing("sub_dim"))?, nbits: nbits.ok_or_else(|| missing("nbits"))? };
        config.validate()?;
        Ok(config)
    }
}

/// Codebooks of one model's reduced keys and values at one set of rotations and ranks.
///
/// Layer `l`'s key codebook is `[Σ k_qk / sub_dim, centroids, sub_dim]` row-major: its subspaces
/// tile the KV heads' packed reduced keys in order, so head `h` owns subspaces
/// `offset_h / sub_dim ..` of its own, each trained on that head's coordinates only. Values alike
/// with `k_vo`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReducedCodebooks {
    /// The quantizer.
    pub config: ReducedPqConfig,
    /// The model calibrated on.
    pub model: ModelFingerprint,
    /// SHA-256 of the rotations whose coordinates these codebooks quantize.
    pub rotations: [u8; 32],
    /// SHA-256 of the ranks.
    pub ranks: [u8; 32],
    /// What they were calibrated on, in words.
    pub calibration: String,
    /// Per layer, the key codebook.
    pub keys: Vec<Vec<f32>>,
    /// Per layer, the value codebook.
    pub values: Vec<Vec<f32>>,
}

impl ReducedCodebooks {
    /// Floats per subspace: `centroids · sub_dim`.
    fn subspace_len(&self) -> usize {
        self.config.centroids() * self.config.sub_dim
    }

    /// Layer `layer`'s key and value codebook shapes, `[1, subspaces, centroids, sub_dim]` (one
    /// codebook group: the layout MILLION's kernels take).
    pub fn shapes(&self, layer: usize) -> [[usize; 4]; 2] {
        let (c, s) = (self.config.centroids(), self.config.sub_dim);
        [&self.keys[layer], &self.values[layer]].map(|book| [1, book.len() / self.subspace_len(), c, s])
    }

    /// Bytes of layer `layer`'s codebooks in f32.
    pub fn layer_bytes(&self, layer: usize) -> usize {
        4 * (self.keys[layer].len() + self.values[layer].len())
    }

    /// SHA-256 of the configuration, the rotations and ranks they belong to, and every centroid.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.config.to_string().as_bytes());
        hasher.update(self.rotations);
        hasher.update(self.ranks);
        for x in self.keys.iter().chain(&self.values).flatten() {
            hasher.update(x.to_le_bytes());
        }
        hasher.finalize().into()
    }

    /// Checks that these codebooks quantize `zack`'s reduced coordinates: the same rotations
    /// and ranks (by digest), one codebook per layer of the widths the ranks give, finite values.
    pub fn check_fits(&self, zack: &ZackScheme) -> Result<(), ComposeError> {
        self.config.validate()?;
        let mismatch = |what: &str| {
            ComposeError::Config(format!(
                "these reduced codebooks were trained for other {what} (calibrated on: {}); \
                 calibrate them for these rotations and ranks",
                self.calibration
            ))
        };
        if self.rotations != zack.rotations().digest() {
            return Err(mismatch("rotations"));
        }
        if self.ranks != zack.ranks().digest() {
            return Err(mismatch("ranks"));
        }
        check_ranks(zack, self.config)?;
        let layers = zack.ranks().query_key.len();
        if self.keys.len() != layers || self.values.len() != layers {
            return Err(ComposeError::Config(format!(
                "{} key and {} value codebooks for {layers} layers",
                self.keys.len(),
                self.values.len()
            )));
        }
        for layer in 0..layers {
            let layout = zack.layout(layer);
            let widths = [layout.key_width(), layout.value_width()];
            for ((book, width), kind) in
                [&self.keys[layer], &self.values[layer]].into_iter().zip(widths).zip(["key", "value"])
            {
                if book.len() != width / self.config.sub_dim * self.subspace_len() {
                    return Err(ComposeError::Config(format!(
                        "layer {layer}'s {kind} codebook holds {} floats; {width} reduced channels need {}",
                        book.len(),
                        width / self.config.sub_dim * self.subspace_len()
                    )));
                }
                if book.iter().any(|x| !x.is_finite()) {
                    return Err(ComposeError::Config(format!(
                        "layer {layer}'s {kind} codebook holds a non-finite value"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Checks that every rank of `zack` is a nonzero multiple of `config.sub_dim`.
pub(super) fn check_ranks(zack: &ZackScheme, config: ReducedPqConfig) -> Result<(), ComposeError> {
    let ranks = zack.ranks();
    for (pair, all) in [("key", &ranks.query_key), ("value", &ranks.value_output)] {
        for (layer, heads) in all.iter().enumerate() {
            if let Some((head, rank)) = heads.iter().enumerate().find(|(_, &r)| r == 0 || r % config.sub_dim != 0) {
                return Err(ComposeError::Config(format!(
                    "layer {layer}, KV head {head} keeps {rank} {pair} coordinates; PQ subspaces of {} \
                     channels need nonzero multiples of {0}: choose ranks with RankRule {{ multiple: {0} }}",
                    config.sub_dim
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_text_round_trips_and_bad_text_is_refused() {
        let config: ReducedPqConfig = "sub_dim=2,nbits=8".parse().unwrap();
        assert_eq!(config, ReducedPqConfig { sub_dim: 2, nbits: 8 });
        assert_eq!(config.to_string().parse::<ReducedPqConfig>().unwrap(), config);
        assert_eq!(config.packed(96), PqConfig { subspaces: 48, nbits: 8, scope: CodebookScope::Layer });
        for bad in
            ["sub_dim=2", "nbits=8", "sub_dim=0,nbits=8", "sub_dim=2,nbits=13", "m=2,nbits=8", "sub_dim=x,nbits=8"]
        {
            assert!(matches!(bad.parse::<ReducedPqConfig>(), Err(ComposeError::Config(_))), "{bad}");
        }
    }
}
