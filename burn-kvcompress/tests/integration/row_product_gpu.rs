//! The row-product kernel (decode steps' projections) against a plain f64 product on wgpu
//! (lavapipe in CI) or CUDA, in f32 and f16, for awkward shapes: widths that are and are not
//! multiples of the vector and of a cube's columns, short and long `k`, 1 to 8 rows, one to three
//! weights of different widths in one launch; the tensor-core kernel (which CUDA's test devices
//! must take) in f16 and bf16 for 2 to 32 rows (one to four row groups, the last one partial);
//! past what both take, the prompt product (cubek's variants, else Burn's matrix product), whose
//! f16 tiles may sum in f16 and so get a bound in the operands' unit roundoff.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{lcg_uniform, to_vec as host, Gpu};
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_cubecl::cubecl::ir::{ElemType, FloatKind, StorageType};
use burn_kvcompress::kernels::{row_mma_applies, row_product, row_products, MAX_ROWS, MMA_MAX_ROWS, MMA_MIN_ROWS};

/// f32's unit roundoff.
const U_F32: f64 = 1.0 / (1u64 << 24) as f64;

/// Checks `row_product` on `[rows, k] · [k, n]` in `dtype` ([`check_all`]).
fn check(rows: usize, k: usize, n: usize, dtype: FloatDType, u_sum: f64) {
    check_all(rows, k, &[n], dtype, u_sum);
}

/// Checks `row_product` (one width) or `row_products` (two or three) on `[rows, k]` times
/// weights `[k, n_i]` in `dtype` against the f64 product of the operands as the kernel sees them
/// (rounded to `dtype`): within `k · u_sum · Σ|x||w|` for the sums (`u_sum`: the unit roundoff
/// they run in) plus the final rounding, `u_dtype · |exact|`.
fn check_all(rows: usize, k: usize, widths: &[usize], dtype: FloatDType, u_sum: f64) {
    let device = Default::default();
    let x = Tensor::<Gpu, 2>::from_data(TensorData::new(lcg_uniform(rows * k, 1 + k as u64), [rows, k]), &device);
    let x = x.cast(dtype);
    let weights: Vec<Tensor<Gpu, 2>> = widths
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let values = lcg_uniform(k * n, 2 + n as u64 + 100 * i as u64);
            Tensor::<Gpu, 2>::from_data(TensorData::new(values, [k, n]), &device).cast(dtype)
        })
        .collect();
    let xs = host(x.clone().cast(DType::F32));
    let outputs: Vec<Tensor<Gpu, 2>> = match weights.as_slice() {
        [w] => vec![row_product(x, w.clone())],
        [a, b] => row_products(x, [a.clone(), b.clone()]).into(),
        [a, b, c] => row_products(x, [a.clone(), b.clone(), c.clone()]).into(),
        _ => unreachable!("one to three weights"),
    };
    let u_out = match dtype {
        FloatDType::F16 => 2f64.powi(-11),
        FloatDType::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    };
    for ((w, out), &n) in weights.into_iter().zip(outputs).zip(widths) {
        assert_eq!(out.dims(), [rows, n]);
        assert_eq!(out.dtype(), DType::from(dtype), "the product keeps the operands' type");
        let (ws, out) = (host(w.cast(DType::F32)), host(out.cast(DType::F32)));
        for r in 0..rows {
            for c in 0..n {
                let terms = (0..k).map(|i| xs[r * k + i] as f64 * ws[i * n + c] as f64);
                let (exact, magnitude) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                let bound = k as f64 * u_sum * magnitude + u_out * exact.abs() + 1e-30;
                let diff = (out[r * n + c] as f64 - exact).abs();
                assert!(
                    diff <= bound,
                    "{rows}x{k}x{widths:?} {dtype:?}, width {n} at ({r}, {c}): {} vs {exact} (bound {bound:e})",
                    out[r * n + c]
                );
            }
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
fn tensor_core_products_equal_plain_products() {
    // Shapes the tensor-core kernel takes (k a multiple of 16, widths of 8): one step, blocks of 128
    // columns cut by the width, splits whose steps do not divide k, steps fewer than the warps'
    // unrolled rounds, 2 to 32 rows (full and partial row groups, each group count's unrolling),
    // one to three weights; bf16 where the device has it. On lavapipe (no warp products, no bf16)
    // the CUDA-core kernel runs the f16 cases up to 8 rows, the prompt product the rest.
    let device = Default::default();
    let properties = Tensor::<Gpu, 1>::zeros([1], &device).into_primitive().tensor().client.properties().clone();
    let cases = [
        (2, 16, vec![8]),
        (2, 64, vec![256]),
        (3, 144, vec![40, 8, 296]),
        (8, 1024, vec![1000, 1000]),
        (5, 2064, vec![128]),
        (7, 4096, vec![24, 136, 520]),
        (4, 14336, vec![64]),
        (9, 64, vec![256]),
        (16, 1024, vec![1000, 1000]),
        (17, 144, vec![40, 8, 296]),
        (24, 2064, vec![128]),
        (31, 4096, vec![24, 136, 520]),
        (32, 14336, vec![64]),
    ];
    let bf16: StorageType = ElemType::Float(FloatKind::BF16).into();
    let dtypes = match properties.supports_type(bf16) {
        true => vec![FloatDType::F16, FloatDType::BF16],
        false => vec![FloatDType::F16],
    };
    for (rows, k, widths) in cases {
        for &dtype in &dtypes {
            let applies = row_mma_applies(rows, k, &widths, DType::from(dtype), &properties);
            assert!(applies || !cfg!(feature = "cuda"), "{rows}x{k}x{widths:?} {dtype:?}: CUDA must take it");
            // Past the CUDA-core kernel's rows, a device without warp products takes the prompt
            // product, whose f16 tiles may sum in f16.
            let u_sum = match applies || rows <= MAX_ROWS {
                true => U_F32,
                false => 2f64.powi(-11),
            };
            check_all(rows, k, &widths, dtype, u_sum);
        }
    }
}

#[test]
fn the_tensor_core_kernel_declines_what_it_does_not_take() {
    let device = Default::default();
    let properties = Tensor::<Gpu, 1>::zeros([1], &device).into_primitive().tensor().client.properties().clone();
    let takes = |rows, k, widths: &[usize], dtype| row_mma_applies(rows, k, widths, dtype, &properties);
    assert!(!takes(1, 64, &[256], DType::F32), "f32 operands");
    assert!(!takes(MMA_MIN_ROWS - 1, 64, &[256], DType::F16), "fewer rows than it takes");
    assert!(!takes(MMA_MAX_ROWS + 1, 64, &[256], DType::F16), "more rows than its row groups");
    assert!(!takes(2, 56, &[256], DType::F16), "k not a multiple of a step's 16 rows");
    assert!(!takes(1, 64, &[256, 12], DType::F16), "a width not a multiple of a 16-byte piece");
    assert!(!takes(1, 64, &[8, 8, 8, 8], DType::F16), "more weights than one launch takes");
}

#[test]
fn more_rows_than_the_kernel_takes_go_through_the_prompt_product() {
    // Rows past the CUDA-core kernel's with k not a multiple of 8 (the tensor-core row kernel
    // declines), or past the tensor-core kernel's; awkward widths (no TMA: rows not 16-byte
    // aligned) and aligned ones that the tensor-core variants take on CUDA; on lavapipe every
    // case falls back to Burn's matrix product.
    // f32 operands take Burn's product, whose tensor-core tiles on CUDA round them to TF32 (10
    // bits of mantissa, the unit roundoff of f16): the f32 cases get f16's bound.
    for (rows, k, n) in [(MAX_ROWS + 1, 33, 48), (20, 15, 8), (130, 256, 192), (MMA_MAX_ROWS + 1, 1024, 64)] {
        check(rows, k, n, FloatDType::F32, 2f64.powi(-11));
        check(rows, k, n, FloatDType::F16, 2f64.powi(-11));
    }
}

#[test]
fn row_products_of_several_weights_equal_plain_products() {
    // Query, key and value widths (one cube's columns or less, several cubes', a partial one);
    // widths whose common vector is narrower than one alone's; gate and up of a feed-forward.
    for (rows, k, widths) in [(1, 64, vec![256, 64, 64]), (3, 129, vec![40, 8, 296]), (8, 300, vec![1000, 1000])] {
        check_all(rows, k, &widths, FloatDType::F32, U_F32);
        check_all(rows, k, &widths, FloatDType::F16, U_F32);
    }
    check_all(2, 7, &[12, 5, 3], FloatDType::F32, U_F32);
    // Past the kernel's rows: each product on its own.
    check_all(MAX_ROWS + 3, 33, &[48, 16], FloatDType::F16, 2f64.powi(-11));
}
