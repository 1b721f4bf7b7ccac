//! A prefill engine without a model, for protocol tests and transfer benchmarks: deterministic
//! dense-cache-shaped states derived from the prompt.

use std::time::Duration;

use burn_kvcompress::cache::{LayerState, StateDType, StateTensor};

use super::PrefillEngine;
use crate::descriptor::SchemeDescriptor;
use crate::wire::ModelShape;

/// Publishes [`SyntheticPrefill::state`] for every layer, `per_layer` apart. The states of the
/// last prompt are kept and published as shared buffers (no copy), so a benchmark repeating a
/// prompt measures transfer, not generation.
#[derive(Debug, Clone)]
pub struct SyntheticPrefill {
    /// The dimensions of the states.
    pub shape: ModelShape,
    /// What the states claim to be.
    pub descriptor: SchemeDescriptor,
    /// Simulated compute time per layer.
    pub per_layer: Duration,
    memo: Option<(Vec<u32>, Vec<LayerState>)>,
}

impl SyntheticPrefill {
    /// An engine with no simulated compute time.
    pub fn new(shape: ModelShape, descriptor: SchemeDescriptor) -> Self {
        Self { shape, descriptor, per_layer: Duration::ZERO, memo: None }
    }

    /// The same engine taking `per_layer` to compute each layer.
    pub fn with_per_layer(self, per_layer: Duration) -> Self {
        Self { per_layer, ..self }
    }

    /// The state of `layer` for `tokens`: a dense cache's `k` and `v`, each
    /// `[1, kv_heads, tokens, head_dim]` f32, with values in [-1, 1) hashed from the tokens,
    /// the layer and the position.
    pub fn state(shape: ModelShape, tokens: &[u32], layer: usize) -> LayerState {
        let seed =
            tokens.iter().fold(layer as u32 ^ 0x9E37_79B9, |h, &t| h.rotate_left(5) ^ t.wrapping_mul(0x85EB_CA6B));
        let n = shape.kv_heads as usize * tokens.len() * shape.head_dim as usize;
        let tensor = |name: &str, salt: u32| {
            let bytes: Vec<u8> = (0..n as u32)
                .flat_map(|i| {
                    let h = (i ^ seed ^ salt).wrapping_mul(0x9E37_79B1);
                    ((h >> 8) as f32 / (1u32 << 23) as f32 - 1.0).to_le_bytes()
                })
                .collect();
            let dims = vec![1, shape.kv_heads as usize, tokens.len(), shape.head_dim as usize];
            StateTensor { name: name.into(), dtype: StateDType::F32, shape: dims, bytes: bytes.into() }
        };
        LayerState { tokens: tokens.len(), tensors: vec![tensor("k", 0x1234_5678), tensor("v", 0x8765_4321)] }
    }

    /// The logits for `tokens`, `[vocab]`.
    pub fn logits(shape: ModelShape, tokens: &[u32]) -> Vec<f32> {
        (0..shape.vocab).map(|i| (i as usize + tokens.len()) as f32).collect()
    }
}

impl PrefillEngine for SyntheticPrefill {
    fn descriptor(&self) -> SchemeDescriptor {
        self.descriptor.clone()
    }

    fn shape(&self) -> ModelShape {
        self.shape
    }

    fn prefill(&mut self, tokens: &[u32], publish: &dyn Fn(usize, LayerState)) -> Result<Vec<f32>, String> {
        if self.memo.as_ref().is_none_or(|(t, _)| t != tokens) {
            let states = (0..self.shape.num_layers as usize).map(|l| Self::state(self.shape, tokens, l)).collect();
            self.memo = Some((tokens.to_vec(), states));
        }
        let (_, states) = self.memo.as_ref().expect("just filled");
        for (layer, state) in states.iter().enumerate() {
            std::thread::sleep(self.per_layer);
            publish(layer, state.clone());
        }
        Ok(Self::logits(self.shape, tokens))
    }
}
