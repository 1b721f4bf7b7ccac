//! Gram matrices of the calibration activations, accumulated batch by batch so that recordings
//! can be dropped as soon as they are counted.

use burn_kvcompress::cache::{LayerRecording, RecordedTensor};

use super::RotationGeometry;
use crate::ZackError;

/// First and second moments of a set of vectors: `Σ x` and `Σ x xᵀ`, in f64.
#[derive(Debug, Clone, PartialEq)]
pub struct Moments {
    /// Vectors counted.
    pub count: usize,
    /// `Σ x`, `head_dim` long.
    pub sum: Vec<f64>,
    /// `Σ x xᵀ`, `head_dim²` row-major (only the upper triangle is filled).
    pub gram: Vec<f64>,
}

impl Moments {
    fn new(dim: usize) -> Self {
        Self { count: 0, sum: vec![0.0; dim], gram: vec![0.0; dim * dim] }
    }

    /// The mean vector (zeros before any vector is counted).
    pub fn mean(&self) -> Vec<f64> {
        self.sum.iter().map(|s| s / self.count.max(1) as f64).collect()
    }

    /// `Σ (x − μ)(x − μ)ᵀ = Σ x xᵀ − n μ μᵀ` (upper triangle).
    pub fn centered_gram(&self) -> Vec<f64> {
        let d = self.sum.len();
        let mean = self.mean();
        let n = self.count as f64;
        let mut gram = self.gram.clone();
        for i in 0..d {
            for j in i..d {
                gram[i * d + j] -= n * mean[i] * mean[j];
            }
        }
        gram
    }

    /// Counts `vectors`.
    fn add<'a>(&mut self, vectors: impl Iterator<Item = &'a [f32]>) {
        let dim = self.sum.len();
        let mut x = vec![0.0f64; dim];
        for vector in vectors {
            for (slot, &value) in x.iter_mut().zip(vector) {
                *slot = f64::from(value);
            }
            for i in 0..dim {
                let xi = x[i];
                self.sum[i] += xi;
                let row = &mut self.gram[i * dim + i..(i + 1) * dim];
                for (acc, &xj) in row.iter_mut().zip(&x[i..]) {
                    *acc += xi * xj;
                }
            }
            self.count += 1;
        }
    }
}

/// Moments of every recorded vector, per layer and KV head: of the post-RoPE queries of the KV
/// head's query group, of its post-RoPE keys, of its values, and of the attention outputs of its
/// query group.
#[derive(Debug, Clone, PartialEq)]
pub struct GramAccumulator {
    geometry: RotationGeometry,
    /// `[layer][kv_head]`.
    queries: Vec<Vec<Moments>>,
    keys: Vec<Vec<Moments>>,
    values: Vec<Vec<Moments>>,
    outputs: Vec<Vec<Moments>>,
    /// Key vectors counted per (layer, KV head): calibration tokens times batch rows.
    tokens: usize,
}

/// Which recorded tensor a Gram matrix sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    Queries,
    Keys,
    Values,
    Outputs,
}

impl GramAccumulator {
    /// Empty sums for `geometry`.
    pub fn new(geometry: RotationGeometry) -> Self {
        let zeros = vec![vec![Moments::new(geometry.head_dim); geometry.kv_heads]; geometry.layers];
        Self { geometry, queries: zeros.clone(), keys: zeros.clone(), values: zeros.clone(), outputs: zeros, tokens: 0 }
    }

    /// An accumulator for the geometry the recordings show (layers, query and KV heads, head
    /// dimension), with them added.
    pub fn from_recordings(layers: &[LayerRecording]) -> Result<Self, ZackError> {
        let first = layers.first().ok_or_else(|| ZackError::Calibration("no layer was recorded".into()))?;
        let (Some(q), Some(k)) = (first.queries.first(), first.keys.first()) else {
            return Err(ZackError::Calibration("nothing was recorded (were queries recorded?)".into()));
        };
        let geometry =
            RotationGeometry { layers: layers.len(), heads: q.shape[1], kv_heads: k.shape[1], head_dim: k.shape[3] };
        if geometry.kv_heads == 0 || !geometry.heads.is_multiple_of(geometry.kv_heads) {
            return Err(ZackError::Calibration(format!(
                "recorded {} query heads for {} KV heads",
                q.shape[1], k.shape[1]
            )));
        }
        let mut grams = Self::new(geometry);
        grams.add(layers)?;
        Ok(grams)
    }

    /// The geometry the sums are for.
    pub fn geometry(&self) -> RotationGeometry {
        self.geometry
    }

    /// Token vectors counted per (layer, KV head) so far.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// The moments of one activation at (`layer`, `kv_head`).
    pub(crate) fn moments(&self, activation: Activation, layer: usize, kv_head: usize) -> &Moments {
        match activation {
            Activation::Queries => &self.queries[layer][kv_head],
            Activation::Keys => &self.keys[layer][kv_head],
            Activation::Values => &self.values[layer][kv_head],
            Activation::Outputs => &self.outputs[layer][kv_head],
        }
    }

    /// Adds what a `RecordingScheme` with `record_queries` recorded (index = layer), one thread
    /// per layer up to the available cores.
    pub fn add(&mut self, layers: &[LayerRecording]) -> Result<(), ZackError> {
        let g = self.geometry;
        if layers.len() != g.layers {
            return Err(ZackError::Calibration(format!("{} recorded layers for {g}", layers.len())));
        }
        for layer in layers {
            for (what, tensors, heads) in [
                ("queries", &layer.queries, g.heads),
                ("keys", &layer.keys, g.kv_heads),
                ("values", &layer.values, g.kv_heads),
            ] {
                if let Some(bad) = tensors.iter().find(|t| t.shape[1] != heads || t.shape[3] != g.head_dim) {
                    return Err(ZackError::Calibration(format!(
                        "recorded {what} of shape {:?} for {g} (were queries recorded?)",
                        bad.shape
                    )));
                }
            }
        }
        let tokens = |tensors: &[RecordedTensor]| tensors.iter().map(|t| t.shape[0] * t.shape[2]).sum::<usize>();
        let added = layers.first().map_or(0, |l| tokens(&l.keys));
        let counts = |l: &LayerRecording| [&l.keys, &l.values, &l.queries, &l.outputs].map(|t| tokens(t));
        if layers.iter().any(|l| counts(l).iter().any(|&n| n != added)) {
            return Err(ZackError::Calibration(
                "layers recorded different numbers of queries, keys, values and outputs (record prefill passes only)"
                    .into(),
            ));
        }
        let threads = std::thread::available_parallelism().map_or(1, usize::from).min(g.layers).max(1);
        let mut work: Vec<_> = self
            .queries
            .iter_mut()
            .zip(self.keys.iter_mut())
            .zip(self.values.iter_mut())
            .zip(self.outputs.iter_mut())
            .zip(layers)
            .map(|((((q, k), v), o), rec)| (q, k, v, o, rec))
            .collect();
        let per_thread = work.len().div_ceil(threads);
        std::thread::scope(|scope| {
            for chunk in work.chunks_mut(per_thread) {
                scope.spawn(move || {
                    for (q, k, v, o, rec) in chunk.iter_mut() {
                        // Query-head activations pool into their KV head's moments.
                        for (sums, tensors) in [(&mut **q, &rec.queries), (&mut **o, &rec.outputs)] {
                            for tensor in tensors {
                                for head in 0..g.heads {
                                    sums[head / g.group()].add(tensor.head_vectors(head));
                                }
                            }
                        }
                        for (sums, tensors) in [(&mut **k, &rec.keys), (&mut **v, &rec.values)] {
                            for tensor in tensors {
                                for (head, sum) in sums.iter_mut().enumerate() {
                                    sum.add(tensor.head_vectors(head));
                                }
                            }
                        }
                    }
                });
            }
        });
        self.tokens += added;
        Ok(())
    }
}
