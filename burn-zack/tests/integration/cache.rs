//! The ZACK cache and folded model: exact at full rank, and at reduced ranks equal to dense
//! attention on the projected tensors.

use std::sync::Arc;

use crate::common::*;
use burn::tensor::{Int, Tensor};
use burn_kvcompress::{
    cache::{
        attention_reference, AttendOptions, CacheGeometry, DenseScheme, KvCache, KvScheme, TransferableCache,
        TransferableScheme,
    },
    model::{logits_to_host, CausalLm, Logits},
};
use burn_zack::{
    cache::ZackScheme,
    rotation::{BlockWeighting, Centering, Pair, RotationConfig, Rotations, ValueSamples},
    RankRule, Ranks,
};

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Prefill of 2 rows (one left-padded) then 3 decode steps; every step's last logits.
fn run<S: KvScheme<Cpu>>(model: &CausalLm<Cpu>, scheme: &S) -> Vec<f32> {
    let device = Default::default();
    let prompts = vec![token_rows(1, 9, model.config().vocab_size, 3)[0].clone(), token_rows(1, 6, 100, 4)[0].clone()];
    let mut caches = model.new_cache(scheme, 2, &device);
    let mut logits = logits_to_host(model.prefill_padded(&prompts, &mut caches, 0).unwrap());
    for step in 0..3u32 {
        let next = vec![vec![5 + step], vec![17 + step]];
        logits.extend(logits_to_host(model.forward(&next, &mut caches, Logits::Last).unwrap()));
    }
    logits.concat()
}

#[test]
fn at_full_rank_the_folded_model_equals_the_dense_model() {
    let model = tiny_llama();
    let dense = run(&model, &DenseScheme);
    let largest = dense.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let configs = [
        RotationConfig::default(),
        RotationConfig {
            weighting: BlockWeighting::Concatenate,
            centering: Centering::None,
            value_samples: ValueSamples::Values,
        },
        RotationConfig { centering: Centering::KeysAndValues, ..RotationConfig::default() },
    ];
    for config in configs {
        let rotations = Arc::new(calibrated(&model, config));
        let scheme = ZackScheme::new(rotations.clone(), Ranks::full(rotations.geometry)).unwrap();
        let folded = scheme.fold(model.clone()).unwrap();
        let zack = run(&folded, &scheme);
        // f32 rounding of the rotations (≈1e-7 relative) through 3 layers: far below 1e-4.
        let diff = max_abs_diff(&zack, &dense);
        assert!(diff <= 1e-4 * largest.max(1.0), "{config}: logits differ by {diff} (largest {largest})");
        // A reduced rank changes them: the comparison can tell.
        let (ranks, _) = Ranks::for_compression_rate(&rotations, 0.5, RankRule::default()).unwrap();
        let half = ZackScheme::new(rotations, ranks).unwrap();
        let reduced = run(&half.fold(model.clone()).unwrap(), &half);
        assert!(max_abs_diff(&reduced, &dense) > 100.0 * diff.max(1e-6));
    }
}

/// Uneven ranks: layer 1 keeps (3, 16) query/key and (16, 5) value dimensions per KV head.
fn uneven_scheme(rotations: Arc<Rotations>) -> ZackScheme {
    let mut ranks = Ranks::full(rotations.geometry);
    ranks.query_key[1] = vec![3, 16];
    ranks.value_output[1] = vec![16, 5];
    ZackScheme::new(rotations, ranks).unwrap()
}

/// `[batch, kv, n, d] · R_g` per KV head (`R̃_g R̃_gᵀ` when `project` keeps `rank` columns).
fn per_head(
    x: Tensor<Cpu, 4>,
    rotations: &Rotations,
    pair: Pair,
    layer: usize,
    ranks: &[usize],
    project: bool,
) -> Tensor<Cpu, 4> {
    let [b, heads, n, d] = x.dims();
    let kv = ranks.len();
    let parts = (0..heads).map(|h| {
        let g = h / (heads / kv);
        let rot = rotations.head(pair, layer, g);
        let matrix = if project {
            let r = rot.truncated_basis(ranks[g]);
            let k = ranks[g];
            (0..d * d).map(|ij| (0..k).map(|c| r[(ij / d) * k + c] * r[(ij % d) * k + c]).sum()).collect()
        } else {
            rot.basis.clone()
        };
        x.clone().narrow(1, h, 1).matmul(tensor(matrix, [1, 1, d, d]).expand([b, 1, d, d]))
    });
    let _ = n;
    Tensor::cat(parts.collect(), 1)
}

#[test]
fn reduced_attention_equals_dense_attention_on_projected_tensors() {
    let model = tiny_llama();
    let rotations = Arc::new(calibrated(&model, RotationConfig::default()));
    let scheme = uneven_scheme(rotations.clone());
    let (layer, d) = (1, 16);
    let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: d };
    let mut cache = KvScheme::<Cpu>::new_cache(&scheme, layer, geometry, &Default::default());
    let (qk, vo) = (scheme.ranks().query_key[layer].clone(), scheme.ranks().value_output[layer].clone());
    let k = tensor(uniform(2 * 2 * 11 * d, 1), [2, 2, 11, d]);
    let v = tensor(uniform(2 * 2 * 11 * d, 2), [2, 2, 11, d]);
    // The cache receives values from the folded W_V: v R_g.
    let v_folded = per_head(v.clone(), &rotations, Pair::ValueOutput, layer, &vo, false);
    cache.append(k.clone().narrow(2, 0, 7), v_folded.clone().narrow(2, 0, 7)).unwrap();
    cache.append(k.clone().narrow(2, 7, 4), v_folded.narrow(2, 7, 4)).unwrap();
    assert_eq!(cache.len(), 11);
    assert_eq!(cache.memory_bytes(), 2 * 11 * ((3 + 16) + (16 + 5)) * 4);

    let q = tensor(uniform(2 * 4 * 3 * d, 3), [2, 4, 3, d]);
    for window in [None, Some(4)] {
        let options = AttendOptions { scale: 0.25, key_start: vec![0, 2], window };
        let zack = cache.attend(q.clone(), &options).unwrap();
        // Dense attention with q, k projected on span(R̃_qk) and v on span(R̃_vo), rotated to the
        // value basis: its first k_vo coordinates are ZACK's output, the rest zero.
        let q_p = per_head(q.clone(), &rotations, Pair::QueryKey, layer, &qk, true);
        let k_p = per_head(k.clone(), &rotations, Pair::QueryKey, layer, &qk, true);
        let v_p = per_head(v.clone(), &rotations, Pair::ValueOutput, layer, &vo, true);
        let dense = attention_reference(q_p, k_p, v_p, &options).unwrap();
        let expected = per_head(dense, &rotations, Pair::ValueOutput, layer, &vo, false);
        let (zack, expected) = (host(zack), host(expected));
        // Zeros past each head's value rank are exact.
        for (i, x) in zack.iter().enumerate() {
            let head = (i / (3 * d)) % 4;
            if i % d >= vo[head / 2] {
                assert_eq!(*x, 0.0, "padding at {i}");
            }
        }
        let diff = max_abs_diff(&zack, &expected);
        assert!(diff < 1e-5, "window {window:?}: {diff}");
    }
}

#[test]
fn state_round_trips_and_bad_input_is_refused() {
    let model = tiny_llama();
    let rotations = Arc::new(calibrated(&model, RotationConfig::default()));
    let scheme = uneven_scheme(rotations.clone());
    let device = Default::default();
    let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: 16 };
    let mut cache = KvScheme::<Cpu>::new_cache(&scheme, 1, geometry, &device);
    let k = tensor(uniform(2 * 2 * 5 * 16, 5), [2, 2, 5, 16]);
    cache.append(k.clone(), k.clone()).unwrap();
    let state = cache.export_state();
    let imported = TransferableScheme::<Cpu>::import_state(&scheme, 1, geometry, &state, &device).unwrap();
    assert_eq!(imported.export_state(), state);
    let options = AttendOptions { scale: 0.25, key_start: vec![0, 0], window: None };
    let q = tensor(uniform(2 * 4 * 16, 6), [2, 4, 1, 16]);
    assert_eq!(host(imported.attend(q.clone(), &options).unwrap()), host(cache.attend(q, &options).unwrap()));
    // Layer 0 has other widths: the state does not fit it.
    assert!(TransferableScheme::<Cpu>::import_state(&scheme, 0, geometry, &state, &device).is_err());
    let mut truncated = state.clone();
    truncated.tensors.pop();
    assert!(TransferableScheme::<Cpu>::import_state(&scheme, 1, geometry, &truncated, &device).is_err());
    // A geometry the rotations were not made for fails on use, with a message.
    let wrong = CacheGeometry { head_dim: 8, ..geometry };
    let mut bad = KvScheme::<Cpu>::new_cache(&scheme, 1, wrong, &device);
    let small = tensor(uniform(2 * 2 * 8, 7), [2, 2, 1, 8]);
    assert!(bad.append(small.clone(), small).is_err());
    assert!(
        ZackScheme::new(rotations.clone(), Ranks { head_dim: 16, query_key: vec![], value_output: vec![] }).is_err()
    );
    // Different ranks or rotations give different scheme names (the transfer handshake).
    let full = ZackScheme::new(rotations, Ranks::full(scheme.rotations().geometry)).unwrap();
    assert_ne!(KvScheme::<Cpu>::name(&full), KvScheme::<Cpu>::name(&scheme));
}

#[test]
fn folding_restores_the_mean_of_the_dropped_value_coordinates() {
    // One token attends only to itself, so attention returns its value: the folded layer must
    // output W_O applied to the value with its dropped rotated coordinates set to their mean.
    let model = tiny_llama();
    let rotations = Arc::new(calibrated(&model, RotationConfig::default()));
    let scheme = uneven_scheme(rotations.clone());
    let folded = scheme.fold(model.clone()).unwrap();
    let (layer, d, hidden) = (1, 16, model.config().hidden_size);
    let x = tensor(uniform(hidden, 9), [1, hidden]);
    let options = AttendOptions { scale: 0.25, key_start: vec![0], window: None };
    let geometry = CacheGeometry { batch: 1, kv_heads: 2, heads: 4, head_dim: d };
    let mut cache = KvScheme::<Cpu>::new_cache(&scheme, layer, geometry, &Default::default());
    let attention = &folded.layers[layer].attention;
    let position = Tensor::<Cpu, 1, Int>::from_ints([0], &Default::default());
    let zack = attention.forward(x.clone(), &folded.rope, &position, &mut cache, &options).unwrap();

    let original = &model.layers[layer].attention;
    let v = host(original.v_proj.forward(x));
    let vo = &scheme.ranks().value_output[layer];
    // Rotate each head's value, keep k_vo coordinates, fill the rest (mean or zero), rotate back.
    let restore = |fill_mean: bool| -> Vec<f32> {
        let mut restored = Vec::new();
        for h in 0..4 {
            let g = h / 2;
            let rot = rotations.head(Pair::ValueOutput, layer, g);
            let r = |c: usize, j: usize| rot.basis[c * d + j];
            let coords: Vec<f32> = (0..d)
                .map(|j| match (j < vo[g], fill_mean) {
                    (true, _) => (0..d).map(|c| v[g * d + c] * r(c, j)).sum(),
                    (false, true) => (0..d).map(|c| rot.mean[c] * r(c, j)).sum(),
                    (false, false) => 0.0,
                })
                .collect();
            restored.extend((0..d).map(|c| (0..d).map(|j| coords[j] * r(c, j)).sum::<f32>()));
        }
        host(original.o_proj.forward(tensor(restored, [1, 4 * d])))
    };
    let expected = restore(true);
    let diff = max_abs_diff(&host(zack), &expected);
    assert!(diff < 1e-5, "{diff}");
    // With zeros in the dropped coordinates the output differs: the test can tell.
    let plain = restore(false);
    assert!(max_abs_diff(&plain, &expected) > 1e-3);
}
