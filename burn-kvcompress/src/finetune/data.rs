//! [`FinetuneData`]: everything a fine-tuning run reads.

use super::{AttentionSamples, FinetuneError, OutputProjections, SampleShape};

/// Training and held-out samples of one model with its output projections.
#[derive(Debug, Clone, PartialEq)]
pub struct FinetuneData {
    /// The windows the optimizer steps on.
    pub train: AttentionSamples,
    /// The windows early stopping watches (from other text than `train`).
    pub held_out: AttentionSamples,
    /// The model's output projections (the loss's weighting).
    pub projections: OutputProjections,
}

impl FinetuneData {
    /// Checks that both sample sets hold windows of one model and that the projections fit it;
    /// returns the training samples' shape.
    pub fn check(&self) -> Result<SampleShape, FinetuneError> {
        let (train, held_out) = (self.train.shape(), self.held_out.shape());
        if self.train.is_empty() || self.held_out.is_empty() {
            return Err(FinetuneError::Samples(format!(
                "{} training and {} held-out windows: need at least one of each",
                self.train.len(),
                self.held_out.len()
            )));
        }
        let same_model = |a: SampleShape, b: SampleShape| {
            (a.layers, a.heads, a.kv_heads, a.head_dim) == (b.layers, b.heads, b.kv_heads, b.head_dim)
        };
        if !same_model(train, held_out) {
            return Err(FinetuneError::Samples(format!("training {train:?} and held-out {held_out:?} samples differ")));
        }
        let p = &self.projections;
        if (p.heads, p.head_dim, p.weights.len()) != (train.heads, train.head_dim, train.layers)
            || p.weights.iter().any(|w| w.len() != p.heads * p.head_dim * p.hidden)
        {
            return Err(FinetuneError::Samples(format!(
                "output projections of {} layers x {} heads x {} do not fit samples {train:?}",
                p.weights.len(),
                p.heads,
                p.head_dim
            )));
        }
        Ok(train)
    }
}
