//! ZACK followed by product quantization: calibration samples reduced as the cache reduces,
//! codebooks that tile each head's own coordinates, codes that pick the nearest centroid,
//! attention within the bound its reconstruction error allows, the state round trip, the byte
//! count, and compositions that cannot work refused.

use std::sync::Arc;

use crate::common::*;
use burn::tensor::{Int, Tensor};
use burn_kvcompress::{
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, LayerRecording, TransferableCache, TransferableScheme},
    fingerprint::ModelFingerprint,
};
use burn_kvschemes::compose::{
    train_reduced_codebooks, ComposeError, ReducedCodebooks, ReducedPqConfig, ReducedSamples, ZackPqScheme,
};
use burn_million_pq::{codebook::nearest_centroid, KmeansConfig};
use burn_zack::{
    cache::{ReducedStorage, ZackScheme},
    rotation::{Pair, RotationConfig, RotationGeometry},
    RankRule, Ranks,
};

/// The tiny Llama's geometry: 3 layers, 4 query / 2 KV heads, head_dim 16.
const D: usize = 16;
const GEOMETRY: CacheGeometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: D };

/// Rotations calibrated on the tiny Llama, ranks at rate 0.5 in multiples of 4.
fn zack_scheme() -> ZackScheme {
    let rotations = calibrated(&tiny_llama(), RotationConfig::default());
    let (ranks, _) = Ranks::for_compression_rate(&rotations, 0.5, RankRule { min_rank: 4, multiple: 4 }).unwrap();
    ZackScheme::new(Arc::new(rotations), ranks).unwrap()
}

fn geometry(zack: &ZackScheme) -> RotationGeometry {
    zack.rotations().geometry
}

fn kmeans() -> KmeansConfig {
    KmeansConfig { iterations: 8, batch_size: 256, ..KmeansConfig::default() }
}

fn train(zack: &ZackScheme, recordings: &[LayerRecording], config: ReducedPqConfig) -> ReducedCodebooks {
    let samples = ReducedSamples::from_recordings(recordings, zack).unwrap();
    let fingerprint = ModelFingerprint::of_bytes(b"tiny");
    let (books, report) =
        train_reduced_codebooks(&samples, config, zack, &kmeans(), fingerprint, "synthetic".into(), 2, &|| {}).unwrap();
    for curve in &report.relative_error {
        assert_eq!(curve.len(), kmeans().iterations + 1);
        assert!(curve.last().unwrap() <= &(curve[0] + 1e-9), "k-means raised its objective: {curve:?}");
    }
    books
}

/// `x` (`[rows, d]` row-major) times a head's full basis (`d × d` row-major).
fn rotate(x: &[f32], basis: &[f32]) -> Vec<f32> {
    x.chunks_exact(D)
        .flat_map(|row| (0..D).map(move |j| (0..D).map(|c| row[c] * basis[c * D + j]).sum::<f32>()))
        .collect()
}

#[test]
fn samples_are_reduced_as_the_cache_reduces_and_codebooks_fit_every_head() {
    let zack = zack_scheme();
    let tokens = 16;
    let recordings = synthetic_recordings(geometry(&zack), tokens, 40);
    let samples = ReducedSamples::from_recordings(&recordings, &zack).unwrap();
    assert_eq!(samples.rows(), tokens);
    let device = Default::default();
    for (layer, recording) in recordings.iter().enumerate() {
        // The cache reduces keys by the basis and truncates values the folded W_V rotated: feed it
        // the recorded values rotated on the host.
        let keys = &recording.keys[0];
        let values = &recording.values[0];
        let rotated: Vec<f32> = (0..2)
            .flat_map(|h| {
                let head: Vec<f32> = values.head_vectors(h).flatten().copied().collect();
                rotate(&head, &zack.rotations().head(Pair::ValueOutput, layer, h).basis)
            })
            .collect();
        let one = CacheGeometry { batch: 1, ..GEOMETRY };
        let mut cache = KvScheme::<Cpu>::new_cache(&zack, layer, one, &device);
        cache.append(tensor(keys.values.clone(), keys.shape), tensor(rotated, values.shape)).unwrap();
        let (k, v) = cache.keys_values().unwrap();
        for (ours, theirs) in [(&samples.layers[layer][0], host(k)), (&samples.layers[layer][1], host(v))] {
            let diff = ours.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(ours.len() == theirs.len() && diff < 1e-5, "layer {layer}: {diff}");
        }
    }

    // 16 centroids for 16 distinct calibration vectors per subspace: k-means++ takes every one,
    // so the cache rebuilds the calibration vectors exactly, which holds only if training and
    // encoding agree on which head owns which subspace.
    let config = ReducedPqConfig { sub_dim: 4, nbits: 4 };
    let books = train(&zack, &recordings, config);
    books.check_fits(&zack).unwrap();
    let composed = ZackPqScheme::new(zack.clone(), Arc::new(books), 0).unwrap();
    for (layer, recording) in recordings.iter().enumerate() {
        let one = CacheGeometry { batch: 1, ..GEOMETRY };
        let mut cache = KvScheme::<Cpu>::new_cache(&composed, layer, one, &device);
        let (keys, values) = (&recording.keys[0], &recording.values[0]);
        let rotated: Vec<f32> = (0..2)
            .flat_map(|h| {
                let head: Vec<f32> = values.head_vectors(h).flatten().copied().collect();
                rotate(&head, &zack.rotations().head(Pair::ValueOutput, layer, h).basis)
            })
            .collect();
        cache.append(tensor(keys.values.clone(), keys.shape), tensor(rotated, values.shape)).unwrap();
        // A one-slot append encodes the 16 calibration slots (window 0).
        let one_slot = tensor(vec![0.0; 2 * D], [1, 2, 1, D]);
        cache.append(one_slot.clone(), one_slot).unwrap();
        assert_eq!((cache.coded_len(), cache.recent_len()), (tokens, 1));
        let (k, v) = cache.reconstructed().unwrap();
        for (kind, (rebuilt, sample)) in
            [(host(k), &samples.layers[layer][0]), (host(v), &samples.layers[layer][1])].iter().enumerate()
        {
            let width = sample.len() / tokens;
            let diff =
                rebuilt[..tokens * width].iter().zip(sample.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(diff < 1e-3, "layer {layer}, kind {kind}: {diff}");
        }
    }
}

/// A composed scheme with codebooks trained on synthetic recordings.
fn composed(window: usize, config: ReducedPqConfig) -> ZackPqScheme {
    let zack = zack_scheme();
    let recordings = synthetic_recordings(geometry(&zack), 300, 50);
    let books = train(&zack, &recordings, config);
    ZackPqScheme::new(zack, Arc::new(books), window).unwrap()
}

#[test]
fn codes_are_nearest_centroids_and_attention_is_within_the_reconstruction_bound() {
    let device = Default::default();
    for (config, window, len) in
        [(ReducedPqConfig { sub_dim: 4, nbits: 4 }, 0, 40), (ReducedPqConfig { sub_dim: 2, nbits: 3 }, 8, 29)]
    {
        let scheme = composed(window, config);
        let layer = 1;
        let layout = scheme.zack().layout(layer);
        let mut exact = KvScheme::<Cpu>::new_cache(scheme.zack(), layer, GEOMETRY, &device);
        let mut coded = KvScheme::<Cpu>::new_cache(&scheme, layer, GEOMETRY, &device);
        fill_both((&mut exact, &mut coded), len, D, 61);
        // The second append kept the newest max(window, its length) slots in f32.
        let newest = window.max(len - len * 2 / 3);
        assert_eq!((coded.coded_len(), coded.recent_len()), (len - newest, newest));
        let (k, v) = exact.keys_values().unwrap();
        let (rk, rv) = coded.reconstructed().unwrap();
        let s = config.sub_dim;
        let books = [&scheme.books().keys[layer], &scheme.books().values[layer]];
        let book_len = config.centroids() * s;
        let (mut key_error, mut value_error) = (Vec::new(), 0.0f32);
        for (kind, (exact, rebuilt)) in [(host(k), host(rk)), (host(v), host(rv))].into_iter().enumerate() {
            let width = [layout.key_width(), layout.value_width()][kind];
            for (slot, (x, y)) in exact.chunks_exact(width).zip(rebuilt.chunks_exact(width)).enumerate() {
                let recent = slot % len >= len - newest;
                for j in 0..width / s {
                    let sub = &x[j * s..(j + 1) * s];
                    let book = &books[kind][j * book_len..(j + 1) * book_len];
                    let c = nearest_centroid(sub, book) as usize;
                    let want = if recent { sub } else { &book[c * s..(c + 1) * s] };
                    assert_eq!(&y[j * s..(j + 1) * s], want, "kind {kind}, slot {slot}, subspace {j}");
                }
                let errors: Vec<f32> = x.iter().zip(y).map(|(a, b)| (a - b).abs()).collect();
                match kind {
                    0 => key_error.push(errors),
                    _ => value_error = errors.into_iter().fold(value_error, f32::max),
                }
            }
            assert!(exact != rebuilt, "quantization changed nothing");
        }
        let largest_value = host(exact.keys_values().unwrap().1).iter().fold(0.0f32, |m, x| m.max(x.abs()));

        for (q_len, attend_window) in [(1, None), (3, Some(20))] {
            let options = AttendOptions { scale: 0.25, key_start: vec![0, 2], window: attend_window };
            let q = tensor(uniform(2 * 4 * q_len * D, 62), [2, 4, q_len, D]);
            let want = host(exact.attend(q.clone(), &options).unwrap());
            let got = host(coded.attend(q.clone(), &options).unwrap());
            // Score error of slot t for query row q: scale · Σ_j |q̃_j| |e_tj| over the head's
            // reduced key columns (q̃ = q times the head's truncated basis).
            let mut score_error = 0.0f32;
            for b in 0..2 {
                for head in 0..4 {
                    let g = head / 2;
                    let columns = layout.key_columns(g);
                    let basis = scheme.zack().rotations().head(Pair::QueryKey, layer, g).truncated_basis(columns.len());
                    for i in 0..q_len {
                        let row = &host(q.clone().narrow(0, b, 1).narrow(1, head, 1).narrow(2, i, 1).reshape([D]))[..];
                        let reduced: Vec<f32> = (0..columns.len())
                            .map(|j| (0..D).map(|c| row[c] * basis[c * columns.len() + j]).sum())
                            .collect();
                        for slot in 0..len {
                            let e = &key_error[b * len + slot][columns.clone()];
                            let delta: f32 = reduced.iter().zip(e).map(|(a, b)| a.abs() * b).sum();
                            score_error = score_error.max(options.scale * delta);
                        }
                    }
                }
            }
            // Weights move by a factor within e^(±2δ); values by their reconstruction error.
            let bound = ((2.0 * score_error).exp() - 1.0) * (largest_value + value_error) + value_error + 1e-5;
            let diff = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(diff <= bound, "{config}, q_len {q_len}: {diff} beyond {bound}");
            assert!(diff > 0.0, "{config}: quantization changed nothing");
        }
    }
}

#[test]
fn state_round_trips_bytes_are_counted_and_bad_compositions_are_refused() {
    let config = ReducedPqConfig { sub_dim: 4, nbits: 4 };
    let scheme = composed(8, config);
    let device = Default::default();
    let layer = 2;
    let mut cache = KvScheme::<Cpu>::new_cache(&scheme, layer, GEOMETRY, &device);
    let mut plain = KvScheme::<Cpu>::new_cache(scheme.zack(), layer, GEOMETRY, &device);
    fill_both((&mut cache, &mut plain), 30, D, 71);
    let layout = scheme.zack().layout(layer);
    let (wk, wv) = (layout.key_width(), layout.value_width());
    // 4-bit codes, 8 per word: ⌈(W / 4) / 8⌉ words per slot; 10 recent slots in f32; the layer's
    // codebooks: (Σ k / 4) subspaces · 16 centroids · 4 floats.
    let words = |w: usize| (w / 4).div_ceil(8);
    let books = 4 * (wk + wv) / 4 * 16 * 4;
    assert_eq!(cache.memory_bytes(), 2 * 4 * (20 * (words(wk) + words(wv)) + 10 * (wk + wv)) + books);

    let state = cache.export_state();
    let imported = TransferableScheme::<Cpu>::import_state(&scheme, layer, GEOMETRY, &state, &device).unwrap();
    assert_eq!(imported.export_state(), state);
    let options = AttendOptions { scale: 0.25, key_start: vec![0, 0], window: None };
    let q = tensor(uniform(2 * 4 * D, 72), [2, 4, 1, D]);
    assert_eq!(host(imported.attend(q.clone(), &options).unwrap()), host(cache.attend(q, &options).unwrap()));
    let mut truncated = state.clone();
    truncated.tensors.pop();
    assert!(TransferableScheme::<Cpu>::import_state(&scheme, layer, GEOMETRY, &truncated, &device).is_err());
    let mut miscounted = state.clone();
    miscounted.tokens = 29;
    assert!(TransferableScheme::<Cpu>::import_state(&scheme, layer, GEOMETRY, &miscounted, &device).is_err());
    let mut wrong_words = state;
    let codes: Tensor<Cpu, 4, Int> = Tensor::zeros([2, 1, 20, words(wk) + 1], &device);
    wrong_words.tensors[0] = burn_kvcompress::cache::StateTensor::from_int("k_codes", &codes);
    assert!(TransferableScheme::<Cpu>::import_state(&scheme, layer, GEOMETRY, &wrong_words, &device).is_err());

    let name = KvScheme::<Cpu>::name(&scheme);
    assert!(name.starts_with("zack:") && name.contains("+pq:sub_dim=4,nbits=4,window=8,books="), "{name}");
    // Codebooks of other ranks, ranks that are not multiples of sub_dim, and f16 storage.
    let books = Arc::new(scheme.books().clone());
    let rotations = Arc::new(scheme.zack().rotations().clone());
    let (other, _) = Ranks::for_compression_rate(&rotations, 0.25, RankRule { min_rank: 4, multiple: 4 }).unwrap();
    let other = ZackScheme::new(rotations.clone(), other).unwrap();
    let refused = ZackPqScheme::new(other, books.clone(), 0).unwrap_err();
    assert!(matches!(&refused, ComposeError::Config(m) if m.contains("other ranks")), "{refused}");
    let mut odd = scheme.zack().ranks().clone();
    odd.value_output[0][1] -= 1;
    let odd = ZackScheme::new(rotations, odd).unwrap();
    let mut odd_books = scheme.books().clone();
    odd_books.ranks = odd.ranks().digest();
    let refused = ZackPqScheme::new(odd, Arc::new(odd_books), 0).unwrap_err();
    assert!(matches!(&refused, ComposeError::Config(m) if m.contains("multiple: 4")), "{refused}");
    let f16 = scheme.zack().clone().with_storage(ReducedStorage::F16);
    assert!(matches!(ZackPqScheme::new(f16, books, 0), Err(ComposeError::Config(_))));
    // Training refuses ranks that do not split into subspaces.
    let samples =
        ReducedSamples::from_recordings(&synthetic_recordings(geometry(scheme.zack()), 20, 1), scheme.zack()).unwrap();
    let fingerprint = ModelFingerprint::of_bytes(b"tiny");
    let three = ReducedPqConfig { sub_dim: 3, nbits: 2 };
    let refused =
        train_reduced_codebooks(&samples, three, scheme.zack(), &kmeans(), fingerprint, String::new(), 1, &|| {});
    assert!(matches!(refused, Err(ComposeError::Config(_))));
}

/// Relative error of a product in a GPU backend's f32 matmul: CUDA runs them in TF32, which keeps
/// 10 mantissa bits of each operand, so a product is within `2^-9` of its value, relatively, and a
/// coordinate reduced by a basis, `Σ_c k_c b_cj`, within `2^-9 Σ_c |k_c| |b_cj| ≤ 2^-9 ‖k‖₂` (unit
/// basis columns). Exact f32 backends (lavapipe) stay far inside these bounds.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
const MATMUL_UNIT: f32 = 1.0 / 512.0;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[test]
fn on_the_gpu_the_codes_follow_the_hosts_and_attention_follows() {
    let device = Default::default();
    let to_gpu = |t: Tensor<Cpu, 4>| Tensor::<Gpu, 4>::from_data(t.into_data(), &Default::default());
    let config = ReducedPqConfig { sub_dim: 2, nbits: 5 };
    let scheme = composed(4, config);
    let (layer, len) = (0, 37);
    let mut exact = KvScheme::<Cpu>::new_cache(scheme.zack(), layer, GEOMETRY, &device);
    let mut host_cache = KvScheme::<Cpu>::new_cache(&scheme, layer, GEOMETRY, &device);
    let mut gpu_cache = KvScheme::<Gpu>::new_cache(&scheme, layer, GEOMETRY, &Default::default());
    let k = tensor(uniform(2 * 2 * len * D, 81), [2, 2, len, D]);
    let v = tensor(uniform(2 * 2 * len * D, 82), [2, 2, len, D]);
    for (start, n) in [(0, len - 2), (len - 2, 1), (len - 1, 1)] {
        let (k, v) = (k.clone().narrow(2, start, n), v.clone().narrow(2, start, n));
        exact.append(k.clone(), v.clone()).unwrap();
        host_cache.append(k.clone(), v.clone()).unwrap();
        gpu_cache.append(to_gpu(k), to_gpu(v)).unwrap();
    }
    // Keys in [-1, 1]: a reduced coordinate is within `MATMUL_UNIT · √D` of the host's.
    let reduction_error = MATMUL_UNIT * (D as f32).sqrt();
    // Values are truncated, not multiplied: their codes and recent slots equal the host's bit for
    // bit (the encode kernel follows the host's nearest-centroid rule), the recent keys are the
    // same reduction on both.
    let (host_state, gpu_state) = (host_cache.export_state(), gpu_cache.export_state());
    for (ours, theirs) in host_state.tensors.iter().zip(&gpu_state.tensors) {
        match ours.name.as_str() {
            "k_codes" => {}
            "v_codes" | "v_recent" => assert_eq!(ours, theirs),
            _ => {
                let (a, b) = (ours.to_float::<Cpu, 3>(&device).unwrap(), theirs.to_float::<Cpu, 3>(&device).unwrap());
                let diff = host(a).iter().zip(host(b)).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
                assert!(diff <= reduction_error, "{}: {diff}", ours.name);
            }
        }
    }
    // Each coded key sub-vector's centroid is a nearest one of the host's reduced sub-vector
    // up to the reduction's error: with `x' = x + e` encoded, `|x − C[c']| ≤ |x' − C[c']| + |e| ≤
    // |x' − C[c*]| + |e| ≤ |x − C[c*]| + 2|e|`.
    let s = config.sub_dim;
    let book_len = config.centroids() * s;
    let keys = host(exact.keys_values().unwrap().0);
    let chosen = host(gpu_cache.reconstructed().unwrap().0);
    let width = scheme.zack().layout(layer).key_width();
    let coded = gpu_cache.coded_len();
    let distance = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>().sqrt();
    for (slot, (x, y)) in keys.chunks_exact(width).zip(chosen.chunks_exact(width)).enumerate() {
        if slot % len >= coded {
            continue;
        }
        for j in 0..width / s {
            let (sub, centroid) = (&x[j * s..(j + 1) * s], &y[j * s..(j + 1) * s]);
            let book = &scheme.books().keys[layer][j * book_len..(j + 1) * book_len];
            let c = nearest_centroid(sub, book) as usize;
            let slack = 2.0 * (s as f32).sqrt() * reduction_error + 1e-6;
            let (got, best) = (distance(sub, centroid), distance(sub, &book[c * s..(c + 1) * s]));
            assert!(got <= best + slack, "slot {slot}, subspace {j}: {got} vs {best}");
        }
    }
    // Attention against the host's on the GPU's own state: the query reduction and the scores
    // may run in TF32, so a score moves by at most `Δ = scale · 2^-9 ‖q‖₂ (‖k̃‖₁ + 2‖k̃‖₂)`,
    // weights by a factor within `e^(±2Δ)`, and the weighted sum of values by `2^-9 max|ṽ|`.
    let imported = TransferableScheme::<Cpu>::import_state(&scheme, layer, GEOMETRY, &gpu_state, &device).unwrap();
    let options = AttendOptions { scale: 0.25, key_start: vec![0, 3], window: None };
    let q = tensor(uniform(2 * 4 * D, 83), [2, 4, 1, D]);
    let want = host(imported.attend(q.clone(), &options).unwrap());
    let got = host(gpu_cache.attend(to_gpu(q.clone()), &options).unwrap());
    let (rebuilt_keys, rebuilt_values) = imported.reconstructed().unwrap();
    let key_norms = host(rebuilt_keys)
        .chunks_exact(width)
        .map(|k| k.iter().map(|x| x.abs()).sum::<f32>() + 2.0 * k.iter().map(|x| x * x).sum::<f32>().sqrt())
        .fold(0.0, f32::max);
    let query_norm = host(q).chunks_exact(D).map(|q| q.iter().map(|x| x * x).sum::<f32>().sqrt()).fold(0.0, f32::max);
    let largest_value = host(rebuilt_values).iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let delta = options.scale * MATMUL_UNIT * query_norm * key_norms;
    let bound = ((2.0 * delta).exp() - 1.0) * largest_value + MATMUL_UNIT * largest_value + 1e-5;
    let diff = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(diff <= bound, "{diff} beyond {bound}");
}
