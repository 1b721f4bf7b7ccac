//! The f16 dense cache (`HalfDenseScheme`) on wgpu (lavapipe in CI): attention within the error
//! bound its documentation derives from f32 attention over the same keys and values, states of
//! half the bytes that re-import exactly, and typed refusals of a backend without f16 tensors and
//! of buffers that do not fit the attention call.

use burn::tensor::{Distribution, Tensor, TensorData};
use burn_kvcompress::{
    backend::NdArray,
    cache::{
        half_attention, AttendOptions, CacheGeometry, DenseScheme, HalfDenseScheme, KvCache, KvScheme, StateDType,
        TransferableCache, TransferableScheme,
    },
    error::CacheError,
};

type Wgpu = burn::backend::Wgpu<f32, i32>;

/// f16's unit roundoff.
const U_HALF: f64 = 1.0 / 2048.0;
/// Slack for f32 summation order between the two attention runs (values O(1), ≤ 70 slots).
const F32_SLACK: f64 = 1e-5;

const GEOMETRY: CacheGeometry = CacheGeometry { batch: 2, kv_heads: 3, heads: 9, head_dim: 24 };

fn random(shape: [usize; 4], std: f64) -> Tensor<Wgpu, 4> {
    Tensor::random(shape, Distribution::Normal(0.0, std), &Default::default())
}

fn host(t: Tensor<Wgpu, 4>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

/// The derived bound on `|out_f16 − out_f32|` for each query row: `(e^(2δ) − 1 + u) · max|v|`
/// with `δ = scale · u Σ_j |q_j k_j|` maximal over slots (plus `2^-25 Σ_j |q_j|` for values
/// below f16's normal range), over each query head's KV head.
fn bounds(q: &[f32], k: &[f32], v: &[f32], slots: usize, scale: f64) -> Vec<f64> {
    let [batch, kv_heads, heads, dim] = [GEOMETRY.batch, GEOMETRY.kv_heads, GEOMETRY.heads, GEOMETRY.head_dim];
    let group = heads / kv_heads;
    let mut out = Vec::new();
    for b in 0..batch {
        for h in 0..heads {
            let kv = b * kv_heads + h / group;
            let q_row = &q[(b * heads + h) * dim..][..dim];
            let q_abs: f64 = q_row.iter().map(|x| x.abs() as f64).sum();
            let delta = (0..slots)
                .map(|s| {
                    let k_row = &k[(kv * slots + s) * dim..][..dim];
                    let dot: f64 = q_row.iter().zip(k_row).map(|(a, b)| (a * b).abs() as f64).sum();
                    scale * (U_HALF * dot + q_abs / (1u64 << 25) as f64)
                })
                .fold(0.0, f64::max);
            let v_max = v[kv * slots * dim..][..slots * dim].iter().fold(0.0f64, |m, x| m.max(x.abs() as f64));
            out.push(((2.0 * delta).exp() - 1.0 + U_HALF) * v_max + F32_SLACK);
        }
    }
    out
}

#[test]
fn half_attention_stays_within_its_bound_of_f32_attention() {
    let device = Default::default();
    for (slots, std) in [(1, 1.0), (37, 1.0), (70, 3.0)] {
        let k = random([2, 3, slots, 24], std);
        let v = random([2, 3, slots, 24], 1.0);
        let q = random([2, 9, 1, 24], 1.0);
        let mut full = KvScheme::<Wgpu>::new_cache(&DenseScheme, 0, GEOMETRY, &device);
        let mut half = KvScheme::<Wgpu>::new_cache(&HalfDenseScheme, 0, GEOMETRY, &device);
        full.append(k.clone(), v.clone()).unwrap();
        half.append(k.clone(), v.clone()).unwrap();
        let scale = 1.0 / (24f64).sqrt();
        let options = AttendOptions { scale: scale as f32, key_start: vec![0, 0], window: None };
        let exact = host(full.attend(q.clone(), &options).unwrap());
        let rounded = host(half.attend(q.clone(), &options).unwrap());
        let bounds = bounds(&host(q), &host(k), &host(v), slots, scale);
        let mut moved = false;
        for (i, (a, b)) in exact.iter().zip(&rounded).enumerate() {
            let bound = bounds[i / 24];
            assert!(((a - b).abs() as f64) <= bound, "{slots} slots, element {i}: {a} vs {b}, bound {bound}");
            moved |= a != b;
        }
        // Rounding to f16 changes the output: the test compares two different computations.
        assert!(moved, "{slots} slots: f16 storage changed nothing");
    }
}

#[test]
fn half_states_carry_f16_and_re_import_exactly() {
    let device = Default::default();
    let mut half = KvScheme::<Wgpu>::new_cache(&HalfDenseScheme, 0, GEOMETRY, &device);
    half.append(random([2, 3, 5, 24], 1.0), random([2, 3, 5, 24], 1.0)).unwrap();
    half.append(random([2, 3, 2, 24], 1.0), random([2, 3, 2, 24], 1.0)).unwrap();
    assert_eq!(half.len(), 7);
    // The buffers hold 256 slots (`GROWTH_SLOTS`), 7 of them filled; the state carries those 7.
    assert_eq!(half.memory_bytes(), 2 * 2 * 3 * 256 * 24 * 2);
    let state = half.export_state();
    assert_eq!(state.byte_len(), 2 * 2 * 3 * 7 * 24 * 2);
    assert!(state.tensors.iter().all(|t| t.dtype == StateDType::F16 && t.validate().is_ok()));

    let copy: burn_kvcompress::cache::DenseCache<Wgpu> =
        HalfDenseScheme.import_state(0, GEOMETRY, &state, &device).unwrap();
    assert_eq!(copy.export_state(), state);
    // An f32 cache takes the f16 state too, holding the same values.
    let widened: burn_kvcompress::cache::DenseCache<Wgpu> =
        DenseScheme.import_state(0, GEOMETRY, &state, &device).unwrap();
    let (k_half, _) = half.keys_values().unwrap();
    let (k_wide, _) = widened.keys_values().unwrap();
    assert_eq!(host(k_half), host(k_wide));
    assert_eq!(widened.export_state().byte_len(), 2 * state.byte_len());
}

#[test]
fn values_f16_cannot_hold_round_to_its_nearest() {
    let device = Default::default();
    let one_third = TensorData::new(vec![1.0f32 / 3.0; 24], [1, 1, 1, 24]);
    let k = Tensor::<Wgpu, 4>::from_data(one_third.clone(), &device);
    let geometry = CacheGeometry { batch: 1, kv_heads: 1, heads: 1, head_dim: 24 };
    let mut half = KvScheme::<Wgpu>::new_cache(&HalfDenseScheme, 0, geometry, &device);
    half.append(k.clone(), k).unwrap();
    let (k, _) = half.keys_values().unwrap();
    let nearest = half::f16::from_f32(1.0 / 3.0).to_f32();
    assert!(host(k).iter().all(|&x| x == nearest) && nearest != 1.0 / 3.0);
}

#[test]
fn a_backend_without_f16_tensors_is_refused() {
    let device = Default::default();
    let geometry = CacheGeometry { batch: 1, kv_heads: 1, heads: 2, head_dim: 4 };
    let mut half = KvScheme::<NdArray>::new_cache(&HalfDenseScheme, 0, geometry, &device);
    let k = Tensor::<NdArray, 4>::zeros([1, 1, 3, 4], &device);
    let err = half.append(k.clone(), k).unwrap_err();
    assert!(matches!(&err, CacheError::Unsupported(m) if m.contains("F16")), "{err}");
    assert_eq!(half.len(), 0);
}

#[test]
fn buffers_that_do_not_fit_are_refused_with_typed_errors() {
    let options = AttendOptions { scale: 0.2, key_start: vec![0, 0], window: None };
    let q = random([2, 9, 1, 24], 1.0);
    let buffer = |slots| random([2, 3, slots, 24], 1.0).cast(burn::tensor::FloatDType::F16);
    let shape_error = half_attention(q.clone(), buffer(8), buffer(9), 4, &options).unwrap_err();
    assert!(matches!(shape_error, CacheError::Shape { what: "value buffer", .. }), "{shape_error}");
    let overfull = half_attention(q, buffer(8), buffer(8), 9, &options).unwrap_err();
    assert!(matches!(overfull, CacheError::Request(_)), "{overfull}");
}
