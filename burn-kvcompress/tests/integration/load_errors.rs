//! Malformed or unsupported model files give typed errors that name the problem.

use std::path::Path;

use crate::common::*;
use burn_kvcompress::{
    error::LoadError,
    loading::{
        build_model, load_gguf_model, load_hf_model, parse_hf_config, HostTensor, SafetensorsWeights, WeightSource,
    },
    model::{ModelConfig, MAX_ROPE_ELEMENTS},
};

fn tiny_config_json() -> serde_json::Value {
    let text = std::fs::read_to_string(hf_tiny_dir("tiny-llama").join("config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn parse(json: &serde_json::Value) -> Result<burn_kvcompress::model::ModelConfig, LoadError> {
    parse_hf_config(&json.to_string(), Path::new("config.json"))
}

#[test]
fn config_variants_and_errors() {
    let mut json = tiny_config_json();
    assert_eq!(parse(&json).unwrap().rope_theta, 10_000.0);
    // transformers 4.x spelling
    json.as_object_mut().unwrap().remove("rope_parameters");
    json["rope_theta"] = 500_000.0.into();
    assert_eq!(parse(&json).unwrap().rope_theta, 500_000.0);

    let mut bad = tiny_config_json();
    bad["model_type"] = "gpt2".into();
    assert!(matches!(parse(&bad), Err(LoadError::UnsupportedArchitecture(a)) if a == "gpt2"));

    let mut bad = tiny_config_json();
    bad["rope_parameters"]["rope_type"] = "yarn".into();
    assert!(matches!(parse(&bad), Err(LoadError::InvalidConfig(m)) if m.contains("yarn")));

    let mut bad = tiny_config_json();
    bad["attention_bias"] = true.into();
    assert!(matches!(parse(&bad), Err(LoadError::InvalidConfig(_))));

    assert!(matches!(parse_hf_config("{not json", Path::new("c.json")), Err(LoadError::Json { .. })));
}

/// Serves the tiny model's weights with one of them altered.
struct Altered {
    inner: SafetensorsWeights,
    name: &'static str,
    change: fn(HostTensor) -> Option<HostTensor>,
}

impl WeightSource for Altered {
    fn get(&self, name: &str) -> Result<HostTensor, LoadError> {
        let t = self.inner.get(name)?;
        match name == self.name {
            true => (self.change)(t).ok_or_else(|| LoadError::MissingWeight(name.into())),
            false => Ok(t),
        }
    }
    fn contains(&self, name: &str) -> bool {
        self.inner.contains(name)
    }
}

#[test]
fn missing_and_misshapen_weights_are_named() {
    let dir = hf_tiny_dir("tiny-llama");
    let config = parse(&tiny_config_json()).unwrap();
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let name = "model.layers.1.self_attn.k_proj.weight";
    let missing = Altered { inner: SafetensorsWeights::from_bytes(&bytes).unwrap(), name, change: |_| None };
    let err = build_model::<Cpu, _>(config.clone(), &missing, &Default::default()).unwrap_err();
    assert!(matches!(&err, LoadError::MissingWeight(n) if n == name), "{err}");

    let transposed =
        Altered { inner: SafetensorsWeights::from_bytes(&bytes).unwrap(), name, change: |t| Some(t.transposed()) };
    let err = build_model::<Cpu, _>(config.clone(), &transposed, &Default::default()).unwrap_err();
    assert!(
        matches!(&err, LoadError::WeightShape { name: n, expected, found } if n == name && expected == &vec![32, 64] && found == &vec![64, 32]),
        "{err}"
    );

    let mut bad = config;
    bad.num_kv_heads = 3;
    let source = SafetensorsWeights::from_bytes(&bytes).unwrap();
    assert!(matches!(build_model::<Cpu, _>(bad, &source, &Default::default()), Err(LoadError::InvalidConfig(_))));
}

#[test]
fn truncated_or_absent_files_fail_cleanly() {
    let bytes = std::fs::read(hf_tiny_dir("tiny-llama").join("model.safetensors")).unwrap();
    for cut in [0, 7, 100, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            matches!(SafetensorsWeights::from_bytes(&bytes[..cut]), Err(LoadError::Safetensors(_))),
            "cut at {cut}"
        );
    }
    assert!(matches!(load_hf_model::<Cpu>(Path::new("/nonexistent"), &Default::default()), Err(LoadError::Io { .. })));
    let junk = std::env::temp_dir().join(format!("kvc-junk-{}.gguf", std::process::id()));
    std::fs::write(&junk, b"not a gguf file at all").unwrap();
    let result = load_gguf_model::<Cpu>(&junk, &Default::default());
    std::fs::remove_file(&junk).unwrap();
    assert!(matches!(result, Err(LoadError::Gguf(_))));
}

#[test]
fn a_config_implying_huge_tensors_is_refused_before_allocating() {
    let config = parse(&tiny_config_json()).unwrap();
    let bytes = std::fs::read(hf_tiny_dir("tiny-llama").join("model.safetensors")).unwrap();
    let weights = SafetensorsWeights::from_bytes(&bytes).unwrap();
    let build = |config| build_model::<Cpu, _>(config, &weights, &Default::default());
    // Every weight is there and of its shape; only the RoPE tables would be huge (2^40 positions).
    for max_position in [1 << 40, usize::MAX] {
        let huge = ModelConfig { max_position, ..config.clone() };
        match build(huge) {
            Err(LoadError::TooLarge { what, elements, limit }) => {
                assert!(what.contains("RoPE"), "{what}");
                assert_eq!((elements, limit), (max_position as u128 * config.head_dim as u128, MAX_ROPE_ELEMENTS));
            }
            other => panic!("max_position {max_position}: {other:?}"),
        }
    }
    // Products past usize are refused, not wrapped around.
    let huge = ModelConfig { vocab_size: usize::MAX, ..config.clone() };
    assert!(matches!(build(huge), Err(LoadError::TooLarge { what, .. }) if what.contains("embedding")));
    let huge = ModelConfig { num_heads: 1 << 40, num_kv_heads: 1 << 40, head_dim: 1 << 30, ..config };
    assert!(matches!(build(huge), Err(LoadError::TooLarge { what, .. }) if what.contains("W_Q")));
}

#[test]
fn safetensors_lengths_past_the_file_are_refused() {
    // A header length of 2^40 in an 8-byte file.
    let header_too_long = (1u64 << 40).to_le_bytes().to_vec();
    // A header declaring a tensor of 2^40 elements over 8 bytes of data.
    let json = r#"{"t":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,8]}}"#;
    let huge_tensor = [&(json.len() as u64).to_le_bytes()[..], json.as_bytes(), &[0; 8]].concat();
    for bytes in [header_too_long, huge_tensor] {
        assert!(matches!(SafetensorsWeights::from_bytes(&bytes), Err(LoadError::Safetensors(_))));
    }
}
