//! The row-product kernel (decode steps' projections) against a plain f64 product on wgpu
//! (lavapipe in CI) or CUDA, in f32 and f16, for awkward shapes: widths that are and are not
//! multiples of the vector and of a cube's columns, short and long `k`, 1 to 8 rows; above 8 rows,
//! the prompt product (cubek's variants, else Burn's matrix product), whose f16 tiles may sum in
//! f16 and so get a bound in the operands' unit roundoff.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{lcg_uniform, to_vec as host, Gpu};
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_kvcompress::kernels::{row_product, MAX_ROWS};

/// f32's unit roundoff.
const U_F32: f64 = 1.0 / (1u64 << 24) as f64;

/// Checks `row_product` on `[rows, k] · [k, n]` in `dtype` against the f64 product of the
/// operands as the kernel sees them (rounded to `dtype`): within `k · u_sum · Σ|x||w|` for the
/// sums (`u_sum`: the unit roundoff they run in) plus the final rounding, `u_dtype · |exact|`.
fn check(rows: usize, k: usize, n: usize, dtype: FloatDType, u_sum: f64) {
    let device = Default::default();
    let x = Tensor::<Gpu, 2>::from_data(TensorData::new(lcg_uniform(rows * k, 1 + k as u64), [rows, k]), &device);
    let w = Tensor::<Gpu, 2>::from_data(TensorData::new(lcg_uniform(k * n, 2 + n as u64), [k, n]), &device);
    let (x, w) = (x.cast(dtype), w.cast(dtype));
    let (xs, ws) = (host(x.clone().cast(DType::F32)), host(w.clone().cast(DType::F32)));
    let out = row_product(x, w);
    assert_eq!(out.dims(), [rows, n]);
    assert_eq!(out.dtype(), DType::from(dtype), "the product keeps the operands' type");
    let out = host(out.cast(DType::F32));
    let u_out = match dtype {
        FloatDType::F16 => 2f64.powi(-11),
        _ => 2f64.powi(-24),
    };
    for r in 0..rows {
        for c in 0..n {
            let terms = (0..k).map(|i| xs[r * k + i] as f64 * ws[i * n + c] as f64);
            let (exact, magnitude) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
            let bound = k as f64 * u_sum * magnitude + u_out * exact.abs() + 1e-30;
            let diff = (out[r * n + c] as f64 - exact).abs();
            assert!(
                diff <= bound,
                "{rows}x{k}x{n} {dtype:?} at ({r}, {c}): {} vs {exact} (bound {bound:e})",
                out[r * n + c]
            );
        }
    }
}

#[test]
fn row_product_equals_a_plain_product_in_f32() {
    for (rows, k, n) in [(1, 64, 256), (1, 300, 1000), (3, 7, 5), (8, 129, 40), (2, 1, 24), (5, 1000, 1)] {
        check(rows, k, n, FloatDType::F32, U_F32);
    }
}

#[test]
fn row_product_equals_a_plain_product_in_f16() {
    for (rows, k, n) in [(1, 64, 256), (1, 300, 1000), (3, 7, 5), (8, 129, 40), (4, 2048, 12)] {
        check(rows, k, n, FloatDType::F16, U_F32);
    }
}

#[test]
fn more_rows_than_the_kernel_takes_go_through_the_prompt_product() {
    // Awkward widths (no TMA: rows not 16-byte aligned) and aligned ones that the tensor-core
    // variants take on CUDA; on lavapipe every case falls back to Burn's matrix product.
    // f32 operands take Burn's product, whose tensor-core tiles on CUDA round them to TF32 (10
    // bits of mantissa, the unit roundoff of f16): the f32 cases get f16's bound.
    for (rows, k, n) in [(MAX_ROWS + 1, 33, 48), (20, 16, 8), (130, 256, 192), (64, 1024, 64)] {
        check(rows, k, n, FloatDType::F32, 2f64.powi(-11));
        check(rows, k, n, FloatDType::F16, 2f64.powi(-11));
    }
}
