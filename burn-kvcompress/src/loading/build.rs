//! Assembling a [`CausalLm`] from a [`WeightSource`].

use burn::{
    module::Param,
    nn::{Embedding, Linear, RmsNorm},
    tensor::{backend::Backend, Tensor, TensorData},
};

use super::{HostTensor, WeightSource};
use crate::{
    error::LoadError,
    model::{CausalLm, DecoderLayer, FeedForward, ModelConfig, ModelOps, SelfAttention},
};

struct Builder<'a, B: Backend, S: WeightSource> {
    source: &'a S,
    device: &'a B::Device,
    eps: f64,
}

impl<B: Backend, S: WeightSource> Builder<'_, B, S> {
    fn host(&self, name: &str, shape: &[usize]) -> Result<HostTensor, LoadError> {
        self.source.get(name)?.expect_shape(name, shape)
    }

    fn tensor<const D: usize>(&self, t: HostTensor) -> Tensor<B, D> {
        Tensor::from_data(TensorData::new(t.values, t.shape), self.device)
    }

    /// A bias-free projection from a Hugging Face `[out, in]` weight.
    fn linear(&self, name: &str, d_in: usize, d_out: usize) -> Result<Linear<B>, LoadError> {
        let w = self.host(name, &[d_out, d_in])?.transposed();
        Ok(Linear { weight: Param::from_tensor(self.tensor(w)), bias: None })
    }

    fn norm(&self, name: &str, dim: usize) -> Result<RmsNorm<B>, LoadError> {
        let gamma = self.host(name, &[dim])?;
        Ok(RmsNorm { gamma: Param::from_tensor(self.tensor(gamma)), epsilon: self.eps })
    }

    fn layer(&self, c: &ModelConfig, i: usize) -> Result<DecoderLayer<B>, LoadError> {
        let p = format!("model.layers.{i}");
        let (hidden, q_dim, kv_dim) = (c.hidden_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
        let attention = SelfAttention {
            q_proj: self.linear(&format!("{p}.self_attn.q_proj.weight"), hidden, q_dim)?,
            k_proj: self.linear(&format!("{p}.self_attn.k_proj.weight"), hidden, kv_dim)?,
            v_proj: self.linear(&format!("{p}.self_attn.v_proj.weight"), hidden, kv_dim)?,
            o_proj: self.linear(&format!("{p}.self_attn.o_proj.weight"), q_dim, hidden)?,
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            ops: ModelOps::default(),
        };
        let mlp = FeedForward {
            gate_proj: self.linear(&format!("{p}.mlp.gate_proj.weight"), hidden, c.intermediate_size)?,
            up_proj: self.linear(&format!("{p}.mlp.up_proj.weight"), hidden, c.intermediate_size)?,
            down_proj: self.linear(&format!("{p}.mlp.down_proj.weight"), c.intermediate_size, hidden)?,
            ops: ModelOps::default(),
        };
        Ok(DecoderLayer {
            attn_norm: self.norm(&format!("{p}.input_layernorm.weight"), hidden)?,
            attention,
            mlp_norm: self.norm(&format!("{p}.post_attention_layernorm.weight"), hidden)?,
            mlp,
            ops: ModelOps::default(),
        })
    }
}

/// Builds a model from `source` after checking `config` and every weight's shape.
pub fn build_model<B: Backend, S: WeightSource>(
    config: ModelConfig,
    source: &S,
    device: &B::Device,
) -> Result<CausalLm<B>, LoadError> {
    config.validate()?;
    let b = Builder::<B, S> { source, device, eps: config.rms_norm_eps };
    let embed = b.host("model.embed_tokens.weight", &[config.vocab_size, config.hidden_size])?;
    let layers = (0..config.num_layers).map(|i| b.layer(&config, i)).collect::<Result<Vec<_>, _>>()?;
    let norm = b.norm("model.norm.weight", config.hidden_size)?;
    let lm_head = match config.tie_embeddings {
        // A contiguous [hidden, vocab] copy of the embedding: see `CausalLm::lm_head`.
        true => Linear { weight: Param::from_tensor(b.tensor(embed.transposed())), bias: None },
        false => b.linear("lm_head.weight", config.hidden_size, config.vocab_size)?,
    };
    let embedding = Embedding { weight: Param::from_tensor(b.tensor(embed)) };
    Ok(CausalLm::from_parts(config, embedding, layers, norm, lm_head, device))
}
