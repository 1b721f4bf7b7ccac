//! The attention reference and the dense cache against an element-by-element loop written
//! independently here: GQA, causal masking, left padding and sliding windows. On ndarray the dense
//! cache attends a prompt on the host (`host_attention`: tiles of 64 queries and 128 keys), so
//! the shapes include prompts that cross both tiles, a window that starts inside a key tile and
//! padding that ends inside one.

use crate::common::*;
use burn::tensor::{Distribution, Tensor};
use burn_kvcompress::{
    cache::{attention_reference, AttendOptions, CacheGeometry, DenseCache, KvCache},
    error::CacheError,
};

/// Scores and outputs are O(1) sums of 16 products: f32 rounding stays far below this.
const TOLERANCE: f32 = 1e-5;

/// out[b,h,i] = sum_j softmax_j(scale * q·k_j) v_j over allowed j, in f64.
#[allow(clippy::too_many_arguments)]
fn naive(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: (usize, usize, usize, usize, usize, usize),
    o: &AttendOptions,
) -> Vec<f32> {
    let (batch, heads, kv_heads, q_len, total, d) = dims;
    let group = heads / kv_heads;
    let mut out = vec![0.0f32; batch * heads * q_len * d];
    for b in 0..batch {
        for h in 0..heads {
            let kh = h / group;
            for i in 0..q_len {
                let slot = total - q_len + i;
                let qv = &q[((b * heads + h) * q_len + i) * d..][..d];
                let allowed: Vec<usize> = (0..total).filter(|&j| o.allows(b, slot, j)).collect();
                let scores: Vec<f64> = allowed
                    .iter()
                    .map(|&j| {
                        let kv = &k[((b * kv_heads + kh) * total + j) * d..][..d];
                        o.scale as f64 * qv.iter().zip(kv).map(|(a, b)| (*a as f64) * (*b as f64)).sum::<f64>()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let norm: f64 = weights.iter().sum();
                for c in 0..d {
                    let acc: f64 = allowed
                        .iter()
                        .zip(&weights)
                        .map(|(&j, w)| w * v[((b * kv_heads + kh) * total + j) * d + c] as f64)
                        .sum();
                    out[((b * heads + h) * q_len + i) * d + c] = (acc / norm) as f32;
                }
            }
        }
    }
    out
}

/// One attention shape: GQA ratio, queries, cache length, window and per-row left padding.
struct Case {
    batch: usize,
    heads: usize,
    kv_heads: usize,
    q_len: usize,
    total: usize,
    head_dim: usize,
    window: Option<usize>,
    key_start: Vec<usize>,
}

#[test]
fn reference_matches_naive_loops_on_awkward_shapes() {
    let device = Default::default();
    <Cpu as burn::tensor::backend::Backend>::seed(&device, 20261121);
    let case = |batch, heads, kv_heads, q_len, total, head_dim, window, key_start| Case {
        batch,
        heads,
        kv_heads,
        q_len,
        total,
        head_dim,
        window,
        key_start,
    };
    let cases = vec![
        case(1, 1, 1, 1, 1, 16, None, vec![0]),
        case(2, 4, 2, 5, 5, 16, None, vec![0, 2]),
        case(2, 9, 3, 1, 37, 8, None, vec![3, 0]),
        case(1, 6, 2, 7, 30, 16, Some(4), vec![0]),
        case(3, 4, 1, 3, 13, 4, Some(1), vec![0, 5, 12]),
        case(2, 6, 2, 70, 300, 16, Some(100), vec![0, 237]),
        case(1, 3, 3, 130, 130, 8, None, vec![0]),
        case(2, 2, 1, 200, 260, 8, None, vec![131, 0]),
    ];
    for Case { batch, heads, kv_heads, q_len, total, head_dim: d, window, key_start } in cases {
        let q = Tensor::<Cpu, 4>::random([batch, heads, q_len, d], Distribution::Normal(0.0, 1.0), &device);
        let k = Tensor::<Cpu, 4>::random([batch, kv_heads, total, d], Distribution::Normal(0.0, 1.0), &device);
        let v = Tensor::<Cpu, 4>::random([batch, kv_heads, total, d], Distribution::Normal(0.0, 1.0), &device);
        let options = AttendOptions { scale: 1.0 / (d as f32).sqrt(), key_start, window };
        let expected = naive(
            &to_vec(q.clone()),
            &to_vec(k.clone()),
            &to_vec(v.clone()),
            (batch, heads, kv_heads, q_len, total, d),
            &options,
        );
        let got = to_vec(attention_reference(q.clone(), k.clone(), v.clone(), &options).unwrap());
        let diff = max_abs_diff(&got, &expected);
        assert!(diff < TOLERANCE, "case {:?}: {diff}", (batch, heads, kv_heads, q_len, total, d));

        // The dense cache, filled in two appends, gives the same result.
        let geometry = CacheGeometry { batch, kv_heads, heads, head_dim: d };
        let mut cache = DenseCache::<Cpu>::new(geometry);
        let split = total / 2;
        if split > 0 {
            cache.append(k.clone().narrow(2, 0, split), v.clone().narrow(2, 0, split)).unwrap();
        }
        cache.append(k.narrow(2, split, total - split), v.narrow(2, split, total - split)).unwrap();
        assert_eq!(cache.len(), total);
        // The buffers keep room in steps of 256 slots (`GROWTH_SLOTS`), at least one slot free.
        let capacity = if total < 256 { 256 } else { 512 };
        assert_eq!(cache.memory_bytes(), 2 * batch * kv_heads * capacity * d * 4);
        let diff = max_abs_diff(&to_vec(cache.attend(q, &options).unwrap()), &expected);
        assert!(diff < TOLERANCE, "dense cache: {diff}");
    }
}

#[test]
fn wrong_shapes_are_rejected_with_typed_errors() {
    let device = Default::default();
    let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: 8 };
    let mut cache = DenseCache::<Cpu>::new(geometry);
    let kv = |b, h, t, d| Tensor::<Cpu, 4>::zeros([b, h, t, d], &device);
    assert!(matches!(cache.append(kv(1, 2, 3, 8), kv(1, 2, 3, 8)), Err(CacheError::Shape { what: "keys", .. })));
    assert!(matches!(cache.append(kv(2, 2, 3, 8), kv(2, 2, 4, 8)), Err(CacheError::Shape { what: "values", .. })));
    let options = AttendOptions { scale: 1.0, key_start: vec![0, 0], window: None };
    assert!(matches!(cache.attend(kv(2, 4, 1, 8), &options), Err(CacheError::Request(_))));
    cache.append(kv(2, 2, 3, 8), kv(2, 2, 3, 8)).unwrap();
    assert!(matches!(cache.attend(kv(2, 3, 1, 8), &options), Err(CacheError::Shape { what: "queries", .. })));
    assert!(matches!(cache.attend(kv(2, 4, 4, 8), &options), Err(CacheError::Shape { .. })));
    let one_row = AttendOptions { key_start: vec![0], ..options };
    assert!(matches!(cache.attend(kv(2, 4, 1, 8), &one_row), Err(CacheError::Request(_))));
}
