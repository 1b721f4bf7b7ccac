//! The real SmolLM2-135M-Instruct Q4_1 GGUF against values read from it by the reference Python
//! reader (`tests/fixtures/make_model_fixture.py` wrote `smollm2_q4_1_reference.json`).

use crate::common::{fixture, model_path};
use burn_kvcompress::gguf::{GgmlType, GgufFile};
use serde_json::Value;

fn reference() -> Value {
    let text = std::fs::read_to_string(fixture("smollm2_q4_1_reference.json")).expect("reference fixture");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn model_header_and_metadata() {
    let f = GgufFile::open(model_path()).unwrap();
    let r = reference();
    let m = &r["metadata"];
    assert_eq!(f.version(), r["gguf_version"].as_u64().unwrap() as u32);
    assert_eq!(f.tensor_infos().len(), 272);
    assert_eq!(f.tensor_infos().len() as u64, r["n_tensors"].as_u64().unwrap());
    assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(f.get_str("general.architecture").unwrap(), m["general.architecture"]);
    assert_eq!(f.get_u32("llama.embedding_length").unwrap() as u64, m["llama.embedding_length"].as_u64().unwrap());
    assert_eq!(f.get_f32("llama.rope.freq_base").unwrap() as f64, m["llama.rope.freq_base"].as_f64().unwrap());
    assert_eq!(
        f.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap() as f64,
        m["llama.attention.layer_norm_rms_epsilon"].as_f64().unwrap()
    );
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), m["tokenizer.ggml.model"]);
    assert_eq!(
        f.get_u32("tokenizer.ggml.bos_token_id").unwrap() as u64,
        m["tokenizer.ggml.bos_token_id"].as_u64().unwrap()
    );
    let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len() as u64, m["n_tokens"].as_u64().unwrap());
    assert_eq!(tokens[100], m["token_100"]);
    let merges = f.get_str_array("tokenizer.ggml.merges").unwrap();
    assert_eq!(merges.len() as u64, m["n_merges"].as_u64().unwrap());
    assert_eq!(merges[0], m["merge_0"]);
    assert_eq!(f.get_i32_array("tokenizer.ggml.token_type").unwrap().len(), tokens.len());
}

#[test]
fn model_tensor_table_matches_gguf_py() {
    let f = GgufFile::open(model_path()).unwrap();
    let r = reference();
    let table = r["tensors"].as_array().unwrap();
    assert_eq!(table.len(), f.tensor_infos().len());
    for (info, row) in f.tensor_infos().iter().zip(table) {
        let dims: Vec<u64> = row[1].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        assert_eq!(info.name, row[0].as_str().unwrap());
        assert_eq!(info.dims, dims, "{}", info.name);
        assert_eq!(info.ggml_type.id() as u64, row[2].as_u64().unwrap(), "{}", info.name);
        assert_eq!(f.data_offset() + info.offset, row[3].as_u64().unwrap(), "{}", info.name);
    }
}

#[test]
fn model_tensors_dequantize_like_gguf_py() {
    let f = GgufFile::open(model_path()).unwrap();
    let r = reference();
    let info = f.tensor_info("blk.0.attn_q.weight").unwrap();
    assert_eq!(info.ggml_type, GgmlType::Q4_1);
    for s in r["samples"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        let (values, shape) = f.tensor_f32(name).unwrap();
        let want_shape: Vec<usize> =
            s["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert_eq!(shape, want_shape, "{name}");
        assert_eq!(f.tensor_info(name).unwrap().ggml_type.name(), s["ggml_type"].as_str().unwrap());
        let samples = s["samples"].as_array().unwrap();
        assert!(samples.len() >= 20);
        for pair in samples {
            let (i, bits) = (pair[0].as_u64().unwrap() as usize, pair[1].as_u64().unwrap() as u32);
            assert_eq!(values[i].to_bits(), bits, "{name}[{i}]: got {}, gguf-py {}", values[i], f32::from_bits(bits));
        }
    }
    let (_, shape) = f.tensor_f32("blk.0.attn_q.weight").unwrap();
    assert_eq!(shape, vec![576, 576]);
}
