//! The seed corpora: a few small valid inputs per target, where the fuzzer's mutations start
//! (`examples/write_corpora.rs` writes them under `libfuzzer/corpus/<target>/`). Built here from
//! the crates' own writers, so that they stay valid as the formats change.

use std::path::PathBuf;

use burn::tensor::{Tensor, TensorData};
use burn_hack_attn::rotation::{HackRotations, RotationFile, RotationShape};
use burn_kvcompress::{
    backend::NdArray,
    cache::{DenseScheme, KvCache, KvScheme, LayerState, TransferableCache},
    fingerprint::ModelFingerprint,
    gguf::{GgmlType, MetadataArray, MetadataValue},
};
use burn_kvtransfer::state_codec::encode_state;
use burn_zack::rotation::Rotations;
use safetensors::{tensor::TensorView, Dtype};

use crate::gguf_writer::{GgufParts, RawTensorInfo};
use crate::layer_state::selector;
use crate::schemes::{codebooks, geometry, identity_rotations, schemes, HEAD_DIM, KV_HEADS};

/// Deterministic bytes (an xorshift stream from `seed`).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    noise(n, seed).into_iter().map(|b| b as f32 / 128.0 - 1.0).collect()
}

/// The tiny Llama the model seeds describe: 1 layer, hidden 32, 2 query heads and 1 KV head of
/// 16 channels, feed-forward 32, vocabulary 16.
const HIDDEN: u64 = 32;
const VOCAB: u64 = 16;

/// The tiny Llama's weights: GGUF name, `ne` (innermost first).
fn gguf_weights() -> Vec<(&'static str, Vec<u64>)> {
    vec![
        ("token_embd.weight", vec![HIDDEN, VOCAB]),
        ("output_norm.weight", vec![HIDDEN]),
        ("blk.0.attn_norm.weight", vec![HIDDEN]),
        ("blk.0.ffn_norm.weight", vec![HIDDEN]),
        ("blk.0.attn_q.weight", vec![HIDDEN, 32]),
        ("blk.0.attn_k.weight", vec![HIDDEN, 16]),
        ("blk.0.attn_v.weight", vec![HIDDEN, 16]),
        ("blk.0.attn_output.weight", vec![32, HIDDEN]),
        ("blk.0.ffn_gate.weight", vec![HIDDEN, 32]),
        ("blk.0.ffn_up.weight", vec![HIDDEN, 32]),
        ("blk.0.ffn_down.weight", vec![32, HIDDEN]),
    ]
}

/// GGUF files of the tiny Llama with a byte-level BPE tokenizer, its weights in each
/// dequantizable type in turn (norms in F32), plus one super-block each of Q4_K and Q6_K.
pub(crate) fn gguf_files() -> Vec<Vec<u8>> {
    use GgmlType::*;
    [[F32, F16, BF16], [Q8_0, Q4_0, Q4_1], [Q5_0, Q5_1, Q8_0]]
        .into_iter()
        .enumerate()
        .map(|(i, types)| {
            let mut tensors: Vec<(String, Vec<u64>, GgmlType)> = gguf_weights()
                .into_iter()
                .enumerate()
                .map(|(j, (name, dims))| {
                    let ty = if dims.len() == 1 { F32 } else { types[j % types.len()] };
                    (name.to_string(), dims, ty)
                })
                .collect();
            tensors.push(("extra.q4_k".into(), vec![256], Q4_K));
            tensors.push(("extra.q6_k".into(), vec![256], Q6_K));
            gguf_file(&tensors, i as u64)
        })
        .collect()
}

/// A GGUF file of the tiny Llama's metadata and tokenizer and `tensors` (of noise).
fn gguf_file(tensors: &[(String, Vec<u64>, GgmlType)], seed: u64) -> Vec<u8> {
    use MetadataValue as V;
    let tokens = ["<s>", "</s>", "H", "e", "l", "o", "Ġ", "w", "r", "d", "He", "ll", "llo", "Hello", "Ġw", "Ġwo"];
    let metadata = vec![
        ("general.architecture".into(), V::String("llama".into())),
        ("llama.embedding_length".into(), V::U32(HIDDEN as u32)),
        ("llama.attention.head_count".into(), V::U32(2)),
        ("llama.attention.head_count_kv".into(), V::U32(1)),
        ("llama.feed_forward_length".into(), V::U32(32)),
        ("llama.block_count".into(), V::U32(1)),
        ("llama.context_length".into(), V::U32(64)),
        ("llama.rope.freq_base".into(), V::F32(10_000.0)),
        ("llama.attention.layer_norm_rms_epsilon".into(), V::F32(1e-5)),
        ("tokenizer.ggml.model".into(), V::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), V::String("smollm".into())),
        ("tokenizer.ggml.tokens".into(), V::Array(MetadataArray::String(tokens.map(String::from).to_vec()))),
        (
            "tokenizer.ggml.merges".into(),
            V::Array(MetadataArray::String(["H e", "l l", "ll o", "He llo", "Ġ w", "Ġw o"].map(String::from).to_vec())),
        ),
        ("tokenizer.ggml.bos_token_id".into(), V::U32(0)),
        ("tokenizer.ggml.eos_token_id".into(), V::U32(1)),
    ];
    let (mut infos, mut data) = (Vec::new(), Vec::new());
    for (i, (name, dims, ty)) in tensors.iter().enumerate() {
        let bytes = ty.byte_size(dims.iter().product()).expect("whole blocks") as usize;
        infos.push(RawTensorInfo {
            name: name.clone(),
            dims: dims.clone(),
            type_id: ty.id(),
            offset: data.len() as u64,
        });
        data.extend(noise(bytes, seed * 100 + i as u64));
        data.resize(data.len().next_multiple_of(32), 0);
    }
    GgufParts::new(metadata, infos, data).encode()
}

/// Inputs of the structure-aware GGUF target: leading zeros choose a valid header without
/// metadata or tensors, the noise after them is its data section; mutations of the zeros grow
/// the tables.
pub(crate) fn table_inputs() -> Vec<Vec<u8>> {
    (0..4).map(|i| [vec![0; 8], noise(64 + 200 * i, 40 + i as u64)].concat()).collect()
}

/// The tiny Llama as a Hugging Face checkpoint: its `config.json` and safetensors weights, in
/// f32, in f16 and bf16 mixed, and with an untied output head.
pub(crate) fn hf_models() -> Vec<Vec<u8>> {
    [(Dtype::F32, Dtype::F32, true), (Dtype::F16, Dtype::BF16, true), (Dtype::F32, Dtype::F16, false)]
        .into_iter()
        .map(|(matrices, norms, tied)| {
            let config = format!(
                r#"{{"model_type":"llama","vocab_size":{VOCAB},"hidden_size":{HIDDEN},"intermediate_size":32,
"num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1,"rms_norm_eps":1e-5,
"max_position_embeddings":64,"rope_theta":10000.0,"tie_word_embeddings":{tied},"hidden_act":"silu"}}"#
            );
            crate::hf_model::join(&config, &safetensors_weights(matrices, norms, tied))
        })
        .collect()
}

/// The tiny Llama's weights under Hugging Face names, matrices in `matrices`, norms in `norms`.
fn safetensors_weights(matrices: Dtype, norms: Dtype, tied: bool) -> Vec<u8> {
    let h = HIDDEN as usize;
    let mut shapes: Vec<(String, Vec<usize>)> =
        vec![("model.embed_tokens.weight".into(), vec![VOCAB as usize, h]), ("model.norm.weight".into(), vec![h])];
    let layer = [
        ("self_attn.q_proj", vec![32, h]),
        ("self_attn.k_proj", vec![16, h]),
        ("self_attn.v_proj", vec![16, h]),
        ("self_attn.o_proj", vec![h, 32]),
        ("mlp.gate_proj", vec![32, h]),
        ("mlp.up_proj", vec![32, h]),
        ("mlp.down_proj", vec![h, 32]),
        ("input_layernorm", vec![h]),
        ("post_attention_layernorm", vec![h]),
    ];
    shapes.extend(layer.into_iter().map(|(name, shape)| (format!("model.layers.0.{name}.weight"), shape)));
    if !tied {
        shapes.push(("lm_head.weight".into(), vec![VOCAB as usize, h]));
    }
    let data: Vec<(String, Vec<usize>, Dtype, Vec<u8>)> = shapes
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let dtype = if shape.len() == 1 { norms } else { matrices };
            let n: usize = shape.iter().product();
            let bytes = match dtype {
                Dtype::F32 => values(n, i as u64).iter().flat_map(|x| x.to_le_bytes()).collect(),
                Dtype::F16 => values(n, i as u64).iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
                _ => values(n, i as u64).iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
            };
            (name, shape, dtype, bytes)
        })
        .collect();
    let views = data.iter().map(|(name, shape, dtype, bytes)| {
        (name.clone(), TensorView::new(*dtype, shape.clone(), bytes).expect("bytes of the shape"))
    });
    safetensors::serialize(views, None).expect("a small file")
}

/// One small file of each artifact format, written by its own `save`, behind its format byte
/// (see [`crate::artifacts::FORMATS`]).
pub(crate) fn artifact_files() -> Vec<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("kvc-fuzz-seeds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let read = |name: &str, save: &dyn Fn(&PathBuf)| -> Vec<u8> {
        let path = dir.join(name);
        save(&path);
        std::fs::read(&path).expect("the file just written")
    };
    let s = schemes();
    let books = read("books", &|p| codebooks().save(p).expect("saved"));
    let rotations: Rotations = identity_rotations(8);
    let zack = read("zack", &|p| rotations.save(p).expect("saved"));
    let shape = RotationShape { layers: 1, kv_heads: KV_HEADS, head_dim: 16 };
    let hack = RotationFile {
        rotations: HackRotations::hadamard(shape, 7).expect("a power-of-two head"),
        model: ModelFingerprint::of_bytes(b"fuzz"),
        training: "hadamard".into(),
    };
    let hack = read("hack", &|p| hack.save(p).expect("saved"));
    let reduced = read("reduced", &|p| s.zack_pq.books().save(p).expect("saved"));
    std::fs::remove_dir_all(&dir).expect("the temporary directory");
    [books, zack, hack, reduced]
        .into_iter()
        .enumerate()
        .map(|(format, file)| [vec![format as u8], file].concat())
        .collect()
}

/// States of each scheme's cache after appends of a few lengths (a HACK cache past its first
/// closed block; the f16 dense scheme, which the CPU backend cannot store, an empty state), behind
/// their selector bytes (see [`crate::layer_state::SCHEMES`]).
pub(crate) fn layer_states() -> Vec<Vec<u8>> {
    let s = schemes();
    let mut out = Vec::new();
    let mut push = |index: usize, states: Vec<LayerState>| {
        out.extend(states.iter().map(|state| [vec![selector(index, 1)], encode_state(state)].concat()));
    };
    push(0, exported(&DenseScheme, &[0, 3, 6]));
    push(1, exported(&DenseScheme, &[0]));
    push(2, exported(&s.hack_paper, &[3, 40]));
    push(3, exported(&s.hack_channel, &[3, 197]));
    push(4, exported(&s.pq, &[3, 9]));
    push(5, exported(&s.zack, &[3, 9]));
    push(6, exported(&s.zack_hack, &[3, 40]));
    push(7, exported(&s.zack_pq, &[3, 9]));
    out
}

/// The states of `scheme`'s layer-0 cache after one append of each of `lengths` slots of noise.
fn exported<S>(scheme: &S, lengths: &[usize]) -> Vec<LayerState>
where
    S: KvScheme<NdArray>,
    S::Cache: TransferableCache<NdArray>,
{
    let (device, g) = (Default::default(), geometry(1));
    lengths
        .iter()
        .map(|&n| {
            let mut cache = scheme.new_cache(0, g, &device);
            if n > 0 {
                let shape = [1, KV_HEADS, n, HEAD_DIM];
                let kv =
                    |seed| Tensor::from_data(TensorData::new(values(shape.iter().product(), seed), shape), &device);
                cache.append(kv(n as u64), kv(n as u64 + 1)).expect("an append of the cache's geometry");
            }
            cache.export_state()
        })
        .collect()
}

/// The `--kv` spellings of the README and docs, and a few longer forms.
pub(crate) fn spellings() -> Vec<Vec<u8>> {
    [
        "dense",
        "dense:storage=f16",
        "hack2",
        "hack3",
        "hack4",
        "hack:bits=2,pi=64,round=stochastic,seed=0",
        "hack:kbits=4,vbits=2,pi=128,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64,clip=mse",
        "pq:codebooks=books.st,window=16",
        "zack:rotations=rot.st,rate=0.25",
        "zack:rotations=r,eps=0.05,min_rank=4,multiple=8,storage=f16",
        "zack:rotations=r,rate=0.5+hack:bits=2,pi=32",
        "zack:rotations=r,rate=0.5+pq:codebooks=reduced.st,window=64",
    ]
    .map(|s| s.as_bytes().to_vec())
    .to_vec()
}
