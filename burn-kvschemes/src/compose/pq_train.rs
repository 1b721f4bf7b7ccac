//! Training [`ReducedCodebooks`]: calibration keys and values reduced on the host by the bases the
//! cache uses, then k-means per subspace of each head's reduced coordinates.

use std::time::Instant;

use burn_kvcompress::{
    cache::{LayerRecording, RecordedTensor},
    fingerprint::ModelFingerprint,
};
use burn_million_pq::{
    codebook::{fit_subspaces, pooled_relative_error, TrainingReport},
    KmeansConfig,
};

use super::{pq_books::check_ranks, ReducedCodebooks, ReducedPqConfig};
use burn_zack::{cache::ZackScheme, rotation::Pair};

use super::ComposeError;

/// Calibration vectors in ZACK's reduced, packed coordinates.
#[derive(Debug, Clone, PartialEq)]
pub struct ReducedSamples {
    /// Per layer, keys `[rows, Σ k_qk]` and values `[rows, Σ k_vo]`, row-major.
    pub layers: Vec<[Vec<f32>; 2]>,
    /// Per layer, the key and value widths `[Σ k_qk, Σ k_vo]`.
    pub widths: Vec<[usize; 2]>,
}

/// Each recorded vector of every KV head times that head's truncated basis of `pair`, heads
/// packed side by side: `[rows, Σ rank]` row-major.
fn reduce_recorded(recorded: &[RecordedTensor], zack: &ZackScheme, pair: Pair, layer: usize) -> Vec<f32> {
    let ranks = match pair {
        Pair::QueryKey => &zack.ranks().query_key[layer],
        Pair::ValueOutput => &zack.ranks().value_output[layer],
    };
    let bases: Vec<Vec<f32>> =
        ranks.iter().enumerate().map(|(h, &r)| zack.rotations().head(pair, layer, h).truncated_basis(r)).collect();
    let mut out = Vec::new();
    for tensor in recorded {
        let per_head: Vec<Vec<&[f32]>> = (0..ranks.len()).map(|h| tensor.head_vectors(h).collect()).collect();
        for row in 0..per_head.first().map_or(0, Vec::len) {
            for ((vectors, basis), &rank) in per_head.iter().zip(&bases).zip(ranks) {
                let mut reduced = vec![0.0f32; rank];
                for (&x, basis_row) in vectors[row].iter().zip(basis.chunks_exact(rank.max(1))) {
                    for (acc, &b) in reduced.iter_mut().zip(basis_row) {
                        *acc += x * b;
                    }
                }
                out.extend(reduced);
            }
        }
    }
    out
}

impl ReducedSamples {
    /// What a [`RecordingScheme`](burn_kvcompress::cache::RecordingScheme) recorded on the
    /// unfolded model (post-RoPE keys, values before `W_V`'s rotation), reduced by `zack`:
    /// keys and values times each KV head's truncated basis, which is what the folded model's
    /// values and the cache's key reduction give.
    pub fn from_recordings(layers: &[LayerRecording], zack: &ZackScheme) -> Result<Self, ComposeError> {
        let g = zack.rotations().geometry;
        if layers.len() != g.layers {
            return Err(ComposeError::Calibration(format!("{} recorded layers for {g}", layers.len())));
        }
        let fits = |t: &RecordedTensor| t.shape[1] == g.kv_heads && t.shape[3] == g.head_dim;
        if let Some(bad) = layers.iter().flat_map(|l| l.keys.iter().chain(&l.values)).find(|t| !fits(t)) {
            return Err(ComposeError::Calibration(format!("recorded shape {:?} does not fit {g}", bad.shape)));
        }
        let mut samples = Self { layers: Vec::with_capacity(g.layers), widths: Vec::with_capacity(g.layers) };
        for (layer, recording) in layers.iter().enumerate() {
            let layout = zack.layout(layer);
            samples.widths.push([layout.key_width(), layout.value_width()]);
            samples.layers.push([
                reduce_recorded(&recording.keys, zack, Pair::QueryKey, layer),
                reduce_recorded(&recording.values, zack, Pair::ValueOutput, layer),
            ]);
        }
        Ok(samples)
    }

    /// Vectors per layer.
    pub fn rows(&self) -> usize {
        self.layers.first().zip(self.widths.first()).map_or(0, |(l, w)| l[0].len() / w[0].max(1))
    }
}

/// One k-means problem: a subspace of one layer's keys or values.
#[derive(Debug, Clone, Copy)]
struct Task {
    layer: usize,
    kind: usize,
    subspace: usize,
}

/// Trains codebooks of `zack`'s reduced coordinates from `samples` (which `zack` reduced), one
/// k-means per subspace of `config.sub_dim` channels, on `threads` threads. `on_iteration` is
/// called once per k-means iteration; the total is `Σ_layers (Σ k_qk + Σ k_vo) / sub_dim ·
/// iterations`.
#[allow(clippy::too_many_arguments)] // Each is one independent choice of the training run.
pub fn train_reduced_codebooks(
    samples: &ReducedSamples,
    config: ReducedPqConfig,
    zack: &ZackScheme,
    kmeans: &KmeansConfig,
    model: ModelFingerprint,
    calibration: String,
    threads: usize,
    on_iteration: &(dyn Fn() + Sync),
) -> Result<(ReducedCodebooks, TrainingReport), ComposeError> {
    let start = Instant::now();
    config.validate()?;
    check_ranks(zack, config)?;
    let layers = zack.ranks().query_key.len();
    let expected: Vec<[usize; 2]> =
        (0..layers).map(|l| [zack.layout(l).key_width(), zack.layout(l).value_width()]).collect();
    if samples.widths != expected {
        return Err(ComposeError::Calibration("the samples were reduced with other ranks".into()));
    }
    let s = config.sub_dim;
    let tasks: Vec<Task> = (0..layers)
        .flat_map(|layer| (0..2).map(move |kind| (layer, kind)))
        .flat_map(|(layer, kind)| (0..expected[layer][kind] / s).map(move |subspace| Task { layer, kind, subspace }))
        .collect();
    let points = |index: usize| -> Vec<f32> {
        let Task { layer, kind, subspace } = tasks[index];
        let width = expected[layer][kind];
        samples.layers[layer][kind]
            .chunks_exact(width)
            .flat_map(|row| &row[subspace * s..(subspace + 1) * s])
            .copied()
            .collect()
    };
    let fits = fit_subspaces(tasks.len(), &points, s, config.centroids(), kmeans, threads, on_iteration)?;
    let mut books = [vec![Vec::new(); layers], vec![Vec::new(); layers]];
    for (task, fit) in tasks.iter().zip(&fits) {
        books[task.kind][task.layer].extend_from_slice(&fit.result.centroids);
    }
    let relative_error = [0, 1]
        .map(|kind| pooled_relative_error(tasks.iter().zip(&fits).filter(|(t, _)| t.kind == kind).map(|(_, f)| f)));
    let [keys, values] = books;
    let codebooks = ReducedCodebooks {
        config,
        model,
        rotations: zack.rotations().digest(),
        ranks: zack.ranks().digest(),
        calibration,
        keys,
        values,
    };
    Ok((codebooks, TrainingReport { seconds: start.elapsed().as_secs_f64(), relative_error }))
}
