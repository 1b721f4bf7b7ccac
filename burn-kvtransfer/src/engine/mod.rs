//! What the prefill server runs: a [`PrefillEngine`] turns a prompt into per-layer states
//! (published one layer at a time, as soon as each is computed) and the last position's logits.
//! [`ModelPrefill`] is the engine of a real model and KV scheme; [`SyntheticPrefill`] makes up
//! states without a model (tests, transfer benchmarks).

mod model;
mod publish;
mod synthetic;

pub use model::ModelPrefill;
pub use publish::{PublishingCache, PublishingScheme};
pub use synthetic::SyntheticPrefill;

use burn_kvcompress::cache::LayerState;

use crate::descriptor::SchemeDescriptor;
use crate::wire::ModelShape;

/// Computes prefills for the server (on a thread of its own).
pub trait PrefillEngine: Send + 'static {
    /// The scheme and model this engine's states belong to.
    fn descriptor(&self) -> SchemeDescriptor;

    /// The model's dimensions.
    fn shape(&self) -> ModelShape;

    /// Prefills `tokens`, calling `publish(layer, state)` for every layer as soon as its state is
    /// final, and returns the logits of the last prompt position, `[vocab]`.
    fn prefill(&mut self, tokens: &[u32], publish: &dyn Fn(usize, LayerState)) -> Result<Vec<f32>, String>;
}
