//! The homomorphic product of two quantized matrices, as a plain-tensor reference (spec §3.2).
//!
//! For `C = A · Bᵀ` with `A: [M, Z]` and `B: [N, Z]` both partitioned along `Z` (partitions
//! `p` of `|Z_p|` elements, codes `a'`, `b'`, metadata `(m, s)` per row and partition):
//!
//! ```text
//! c_ij = Σ_p [ s^A_ip s^B_jp Σ_{z∈p} a'_iz b'_jz      (integer dot product of codes)
//!            + s^A_ip m^B_jp Σ_{z∈p} a'_iz             (A's code sums, computed on the fly)
//!            + m^A_ip s^B_jp Σ_{z∈p} b'_jz             (B's code sums, cached: SE)
//!            + |Z_p| m^A_ip m^B_jp ]
//! ```
//!
//! which is exactly the product of the dequantized operands, `(s a' + m)(s b' + m)` expanded.
//! In attention, `QKᵀ` has A = Q (8-bit) and B = K (per token, channel partitions), and `PV` has
//! A = P (8-bit) and B = Vᵀ (per channel, token partitions).

use burn::tensor::{backend::Backend, Tensor, TensorData};

use crate::quant::PartitionedMatrix;

/// Per-partition host arrays of one operand, laid out `[parts, rows]`.
struct Terms {
    codes: Vec<f32>,
    scale: Vec<f32>,
    min: Vec<f32>,
    sum: Vec<f32>,
}

/// Codes zero-padded to `[rows, parts, Π]`, and metadata/sums transposed to `[parts, rows]`.
fn terms(m: &PartitionedMatrix) -> Terms {
    let (rows, parts, pi) = (m.rows(), m.parts(), m.partition());
    let mut codes = vec![0.0; rows * parts * pi];
    for r in 0..rows {
        for p in 0..parts {
            for (z, c) in m.codes(r, p).into_iter().enumerate() {
                codes[(r * parts + p) * pi + z] = c as f32;
            }
        }
    }
    let per_part = |f: &dyn Fn(usize, usize) -> f32| -> Vec<f32> {
        (0..parts).flat_map(|p| (0..rows).map(move |r| (p, r))).map(|(p, r)| f(r, p)).collect()
    };
    Terms {
        codes,
        scale: per_part(&|r, p| m.params(r, p).scale.to_f32()),
        min: per_part(&|r, p| m.params(r, p).min.to_f32()),
        sum: per_part(&|r, p| m.sum(r, p) as f32),
    }
}

/// `A · Bᵀ` (`[M, N]`) from the codes, metadata and code sums of `a` (`[M, Z]`) and `b`
/// (`[N, Z]`), which must share `Z` and Π.
pub fn homomorphic_matmul<B: Backend>(
    a: &PartitionedMatrix,
    b: &PartitionedMatrix,
    device: &B::Device,
) -> Tensor<B, 2> {
    assert_eq!((a.inner(), a.partition()), (b.inner(), b.partition()), "operands must share Z and Π");
    let (m, n, parts, pi) = (a.rows(), b.rows(), a.parts(), a.partition());
    let (ta, tb) = (terms(a), terms(b));
    let t3 = |v: Vec<f32>, shape: [usize; 3]| Tensor::<B, 3>::from_data(TensorData::new(v, shape), device);
    // [P, M, Π] @ [P, Π, N] = [P, M, N]: one integer-valued product per partition (exact in f32:
    // |sum| <= Π * 255 * 255 < 2^24 for Π <= 256).
    let a_codes = t3(ta.codes, [m, parts, pi]).swap_dims(0, 1);
    let b_codes = t3(tb.codes, [n, parts, pi]).swap_dims(0, 1).swap_dims(1, 2);
    let dot = a_codes.matmul(b_codes);
    let col = |v: Vec<f32>| t3(v, [parts, m, 1]);
    let row = |v: Vec<f32>| t3(v, [parts, 1, n]);
    let (sa, ma, suma) = (col(ta.scale), col(ta.min), col(ta.sum));
    let (sb, mb, sumb) = (row(tb.scale), row(tb.min), row(tb.sum));
    let counts: Vec<f32> = (0..parts).map(|p| a.part_len(p) as f32).collect();
    let count = t3(counts, [parts, 1, 1]);
    let c = sa.clone() * sb.clone() * dot + sa * suma * mb.clone() + ma.clone() * sb * sumb + count * ma * mb;
    c.sum_dim(0).reshape([m, n])
}
