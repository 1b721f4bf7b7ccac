//! The decoder-only language model (Llama or Mistral) over any KV cache scheme.

use burn::{
    module::Module,
    nn::{Embedding, Linear, RmsNorm},
    tensor::{backend::Backend, DType, Int, Tensor, TensorData},
};

use super::{DecoderLayer, ModelConfig, ModelOps, Residual, RotaryEmbedding};
use crate::cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, LayerCaches};
use crate::error::RunError;

/// Copies logits to the host as one `Vec` per row of the last dimension (`[..., vocab]` gives
/// `len / vocab` rows of `vocab` values). Reading back also waits for the device.
pub fn logits_to_host<B: Backend, const D: usize>(logits: Tensor<B, D>) -> Vec<Vec<f32>> {
    let vocab = logits.dims()[D - 1];
    let flat: Vec<f32> = logits.into_data().convert::<f32>().into_vec().expect("float logits");
    flat.chunks_exact(vocab).map(<[f32]>::to_vec).collect()
}

/// Which positions' logits a forward pass returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Every input position: `[batch, seq, vocab]`.
    All,
    /// Only the last input position: `[batch, 1, vocab]` (skips the output head elsewhere).
    Last,
}

/// A Llama or Mistral decoder. The weights are independent of the KV cache: the same model runs
/// with any [`KvScheme`], whose per-layer caches are passed to every forward call.
#[derive(Module, Debug)]
pub struct CausalLm<B: Backend> {
    /// Token embedding, `[vocab, hidden]`.
    pub embedding: Embedding<B>,
    /// Decoder layers.
    pub layers: Vec<DecoderLayer<B>>,
    /// Final norm.
    pub norm: RmsNorm<B>,
    /// Output head `[hidden, vocab]`. For tied embeddings it is a contiguous transposed copy of
    /// the embedding: on ndarray a product with a transposed view costs 3.4x more per decode step.
    pub lm_head: Linear<B>,
    /// RoPE tables.
    pub rope: RotaryEmbedding<B>,
    #[module(skip)]
    config: ModelConfig,
    /// How the final norm and the output head are applied (the layers hold their own copy).
    #[module(skip)]
    pub(super) ops: ModelOps,
}

impl<B: Backend> CausalLm<B> {
    /// Assembles a model from its parts; `config` must describe them (loaders check shapes).
    pub fn from_parts(
        config: ModelConfig,
        embedding: Embedding<B>,
        layers: Vec<DecoderLayer<B>>,
        norm: RmsNorm<B>,
        lm_head: Linear<B>,
        device: &B::Device,
    ) -> Self {
        let rope = RotaryEmbedding::new(config.head_dim, config.max_position, config.rope_theta, device);
        Self { embedding, layers, norm, lm_head, rope, config, ops: ModelOps::default() }
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Builds empty per-layer caches of `scheme` for `batch` sequences.
    pub fn new_cache<S: KvScheme<B>>(&self, scheme: &S, batch: usize, device: &B::Device) -> LayerCaches<S::Cache> {
        let c = self.config();
        let geometry = CacheGeometry { batch, kv_heads: c.num_kv_heads, heads: c.num_heads, head_dim: c.head_dim };
        let layers = (0..c.num_layers).map(|l| scheme.new_cache(l, geometry, device)).collect();
        LayerCaches::new(layers, batch)
    }

    /// Runs `tokens` (one row of equal length per batch sequence) through the model, appending to
    /// `caches`, and returns f32 logits `[batch, seq, vocab]` (or `[batch, 1, vocab]` for
    /// [`Logits::Last`]), whatever the weights' float type ([`CausalLm::with_weights_as`]).
    pub fn forward<C: KvCache<B>>(
        &self,
        tokens: &[Vec<u32>],
        caches: &mut LayerCaches<C>,
        logits: Logits,
    ) -> Result<Tensor<B, 3>, RunError> {
        let (batch, seq) = self.check_tokens(tokens, caches)?;
        let start = caches.len();
        let positions: Vec<i64> = (0..batch)
            .flat_map(|b| {
                let pad = caches.key_start[b];
                (start..start + seq).map(move |slot| slot.saturating_sub(pad) as i64)
            })
            .collect();
        if let Some(&max) = positions.iter().max() {
            if max as usize >= self.rope.max_position() {
                return Err(RunError::Input(format!(
                    "position {max} is beyond the model's context of {}",
                    self.rope.max_position()
                )));
            }
        }
        let options = AttendOptions {
            scale: 1.0 / (self.config().head_dim as f32).sqrt(),
            key_start: caches.key_start.clone(),
            window: self.config().sliding_window,
        };
        let device = self.embedding.weight.device();
        let positions = Tensor::<B, 1, Int>::from_data(TensorData::new(positions, [batch * seq]), &device);
        let ids: Vec<i64> = tokens.iter().flatten().map(|&t| t as i64).collect();
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [batch, seq]), &device);
        let hidden = self.config.hidden_size;
        let mut x = Residual::new(self.embedding.forward(ids).reshape([batch * seq, hidden]));
        for (layer, cache) in self.layers.iter().zip(caches.layers.iter_mut()) {
            x = layer.forward(x, &self.rope, &positions, cache, &options)?;
        }
        let kept = match logits {
            Logits::All => seq,
            Logits::Last => {
                x = x.map(|t| t.reshape([batch, seq, hidden]).narrow(1, seq - 1, 1).reshape([batch, hidden]));
                1
            }
        };
        let [_, normed] = x.normed(&self.ops, &self.norm);
        let out = self.ops.project(&self.lm_head, normed).cast(DType::F32);
        Ok(out.reshape([batch, kept, self.config.vocab_size]))
    }

    /// Prefills prompts of different lengths as one batch: rows are left-padded to the longest,
    /// padding is masked out of attention and RoPE positions start at each row's first token.
    /// `caches` must be empty. Returns the logits of each row's last prompt token, `[batch, vocab]`.
    pub fn prefill_padded<C: KvCache<B>>(
        &self,
        prompts: &[Vec<u32>],
        caches: &mut LayerCaches<C>,
        pad_token: u32,
    ) -> Result<Tensor<B, 2>, RunError> {
        if !caches.is_empty() {
            return Err(RunError::Input("prefill_padded needs an empty cache".into()));
        }
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        caches.key_start = prompts.iter().map(|p| longest - p.len()).collect();
        let rows: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| std::iter::repeat_n(pad_token, longest - p.len()).chain(p.iter().copied()).collect())
            .collect();
        let logits = self.forward(&rows, caches, Logits::Last)?;
        let [batch, _, vocab] = logits.dims();
        Ok(logits.reshape([batch, vocab]))
    }

    fn check_tokens<C: KvCache<B>>(
        &self,
        tokens: &[Vec<u32>],
        caches: &LayerCaches<C>,
    ) -> Result<(usize, usize), RunError> {
        let batch = tokens.len();
        let seq = tokens.first().map_or(0, Vec::len);
        if batch == 0 || seq == 0 {
            return Err(RunError::Input("no tokens to run".into()));
        }
        if tokens.iter().any(|row| row.len() != seq) {
            return Err(RunError::Input("batch rows must have equal lengths (left-pad them)".into()));
        }
        if batch != caches.key_start.len() {
            return Err(RunError::Input(format!(
                "{batch} token rows for a cache built for a batch of {}",
                caches.key_start.len()
            )));
        }
        let vocab = self.config().vocab_size;
        if let Some(bad) = tokens.iter().flatten().find(|&&t| t as usize >= vocab) {
            return Err(RunError::Input(format!("token id {bad} is outside the vocabulary of {vocab}")));
        }
        Ok((batch, seq))
    }
}
