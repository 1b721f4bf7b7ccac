//! A Hugging Face checkpoint from the fuzzer's bytes: a `config.json` text and a
//! `model.safetensors` file, each parsed, then the model built from both on the CPU.

use std::path::Path;

use burn_kvcompress::{
    backend::NdArray,
    loading::{build_model, parse_hf_config, SafetensorsWeights, WeightSource},
};
use safetensors::SafeTensors;

/// `config` and `weights` as one input: the text's length as a little-endian `u16`, the text, the
/// safetensors bytes (what [`hf_model`] reads back).
pub fn join(config: &str, weights: &[u8]) -> Vec<u8> {
    let len = u16::try_from(config.len()).expect("a seed's config text is under 64 KiB");
    [&len.to_le_bytes()[..], config.as_bytes(), weights].concat()
}

/// The config text and safetensors bytes of an input of [`join`]'s form (any bytes are one: a
/// length past the end takes the rest, bytes that are not UTF-8 are replaced).
fn split(data: &[u8]) -> (String, &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<2>() else {
        return (String::new(), data);
    };
    let (text, weights) = rest.split_at((u16::from_le_bytes(*len) as usize).min(rest.len()));
    (String::from_utf8_lossy(text).into_owned(), weights)
}

/// Parses the config and the weights; every tensor the safetensors header lists must read back
/// with its declared shape; when both parse, the model is built (which checks every weight's
/// shape against the config, then allocates what the config implies: the RoPE tables).
/// Accepted: the model built.
pub fn hf_model(data: &[u8]) -> bool {
    let (text, bytes) = split(data);
    let config = parse_hf_config(&text, Path::new("config.json"));
    let Ok(weights) = SafetensorsWeights::from_bytes(bytes) else {
        return false;
    };
    let header = SafeTensors::deserialize(bytes).expect("the loader accepted the file");
    for (name, view) in header.tensors() {
        let tensor = weights.get(&name).expect("a listed tensor of an accepted dtype reads");
        assert_eq!(tensor.shape, view.shape(), "tensor {name:?}");
        assert_eq!(tensor.values.len(), view.shape().iter().product::<usize>(), "tensor {name:?}");
    }
    config.is_ok_and(|config| build_model::<NdArray, _>(config, &weights, &Default::default()).is_ok())
}
