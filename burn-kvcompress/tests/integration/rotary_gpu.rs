//! The rotary kernel (`kernels::rotary_qk`: a layer's queries and keys through RoPE and, where a
//! cache asks for one, its rotation per KV head, in one launch) against the same math in f64 on
//! the host, on wgpu (lavapipe in CI) or CUDA: f32 and f16 inputs, keys written in f32 or f16,
//! with and without a rotation, for awkward shapes (one to three batch rows, one to five
//! positions each, groups of one to four query heads, tiles that hold query and key rows
//! together and end part-way, head dimensions 2 to 256, positions anywhere in the tables).
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use crate::common::{lcg_uniform, to_vec as host, Gpu};
use burn::tensor::{DType, FloatDType, Int, Tensor, TensorData};
use burn_kvcompress::{kernels::rotary_qk, model::RotaryEmbedding};

const U_F32: f64 = 1.0 / 16_777_216.0;
const MAX_POSITION: usize = 40;

fn unit(dtype: FloatDType) -> f64 {
    match dtype {
        FloatDType::F16 => 1.0 / 2048.0,
        _ => U_F32,
    }
}

/// One case: `batch` rows of `seq` positions, `[heads, kv_heads]`, heads of `head_dim`.
struct Case {
    batch: usize,
    seq: usize,
    heads: [usize; 2],
    head_dim: usize,
    input: FloatDType,
    keys: FloatDType,
    rotate: bool,
}

/// RoPE of head row `x` (f64) at the angles `cos`, `sin` (`[head_dim / 2]`): the exact values
/// and each channel's `|x_c · cos| + |x_partner · sin|`, the scale of its f32 evaluation's error.
fn rope_row(x: &[f64], cos: &[f64], sin: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let half = x.len() / 2;
    let mut exact = vec![0.0; x.len()];
    let mut scale = vec![0.0; x.len()];
    for i in 0..half {
        let (x1, x2, c, s) = (x[i], x[i + half], cos[i], sin[i]);
        exact[i] = x1 * c - x2 * s;
        exact[i + half] = x2 * c + x1 * s;
        scale[i] = (x1 * c).abs() + (x2 * s).abs();
        scale[i + half] = (x2 * c).abs() + (x1 * s).abs();
    }
    (exact, scale)
}

/// Checks `got` (a head row as the kernel wrote it) against RoPE of `x` times `r` (`[d, d]`, or
/// none) in f64: each RoPE channel within `2 · u_f32` of its scale (two products and a sum, or
/// a fused multiply-add), each product's f32 sum within `(d + 2) · u_f32 · Σ |x̂_c r_cj|` plus the
/// channels' RoPE errors carried through `r`, and the final rounding, `u · |y|`.
fn check_row(got: &[f32], x: &[f64], angles: (&[f64], &[f64]), r: Option<&[f64]>, out: FloatDType, what: &str) {
    let d = x.len();
    let (rope, scale) = rope_row(x, angles.0, angles.1);
    for j in 0..d {
        let (exact, bound) = match r {
            None => (rope[j], 2.0 * U_F32 * scale[j]),
            Some(r) => (0..d).fold((0.0, 0.0), |(y, e), c| {
                let m = r[c * d + j];
                (y + rope[c] * m, e + m.abs() * (2.0 * U_F32 * scale[c] + (d + 2) as f64 * U_F32 * rope[c].abs()))
            }),
        };
        let bound = bound + unit(out) * exact.abs() + 1e-30;
        let diff = (got[j] as f64 - exact).abs();
        assert!(diff <= bound, "{what} channel {j}: {} vs {exact} (bound {bound:e})", got[j]);
    }
}

fn check(case: Case) {
    let Case { batch, seq, heads: [heads, kv_heads], head_dim: d, input, keys, rotate } = case;
    let device = Default::default();
    let (rows, half, group) = (batch * seq, d / 2, heads / kv_heads);
    let rope = RotaryEmbedding::<Gpu>::new(d, MAX_POSITION, 10_000.0, &device);
    let tensor = |n: usize, seed: u64, dims: [usize; 2]| {
        Tensor::<Gpu, 2>::from_data(TensorData::new(lcg_uniform(n, seed), dims), &device).cast(input)
    };
    let q = tensor(rows * heads * d, 7 + d as u64, [rows, heads * d]);
    let k = tensor(rows * kv_heads * d, 8 + heads as u64, [rows, kv_heads * d]);
    let positions: Vec<i64> = (0..rows).map(|i| ((i * 17 + batch * 5) % MAX_POSITION) as i64).collect();
    let ids = Tensor::<Gpu, 1, Int>::from_data(TensorData::new(positions.clone(), [rows]), &device);
    let r = rotate.then(|| {
        let r = lcg_uniform(kv_heads * d * d, 9 + seq as u64);
        Tensor::<Gpu, 3>::from_data(TensorData::new(r, [kv_heads, d, d]), &device)
    });
    let to_f64 = |t: Tensor<Gpu, 2>| host(t.cast(DType::F32)).into_iter().map(f64::from).collect::<Vec<_>>();
    let (qs, ks) = (to_f64(q.clone()), to_f64(k.clone()));
    let rs: Option<Vec<f64>> = r.as_ref().map(|r| host(r.clone()).into_iter().map(f64::from).collect());
    let (cos, sin) = rope.tables();
    let table = |t: &Tensor<Gpu, 2>| host(t.clone()).into_iter().map(f64::from).collect::<Vec<_>>();
    let (cos_h, sin_h) = (table(cos), table(sin));
    let [q_out, k_out] = rotary_qk(q, k, [batch, heads, kv_heads], cos, sin, &ids, r.as_ref(), keys.into());
    assert_eq!((q_out.dims(), q_out.dtype()), ([batch, heads, seq, d], DType::F32));
    assert_eq!((k_out.dims(), k_out.dtype()), ([batch, kv_heads, seq, d], DType::from(keys)));
    let (q_got, k_got) = (host(q_out), host(k_out.cast(DType::F32)));
    for b in 0..batch {
        for s in 0..seq {
            let row = b * seq + s;
            let p = positions[row] as usize;
            let angles = (&cos_h[p * half..(p + 1) * half], &sin_h[p * half..(p + 1) * half]);
            for h in 0..heads {
                let matrix = rs.as_ref().map(|r| &r[h / group * d * d..(h / group + 1) * d * d]);
                let x = &qs[(row * heads + h) * d..][..d];
                let got = &q_got[((b * heads + h) * seq + s) * d..][..d];
                let what = format!("{batch}x{seq} {heads}/{kv_heads}x{d} {input:?} query b{b} s{s} h{h}");
                check_row(got, x, angles, matrix, FloatDType::F32, &what);
            }
            for h in 0..kv_heads {
                let matrix = rs.as_ref().map(|r| &r[h * d * d..(h + 1) * d * d]);
                let x = &ks[(row * kv_heads + h) * d..][..d];
                let got = &k_got[((b * kv_heads + h) * seq + s) * d..][..d];
                let what = format!("{batch}x{seq} {heads}/{kv_heads}x{d} {input:?} key b{b} s{s} h{h}");
                check_row(got, x, angles, matrix, keys, &what);
            }
        }
    }
}

/// `(batch, seq, [heads, kv_heads], head_dim, input, keys)`.
type Shape = (usize, usize, [usize; 2], usize, FloatDType, FloatDType);

/// Checks each case with `rotate`.
fn check_all(rotate: bool, cases: &[Shape]) {
    for &(batch, seq, heads, head_dim, input, keys) in cases {
        check(Case { batch, seq, heads, head_dim, input, keys, rotate });
    }
}

#[test]
fn rotary_qk_equals_rope_in_f64() {
    use FloatDType::{F16, F32};
    check_all(
        false,
        &[
            (1, 1, [1, 1], 2, F32, F32),
            (2, 3, [6, 2], 32, F32, F32),
            (3, 1, [9, 3], 64, F16, F16),
            (1, 5, [4, 4], 128, F16, F32),
            (2, 2, [2, 1], 96, F32, F16),
        ],
    );
}

#[test]
fn rotary_qk_with_a_rotation_equals_the_product_in_f64() {
    use FloatDType::{F16, F32};
    check_all(
        true,
        &[
            (1, 1, [4, 1], 16, F32, F32),
            (3, 1, [9, 3], 64, F16, F16),
            (2, 5, [8, 2], 128, F16, F16),
            (1, 3, [2, 2], 256, F32, F16),
        ],
    );
}

#[test]
fn rotary_qk_takes_the_place_of_burns_ops() {
    // The same queries and keys through Burn's ops (the model's path without the kernels): the
    // same f32 arithmetic, up to a fused multiply-add.
    let device = Default::default();
    let (batch, seq, heads, kv_heads, d) = (2, 3, 4, 2, 32);
    let rope = RotaryEmbedding::<Gpu>::new(d, 24, 500_000.0, &device);
    let tensor = |n: usize, seed: u64, dims: [usize; 2]| {
        Tensor::<Gpu, 2>::from_data(TensorData::new(lcg_uniform(n, seed), dims), &device).cast(FloatDType::F16)
    };
    let q = tensor(batch * seq * heads * d, 21, [batch * seq, heads * d]);
    let k = tensor(batch * seq * kv_heads * d, 22, [batch * seq, kv_heads * d]);
    let ids = Tensor::<Gpu, 1, Int>::from_data(TensorData::new(vec![23i64, 0, 9, 4, 5, 6], [6]), &device);
    let (cos, sin) = rope.tables();
    let shape = [batch, heads, kv_heads];
    let ours = rotary_qk(q.clone(), k.clone(), shape, cos, sin, &ids, None, DType::F32);
    let burns = rope.apply_qk([q, k], shape, &ids, None, FloatDType::F32);
    for (ours, burns) in ours.into_iter().zip(burns) {
        assert_eq!(ours.dims(), burns.dims());
        for (a, b) in host(ours).iter().zip(&host(burns)) {
            assert!((a - b).abs() <= 4.0 * f32::EPSILON * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}
