//! Adaptive per-head ranks: one global singular-value removal rate ε sets every head's rank
//! (Eq. 6 of the paper), and an overall compression rate is met by searching ε.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::rotation::{Pair, RotationGeometry, Rotations};
use crate::ZackError;

/// Constraints on the ranks ε produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankRule {
    /// The smallest rank a head keeps (at least 1: a head with rank 0 would attend uniformly).
    pub min_rank: usize,
    /// Ranks are rounded up to a multiple of this (1 = exact; the paper pads to 16 for tensor
    /// cores). With every rank a multiple of 8, the CubeCL decode kernel loads 8 f16 (4 f32) of a
    /// cached row at a time instead of one.
    pub multiple: usize,
}

impl Default for RankRule {
    fn default() -> Self {
        Self { min_rank: 1, multiple: 1 }
    }
}

impl RankRule {
    fn check(&self, head_dim: usize) -> Result<(), ZackError> {
        if self.min_rank == 0 || self.min_rank > head_dim || self.multiple == 0 || self.multiple > head_dim {
            return Err(ZackError::Config(format!(
                "min_rank {} and multiple {} must be in 1..={head_dim}",
                self.min_rank, self.multiple
            )));
        }
        Ok(())
    }

    /// The rank a head keeps before rounding, raised to `min_rank`, rounded up to `multiple`,
    /// capped at `head_dim`.
    fn apply(&self, rank: usize, head_dim: usize) -> usize {
        rank.max(self.min_rank).next_multiple_of(self.multiple).min(head_dim)
    }
}

/// The ranks of every (layer, KV head), for both pairs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranks {
    /// Dimension of an uncompressed head.
    pub head_dim: usize,
    /// `[layer][kv_head]` kept dimensions of queries and keys.
    pub query_key: Vec<Vec<usize>>,
    /// `[layer][kv_head]` kept dimensions of values (and rows of each head's `W_O` block).
    pub value_output: Vec<Vec<usize>>,
}

impl Ranks {
    /// Every head at full rank: the folded model then equals the dense one.
    pub fn full(geometry: RotationGeometry) -> Self {
        let all = vec![vec![geometry.head_dim; geometry.kv_heads]; geometry.layers];
        Self { head_dim: geometry.head_dim, query_key: all.clone(), value_output: all }
    }

    /// Ranks at removal rate `epsilon` (Eq. 6): each head keeps the fewest leading directions
    /// whose dropped singular values sum to at most `epsilon` of the head's total (σ, not σ²,
    /// as the paper words it), then `rule` applies. `epsilon = 0` keeps every direction with a
    /// non-zero singular value.
    pub fn from_removal_rate(rotations: &Rotations, epsilon: f64, rule: RankRule) -> Result<Self, ZackError> {
        if !(0.0..1.0).contains(&epsilon) {
            return Err(ZackError::Config(format!("the removal rate ε = {epsilon} must be in [0, 1)")));
        }
        let d = rotations.geometry.head_dim;
        rule.check(d)?;
        let ranks_of = |pair: Pair| -> Vec<Vec<usize>> {
            (0..rotations.geometry.layers)
                .map(|layer| {
                    (0..rotations.geometry.kv_heads)
                        .map(|head| {
                            let rotation = rotations.head(pair, layer, head);
                            let kept = (0..=d).find(|&k| rotation.removed_share(k) <= epsilon).unwrap_or(d);
                            rule.apply(kept, d)
                        })
                        .collect()
                })
                .collect()
        };
        Ok(Self { head_dim: d, query_key: ranks_of(Pair::QueryKey), value_output: ranks_of(Pair::ValueOutput) })
    }

    /// The ranks of the smallest ε (to `1e-6`) whose overall compression rate reaches `rate`,
    /// with that ε. Rates beyond what `rule` allows are an error.
    pub fn for_compression_rate(rotations: &Rotations, rate: f64, rule: RankRule) -> Result<(Self, f64), ZackError> {
        if !(0.0..1.0).contains(&rate) {
            return Err(ZackError::Config(format!("the compression rate {rate} must be in [0, 1)")));
        }
        let at = |epsilon: f64| Self::from_removal_rate(rotations, epsilon, rule);
        let most = at(1.0 - 1e-9)?;
        if most.compression_rate() < rate {
            return Err(ZackError::Config(format!(
                "compression rate {rate} is beyond the {:.4} that min_rank {} allows",
                most.compression_rate(),
                rule.min_rank
            )));
        }
        let (mut low, mut high) = (0.0, 1.0 - 1e-9);
        if at(low)?.compression_rate() >= rate {
            return Ok((at(low)?, low));
        }
        while high - low > 1e-6 {
            let mid = 0.5 * (low + high);
            if at(mid)?.compression_rate() >= rate {
                high = mid;
            } else {
                low = mid;
            }
        }
        Ok((at(high)?, high))
    }

    /// The rank of `pair` for (`layer`, `kv_head`).
    pub fn rank(&self, pair: Pair, layer: usize, kv_head: usize) -> usize {
        match pair {
            Pair::QueryKey => self.query_key[layer][kv_head],
            Pair::ValueOutput => self.value_output[layer][kv_head],
        }
    }

    /// The overall KV compression rate: `1 − Σ (k_qk + k_vo) / (2 · layers · kv_heads ·
    /// head_dim)`, the fraction of cached elements removed.
    pub fn compression_rate(&self) -> f64 {
        let kept: usize = self.query_key.iter().chain(&self.value_output).flatten().sum();
        let full = 2 * self.query_key.iter().map(Vec::len).sum::<usize>() * self.head_dim;
        1.0 - kept as f64 / full.max(1) as f64
    }

    /// SHA-256 of the ranks (caches and transfers check it together with the rotations').
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update((self.head_dim as u64).to_le_bytes());
        for rank in self.query_key.iter().chain(&self.value_output).flatten() {
            hasher.update((*rank as u64).to_le_bytes());
        }
        hasher.finalize().into()
    }

    /// Checks that the ranks cover `geometry` and lie in `1..=head_dim`.
    pub fn check(&self, geometry: RotationGeometry) -> Result<(), ZackError> {
        let covers = |ranks: &Vec<Vec<usize>>| {
            ranks.len() == geometry.layers
                && ranks
                    .iter()
                    .all(|l| l.len() == geometry.kv_heads && l.iter().all(|&r| (1..=geometry.head_dim).contains(&r)))
        };
        if self.head_dim != geometry.head_dim || !covers(&self.query_key) || !covers(&self.value_output) {
            return Err(ZackError::Config(format!("the ranks do not fit {geometry} (each must be in 1..=head_dim)")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use burn_kvcompress::fingerprint::ModelFingerprint;

    use super::*;
    use crate::rotation::{HeadRotation, RotationConfig};

    /// Two layers x two KV heads of head_dim 4 with the given spectra (same for both pairs).
    fn rotations(spectra: [[f32; 4]; 4]) -> Rotations {
        let geometry = RotationGeometry { layers: 2, heads: 2, kv_heads: 2, head_dim: 4 };
        let head = |s: [f32; 4]| HeadRotation { basis: vec![0.0; 16], singular_values: s.to_vec(), mean: vec![0.0; 4] };
        let layers = vec![vec![head(spectra[0]), head(spectra[1])], vec![head(spectra[2]), head(spectra[3])]];
        Rotations {
            geometry,
            model: ModelFingerprint::of_bytes(b"x"),
            config: RotationConfig::default(),
            calibration: String::new(),
            query_key: layers.clone(),
            value_output: layers,
        }
    }

    #[test]
    fn removal_rate_keeps_the_fewest_directions_within_epsilon() {
        // Shares removed by keeping k = 0..=4 of [4,3,2,1] (sum 10): 1, .6, .3, .1, 0; of [7,1,1,1]:
        // 1, .3, .2, .1, 0; of [1,1,1,1]: 1, .75, .5, .25, 0; of [5,0,0,0]: 1, 0, 0, 0, 0.
        let r = rotations([[4.0, 3.0, 2.0, 1.0], [7.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0]]);
        let ranks = |eps| Ranks::from_removal_rate(&r, eps, RankRule::default()).unwrap().query_key;
        assert_eq!(ranks(0.0), vec![vec![4, 4], vec![4, 1]]);
        assert_eq!(ranks(0.1), vec![vec![3, 3], vec![4, 1]]);
        assert_eq!(ranks(0.3), vec![vec![2, 1], vec![3, 1]]);
        assert_eq!(ranks(0.5), vec![vec![2, 1], vec![2, 1]]);
        let rounded = Ranks::from_removal_rate(&r, 0.3, RankRule { min_rank: 2, multiple: 3 }).unwrap();
        assert_eq!(rounded.query_key, vec![vec![3, 3], vec![3, 3]]);
        assert!(Ranks::from_removal_rate(&r, 1.0, RankRule::default()).is_err());
        assert!(Ranks::from_removal_rate(&r, 0.1, RankRule { min_rank: 0, multiple: 1 }).is_err());
    }

    #[test]
    fn compression_rate_counts_kept_elements_and_the_search_meets_it() {
        let r = rotations([[4.0, 3.0, 2.0, 1.0], [7.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0]]);
        let full = Ranks::full(r.geometry);
        assert_eq!(full.compression_rate(), 0.0);
        let at = Ranks::from_removal_rate(&r, 0.3, RankRule::default()).unwrap();
        // Kept: (2 + 1 + 3 + 1) per pair, both pairs: 14 of 32.
        assert_eq!(at.compression_rate(), 1.0 - 14.0 / 32.0);
        for target in [0.1, 0.25, 0.5, 0.6] {
            let (ranks, eps) = Ranks::for_compression_rate(&r, target, RankRule::default()).unwrap();
            assert!(ranks.compression_rate() >= target, "{target}: {}", ranks.compression_rate());
            let below = Ranks::from_removal_rate(&r, (eps - 1e-5).max(0.0), RankRule::default()).unwrap();
            assert!(eps == 0.0 || below.compression_rate() < target, "{target}: ε = {eps} is not the smallest");
        }
        // One kept dimension per head removes 3/4 of the elements; more is impossible.
        assert!(Ranks::for_compression_rate(&r, 0.8, RankRule::default()).is_err());
        assert_ne!(full.digest(), at.digest());
        assert!(at.check(r.geometry).is_ok());
        assert!(at.check(RotationGeometry { layers: 3, ..r.geometry }).is_err());
    }
}
