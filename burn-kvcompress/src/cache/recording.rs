//! A dense cache that also records what passes through it: the post-RoPE keys and values of every
//! append and the queries and outputs of every attention call. Calibration (PQ codebooks, SVD
//! rotations) runs the model over text with this scheme and reads the samples afterwards.

use std::sync::{Arc, Mutex, PoisonError};

use burn::tensor::{backend::Backend, Tensor};

use super::{AttendOptions, CacheGeometry, DenseCache, KvCache, KvScheme};
use crate::{backend::host_f32, error::CacheError};

/// One recorded tensor on the host, `[batch, heads, tokens, head_dim]` (heads are KV heads for
/// keys and values, query heads for queries).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedTensor {
    /// `[batch, heads, tokens, head_dim]`.
    pub shape: [usize; 4],
    /// Row-major values.
    pub values: Vec<f32>,
}

impl RecordedTensor {
    fn of<B: Backend>(tensor: &Tensor<B, 4>) -> Self {
        let values = host_f32(tensor.clone());
        Self { shape: tensor.dims(), values }
    }

    /// The vectors of head `head`, each `head_dim` long, for every batch row and token.
    pub fn head_vectors(&self, head: usize) -> impl Iterator<Item = &[f32]> {
        let [batch, heads, tokens, dim] = self.shape;
        (0..batch).flat_map(move |b| {
            let start = (b * heads + head) * tokens * dim;
            self.values[start..start + tokens * dim].chunks_exact(dim)
        })
    }
}

/// What one layer saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayerRecording {
    /// Appended keys, one entry per append.
    pub keys: Vec<RecordedTensor>,
    /// Appended values, one entry per append.
    pub values: Vec<RecordedTensor>,
    /// Queries of attention calls, one entry per call (only when queries are recorded).
    pub queries: Vec<RecordedTensor>,
    /// Attention outputs of those calls, `[batch, heads, q_len, head_dim]` (only when queries
    /// are recorded).
    pub outputs: Vec<RecordedTensor>,
}

/// Shared sink of a [`RecordingScheme`]: one [`LayerRecording`] per layer.
#[derive(Debug, Clone, Default)]
pub struct KvRecorder(Arc<Mutex<Vec<LayerRecording>>>);

impl KvRecorder {
    fn with_layer(&self, layer: usize, f: impl FnOnce(&mut LayerRecording)) {
        let mut layers = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if layers.len() <= layer {
            layers.resize_with(layer + 1, LayerRecording::default);
        }
        f(&mut layers[layer]);
    }

    /// Takes everything recorded so far (index = layer), leaving the recorder empty.
    pub fn take(&self) -> Vec<LayerRecording> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The dense scheme, recording into a [`KvRecorder`].
#[derive(Debug, Clone, Default)]
pub struct RecordingScheme {
    /// Where the samples go.
    pub recorder: KvRecorder,
    /// Whether queries and attention outputs are recorded too (keys and values always are).
    pub record_queries: bool,
}

/// A [`DenseCache`] that copies every append (and, if asked, every query) to the host.
#[derive(Debug)]
pub struct RecordingCache<B: Backend> {
    inner: DenseCache<B>,
    layer: usize,
    scheme: RecordingScheme,
}

impl<B: Backend> KvCache<B> for RecordingCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.inner.append(k.clone(), v.clone())?;
        self.scheme.recorder.with_layer(self.layer, |rec| {
            rec.keys.push(RecordedTensor::of(&k));
            rec.values.push(RecordedTensor::of(&v));
        });
        Ok(())
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        let queries = self.scheme.record_queries.then(|| RecordedTensor::of(&q));
        let out = self.inner.attend(q, options)?;
        if let Some(queries) = queries {
            let outputs = RecordedTensor::of(&out);
            self.scheme.recorder.with_layer(self.layer, |rec| {
                rec.queries.push(queries);
                rec.outputs.push(outputs);
            });
        }
        Ok(out)
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }
}

impl<B: Backend> KvScheme<B> for RecordingScheme {
    type Cache = RecordingCache<B>;

    fn new_cache(&self, layer: usize, geometry: CacheGeometry, _device: &B::Device) -> RecordingCache<B> {
        RecordingCache { inner: DenseCache::new(geometry), layer, scheme: self.clone() }
    }

    fn name(&self) -> String {
        "dense (recording)".into()
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Tensor};

    use super::*;
    use crate::backend::NdArray;

    #[test]
    fn records_appends_and_queries_per_layer_and_attends_like_dense() {
        let device = Default::default();
        let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: 8 };
        let scheme = RecordingScheme { record_queries: true, ..Default::default() };
        let mut recording = KvScheme::<NdArray>::new_cache(&scheme, 1, geometry, &device);
        let mut dense = DenseCache::<NdArray>::new(geometry);
        let k = Tensor::<NdArray, 4>::random([2, 2, 5, 8], Distribution::Default, &device);
        let v = Tensor::<NdArray, 4>::random([2, 2, 5, 8], Distribution::Default, &device);
        let q = Tensor::<NdArray, 4>::random([2, 4, 5, 8], Distribution::Default, &device);
        recording.append(k.clone(), v.clone()).unwrap();
        dense.append(k.clone(), v).unwrap();
        let options = AttendOptions { scale: 0.3, key_start: vec![0, 1], window: None };
        let a = recording.attend(q.clone(), &options).unwrap();
        let a_recorded = RecordedTensor::of(&a);
        let b = dense.attend(q, &options).unwrap();
        a.into_data().assert_eq(&b.into_data(), true);

        let layers = scheme.recorder.take();
        assert_eq!(layers.len(), 2);
        assert_eq!(layers[0], LayerRecording::default());
        assert_eq!((layers[1].keys.len(), layers[1].values.len(), layers[1].queries.len()), (1, 1, 1));
        assert_eq!(layers[1].outputs, vec![a_recorded]);
        let keys = &layers[1].keys[0];
        assert_eq!(keys.shape, [2, 2, 5, 8]);
        let head1: Vec<&[f32]> = keys.head_vectors(1).collect();
        assert_eq!(head1.len(), 10);
        let host = k.into_data().into_vec::<f32>().unwrap();
        // Batch row 1, head 1, token 0 is vector 5 of head 1's iterator.
        let start = ((2 + 1) * 5) * 8;
        assert_eq!(head1[5], &host[start..start + 8]);
        assert!(scheme.recorder.take().is_empty());
    }
}
