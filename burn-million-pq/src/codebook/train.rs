//! Codebook training: k-means per (layer, K/V, codebook group, subspace) on calibration samples,
//! in parallel over those independent problems.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex, PoisonError,
    },
    time::Instant,
};

use burn_kvcompress::{cache::LayerRecording, fingerprint::ModelFingerprint};

use super::{kmeans, CodebookGeometry, Codebooks, KmeansResult};
use crate::{KmeansConfig, PqConfig, PqError};

/// Calibration vectors: per layer, per kind (K, V), per KV head, rows of `head_dim`.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationSamples {
    /// The model dimensions.
    pub geometry: CodebookGeometry,
    /// `[layer][kind][kv_head]`, rows of `head_dim` (kind 0 = keys, 1 = values).
    pub vectors: Vec<[Vec<Vec<f32>>; 2]>,
}

impl CalibrationSamples {
    /// Gathers what a [`RecordingScheme`](burn_kvcompress::cache::RecordingScheme) recorded.
    pub fn from_recordings(layers: &[LayerRecording]) -> Result<Self, PqError> {
        let first = layers
            .first()
            .and_then(|l| l.keys.first())
            .ok_or_else(|| PqError::Calibration("nothing was recorded (no layer appended any key)".into()))?;
        let [_, kv_heads, _, head_dim] = first.shape;
        let geometry = CodebookGeometry { layers: layers.len(), kv_heads, head_dim };
        let mut vectors = Vec::with_capacity(layers.len());
        for layer in layers {
            let gather = |recorded: &[burn_kvcompress::cache::RecordedTensor]| -> Result<Vec<Vec<f32>>, PqError> {
                let mut heads = vec![Vec::new(); kv_heads];
                for tensor in recorded {
                    if tensor.shape[1] != kv_heads || tensor.shape[3] != head_dim {
                        return Err(PqError::Calibration(format!("recorded shape {:?} differs", tensor.shape)));
                    }
                    for (h, rows) in heads.iter_mut().enumerate() {
                        rows.extend(tensor.head_vectors(h).flatten());
                    }
                }
                Ok(heads)
            };
            vectors.push([gather(&layer.keys)?, gather(&layer.values)?]);
        }
        Ok(Self { geometry, vectors })
    }

    /// Vectors per (layer, kind, KV head).
    pub fn rows_per_head(&self) -> usize {
        self.vectors.first().map_or(0, |l| l[0].first().map_or(0, |h| h.len() / self.geometry.head_dim))
    }
}

/// How training went.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainingReport {
    /// Wall-clock seconds.
    pub seconds: f64,
    /// Per kind (keys, values), per iteration (0 = after initialization): the squared
    /// reconstruction error of head vectors relative to their squared norm, pooled over layers and
    /// codebook groups (`Σ objective / Σ mean squared norm` over every subspace's k-means, measured
    /// on each k-means' evaluation sample).
    pub relative_error: [Vec<f64>; 2],
}

/// One independent k-means problem of [`train_codebooks`].
#[derive(Debug, Clone, Copy)]
struct Task {
    layer: usize,
    kind: usize,
    group: usize,
    subspace: usize,
}

/// A seed per task, derived from the configured seed (splitmix64 of the task's index).
fn task_seed(seed: u64, index: usize) -> u64 {
    let mut z = seed.wrapping_add((index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One subspace's k-means and the scale of its points.
#[derive(Debug, Clone, PartialEq)]
pub struct SubspaceFit {
    /// Centroids and objective per iteration.
    pub result: KmeansResult,
    /// Mean squared norm of the sub-vectors clustered.
    pub mean_squared_norm: f64,
}

/// Runs `problems` independent k-means on `threads` threads: problem `i` clusters `points(i)`
/// (rows of `dim`) into `k` centroids, seeded by splitmix64 of `kmeans_config.seed` and `i`.
/// Returns the fits in problem order; the first failure stops the rest and is returned.
/// `on_iteration` is called once per finished k-means iteration (from any thread).
pub fn fit_subspaces(
    problems: usize,
    points: &(dyn Fn(usize) -> Vec<f32> + Sync),
    dim: usize,
    k: usize,
    kmeans_config: &KmeansConfig,
    threads: usize,
    on_iteration: &(dyn Fn() + Sync),
) -> Result<Vec<SubspaceFit>, PqError> {
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(problems));
    let error = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= problems {
                    break;
                }
                let points = points(index);
                let norm = points.iter().map(|&x| (x * x) as f64).sum::<f64>() / (points.len() / dim).max(1) as f64;
                match kmeans(&points, dim, k, kmeans_config, task_seed(kmeans_config.seed, index), on_iteration) {
                    Ok(result) => results
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((index, SubspaceFit { result, mean_squared_norm: norm })),
                    Err(e) => {
                        *error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                        next.store(problems, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    if let Some(e) = error.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(e);
    }
    let mut fits = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    fits.sort_by_key(|(index, _)| *index);
    Ok(fits.into_iter().map(|(_, fit)| fit).collect())
}

/// Per iteration, the squared reconstruction error of `fits` pooled relative to their squared
/// norms: `Σ objective / Σ mean squared norm`.
pub fn pooled_relative_error<'a>(fits: impl IntoIterator<Item = &'a SubspaceFit>) -> Vec<f64> {
    let (mut errors, mut norms) = (Vec::<f64>::new(), 0.0f64);
    for fit in fits {
        errors.resize(errors.len().max(fit.result.objective.len()), 0.0);
        for (sum, value) in errors.iter_mut().zip(&fit.result.objective) {
            *sum += value;
        }
        norms += fit.mean_squared_norm;
    }
    errors.iter().map(|e| e / norms.max(f64::MIN_POSITIVE)).collect()
}

/// Trains key and value codebooks for every layer from `samples`, on `threads` threads.
///
/// `on_iteration` is called once per finished k-means iteration (from any thread); the total is
/// `layers * 2 * groups * subspaces * iterations`.
pub fn train_codebooks(
    samples: &CalibrationSamples,
    config: PqConfig,
    kmeans_config: &KmeansConfig,
    model: ModelFingerprint,
    calibration: String,
    threads: usize,
    on_iteration: &(dyn Fn() + Sync),
) -> Result<(Codebooks, TrainingReport), PqError> {
    let start = Instant::now();
    let geometry = samples.geometry;
    config.validate(geometry.head_dim)?;
    let groups = config.scope.groups(geometry.kv_heads);
    let heads_per_group = geometry.kv_heads / groups;
    let (d, ds, k) = (geometry.head_dim, config.sub_dim(geometry.head_dim), config.centroids());
    let book_len = groups * config.subspaces * k * ds;
    let mut books = Codebooks {
        config,
        geometry,
        model,
        calibration,
        keys: vec![vec![0.0; book_len]; geometry.layers],
        values: vec![vec![0.0; book_len]; geometry.layers],
    };
    let tasks: Vec<Task> = (0..geometry.layers)
        .flat_map(|layer| (0..2).map(move |kind| (layer, kind)))
        .flat_map(|(layer, kind)| (0..groups).map(move |group| (layer, kind, group)))
        .flat_map(|(layer, kind, group)| {
            (0..config.subspaces).map(move |subspace| Task { layer, kind, group, subspace })
        })
        .collect();
    let points = |index: usize| -> Vec<f32> {
        let task = tasks[index];
        let heads = &samples.vectors[task.layer][task.kind][task.group * heads_per_group..][..heads_per_group];
        heads
            .iter()
            .flat_map(|rows| rows.chunks_exact(d))
            .flat_map(|row| &row[task.subspace * ds..(task.subspace + 1) * ds])
            .copied()
            .collect()
    };
    let fits = fit_subspaces(tasks.len(), &points, ds, k, kmeans_config, threads, on_iteration)?;
    for (task, fit) in tasks.iter().zip(&fits) {
        let book = match task.kind {
            0 => &mut books.keys[task.layer],
            _ => &mut books.values[task.layer],
        };
        let offset = (task.group * config.subspaces + task.subspace) * k * ds;
        book[offset..offset + k * ds].copy_from_slice(&fit.result.centroids);
    }
    let relative_error = [0, 1]
        .map(|kind| pooled_relative_error(tasks.iter().zip(&fits).filter(|(t, _)| t.kind == kind).map(|(_, f)| f)));
    Ok((books, TrainingReport { seconds: start.elapsed().as_secs_f64(), relative_error }))
}
