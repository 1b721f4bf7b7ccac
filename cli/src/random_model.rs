//! Models with random weights for speed runs (`--random-model`): a shape, a seed, and prompts of
//! random token ids, since such a model has no tokenizer. A step's speed depends on the shapes,
//! not on the weights' values; its tokens are meaningless but deterministic, so a disaggregated
//! run can still be checked against a single-process one.

use std::path::PathBuf;

use burn::tensor::backend::Backend;
use burn_kvcompress::{
    fingerprint::ModelFingerprint,
    loading::{build_model, LoadedModel, RandomWeights},
    model::{Architecture, ModelConfig},
};
use clap::ValueEnum;
use rand::{rngs::StdRng, Rng, SeedableRng};

/// The shape of a random model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RandomShape {
    /// Llama-3-8B (32 layers, 32 query and 8 KV heads of 128 channels, 128256 tokens): 32 GB of
    /// f32 weights, a GPU's work.
    #[value(name = "llama3-8b")]
    Llama3_8b,
    /// Two layers of Llama-3's head geometry (8 query and 2 KV heads of 128 channels) over a
    /// 4096-token vocabulary: a smoke run of the same path on a CPU.
    Tiny,
}

impl RandomShape {
    /// The model's configuration.
    pub fn config(self) -> ModelConfig {
        match self {
            Self::Llama3_8b => ModelConfig::llama3_8b(),
            Self::Tiny => ModelConfig {
                architecture: Architecture::Llama,
                vocab_size: 4096,
                hidden_size: 1024,
                intermediate_size: 3584,
                num_layers: 2,
                num_heads: 8,
                num_kv_heads: 2,
                head_dim: 128,
                max_position: 32_768,
                ..ModelConfig::llama3_8b()
            },
        }
    }

    /// The shape's name on the command line (`--random-model llama3-8b`).
    pub fn name(self) -> String {
        self.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
    }

    /// What names the model where a file path would (messages, calibration tags).
    pub fn label(self, seed: u64) -> PathBuf {
        PathBuf::from(format!("random:{}:seed={seed}", self.name()))
    }

    /// The fingerprint both sides of a transfer must agree on: the configuration and the seed.
    pub fn fingerprint(self, seed: u64) -> ModelFingerprint {
        let config = serde_json::to_string(&self.config()).expect("a configuration serializes");
        ModelFingerprint::of_bytes(format!("random weights, seed {seed}, {config}").as_bytes())
    }

    /// The model of this shape with weights drawn from `seed` (no tokenizer).
    pub fn load<B: Backend>(self, seed: u64, device: &B::Device) -> anyhow::Result<LoadedModel<B>> {
        let config = self.config();
        let model = build_model(config.clone(), &RandomWeights::new(config, seed), device)?;
        Ok(LoadedModel { model, tokenizer: None })
    }
}

/// A prompt of `len` token ids uniform over `vocab`, drawn from `seed`.
pub fn random_prompt(len: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random_range(0..vocab as u32)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_validate_and_name_their_seed() {
        for shape in [RandomShape::Llama3_8b, RandomShape::Tiny] {
            shape.config().validate().unwrap();
        }
        assert_eq!(RandomShape::Tiny.label(3), PathBuf::from("random:tiny:seed=3"));
        assert_eq!(RandomShape::Llama3_8b.label(0), PathBuf::from("random:llama3-8b:seed=0"));
    }

    #[test]
    fn fingerprints_tell_shapes_and_seeds_apart() {
        let tiny = RandomShape::Tiny.fingerprint(1);
        assert_eq!(tiny, RandomShape::Tiny.fingerprint(1));
        assert_ne!(tiny, RandomShape::Tiny.fingerprint(2));
        assert_ne!(tiny, RandomShape::Llama3_8b.fingerprint(1));
    }

    #[test]
    fn random_prompts_are_seeded_and_inside_the_vocabulary() {
        let prompt = random_prompt(1000, 37, 5);
        assert_eq!(prompt, random_prompt(1000, 37, 5));
        assert_ne!(prompt, random_prompt(1000, 37, 6));
        assert!(prompt.iter().all(|&t| t < 37) && prompt.contains(&36));
    }

    #[test]
    fn the_tiny_model_runs() {
        let device = Default::default();
        let loaded = RandomShape::Tiny.load::<burn::backend::NdArray>(0, &device).unwrap();
        assert!(loaded.tokenizer.is_none());
        assert_eq!(loaded.model.config().num_layers, 2);
    }
}
