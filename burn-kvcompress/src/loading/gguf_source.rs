//! GGUF (llama.cpp) files as a [`WeightSource`], and their model configuration.

use super::{HostTensor, WeightSource};
use crate::{
    error::LoadError,
    gguf::{GgufError, GgufFile},
    model::{Architecture, ModelConfig},
};

/// Reads a [`ModelConfig`] from a GGUF file's `general.architecture` and `<arch>.*` metadata.
pub fn gguf_model_config(file: &GgufFile) -> Result<ModelConfig, LoadError> {
    let arch_name = file.get_str("general.architecture")?.to_string();
    let architecture = match arch_name.as_str() {
        "llama" => Architecture::Llama,
        "mistral" => Architecture::Mistral,
        other => return Err(LoadError::UnsupportedArchitecture(other.to_string())),
    };
    let key = |k: &str| format!("{arch_name}.{k}");
    if let Some(scaling) = file.opt_str(&key("rope.scaling.type"))? {
        if scaling != "none" {
            return Err(LoadError::InvalidConfig(format!("RoPE scaling `{scaling}` is not supported")));
        }
    }
    let hidden_size = file.get_u32(&key("embedding_length"))? as usize;
    let num_heads = file.get_u32(&key("attention.head_count"))? as usize;
    let num_kv_heads = file.opt_u32(&key("attention.head_count_kv"))?.map_or(num_heads, |n| n as usize);
    let head_dim = match file.opt_u32(&key("attention.key_length"))? {
        Some(n) => n as usize,
        None if num_heads > 0 => hidden_size / num_heads,
        None => 0,
    };
    let embedding =
        file.tensor_info("token_embd.weight").map_err(|_| LoadError::MissingWeight("token_embd.weight".into()))?;
    let vocab_size = match file.opt_u32(&key("vocab_size"))? {
        Some(n) => n as usize,
        None => embedding.dims.last().copied().unwrap_or(0) as usize,
    };
    Ok(ModelConfig {
        architecture,
        vocab_size,
        hidden_size,
        intermediate_size: file.get_u32(&key("feed_forward_length"))? as usize,
        num_layers: file.get_u32(&key("block_count"))? as usize,
        num_heads,
        num_kv_heads,
        head_dim,
        rope_theta: file.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0),
        rms_norm_eps: file.get_f32(&key("attention.layer_norm_rms_epsilon"))? as f64,
        tie_embeddings: file.tensor_info("output.weight").is_err(),
        sliding_window: file.opt_u32(&key("attention.sliding_window"))?.map(|w| w as usize),
        max_position: file.get_u32(&key("context_length"))? as usize,
    })
}

/// The weights of a GGUF file under Hugging Face names, dequantized to f32.
///
/// llama.cpp's converter interleaves the rows of each head of W_Q and W_K for its adjacent-pair
/// RoPE; this source undoes that, so the model uses Hugging Face's "rotate half" RoPE for both
/// formats and cached keys have the same channel order whichever file the model came from.
pub struct GgufWeights<'a> {
    file: &'a GgufFile,
    num_heads: usize,
    num_kv_heads: usize,
}

impl<'a> GgufWeights<'a> {
    /// Serves the weights of `file`; the head counts come from its metadata.
    pub fn new(file: &'a GgufFile, config: &ModelConfig) -> Self {
        Self { file, num_heads: config.num_heads, num_kv_heads: config.num_kv_heads }
    }
}

/// Maps a Hugging Face weight name to its GGUF name and, for W_Q/W_K, the head count to
/// un-permute with.
fn gguf_name(hf: &str, num_heads: usize, num_kv_heads: usize) -> Option<(String, Option<usize>)> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some((name.to_string(), None));
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (gguf_part, heads) = match part {
        "self_attn.q_proj.weight" => ("attn_q.weight", Some(num_heads)),
        "self_attn.k_proj.weight" => ("attn_k.weight", Some(num_kv_heads)),
        "self_attn.v_proj.weight" => ("attn_v.weight", None),
        "self_attn.o_proj.weight" => ("attn_output.weight", None),
        "mlp.gate_proj.weight" => ("ffn_gate.weight", None),
        "mlp.up_proj.weight" => ("ffn_up.weight", None),
        "mlp.down_proj.weight" => ("ffn_down.weight", None),
        "input_layernorm.weight" => ("attn_norm.weight", None),
        "post_attention_layernorm.weight" => ("ffn_norm.weight", None),
        _ => return None,
    };
    Some((format!("blk.{layer}.{gguf_part}"), heads))
}

/// Undoes llama.cpp's per-head row interleaving of a `[heads * head_dim, in]` weight: GGUF row
/// `h*d + 2i + j` is Hugging Face row `h*d + j*d/2 + i`. An empty weight is returned as it is: its
/// rows (as many as a hostile file declares) hold nothing to move.
fn unpermute_rows(t: HostTensor, heads: usize) -> HostTensor {
    if t.values.is_empty() {
        return t;
    }
    let (rows, cols) = (t.shape[0], t.shape[1]);
    let head_dim = rows / heads;
    let half = head_dim / 2;
    let mut values = vec![0.0; rows * cols];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let src = (h * head_dim + 2 * i + j) * cols;
                let dst = (h * head_dim + j * half + i) * cols;
                values[dst..dst + cols].copy_from_slice(&t.values[src..src + cols]);
            }
        }
    }
    HostTensor { values, shape: t.shape }
}

impl WeightSource for GgufWeights<'_> {
    fn get(&self, name: &str) -> Result<HostTensor, LoadError> {
        let (gguf, heads) = gguf_name(name, self.num_heads, self.num_kv_heads)
            .ok_or_else(|| LoadError::MissingWeight(name.to_string()))?;
        let (values, shape) = self.file.tensor_f32(&gguf).map_err(|e| match e {
            GgufError::MissingTensor(_) => LoadError::MissingWeight(gguf.clone()),
            other => LoadError::Gguf(other),
        })?;
        let t = HostTensor { values, shape };
        match heads {
            Some(h) if t.shape.len() == 2 && h > 0 && t.shape[0].is_multiple_of(2 * h) => Ok(unpermute_rows(t, h)),
            Some(_) => Err(LoadError::WeightShape { name: gguf, expected: vec![self.num_heads, 0], found: t.shape }),
            None => Ok(t),
        }
    }

    fn contains(&self, name: &str) -> bool {
        gguf_name(name, self.num_heads, self.num_kv_heads).is_some_and(|(gguf, _)| self.file.tensor_info(&gguf).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permutation() {
        // llama.cpp's converter: w.reshape(heads, 2, d/2, in).swapaxes(1, 2).reshape(w.shape)
        let (heads, head_dim, cols) = (3, 8, 2);
        let rows = heads * head_dim;
        let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
        let mut gguf = vec![0.0; rows * cols];
        for h in 0..heads {
            for j in 0..2 {
                for i in 0..head_dim / 2 {
                    for c in 0..cols {
                        let hf_row = h * head_dim + j * head_dim / 2 + i;
                        let gguf_row = h * head_dim + i * 2 + j;
                        gguf[gguf_row * cols + c] = hf[hf_row * cols + c];
                    }
                }
            }
        }
        let back = unpermute_rows(HostTensor { values: gguf, shape: vec![rows, cols] }, heads);
        assert_eq!(back.values, hf);
    }

    #[test]
    fn an_empty_weight_of_many_rows_is_not_walked() {
        // 2^62 rows of no columns: walking the rows would take 2^61 steps.
        let empty = HostTensor { values: Vec::new(), shape: vec![1 << 62, 0] };
        assert_eq!(unpermute_rows(empty.clone(), 2), empty);
    }

    #[test]
    fn names_map_to_gguf() {
        assert_eq!(
            gguf_name("model.layers.7.mlp.down_proj.weight", 9, 3),
            Some(("blk.7.ffn_down.weight".into(), None))
        );
        assert_eq!(
            gguf_name("model.layers.0.self_attn.k_proj.weight", 9, 3),
            Some(("blk.0.attn_k.weight".into(), Some(3)))
        );
        assert_eq!(gguf_name("model.layers.x.mlp.down_proj.weight", 9, 3), None);
    }
}
