//! The ZACK cache with f16 storage on wgpu or CUDA: half the bytes, attention within the storage's
//! stated bound of the f32 cache (decode through the kernel, prefill through the reference), the
//! state sent as f16, and a clear error where the backend has no f16 tensors.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use std::sync::Arc;

use crate::common::*;
use burn::tensor::{Tensor, TensorData};
use burn_kvcompress::cache::{
    AttendOptions, CacheGeometry, KvCache, KvScheme, StateDType, TransferableCache, TransferableScheme,
};
use burn_zack::{
    cache::{ReducedStorage, ZackCache, ZackScheme},
    rotation::{RotationConfig, Rotations},
    Ranks,
};

fn gpu<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<Gpu, D> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

/// Layer 1 keeps (3, 16) query/key and (16, 5) value dimensions per KV head.
fn uneven(rotations: Arc<Rotations>, storage: ReducedStorage) -> ZackScheme {
    let mut ranks = Ranks::full(rotations.geometry);
    ranks.query_key[1] = vec![3, 16];
    ranks.value_output[1] = vec![16, 5];
    ZackScheme::new(rotations, ranks).unwrap().with_storage(storage)
}

fn l2(x: &[f32]) -> f32 {
    x.iter().map(|v| v * v).sum::<f32>().sqrt()
}

#[test]
fn f16_storage_halves_the_cache_within_its_bound() {
    let model = tiny_llama();
    let rotations = Arc::new(calibrated(&model, RotationConfig::default()));
    let (wide, narrow) = (uneven(rotations.clone(), ReducedStorage::F32), uneven(rotations, ReducedStorage::F16));
    assert_ne!(KvScheme::<Gpu>::name(&wide), KvScheme::<Gpu>::name(&narrow), "the handshake tells them apart");
    let (batch, len, d) = (2, 300, 16);
    let geometry = CacheGeometry { batch, kv_heads: 2, heads: 4, head_dim: d };
    let device = Default::default();
    let mut caches: Vec<ZackCache<Gpu>> = [&wide, &narrow].map(|s| s.new_cache(1, geometry, &device)).into();
    let (k, v) = (uniform(batch * 2 * len * d, 1), uniform(batch * 2 * len * d, 2));
    for cache in &mut caches {
        cache.append(gpu(k.clone(), [batch, 2, len, d]), gpu(v.clone(), [batch, 2, len, d])).unwrap();
    }
    assert_eq!(caches[1].memory_bytes() * 2, caches[0].memory_bytes());
    let state = caches[1].export_state();
    assert!(state.tensors.iter().all(|t| t.dtype == StateDType::F16));
    assert_eq!(state.tensors.iter().map(|t| t.bytes.len()).sum::<usize>(), caches[1].memory_bytes());

    // The bound of `ReducedStorage`: |q̃_j| ≤ scale · ‖q‖₂ (unit basis columns), so
    // δ ≤ scale · ‖q‖₂ · ((u_h + u_op) · max_t ‖k̃_t‖₁ + 2^-25 · key_width); f32 rounding adds a few
    // ulps per slot. On CUDA, decode runs on tensor cores, which also round q̃ and the softmax
    // numerators to f16 (`u_op`).
    let (keys, values) = caches[0].keys_values().unwrap();
    let (keys, values) = (host(keys), host(values));
    let width = keys.len() / (batch * len);
    let k_l1 = keys.chunks(width).map(|row| row.iter().map(|x| x.abs()).sum::<f32>()).fold(0.0, f32::max);
    let v_max = values.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let (u_h, u) = (2f32.powi(-11), f32::EPSILON / 2.0);
    let u_op = if cfg!(feature = "cuda") { u_h } else { 0.0 };
    for q_len in [1, 3] {
        let q = uniform(batch * 4 * q_len * d, 3 + q_len as u64);
        let q_max = q.chunks(d).map(l2).fold(0.0, f32::max);
        for window in [None, Some(40)] {
            let options = AttendOptions { scale: 0.25, key_start: vec![0, 7], window };
            let [exact, half] =
                [0, 1].map(|i| host(caches[i].attend(gpu(q.clone(), [batch, 4, q_len, d]), &options).unwrap()));
            let delta = options.scale * q_max * ((u_h + u_op) * k_l1 + 2f32.powi(-25) * width as f32);
            let bound = ((2.0 * delta).exp() - 1.0 + u_h + u_op) * v_max + 8.0 * len as f32 * u * v_max;
            let diff = exact.iter().zip(&half).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(diff <= bound, "q_len {q_len}, window {window:?}: {diff} > {bound}");
            assert!(diff > 0.0, "f16 storage rounds something");
            eprintln!("q_len {q_len}, window {window:?}: max diff {diff:.2e} (bound {bound:.2e})");
        }
    }

    // The f16 state imports back into an f16 cache that attends exactly as the one that sent it.
    let imported: ZackCache<Gpu> =
        TransferableScheme::<Gpu>::import_state(&narrow, 1, geometry, &state, &device).unwrap();
    assert_eq!(imported.export_state(), state);
    let options = AttendOptions { scale: 0.25, key_start: vec![0, 0], window: None };
    let q = uniform(batch * 4 * d, 9);
    assert_eq!(
        host(imported.attend(gpu(q.clone(), [batch, 4, 1, d]), &options).unwrap()),
        host(caches[1].attend(gpu(q, [batch, 4, 1, d]), &options).unwrap())
    );
}

#[test]
fn f16_storage_on_a_backend_without_f16_is_a_clear_error() {
    let model = tiny_llama();
    let scheme = uneven(Arc::new(calibrated(&model, RotationConfig::default())), ReducedStorage::F16);
    let geometry = CacheGeometry { batch: 1, kv_heads: 2, heads: 4, head_dim: 16 };
    let mut cache = KvScheme::<Cpu>::new_cache(&scheme, 1, geometry, &Default::default());
    let k = tensor(uniform(2 * 16, 1), [1, 2, 1, 16]);
    let error = cache.append(k.clone(), k).unwrap_err().to_string();
    assert!(error.contains("f16"), "{error}");
}
