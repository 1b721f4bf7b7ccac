//! [`PqConfig`]: the shape of a product quantizer (subspaces, bits per code, codebook scope), and
//! [`KmeansConfig`]: how its codebooks are trained.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

use crate::PqError;

/// Which vectors share a codebook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodebookScope {
    /// One key and one value codebook per layer, shared by its KV heads.
    Layer,
    /// One key and one value codebook per (layer, KV head).
    LayerHead,
}

impl CodebookScope {
    /// Codebooks per layer and tensor (K or V) for a model with `kv_heads` KV heads.
    pub fn groups(self, kv_heads: usize) -> usize {
        match self {
            Self::Layer => 1,
            Self::LayerHead => kv_heads,
        }
    }
}

/// A product quantizer of head vectors.
///
/// Each `head_dim`-long key or value vector of one head is split into `subspaces` contiguous
/// sub-vectors of `head_dim / subspaces` channels (the paper's M; the spec's finding: M counts
/// subspaces, not channels per subspace). Each sub-vector is replaced by the index of its nearest
/// centroid (squared L2, lowest index on ties) among `2^nbits`, so a vector costs
/// `subspaces * nbits` bits and an element `subspaces * nbits / head_dim` bits. Codes are packed
/// `32 / nbits` per 32-bit word, first code in the lowest bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PqConfig {
    /// Subspaces per head vector (M); must divide the head dimension.
    pub subspaces: usize,
    /// Bits per code (1 to 12): `2^nbits` centroids per subspace.
    pub nbits: u8,
    /// Codebook sharing.
    pub scope: CodebookScope,
}

impl PqConfig {
    /// Checks the configuration against a head dimension.
    pub fn validate(&self, head_dim: usize) -> Result<(), PqError> {
        if !(1..=12).contains(&self.nbits) {
            return Err(PqError::Config(format!("nbits {} is outside 1..=12", self.nbits)));
        }
        if self.subspaces == 0 || !head_dim.is_multiple_of(self.subspaces) {
            return Err(PqError::Config(format!(
                "{} subspaces do not divide the head dimension {head_dim}",
                self.subspaces
            )));
        }
        Ok(())
    }

    /// Centroids per subspace, `2^nbits`.
    pub fn centroids(&self) -> usize {
        1 << self.nbits
    }

    /// Channels per subspace for a head dimension.
    pub fn sub_dim(&self, head_dim: usize) -> usize {
        head_dim / self.subspaces
    }

    /// Codes per packed 32-bit word.
    pub fn codes_per_word(&self) -> usize {
        32 / self.nbits as usize
    }

    /// Packed 32-bit words per vector.
    pub fn words_per_vector(&self) -> usize {
        self.subspaces.div_ceil(self.codes_per_word())
    }

    /// Bits per element of the packed codes alone (no codebook, no recent window).
    pub fn code_bits_per_element(&self, head_dim: usize) -> f64 {
        (self.words_per_vector() * 32) as f64 / head_dim as f64
    }
}

impl fmt::Display for PqConfig {
    /// `m=32,nbits=8,scope=layer`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scope = match self.scope {
            CodebookScope::Layer => "layer",
            CodebookScope::LayerHead => "layer-head",
        };
        write!(f, "m={},nbits={},scope={scope}", self.subspaces, self.nbits)
    }
}

impl FromStr for PqConfig {
    type Err = PqError;

    /// Parses [`Display`](fmt::Display)'s form; `scope` defaults to `layer`.
    fn from_str(s: &str) -> Result<Self, PqError> {
        let (mut subspaces, mut nbits, mut scope) = (None, None, CodebookScope::Layer);
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let (key, value) =
                pair.split_once('=').ok_or_else(|| PqError::Config(format!("`{pair}` is not key=value")))?;
            let number = || value.parse::<usize>().map_err(|_| PqError::Config(format!("`{pair}` is not a number")));
            match key {
                "m" => subspaces = Some(number()?),
                "nbits" => nbits = Some(u8::try_from(number()?).map_err(|_| PqError::Config(format!("`{pair}`")))?),
                "scope" => {
                    scope = match value {
                        "layer" => CodebookScope::Layer,
                        "layer-head" => CodebookScope::LayerHead,
                        other => return Err(PqError::Config(format!("unknown scope `{other}` (layer, layer-head)"))),
                    }
                }
                other => return Err(PqError::Config(format!("unknown key `{other}` (m, nbits, scope)"))),
            }
        }
        let missing = |what: &str| PqError::Config(format!("`{what}` is required"));
        Ok(Self {
            subspaces: subspaces.ok_or_else(|| missing("m"))?,
            nbits: nbits.ok_or_else(|| missing("nbits"))?,
            scope,
        })
    }
}

/// Mini-batch k-means (Sculley, 2010) after k-means++ initialization, per subspace.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KmeansConfig {
    /// Mini-batch updates.
    pub iterations: usize,
    /// Points per mini-batch.
    pub batch_size: usize,
    /// Most points k-means++ draws its initial centroids from.
    pub init_sample: usize,
    /// Points of the fixed sample the objective is reported on after each iteration.
    pub eval_sample: usize,
    /// Seed of every random choice (each subspace derives its own stream from it).
    pub seed: u64,
}

impl Default for KmeansConfig {
    fn default() -> Self {
        Self { iterations: 60, batch_size: 1024, init_sample: 8192, eval_sample: 2048, seed: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_and_bad_configs_are_rejected() {
        let c: PqConfig = "m=32,nbits=8".parse().unwrap();
        assert_eq!(c, PqConfig { subspaces: 32, nbits: 8, scope: CodebookScope::Layer });
        assert_eq!(c.to_string().parse::<PqConfig>().unwrap(), c);
        let h: PqConfig = "m=16,nbits=6,scope=layer-head".parse().unwrap();
        assert_eq!(h.to_string(), "m=16,nbits=6,scope=layer-head");
        assert_eq!(serde_json::from_str::<PqConfig>(&serde_json::to_string(&h).unwrap()).unwrap(), h);
        assert!("nbits=8".parse::<PqConfig>().unwrap_err().to_string().contains("`m`"));
        assert!("m=32,nbits=8,colour=red".parse::<PqConfig>().is_err());
        assert!("m=x,nbits=8".parse::<PqConfig>().is_err());
        assert!(c.validate(64).is_ok());
        assert!(PqConfig { subspaces: 24, ..c }.validate(64).is_err());
        assert!(PqConfig { nbits: 13, ..c }.validate(64).is_err());
        assert!(PqConfig { nbits: 0, ..c }.validate(64).is_err());
    }

    #[test]
    fn packing_arithmetic() {
        let c = PqConfig { subspaces: 32, nbits: 8, scope: CodebookScope::Layer };
        assert_eq!((c.centroids(), c.sub_dim(64), c.codes_per_word(), c.words_per_vector()), (256, 2, 4, 8));
        assert_eq!(c.code_bits_per_element(64), 4.0);
        // 6-bit codes: 5 per word, 7 words for 32 codes (224 bits stored for 192 used).
        let six = PqConfig { nbits: 6, ..c };
        assert_eq!((six.codes_per_word(), six.words_per_vector()), (5, 7));
        assert_eq!(six.code_bits_per_element(64), 3.5);
    }
}
