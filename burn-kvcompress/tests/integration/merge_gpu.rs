//! The log-sum-exp merge kernel against a plain f64 merge on wgpu (lavapipe in CI) or CUDA: many splits,
//! head widths that do and do not divide the cube, and fully masked splits.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{lcg_uniform, Gpu};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_kvcompress::kernels::{float_arg, merge_partials, SplitPartials, MASKED_SCORE};

#[test]
fn merge_equals_a_plain_log_sum_exp_merge() {
    let upload = |values: Vec<f32>| {
        let n = values.len();
        float_arg(&Tensor::<Gpu, 1>::from_data(TensorData::new(values, [n]), &Default::default()))
    };
    for (case, (heads, splits, head_dim)) in
        [(1, 1, 16), (3, 7, 64), (2, 130, 128), (4, 33, 80), (1, 9, 256), (1, 4, 16), (2, 13, 32)]
            .into_iter()
            .enumerate()
    {
        let seed = 10 * case as u64;
        let output = lcg_uniform(heads * splits * head_dim, seed);
        let mut max: Vec<f32> = lcg_uniform(heads * splits, seed + 1).iter().map(|x| 20.0 * x).collect();
        let mut sum: Vec<f32> = lcg_uniform(heads * splits, seed + 2).iter().map(|x| 1.5 + x).collect();
        // Every third split of a head saw only masked slots (split 0 always sees some); with 4
        // splits, a merge unit's only split is masked while the last split is not.
        for (i, (m, l)) in max.iter_mut().zip(&mut sum).enumerate() {
            if i % splits % 3 == 2 {
                (*m, *l) = (MASKED_SCORE, 0.0);
            }
        }
        let mut output = output;
        for (i, o) in output.iter_mut().enumerate() {
            if (i / head_dim) % splits % 3 == 2 {
                *o = 0.0;
            }
        }
        let partials = SplitPartials {
            output: upload(output.clone()),
            max: upload(max.clone()),
            sum: upload(sum.clone()),
            heads,
            splits,
            head_dim,
        };
        let merged = Tensor::<Gpu, 1>::from_primitive(TensorPrimitive::Float(merge_partials(partials)));
        let got: Vec<f32> = merged.into_data().convert::<f32>().into_vec().unwrap();
        assert_eq!(got.len(), heads * head_dim);
        for h in 0..heads {
            let m = (0..splits).map(|s| max[h * splits + s]).fold(f32::MIN, f32::max) as f64;
            let weights: Vec<f64> = (0..splits).map(|s| (max[h * splits + s] as f64 - m).exp()).collect();
            let mass: f64 = (0..splits).map(|s| sum[h * splits + s] as f64 * weights[s]).sum();
            for c in 0..head_dim {
                let terms = (0..splits).map(|s| output[(h * splits + s) * head_dim + c] as f64 * weights[s]);
                let (num, abs): (f64, f64) = terms.fold((0.0, 0.0), |(n, a), t| (n + t, a + t.abs()));
                // u = 2^-24. Each weight e^(m_s − M) is the kernel's e^(m_s − m_p) · e^(m_p − M)
                // (m_p: the max of the split's part, between m_s and M): off by a relative
                // `ε_w = 2u·|m_s − M| + 9u` (two rounded differences, each no larger than
                // |m_s − M|, a few ulps of each exp, and their product), and each sum of
                // `splits` products adds `splits · u` relative to the sum of absolute terms;
                // numerator and denominator each so, the quotient by at most
                // `2 (splits·u + ε_w) · Σ|o_s w_s| / l`.
                let u = f64::from(f32::EPSILON) / 2.0;
                let spread = (0..splits).map(|s| (max[h * splits + s] as f64 - m).abs().min(40.0)).fold(0.0, f64::max);
                let bound = 2.0 * (splits as f64 * u + 2.0 * spread * u + 9.0 * u) * abs / mass;
                let diff = (got[h * head_dim + c] as f64 - num / mass).abs();
                assert!(diff <= bound, "case {case}, head {h}, channel {c}: off by {diff:e} > {bound:e}");
            }
        }
    }
}

/// The negative control of `cli/bench/validate_bounds.sh`: partials that claim more splits
/// than their buffers hold make the merge read past them, which bounds validation must report.
/// Ignored (reading out of bounds is undefined behaviour in an unchecked launch); it refuses to
/// run unless the working directory's `cubecl.toml` turns validation on.
#[test]
#[ignore = "run by cli/bench/validate_bounds.sh under check_mode = \"validate\""]
fn bounds_validation_reports_a_merge_reading_past_its_buffers() {
    let config = std::fs::read_to_string("cubecl.toml").unwrap_or_default();
    assert!(config.contains("check_mode = \"validate\""), "needs a cubecl.toml with check_mode = \"validate\"");
    let (heads, splits, head_dim) = (1, 4, 16);
    let upload = |n: usize| float_arg(&Tensor::<Gpu, 1>::zeros([n], &Default::default()));
    let partials = SplitPartials {
        output: upload(heads * splits * head_dim),
        max: upload(heads * splits),
        sum: upload(heads * splits),
        heads,
        splits: 2 * splits,
        head_dim,
    };
    let out = Tensor::<Gpu, 1>::from_primitive(TensorPrimitive::Float(merge_partials(partials)));
    // Reading the result waits for the kernel, so its device prints are out.
    let _ = out.into_data();
}
