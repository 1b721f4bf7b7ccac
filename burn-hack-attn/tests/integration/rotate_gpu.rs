//! The per-KV-head rotation kernel ([`HackBackend::hack_rotate`] on a CubeCL backend) against f64
//! products on the host, on wgpu (lavapipe in CI) or CUDA, in every float type the device has.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use burn::tensor::{backend::Backend, DType, Tensor, TensorData};
use burn_hack_attn::kernels::HackBackend;
use rand::{rngs::StdRng, Rng, SeedableRng};

#[cfg(feature = "cuda")]
type Gpu = burn::backend::Cuda<f32, i32>;
#[cfg(not(feature = "cuda"))]
type Gpu = burn::backend::Wgpu<f32, i32>;

fn normal(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| (rng.random::<f32>() - 0.5) * 4.0).collect()
}

fn rounded(x: &[f32], dtype: DType) -> Vec<f32> {
    match dtype {
        DType::F16 => x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect(),
        _ => x.to_vec(),
    }
}

#[test]
fn the_rotation_kernel_equals_f64_products() {
    let device = Default::default();
    let mut dtypes = vec![DType::F32];
    if Gpu::supports_dtype(&device, DType::F16) {
        dtypes.push(DType::F16);
    }
    // (batch, kv heads, query heads per KV head, slots, head dim): a decode step's queries and
    // keys, a prompt's rows spread over several tiles with a partial last one, the smallest and
    // largest head dimensions the kernel takes.
    let cases = [(2, 3, 3, 1, 64), (1, 2, 4, 19, 128), (3, 1, 1, 1, 16), (1, 1, 2, 9, 32), (2, 1, 1, 3, 256)];
    for (i, &(batch, kv_heads, group, n, d)) in cases.iter().enumerate() {
        let heads = kv_heads * group;
        let shape = [batch, heads, n, d];
        let x = normal(batch * heads * n * d, 10 + i as u64);
        // Any matrix: the kernel computes a product, orthogonal or not.
        let r = normal(kv_heads * d * d, 20 + i as u64);
        let r_t = Tensor::<Gpu, 3>::from_data(TensorData::new(r.clone(), [kv_heads, d, d]), &device);
        for &input in &dtypes {
            for &output in &dtypes {
                let x_in = rounded(&x, input);
                let x_t = Tensor::<Gpu, 4>::from_data(TensorData::new(x.clone(), shape), &device).cast(input);
                let out = Gpu::hack_rotate(x_t, &r_t, output);
                assert_eq!(out.dtype(), output, "case {i}");
                let got: Vec<f32> = out.into_data().convert::<f32>().into_vec().unwrap();
                for (row, got_row) in got.chunks(d).enumerate() {
                    let kv_head = row / n / group % kv_heads;
                    let x_row = &x_in[row * d..(row + 1) * d];
                    for (j, &g) in got_row.iter().enumerate() {
                        let terms = (0..d).map(|c| x_row[c] as f64 * r[(kv_head * d + c) * d + j] as f64);
                        let (want, magnitude) = terms.fold((0.0, 0.0), |(s, m), t| (s + t, m + t.abs()));
                        // f32 sums of `d` products: each rounding at most 2^-24 of the running
                        // magnitude; then the output's one rounding (2^-11 relative in f16).
                        let sums = d as f64 * magnitude * 2f64.powi(-24);
                        let last = if output == DType::F16 { want.abs() * 2f64.powi(-11) + 6e-8 } else { 0.0 };
                        assert!(
                            (g as f64 - want).abs() <= sums + last,
                            "case {i} ({input:?} → {output:?}), row {row}, column {j}: {g} against {want}"
                        );
                    }
                }
            }
        }
    }
}
