//! Random weights for a model shape, for speed measurements of models whose checkpoints are not
//! at hand (issue 8 times a Llama-3-8B-shaped model; a step's speed does not depend on the
//! weights' values, only on their shapes and types).
//!
//! Every projection `[out, in]` is uniform in `±√(3 / in)` (standard deviation `1/√in`, so the
//! residual stream keeps its scale through a layer), every norm's gain is 1, and the embedding is
//! uniform with standard deviation 1. Each chunk of [`CHUNK`] values of a weight comes from its
//! own generator, seeded by the source's seed, the weight's name and the chunk's index, so a
//! weight does not depend on which others were asked for first nor on how many threads draw its
//! chunks (all the machine's cores: Llama-3-8B's 8 G values take minutes on one).

use rand::{rngs::StdRng, Rng, SeedableRng};
use sha2::{Digest, Sha256};

use super::{weights::fill_chunks_in_parallel, HostTensor, WeightSource};
use crate::{error::LoadError, model::ModelConfig};

/// Values drawn from one generator.
const CHUNK: usize = 1 << 20;

/// Random weights of the shapes `config` implies, under their Hugging Face names (see the module
/// documentation for their distribution).
#[derive(Debug, Clone)]
pub struct RandomWeights {
    config: ModelConfig,
    seed: u64,
}

/// What a weight is, by its name.
enum Kind {
    /// A projection `[out, in]`.
    Projection,
    /// A norm's gain `[dim]`.
    Norm,
    /// The token embedding `[vocab, hidden]`.
    Embedding,
}

impl RandomWeights {
    /// The weights of `config`'s shapes drawn from `seed`.
    pub fn new(config: ModelConfig, seed: u64) -> Self {
        Self { config, seed }
    }

    /// The shape and kind of the weight called `name`, if the model has one.
    fn describe(&self, name: &str) -> Option<(Vec<usize>, Kind)> {
        let c = &self.config;
        let (hidden, q_dim, kv_dim) = (c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        match name {
            "model.embed_tokens.weight" => return Some((vec![c.vocab_size, hidden], Kind::Embedding)),
            "model.norm.weight" => return Some((vec![hidden], Kind::Norm)),
            "lm_head.weight" if !c.tie_embeddings => return Some((vec![c.vocab_size, hidden], Kind::Projection)),
            _ => {}
        }
        let rest = name.strip_prefix("model.layers.")?;
        let (layer, weight) = rest.split_once('.')?;
        if layer.parse::<usize>().ok()? >= c.num_layers {
            return None;
        }
        let projection = |out: usize, inner: usize| Some((vec![out, inner], Kind::Projection));
        match weight {
            "self_attn.q_proj.weight" => projection(q_dim, hidden),
            "self_attn.k_proj.weight" | "self_attn.v_proj.weight" => projection(kv_dim, hidden),
            "self_attn.o_proj.weight" => projection(hidden, q_dim),
            "mlp.gate_proj.weight" | "mlp.up_proj.weight" => projection(c.intermediate_size, hidden),
            "mlp.down_proj.weight" => projection(hidden, c.intermediate_size),
            "input_layernorm.weight" | "post_attention_layernorm.weight" => Some((vec![hidden], Kind::Norm)),
            _ => None,
        }
    }

    /// The generator of chunk `chunk` ([`CHUNK`] values) of the weight called `name`.
    fn generator(&self, name: &str, chunk: usize) -> StdRng {
        let digest = Sha256::new()
            .chain_update(self.seed.to_le_bytes())
            .chain_update((chunk as u64).to_le_bytes())
            .chain_update(name.as_bytes())
            .finalize();
        let mut seed = [0u8; 32];
        seed.copy_from_slice(&digest);
        StdRng::from_seed(seed)
    }
}

impl WeightSource for RandomWeights {
    fn get(&self, name: &str) -> Result<HostTensor, LoadError> {
        let (shape, kind) = self.describe(name).ok_or_else(|| LoadError::MissingWeight(name.to_string()))?;
        let count = shape.iter().product();
        let half_width = match kind {
            Kind::Norm => return Ok(HostTensor { values: vec![1.0; count], shape }),
            Kind::Projection => (3.0 / shape[1] as f32).sqrt(),
            Kind::Embedding => 3f32.sqrt(),
        };
        let mut values = vec![0.0f32; count];
        fill_chunks_in_parallel(&mut values, CHUNK, |i, chunk| {
            let mut rng = self.generator(name, i);
            chunk.iter_mut().for_each(|v| *v = rng.random_range(-half_width..half_width));
        });
        Ok(HostTensor { values, shape })
    }

    fn contains(&self, name: &str) -> bool {
        self.describe(name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;

    use super::*;
    use crate::{
        cache::DenseScheme,
        loading::build_model,
        model::{Architecture, Logits},
    };

    fn tiny() -> ModelConfig {
        ModelConfig {
            architecture: Architecture::Llama,
            vocab_size: 50,
            hidden_size: 32,
            intermediate_size: 48,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 8,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-5,
            tie_embeddings: false,
            sliding_window: None,
            max_position: 64,
        }
    }

    #[test]
    fn a_random_model_builds_and_runs() {
        let device = Default::default();
        let model = build_model::<NdArray, _>(tiny(), &RandomWeights::new(tiny(), 3), &device).unwrap();
        let mut cache = model.new_cache(&DenseScheme, 1, &device);
        let logits = model.forward(&[vec![1, 7, 49, 3]], &mut cache, Logits::All).unwrap();
        assert_eq!(logits.dims(), [1, 4, 50]);
        let values: Vec<f32> = logits.into_data().convert::<f32>().into_vec().unwrap();
        assert!(values.iter().all(|v| v.is_finite()));
        // Random projections, not zeros: the logits spread.
        let spread = values.iter().fold(f32::MIN, |a, &b| a.max(b)) - values.iter().fold(f32::MAX, |a, &b| a.min(b));
        assert!(spread > 0.1, "spread {spread}");
    }

    #[test]
    fn weights_depend_on_the_seed_and_name_only() {
        let name = "model.layers.1.mlp.down_proj.weight";
        let a = RandomWeights::new(tiny(), 3);
        let first = a.get(name).unwrap();
        let _ = a.get("model.layers.0.self_attn.q_proj.weight").unwrap();
        assert_eq!(a.get(name).unwrap(), first);
        assert_eq!(RandomWeights::new(tiny(), 3).get(name).unwrap(), first);
        assert_ne!(RandomWeights::new(tiny(), 4).get(name).unwrap(), first);
        assert_ne!(a.get("model.layers.0.mlp.down_proj.weight").unwrap(), first);
    }

    #[test]
    fn a_weight_of_several_chunks_draws_each_apart_and_reproducibly() {
        let config = ModelConfig { hidden_size: 1024, intermediate_size: 2560, ..tiny() };
        let source = RandomWeights::new(config, 9);
        let name = "model.layers.0.mlp.up_proj.weight";
        let w = source.get(name).unwrap();
        assert_eq!(w.values.len(), 2560 * 1024);
        let chunks: Vec<&[f32]> = w.values.chunks(CHUNK).collect();
        assert_eq!(chunks.len(), 3);
        assert!(chunks[0][..1000] != chunks[1][..1000] && chunks[1][..1000] != chunks[2][..1000]);
        assert_eq!(source.get(name).unwrap(), w);
    }

    #[test]
    fn projections_have_unit_variance_per_input() {
        let config = ModelConfig { hidden_size: 256, intermediate_size: 512, ..tiny() };
        let w = RandomWeights::new(config, 1).get("model.layers.0.mlp.down_proj.weight").unwrap();
        assert_eq!(w.shape, [256, 512]);
        let n = w.values.len() as f64;
        let mean = w.values.iter().map(|&v| v as f64).sum::<f64>() / n;
        let std = (w.values.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
        // 131072 draws: the sample deviation is within 1 % of 1/√512 with overwhelming odds.
        let expected = 1.0 / 512f64.sqrt();
        assert!(mean.abs() < 0.01 * expected && (std / expected - 1.0).abs() < 0.01, "mean {mean}, std {std}");
    }

    #[test]
    fn the_llama3_8b_shape_has_its_published_parameter_count() {
        let config = ModelConfig::llama3_8b();
        config.validate().unwrap();
        let source = RandomWeights::new(config.clone(), 0);
        let layer_weights = [
            "self_attn.q_proj.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "self_attn.o_proj.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
            "input_layernorm.weight",
            "post_attention_layernorm.weight",
        ];
        let names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
            .map(String::from)
            .into_iter()
            .chain((0..config.num_layers).flat_map(|i| layer_weights.map(|w| format!("model.layers.{i}.{w}"))));
        let count: usize = names.map(|name| source.describe(&name).unwrap().0.iter().product::<usize>()).sum();
        // The published count: 8.03 B (8,030,261,248 on Meta-Llama-3-8B's Hugging Face page).
        assert_eq!(count, 8_030_261_248);
    }

    #[test]
    fn unknown_and_out_of_range_names_are_missing() {
        let source = RandomWeights::new(tiny(), 0);
        for name in
            ["model.layers.2.mlp.up_proj.weight", "model.layers.0.mlp.bogus", "lm_head.bias", "model.layers.x.mlp"]
        {
            assert!(!source.contains(name));
            assert!(matches!(source.get(name), Err(LoadError::MissingWeight(n)) if n == name));
        }
        let tied = RandomWeights::new(ModelConfig { tie_embeddings: true, ..tiny() }, 0);
        assert!(!tied.contains("lm_head.weight") && source.contains("lm_head.weight"));
    }
}
