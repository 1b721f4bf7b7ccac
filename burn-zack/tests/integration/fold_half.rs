//! Folding the value/output rotations into f16 weights (`CausalLm::with_weights_as`) on wgpu or
//! CUDA: done in f32 and rounded back once, so it equals folding the same weights held in f32
//! and rounding the result, bit for bit; the folded weights and bias stay f16.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use std::sync::Arc;

use crate::common::*;
use burn::tensor::{DType, FloatDType};
use burn_kvcompress::{loading::load_hf_model, model::CausalLm};
use burn_zack::{cache::ZackScheme, rotation::RotationConfig, Ranks};

/// The folded tensors of every layer: `v_proj`'s weight, `o_proj`'s weight and (where a layer
/// drops value coordinates) bias, as f32 host values, and their float types.
fn folded_parts(model: &CausalLm<Gpu>) -> Vec<(DType, Vec<f32>)> {
    assert!(model.layers[1].attention.o_proj.bias.is_some(), "layer 1's dropped coordinates give o_proj a bias");
    model
        .layers
        .iter()
        .flat_map(|layer| {
            let a = &layer.attention;
            let weights = [a.v_proj.weight.val().reshape([-1]), a.o_proj.weight.val().reshape([-1])];
            weights.into_iter().chain(a.o_proj.bias.as_ref().map(|b| b.val()))
        })
        .map(|t| (t.dtype(), host(t.cast(DType::F32))))
        .collect()
}

#[test]
fn folding_f16_weights_rounds_the_f32_fold_once() {
    let rotations = Arc::new(calibrated(&tiny_llama(), RotationConfig::default()));
    let mut ranks = Ranks::full(rotations.geometry);
    ranks.value_output[1] = vec![16, 5];
    let scheme = ZackScheme::new(rotations, ranks).unwrap();

    let half = load_hf_model::<Gpu>(TINY_LLAMA_DIR.as_ref(), &Default::default())
        .unwrap()
        .model
        .with_weights_as(FloatDType::F16)
        .unwrap();
    let widened = half.clone().with_weights_as(FloatDType::F32).unwrap();
    let folded_half = scheme.fold(half).unwrap();
    let rounded = scheme.fold(widened).unwrap().with_weights_as(FloatDType::F16).unwrap();

    let (parts, expected) = (folded_parts(&folded_half), folded_parts(&rounded));
    assert!(parts.iter().all(|(dtype, _)| *dtype == DType::F16), "folded weights stay f16");
    assert_eq!(parts, expected);
}
