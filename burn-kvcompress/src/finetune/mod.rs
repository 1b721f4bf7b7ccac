//! What fine-tuning compression artifacts (PQ codebooks, ZACK rotations) shares, whatever the
//! artifact: the layer-wise attention samples it trains on, the objective's target (the attention
//! output as the output projection sees it), the optimizer and the training loop with early
//! stopping.
//!
//! The objective is local to each layer: with the layer's recorded queries, keys and values of
//! the *uncompressed* model, the compressed attention output `Ô` should match the exact one `O`
//! after the output projection, `‖(Ô − O) W_O‖² / ‖O W_O‖²`. Errors along directions that `W_O`
//! ignores cost nothing, and every layer trains independently of the others (the next-token loss
//! through the frozen model would couple them and cost a full forward and backward pass of the
//! model per step; see the crates' `finetune` modules for why the local loss was chosen).
//!
//! - [`FinetuneData`]: training and held-out [`AttentionSamples`] with the model's
//!   [`OutputProjections`].
//! - [`AttentionSamples`]: per window and layer, the last query rows, all keys and values, the
//!   exact outputs of those rows.
//! - [`OutputProjections`] and [`relative_output_error`]: the loss.
//! - [`Adam`]: Adam on host parameters (codebooks); [`OrthogonalAdam`]: Riemannian Adam that
//!   keeps a rotation orthogonal (ZACK's and HACK's); [`run_finetune`]: the loop, with held-out
//!   evaluation, early stopping and a [`FinetuneReport`].

mod adam;
mod data;
mod driver;
mod objective;
mod samples;
mod stiefel;

pub use adam::Adam;
pub use data::FinetuneData;
pub use driver::{run_finetune, FinetuneConfig, FinetuneProgress, FinetuneReport, Objective};
pub use objective::{causal_forbidden, loss_value, relative_output_error, OutputProjections};
pub use samples::{AttentionSamples, LayerBatch, SampleShape};
pub use stiefel::{orthogonality_error, OrthogonalAdam};

/// Why fine-tuning cannot run.
#[derive(Debug, thiserror::Error)]
pub enum FinetuneError {
    /// The recordings do not form the samples fine-tuning needs.
    #[error("fine-tuning samples: {0}")]
    Samples(String),
    /// A setting is out of range.
    #[error("fine-tuning configuration: {0}")]
    Config(String),
}
