//! [`AttentionSamples`]: what a recording prefill saw, kept per window and layer for training.

use burn::tensor::{backend::Backend, Tensor, TensorData};

use super::FinetuneError;
use crate::{
    cache::{LayerRecording, RecordedTensor, RecordingScheme},
    model::{CausalLm, Logits},
};

/// The dimensions of the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleShape {
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// KV heads.
    pub kv_heads: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// Tokens per window (every key and value of the window is kept).
    pub tokens: usize,
    /// Query rows kept per window: the last ones, which attend to the longest contexts.
    pub query_rows: usize,
}

/// One window of one layer, on the host.
#[derive(Debug, Clone, PartialEq)]
struct LayerWindow {
    /// `[heads, query_rows, head_dim]`: post-RoPE queries of the window's last rows.
    queries: Vec<f32>,
    /// `[kv_heads, tokens, head_dim]`: post-RoPE keys.
    keys: Vec<f32>,
    /// `[kv_heads, tokens, head_dim]`: values.
    values: Vec<f32>,
    /// `[heads, query_rows, head_dim]`: the exact attention outputs of those queries.
    outputs: Vec<f32>,
}

/// A batch of windows of one layer as tensors.
#[derive(Debug, Clone)]
pub struct LayerBatch<B: Backend> {
    /// `[windows, heads, query_rows, head_dim]`.
    pub queries: Tensor<B, 4>,
    /// `[windows, kv_heads, tokens, head_dim]`.
    pub keys: Tensor<B, 4>,
    /// `[windows, kv_heads, tokens, head_dim]`.
    pub values: Tensor<B, 4>,
    /// `[windows, heads, query_rows, head_dim]`.
    pub outputs: Tensor<B, 4>,
}

/// Per window of calibration text and per layer, the last `query_rows` queries with their exact
/// attention outputs and every key and value of the window, recorded by a
/// [`RecordingScheme`](crate::cache::RecordingScheme) with `record_queries` during one prefill
/// per batch of equal-length windows.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionSamples {
    shape: SampleShape,
    /// `[window][layer]`.
    windows: Vec<Vec<LayerWindow>>,
}

impl AttentionSamples {
    /// Empty samples for `layers` layers of windows of `tokens` tokens, keeping the last
    /// `query_rows` queries of each (at most `tokens`).
    pub fn new(layers: usize, tokens: usize, query_rows: usize) -> Result<Self, FinetuneError> {
        if layers == 0 || query_rows == 0 || query_rows > tokens {
            return Err(FinetuneError::Samples(format!(
                "{layers} layers, {query_rows} query rows of {tokens}-token windows: need at least one layer and \
                 1..=tokens query rows"
            )));
        }
        let shape = SampleShape { layers, heads: 0, kv_heads: 0, head_dim: 0, tokens, query_rows };
        Ok(Self { shape, windows: Vec::new() })
    }

    /// The dimensions (heads and head_dim are 0 until the first [`add`](Self::add)).
    pub fn shape(&self) -> SampleShape {
        self.shape
    }

    /// Windows held.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Whether no window is held.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Adds the windows of one recorded prefill: per layer exactly one append of keys and values
    /// `[batch, kv_heads, tokens, head_dim]` and one attention call with queries and outputs
    /// `[batch, heads, tokens, head_dim]`. On an error nothing is added.
    pub fn add(&mut self, recordings: &[LayerRecording]) -> Result<(), FinetuneError> {
        let shape = self.shape;
        match self.windows_of(recordings) {
            Ok(windows) => {
                self.windows.extend(windows);
                Ok(())
            }
            Err(e) => {
                self.shape = shape;
                Err(e)
            }
        }
    }

    /// The windows of one recorded prefill (sets the head counts on the first call).
    fn windows_of(&mut self, recordings: &[LayerRecording]) -> Result<Vec<Vec<LayerWindow>>, FinetuneError> {
        if recordings.len() != self.shape.layers {
            return Err(FinetuneError::Samples(format!(
                "{} layers recorded, {} expected",
                recordings.len(),
                self.shape.layers
            )));
        }
        let mut batch_windows: Vec<Vec<LayerWindow>> = Vec::new();
        for (layer, recording) in recordings.iter().enumerate() {
            let [keys, values, queries, outputs] =
                [&recording.keys, &recording.values, &recording.queries, &recording.outputs].map(|r| match &r[..] {
                    [one] => Ok(one),
                    _ => Err(FinetuneError::Samples(format!(
                        "layer {layer}: expected one prefill (one append, one attention call with queries recorded), \
                         found {} recorded tensors",
                        r.len()
                    ))),
                });
            let (keys, values, queries, outputs) = (keys?, values?, queries?, outputs?);
            self.check_shapes(layer, keys, values, queries, outputs)?;
            let [batch, heads, tokens, d] = queries.shape;
            let kv_heads = keys.shape[1];
            let rows = self.shape.query_rows;
            let last_rows = |t: &RecordedTensor, b: usize| -> Vec<f32> {
                (0..heads)
                    .flat_map(|h| {
                        let start = ((b * heads + h) * tokens + tokens - rows) * d;
                        t.values[start..start + rows * d].iter().copied()
                    })
                    .collect()
            };
            let all_rows =
                |t: &RecordedTensor, b: usize| t.values[b * kv_heads * tokens * d..][..kv_heads * tokens * d].to_vec();
            batch_windows.resize_with(batch, Vec::new);
            for (b, window) in batch_windows.iter_mut().enumerate() {
                window.push(LayerWindow {
                    queries: last_rows(queries, b),
                    keys: all_rows(keys, b),
                    values: all_rows(values, b),
                    outputs: last_rows(outputs, b),
                });
            }
        }
        Ok(batch_windows)
    }

    /// Prefills `windows` (token rows of `tokens` tokens each) through `model` as one batch with a
    /// recording cache, adds what it saw, and returns the recordings (for k-means or Gram
    /// matrices).
    pub fn record<B: Backend>(
        &mut self,
        model: &CausalLm<B>,
        windows: &[Vec<u32>],
        device: &B::Device,
    ) -> Result<Vec<LayerRecording>, FinetuneError> {
        let scheme = RecordingScheme { record_queries: true, ..Default::default() };
        let mut caches = model.new_cache(&scheme, windows.len(), device);
        model
            .forward(windows, &mut caches, Logits::Last)
            .map_err(|e| FinetuneError::Samples(format!("recording a prefill: {e}")))?;
        let recordings = scheme.recorder.take();
        self.add(&recordings)?;
        Ok(recordings)
    }

    fn check_shapes(
        &mut self,
        layer: usize,
        keys: &RecordedTensor,
        values: &RecordedTensor,
        queries: &RecordedTensor,
        outputs: &RecordedTensor,
    ) -> Result<(), FinetuneError> {
        let [batch, heads, _, d] = queries.shape;
        let kv_heads = keys.shape[1];
        let s = &mut self.shape;
        if s.heads == 0 {
            (s.heads, s.kv_heads, s.head_dim) = (heads, kv_heads, d);
        }
        let kv_shape = [batch, s.kv_heads, s.tokens, s.head_dim];
        let q_shape = [batch, s.heads, s.tokens, s.head_dim];
        if keys.shape != kv_shape || values.shape != kv_shape || queries.shape != q_shape || outputs.shape != q_shape {
            return Err(FinetuneError::Samples(format!(
                "layer {layer}: keys {:?}, values {:?}, queries {:?}, outputs {:?}; expected keys and values \
                 {kv_shape:?}, queries and outputs {q_shape:?} (windows of {} tokens)",
                keys.shape, values.shape, queries.shape, outputs.shape, s.tokens
            )));
        }
        Ok(())
    }

    /// The mean over layers and windows of `loss(layer, batch)`, a batch being up to
    /// `windows_per_batch` windows of one layer (weighted by their count).
    pub fn mean_loss<B: Backend>(
        &self,
        windows_per_batch: usize,
        device: &B::Device,
        mut loss: impl FnMut(usize, &LayerBatch<B>) -> f64,
    ) -> f64 {
        let all: Vec<usize> = (0..self.len()).collect();
        let mut total = 0.0;
        for layer in 0..self.shape.layers {
            for windows in all.chunks(windows_per_batch.max(1)) {
                total += loss(layer, &self.batch(layer, windows, device)) * windows.len() as f64;
            }
        }
        total / (self.shape.layers * self.len()).max(1) as f64
    }

    /// The windows `windows` of `layer` as tensors on `device`.
    pub fn batch<B: Backend>(&self, layer: usize, windows: &[usize], device: &B::Device) -> LayerBatch<B> {
        let s = self.shape;
        let n = windows.len();
        let gather = |pick: fn(&LayerWindow) -> &Vec<f32>, shape: [usize; 4]| {
            let values: Vec<f32> =
                windows.iter().flat_map(|&w| pick(&self.windows[w][layer]).iter().copied()).collect();
            Tensor::<B, 4>::from_data(TensorData::new(values, shape), device)
        };
        let q_shape = [n, s.heads, s.query_rows, s.head_dim];
        let kv_shape = [n, s.kv_heads, s.tokens, s.head_dim];
        LayerBatch {
            queries: gather(|w| &w.queries, q_shape),
            keys: gather(|w| &w.keys, kv_shape),
            values: gather(|w| &w.values, kv_shape),
            outputs: gather(|w| &w.outputs, q_shape),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::NdArray;

    fn recorded(shape: [usize; 4], offset: f32) -> RecordedTensor {
        let n = shape.iter().product();
        RecordedTensor { shape, values: (0..n).map(|i| i as f32 + offset).collect() }
    }

    /// One layer of one prefill: 2 windows, 4 query / 2 KV heads, `tokens` tokens, head_dim 3.
    fn layer(tokens: usize) -> LayerRecording {
        LayerRecording {
            keys: vec![recorded([2, 2, tokens, 3], 0.0)],
            values: vec![recorded([2, 2, tokens, 3], 0.5)],
            queries: vec![recorded([2, 4, tokens, 3], 0.25)],
            outputs: vec![recorded([2, 4, tokens, 3], 0.75)],
        }
    }

    #[test]
    fn keeps_the_last_query_rows_of_each_window() {
        let mut samples = AttentionSamples::new(1, 5, 2).unwrap();
        samples.add(&[layer(5)]).unwrap();
        assert_eq!(samples.len(), 2);
        let batch = samples.batch::<NdArray>(0, &[1], &Default::default());
        assert_eq!(batch.queries.dims(), [1, 4, 2, 3]);
        assert_eq!(batch.keys.dims(), [1, 2, 5, 3]);
        let q: Vec<f32> = batch.queries.into_data().convert::<f32>().into_vec().unwrap();
        // Window 1, head 0, rows 3 and 4 of 5: flat index ((1·4 + 0)·5 + 3)·3 = 69.
        assert_eq!(&q[..6], &[69.25, 70.25, 71.25, 72.25, 73.25, 74.25]);
        let k: Vec<f32> = batch.keys.into_data().convert::<f32>().into_vec().unwrap();
        assert_eq!(k[0], 30.0, "window 1 starts after 2·5·3 key values");
    }

    #[test]
    fn malformed_recordings_are_errors() {
        assert!(AttentionSamples::new(1, 4, 5).is_err(), "more query rows than tokens");
        let mut samples = AttentionSamples::new(1, 5, 2).unwrap();
        assert!(samples.add(&[layer(4)]).is_err(), "windows of another length");
        assert!(samples.add(&[layer(5), layer(5)]).is_err(), "another layer count");
        let mut decode = layer(5);
        decode.keys.push(recorded([2, 2, 1, 3], 0.0));
        assert!(samples.add(&[decode]).is_err(), "two appends: not one prefill");
        assert!(samples.is_empty(), "failed adds add nothing");
    }
}
