//! Searching the removal rate ε against a quality budget: the largest ε whose ranks keep a
//! caller-supplied metric (held-out perplexity, typically) within the budget.

use crate::{rotation::Rotations, RankRule, Ranks, ZackError};

/// One evaluated point of a search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchPoint {
    /// The removal rate ε.
    pub epsilon: f64,
    /// The overall compression rate its ranks give.
    pub compression_rate: f64,
    /// The metric at those ranks.
    pub value: f64,
}

/// What [`search_removal_rate`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct RateSearch {
    /// The ranks of the best point within the budget (full rank if none was).
    pub ranks: Ranks,
    /// That point (ε = 0 and no value if nothing within the budget was evaluated).
    pub best: Option<SearchPoint>,
    /// Every evaluated point, in order.
    pub points: Vec<SearchPoint>,
}

/// Bisection over ε in `[0, max_epsilon]` for the largest ε whose ranks keep `evaluate(ranks) ≤
/// budget`, assuming the metric grows with ε (fewer kept dimensions). Evaluates `max_epsilon`
/// first, then `steps` bisection points; ranks that repeat a point already evaluated are not
/// evaluated again.
pub fn search_removal_rate<E: From<ZackError>>(
    rotations: &Rotations,
    rule: RankRule,
    budget: f64,
    max_epsilon: f64,
    steps: usize,
    mut evaluate: impl FnMut(&Ranks) -> Result<f64, E>,
) -> Result<RateSearch, E> {
    let mut points: Vec<(SearchPoint, Ranks)> = Vec::new();
    let mut point = |epsilon: f64| -> Result<(SearchPoint, bool), E> {
        let ranks = Ranks::from_removal_rate(rotations, epsilon, rule)?;
        if let Some((seen, _)) = points.iter().find(|(_, r)| *r == ranks) {
            return Ok((SearchPoint { epsilon, ..*seen }, seen.value <= budget));
        }
        let value = evaluate(&ranks)?;
        let p = SearchPoint { epsilon, compression_rate: ranks.compression_rate(), value };
        points.push((p, ranks));
        Ok((p, value <= budget))
    };
    let (mut low, mut high) = (0.0, max_epsilon);
    let mut best: Option<SearchPoint> = None;
    let (top, fits) = point(max_epsilon)?;
    if fits {
        best = Some(top);
    } else {
        for _ in 0..steps {
            let mid = 0.5 * (low + high);
            let (p, fits) = point(mid)?;
            if fits {
                low = mid;
                best = Some(p);
            } else {
                high = mid;
            }
        }
    }
    let ranks = match best {
        Some(p) => Ranks::from_removal_rate(rotations, p.epsilon, rule)?,
        None => Ranks::full(rotations.geometry),
    };
    Ok(RateSearch { ranks, best, points: points.into_iter().map(|(p, _)| p).collect() })
}

#[cfg(test)]
mod tests {
    use burn_kvcompress::fingerprint::ModelFingerprint;

    use super::*;
    use crate::rotation::{HeadRotation, RotationConfig, RotationGeometry};

    fn rotations() -> Rotations {
        let geometry = RotationGeometry { layers: 1, heads: 2, kv_heads: 2, head_dim: 8 };
        let head = |decay: f32| HeadRotation {
            basis: vec![0.0; 64],
            singular_values: (0..8).map(|j| decay.powi(j)).collect(),
            mean: vec![0.0; 8],
        };
        Rotations {
            geometry,
            model: ModelFingerprint::of_bytes(b"s"),
            config: RotationConfig::default(),
            calibration: String::new(),
            query_key: vec![vec![head(0.5), head(0.8)]],
            value_output: vec![vec![head(0.6), head(0.9)]],
        }
    }

    #[test]
    fn finds_the_largest_rate_within_the_budget() {
        let r = rotations();
        // The metric: 10 plus the compression rate (monotone in ε).
        let metric = |ranks: &Ranks| Ok::<f64, ZackError>(10.0 + ranks.compression_rate());
        let found = search_removal_rate(&r, RankRule::default(), 10.4, 0.9, 10, metric).unwrap();
        let best = found.best.unwrap();
        assert!(best.value <= 10.4 && best.compression_rate == found.ranks.compression_rate());
        // No evaluated point within the budget compresses more.
        assert!(found.points.iter().filter(|p| p.value <= 10.4).all(|p| p.compression_rate <= best.compression_rate));
        // A little more ε leaves the budget (to the bisection's resolution of 0.9 / 2^10).
        let next = Ranks::from_removal_rate(&r, best.epsilon + 0.9 / 1024.0 * 2.0, RankRule::default()).unwrap();
        assert!(10.0 + next.compression_rate() > 10.4 || next == found.ranks);

        let everything = search_removal_rate(&r, RankRule::default(), 100.0, 0.9, 10, metric).unwrap();
        assert_eq!((everything.points.len(), everything.best.unwrap().epsilon), (1, 0.9));
        let nothing = search_removal_rate(&r, RankRule::default(), 1.0, 0.9, 3, metric).unwrap();
        assert_eq!((nothing.best, nothing.ranks), (None, Ranks::full(r.geometry)));
    }
}
