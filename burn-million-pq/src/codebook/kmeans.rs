//! Mini-batch k-means with k-means++ initialization, on the host, seeded.

use rand::{rngs::StdRng, Rng, SeedableRng};

use super::nearest_centroid;
use crate::{KmeansConfig, PqError};

/// Centroids and how the objective moved.
#[derive(Debug, Clone, PartialEq)]
pub struct KmeansResult {
    /// `k` rows of `dim`.
    pub centroids: Vec<f32>,
    /// Mean squared distance of the evaluation sample to its nearest centroid: after the
    /// initialization, then after each mini-batch iteration (`iterations + 1` entries).
    pub objective: Vec<f64>,
}

/// Mean squared distance of `points` (rows of `dim`) to their nearest centroid.
fn objective(points: &[f32], dim: usize, centroids: &[f32]) -> f64 {
    let rows = points.len() / dim;
    let total: f64 = points
        .chunks_exact(dim)
        .map(|x| {
            let c = nearest_centroid(x, centroids) as usize;
            x.iter().zip(&centroids[c * dim..(c + 1) * dim]).map(|(a, b)| ((a - b) * (a - b)) as f64).sum::<f64>()
        })
        .sum();
    total / rows.max(1) as f64
}

fn squared_distance(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// `count` distinct row indices of `0..rows` (all of them, shuffled, when `count >= rows`).
fn sample_rows(rows: usize, count: usize, rng: &mut StdRng) -> Vec<usize> {
    let mut index: Vec<usize> = (0..rows).collect();
    let count = count.min(rows);
    for i in 0..count {
        let j = rng.random_range(i..rows);
        index.swap(i, j);
    }
    index.truncate(count);
    index
}

/// k-means++: the first centroid uniformly, each next one with probability proportional to its
/// squared distance from the nearest centroid chosen so far.
fn kmeans_plus_plus(points: &[f32], dim: usize, k: usize, rng: &mut StdRng) -> Vec<f32> {
    let rows = points.len() / dim;
    let row = |i: usize| &points[i * dim..(i + 1) * dim];
    let mut centroids = Vec::with_capacity(k * dim);
    centroids.extend_from_slice(row(rng.random_range(0..rows)));
    let mut dist: Vec<f32> = (0..rows).map(|i| squared_distance(row(i), &centroids[..dim])).collect();
    for _ in 1..k {
        let total: f64 = dist.iter().map(|&d| d as f64).sum();
        let chosen = if total > 0.0 {
            let mut target = rng.random::<f64>() * total;
            dist.iter()
                .position(|&d| {
                    target -= d as f64;
                    target < 0.0
                })
                .unwrap_or(rows - 1)
        } else {
            // Every point already coincides with a centroid: any choice is as good.
            rng.random_range(0..rows)
        };
        let start = centroids.len();
        centroids.extend_from_slice(row(chosen));
        for (i, d) in dist.iter_mut().enumerate() {
            *d = d.min(squared_distance(row(i), &centroids[start..start + dim]));
        }
    }
    centroids
}

/// Clusters `points` (rows of `dim`) into `k` centroids.
///
/// k-means++ on at most `init_sample` rows, then `iterations` mini-batch updates (each centroid
/// moves toward its assigned batch points with a per-centroid rate `1 / times assigned`). Every
/// random choice comes from `seed`, so a run is reproducible. Fails when there are fewer rows than
/// centroids.
pub fn kmeans(
    points: &[f32],
    dim: usize,
    k: usize,
    config: &KmeansConfig,
    seed: u64,
    mut on_iteration: impl FnMut(),
) -> Result<KmeansResult, PqError> {
    let rows = points.len() / dim;
    if dim == 0 || !points.len().is_multiple_of(dim) {
        return Err(PqError::Calibration(format!("{} values do not make rows of {dim}", points.len())));
    }
    if rows < k {
        return Err(PqError::Calibration(format!(
            "{rows} calibration vectors for {k} centroids; calibrate on more text"
        )));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let gather = |index: &[usize]| -> Vec<f32> {
        index.iter().flat_map(|&i| &points[i * dim..(i + 1) * dim]).copied().collect()
    };
    let init = gather(&sample_rows(rows, config.init_sample.max(k), &mut rng));
    let eval = gather(&sample_rows(rows, config.eval_sample.max(1), &mut rng));
    let mut centroids = kmeans_plus_plus(&init, dim, k, &mut rng);
    let mut objective_history = vec![objective(&eval, dim, &centroids)];
    let mut counts = vec![0u64; k];
    let mut assigned = Vec::new();
    for _ in 0..config.iterations {
        let batch = gather(&sample_rows(rows, config.batch_size.max(1), &mut rng));
        assigned.clear();
        assigned.extend(batch.chunks_exact(dim).map(|x| nearest_centroid(x, &centroids) as usize));
        for (x, &c) in batch.chunks_exact(dim).zip(&assigned) {
            counts[c] += 1;
            let rate = 1.0 / counts[c] as f32;
            for (centroid, &value) in centroids[c * dim..(c + 1) * dim].iter_mut().zip(x) {
                *centroid += rate * (value - *centroid);
            }
        }
        objective_history.push(objective(&eval, dim, &centroids));
        on_iteration();
    }
    Ok(KmeansResult { centroids, objective: objective_history })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points around `centers` with uniform noise of half-width `noise`.
    fn blobs(centers: &[[f32; 2]], per: usize, noise: f32, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut points = Vec::new();
        for _ in 0..per {
            for c in centers {
                points.push(c[0] + rng.random_range(-noise..noise));
                points.push(c[1] + rng.random_range(-noise..noise));
            }
        }
        points
    }

    #[test]
    fn finds_separated_clusters_and_lowers_the_objective() {
        let centers = [[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]];
        let points = blobs(&centers, 300, 0.5, 1);
        let config = KmeansConfig { iterations: 30, batch_size: 256, ..KmeansConfig::default() };
        let result = kmeans(&points, 2, 4, &config, 7, || {}).unwrap();
        for c in centers {
            let nearest = nearest_centroid(&c, &result.centroids) as usize;
            let found = &result.centroids[nearest * 2..nearest * 2 + 2];
            assert!(squared_distance(&c, found) < 0.05, "{c:?} -> {found:?}");
        }
        // Uniform noise of half-width 0.5 per axis: E[d²] = 2 * 0.5² / 3 ≈ 0.167.
        let last = *result.objective.last().unwrap();
        assert!(last < 0.2, "objective {last}");
        assert!(last <= result.objective[0] + 1e-9);
        assert_eq!(result.objective.len(), 31);
    }

    #[test]
    fn is_reproducible_per_seed() {
        let points = blobs(&[[0.0, 0.0], [3.0, 1.0], [1.0, 4.0]], 100, 1.5, 2);
        let config = KmeansConfig { iterations: 10, batch_size: 64, ..KmeansConfig::default() };
        let a = kmeans(&points, 2, 8, &config, 3, || {}).unwrap();
        let b = kmeans(&points, 2, 8, &config, 3, || {}).unwrap();
        let c = kmeans(&points, 2, 8, &config, 4, || {}).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.centroids, c.centroids);
    }

    #[test]
    fn rejects_too_few_points_and_ragged_rows() {
        let config = KmeansConfig::default();
        assert!(matches!(kmeans(&[0.0; 6], 2, 4, &config, 0, || {}), Err(PqError::Calibration(_))));
        assert!(matches!(kmeans(&[0.0; 7], 2, 2, &config, 0, || {}), Err(PqError::Calibration(_))));
        // Identical points: k-means++ still returns k centroids without dividing by zero.
        let same = kmeans(&[1.0; 20], 2, 4, &config, 0, || {}).unwrap();
        assert!(same.centroids.iter().all(|&x| x == 1.0));
    }
}
