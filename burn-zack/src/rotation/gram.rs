//! Gram matrices of the calibration activations, accumulated batch by batch so that recordings
//! can be dropped as soon as they are counted.

use burn_kvcompress::cache::{LayerRecording, RecordedTensor};

use super::RotationGeometry;
use crate::ZackError;

/// `Σ x xᵀ` over every recorded vector, per layer and KV head, in f64: of the post-RoPE queries
/// of the KV head's query group, of its post-RoPE keys, and of its values.
#[derive(Debug, Clone, PartialEq)]
pub struct GramAccumulator {
    geometry: RotationGeometry,
    /// `[layer][kv_head]`, `head_dim²` row-major (only the upper triangle is filled).
    queries: Vec<Vec<Vec<f64>>>,
    keys: Vec<Vec<Vec<f64>>>,
    values: Vec<Vec<Vec<f64>>>,
    /// Key vectors counted per (layer, KV head): calibration tokens times batch rows.
    tokens: usize,
}

/// Which recorded tensor a Gram matrix sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    Queries,
    Keys,
    Values,
}

impl GramAccumulator {
    /// Empty sums for `geometry`.
    pub fn new(geometry: RotationGeometry) -> Self {
        let zeros = vec![vec![vec![0.0; geometry.head_dim * geometry.head_dim]; geometry.kv_heads]; geometry.layers];
        Self { geometry, queries: zeros.clone(), keys: zeros.clone(), values: zeros, tokens: 0 }
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

    /// The Gram matrix of one activation, (`layer`, `kv_head`), upper triangle filled.
    pub(crate) fn gram(&self, activation: Activation, layer: usize, kv_head: usize) -> &[f64] {
        match activation {
            Activation::Queries => &self.queries[layer][kv_head],
            Activation::Keys => &self.keys[layer][kv_head],
            Activation::Values => &self.values[layer][kv_head],
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
        if layers.iter().any(|l| tokens(&l.keys) != added || tokens(&l.values) != added || tokens(&l.queries) != added)
        {
            return Err(ZackError::Calibration(
                "layers recorded different numbers of queries, keys and values (record prefill passes only)".into(),
            ));
        }
        let threads = std::thread::available_parallelism().map_or(1, usize::from).min(g.layers).max(1);
        let mut work: Vec<_> = self
            .queries
            .iter_mut()
            .zip(self.keys.iter_mut())
            .zip(self.values.iter_mut())
            .zip(layers)
            .map(|(((q, k), v), rec)| (q, k, v, rec))
            .collect();
        let per_thread = work.len().div_ceil(threads);
        std::thread::scope(|scope| {
            for chunk in work.chunks_mut(per_thread) {
                scope.spawn(move || {
                    for (q, k, v, rec) in chunk.iter_mut() {
                        for tensor in &rec.queries {
                            for head in 0..g.heads {
                                add_outer_products(&mut q[head / g.group()], tensor.head_vectors(head), g.head_dim);
                            }
                        }
                        for (sums, tensors) in [(&mut **k, &rec.keys), (&mut **v, &rec.values)] {
                            for tensor in tensors {
                                for (head, sum) in sums.iter_mut().enumerate() {
                                    add_outer_products(sum, tensor.head_vectors(head), g.head_dim);
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

/// `gram += Σ x xᵀ` over `vectors` (upper triangle only).
fn add_outer_products<'a>(gram: &mut [f64], vectors: impl Iterator<Item = &'a [f32]>, dim: usize) {
    let mut x = vec![0.0f64; dim];
    for vector in vectors {
        for (slot, &value) in x.iter_mut().zip(vector) {
            *slot = f64::from(value);
        }
        for i in 0..dim {
            let xi = x[i];
            let row = &mut gram[i * dim + i..(i + 1) * dim];
            for (acc, &xj) in row.iter_mut().zip(&x[i..]) {
                *acc += xi * xj;
            }
        }
    }
}
