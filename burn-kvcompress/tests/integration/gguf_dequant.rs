//! Dequantization of every supported ggml type against the reference Python implementation
//! (`gguf.quants.dequantize`), bit-exactly, on the fixtures written by
//! `tests/fixtures/make_dequant_fixtures.py`.

use crate::common::{fixture, from_hex};
use burn_kvcompress::gguf::{dequantize, GgmlType, GgufError};

#[derive(serde::Deserialize)]
struct Fixture {
    #[serde(rename = "type")]
    type_name: String,
    type_id: u32,
    n_elements: usize,
    data_hex: String,
    expected_f32_hex: String,
}

fn load(name: &str) -> Fixture {
    let path = fixture(&format!("dequant/{name}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run tests/fixtures/make_dequant_fixtures.py)", path.display()));
    serde_json::from_str(&text).expect("fixture JSON")
}

fn check(name: &str) {
    let fx = load(name);
    assert_eq!(fx.type_name, name);
    let ty = GgmlType::from_id(fx.type_id).unwrap();
    assert_eq!(ty.name(), name);
    let data = from_hex(&fx.data_hex);
    let expected: Vec<f32> =
        from_hex(&fx.expected_f32_hex).chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert_eq!(expected.len(), fx.n_elements);
    assert_eq!(data.len(), fx.n_elements / ty.block_size() * ty.type_size());

    let got = dequantize(ty, &data, fx.n_elements).unwrap();
    assert_eq!(got.len(), expected.len());
    let mut mismatches = 0;
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        // Bit patterns: stricter than `==` (distinguishes -0.0 from 0.0).
        if g.to_bits() != e.to_bits() {
            if mismatches < 10 {
                eprintln!("{name}[{i}]: got {g:e} ({:#010x}), expected {e:e} ({:#010x})", g.to_bits(), e.to_bits());
            }
            mismatches += 1;
        }
    }
    assert_eq!(mismatches, 0, "{name}: {mismatches} of {} values differ from gguf-py", got.len());
    // The fixture must actually exercise something: mostly distinct, non-zero values.
    let nonzero = got.iter().filter(|v| **v != 0.0).count();
    assert!(nonzero > got.len() / 2, "{name}: fixture is degenerate");
}

#[test]
fn f32_matches_gguf_py() {
    check("F32");
}

#[test]
fn f16_matches_gguf_py() {
    check("F16");
}

#[test]
fn bf16_matches_gguf_py() {
    check("BF16");
}

#[test]
fn q4_0_matches_gguf_py() {
    check("Q4_0");
}

#[test]
fn q4_1_matches_gguf_py() {
    check("Q4_1");
}

#[test]
fn q5_0_matches_gguf_py() {
    check("Q5_0");
}

#[test]
fn q5_1_matches_gguf_py() {
    check("Q5_1");
}

#[test]
fn q8_0_matches_gguf_py() {
    check("Q8_0");
}

#[test]
fn q4_k_matches_gguf_py() {
    check("Q4_K");
}

#[test]
fn q6_k_matches_gguf_py() {
    check("Q6_K");
}

#[test]
fn block_and_type_sizes_match_ggml() {
    // (type, block size, bytes per block) from ggml's type_traits / gguf-py GGML_QUANT_SIZES.
    for (ty, bs, ts) in [
        (GgmlType::F32, 1, 4),
        (GgmlType::F16, 1, 2),
        (GgmlType::BF16, 1, 2),
        (GgmlType::Q4_0, 32, 18),
        (GgmlType::Q4_1, 32, 20),
        (GgmlType::Q5_0, 32, 22),
        (GgmlType::Q5_1, 32, 24),
        (GgmlType::Q8_0, 32, 34),
        (GgmlType::Q4_K, 256, 144),
        (GgmlType::Q6_K, 256, 210),
    ] {
        assert_eq!((ty.block_size(), ty.type_size()), (bs, ts), "{ty}");
    }
}

#[test]
fn unsupported_and_unknown_types_are_typed_errors() {
    assert!(matches!(
        dequantize(GgmlType::Q2_K, &[0u8; 84], 256),
        Err(GgufError::UnsupportedTensorType(GgmlType::Q2_K))
    ));
    assert!(matches!(GgmlType::from_id(4), Err(GgufError::UnknownTensorType(4))));
    assert!(matches!(GgmlType::from_id(1000), Err(GgufError::UnknownTensorType(1000))));
}

#[test]
fn wrong_lengths_are_shape_mismatches() {
    // 33 elements are not a whole Q8_0 block; 34 bytes are one block, not two.
    assert!(matches!(dequantize(GgmlType::Q8_0, &[0u8; 34], 33), Err(GgufError::ShapeMismatch { .. })));
    assert!(matches!(dequantize(GgmlType::Q8_0, &[0u8; 34], 64), Err(GgufError::ShapeMismatch { .. })));
    assert!(matches!(dequantize(GgmlType::F32, &[0u8; 7], 2), Err(GgufError::ShapeMismatch { .. })));
}
