//! The RMSNorm (alone and after a residual addition) and SwiGLU kernels (one launch each, for
//! the model's decode steps) against plain f64 computations on the host, on wgpu (lavapipe in
//! CI) or CUDA, in f32 and f16, for awkward shapes: one to five rows, widths below, at and above
//! a cube's units.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{lcg_uniform, to_vec as host, Gpu};
use burn::{
    nn::RmsNormConfig,
    tensor::{DType, FloatDType, Tensor, TensorData},
};
use burn_kvcompress::kernels::{add_rms_norm, rms_norm, swiglu};

const U_F32: f64 = 1.0 / 16_777_216.0;

fn unit(dtype: FloatDType) -> f64 {
    match dtype {
        FloatDType::F16 => 1.0 / 2048.0,
        _ => U_F32,
    }
}

fn uniform(n: usize, seed: u64, dims: [usize; 2], dtype: FloatDType) -> Tensor<Gpu, 2> {
    Tensor::<Gpu, 2>::from_data(TensorData::new(lcg_uniform(n, seed), dims), &Default::default()).cast(dtype)
}

/// `rms_norm` on `[rows, hidden]` in `dtype` against `x / sqrt(mean(x²) + ε) · γ` in f64 on the
/// operands as the kernel sees them: within `(hidden + 4) · u_f32` relative (the f32 sum of
/// squares in any order, the root, the quotient and two products) plus the final rounding to
/// `dtype`, `u · |y|`.
fn check_rms_norm(rows: usize, hidden: usize, dtype: FloatDType) {
    let epsilon = 1e-5;
    let x = uniform(rows * hidden, 3 + hidden as u64, [rows, hidden], dtype);
    let gamma = uniform(hidden, 4 + rows as u64, [1, hidden], dtype).reshape([hidden]);
    let (xs, gs) = (host(x.clone().cast(DType::F32)), host(gamma.clone().cast(DType::F32)));
    let out = rms_norm(x, &gamma, epsilon);
    assert_eq!((out.dims(), out.dtype()), ([rows, hidden], DType::from(dtype)), "{rows}x{hidden}");
    let out = host(out.cast(DType::F32));
    for r in 0..rows {
        let row = &xs[r * hidden..(r + 1) * hidden];
        let mean_square = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / hidden as f64;
        let inverse = 1.0 / (mean_square + epsilon).sqrt();
        for c in 0..hidden {
            let exact = row[c] as f64 * inverse * gs[c] as f64;
            let bound = ((hidden + 4) as f64 * U_F32 + unit(dtype)) * exact.abs() + 1e-30;
            let got = out[r * hidden + c] as f64;
            assert!((got - exact).abs() <= bound, "{rows}x{hidden} {dtype:?} ({r}, {c}): {got} vs {exact}");
        }
    }
}

#[test]
fn rms_norm_equals_a_plain_norm_in_f32() {
    for (rows, hidden) in [(1, 64), (2, 300), (3, 7), (5, 1000), (1, 1), (4, 256), (1, 4096)] {
        check_rms_norm(rows, hidden, FloatDType::F32);
    }
}

#[test]
fn rms_norm_equals_a_plain_norm_in_f16() {
    for (rows, hidden) in [(1, 64), (3, 300), (2, 4096), (5, 9)] {
        check_rms_norm(rows, hidden, FloatDType::F16);
    }
}

#[test]
fn rms_norm_takes_the_place_of_burns_norm() {
    // Burn's `RmsNorm` with the same γ and ε: the kernel's drop-in (f32: the sums' order only).
    let device = Default::default();
    let (rows, hidden) = (3, 96);
    let norm = RmsNormConfig::new(hidden).with_epsilon(1e-6).init::<Gpu>(&device);
    let gamma = uniform(hidden, 11, [1, hidden], FloatDType::F32).reshape([hidden]);
    let norm = burn::nn::RmsNorm { gamma: burn::module::Param::from_tensor(gamma), ..norm };
    let x = uniform(rows * hidden, 12, [rows, hidden], FloatDType::F32);
    let (ours, burns) = (host(rms_norm(x.clone(), &norm.gamma.val(), norm.epsilon)), host(norm.forward(x)));
    for (a, b) in ours.iter().zip(&burns) {
        assert!(((a - b) as f64).abs() <= (hidden + 8) as f64 * U_F32 * (b.abs() as f64), "{a} vs {b}");
    }
}

#[test]
fn add_rms_norm_is_the_addition_then_the_norm() {
    // The sum as Burn's addition rounds it, then the same kernel's norm of it: both exactly.
    for (rows, hidden, dtype) in [(1, 64, FloatDType::F16), (3, 300, FloatDType::F32), (2, 4096, FloatDType::F16)] {
        let x = uniform(rows * hidden, 51 + hidden as u64, [rows, hidden], dtype);
        let delta = uniform(rows * hidden, 52 + rows as u64, [rows, hidden], dtype);
        let gamma = uniform(hidden, 53, [1, hidden], dtype).reshape([hidden]);
        let [sum, normed] = add_rms_norm(x.clone(), delta.clone(), &gamma, 1e-5);
        let added = x + delta;
        let as_f32 = |t: Tensor<Gpu, 2>| host(t.cast(DType::F32));
        assert_eq!(as_f32(sum), as_f32(added.clone()), "{rows}x{hidden} {dtype:?}: the sum");
        assert_eq!(as_f32(normed), as_f32(rms_norm(added, &gamma, 1e-5)), "{rows}x{hidden} {dtype:?}: the norm");
    }
}

/// `swiglu` on `[rows, width]` in `dtype` against `g / (1 + e^(−g)) · u` in f64 on the operands as
/// the kernel sees them, within its documented bound: `(9 + 2|g|) · u_f32` relative for the f32
/// evaluation (the exponential's error, which Vulkan allows up to `3 + 2|g|` units, and six
/// roundings) plus the final rounding to `dtype`, `u · |y|` (and half an f16 subnormal's spacing
/// below f16's normal range); gates spread over ±12 so that the sigmoid saturates at both ends.
fn check_swiglu(rows: usize, width: usize, dtype: FloatDType) {
    let n = rows * width;
    let spread = |t: Tensor<Gpu, 2>| (t * 12.0).cast(dtype);
    let gate = spread(uniform(n, 31 + width as u64, [rows, width], FloatDType::F32));
    let up = uniform(n, 32 + rows as u64, [rows, width], dtype);
    let (gs, us) = (host(gate.clone().cast(DType::F32)), host(up.clone().cast(DType::F32)));
    let out = swiglu(gate, up);
    assert_eq!((out.dims(), out.dtype()), ([rows, width], DType::from(dtype)), "{rows}x{width}");
    for (i, got) in host(out.cast(DType::F32)).into_iter().enumerate() {
        let g = gs[i] as f64;
        let exact = g / (1.0 + (-g).exp()) * us[i] as f64;
        let subnormal = if dtype == FloatDType::F16 { 1.0 / (1u64 << 25) as f64 } else { 1e-30 };
        let bound = ((9.0 + 2.0 * g.abs()) * U_F32 + unit(dtype)) * exact.abs() + subnormal;
        assert!((got as f64 - exact).abs() <= bound, "{rows}x{width} {dtype:?} element {i}: {got} vs {exact}");
    }
}

#[test]
fn swiglu_equals_a_plain_gating() {
    for (rows, width, dtype) in [(1, 1, FloatDType::F32), (3, 300, FloatDType::F32), (1, 14336, FloatDType::F16)] {
        check_swiglu(rows, width, dtype);
    }
    check_swiglu(5, 257, FloatDType::F16);
}

#[test]
fn swiglu_takes_the_place_of_burns_ops() {
    // Burn's `silu(gate) · up` in f32: the same function, evaluated by other steps.
    let (gate, up) = (uniform(600, 41, [2, 300], FloatDType::F32) * 12.0, uniform(600, 42, [2, 300], FloatDType::F32));
    let ours = host(swiglu(gate.clone(), up.clone()));
    let burns = host(burn::tensor::activation::silu(gate) * up);
    for (a, b) in ours.iter().zip(&burns) {
        assert!((a - b).abs() <= 16.0 * f32::EPSILON * b.abs().max(1e-6), "{a} vs {b}");
    }
}
