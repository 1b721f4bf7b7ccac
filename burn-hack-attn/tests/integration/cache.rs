//! The HACK cache: its attention equals plain attention on the dequantized operands (the
//! homomorphic identity, end to end), appending in pieces equals appending at once, its state
//! round-trips, its byte count matches the format, and unsupported geometries are refused.

use burn::tensor::{Tensor, TensorData};
use burn_hack_attn::{
    cache::{key_group, sum_bytes},
    kernels::{attention_reference, attention_reference_in_steps, pack_words, unpack_words},
    quant::GroupParams,
    HackConfig, HackScheme, Rounding,
};
use burn_kvcompress::{
    cache::{
        AttendOptions, CacheGeometry, KvCache, KvScheme, LayerState, StateDType, TransferableCache, TransferableScheme,
    },
    error::CacheError,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

type B = burn::backend::NdArray<f32>;

/// Seeded N(0.3, 1.5²) values of `shape`.
fn random(shape: [usize; 4], seed: u64) -> Tensor<B, 4> {
    let mut rng = StdRng::seed_from_u64(seed);
    let normal = rand_distr_normal(&mut rng, shape.iter().product());
    Tensor::from_data(TensorData::new(normal, shape), &Default::default())
}

fn rand_distr_normal(rng: &mut StdRng, n: usize) -> Vec<f32> {
    // Box-Muller.
    (0..n)
        .map(|_| {
            let (u, v): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
            0.3 + 1.5 * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
        })
        .collect()
}

fn host(t: Tensor<B, 4>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

/// Dequantized `[b, h, rows, parts * group]` from codes: `scale * code + min` per partition.
fn dequantize(codes: &burn_hack_attn::cache::Codes<B>, bits: u8) -> (Vec<f32>, [usize; 4]) {
    let unpacked = unpack_words(codes.words.clone(), bits).float();
    let dims = unpacked.dims();
    let words: Vec<i32> = codes.params.clone().into_data().convert::<i32>().into_vec().unwrap();
    let params: Vec<GroupParams> = words.into_iter().map(GroupParams::from_word).collect();
    let parts = codes.params.dims()[3];
    let group = dims[3] / parts;
    let out = host(unpacked)
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let p = params[i / group];
            p.scale.to_f32() * c + p.min.to_f32()
        })
        .collect();
    (out, dims)
}

/// 8-bit round-to-nearest min/max quantize-dequantize of one partition, in f64.
fn qdq8(x: &[f64]) -> Vec<f64> {
    let (lo, hi) = x.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| (l.min(v), h.max(v)));
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    x.iter().map(|&v| ((v - lo) / scale + 0.5).floor().clamp(0.0, 255.0) * scale + lo).collect()
}

/// Independent host computation of HACK attention for one (batch row, query head, query slot):
/// dequantized K, Q̂ (8-bit per key group), softmax, P̂ (8-bit per closed block), dequantized V
/// blocks, the float tail.
#[allow(clippy::too_many_arguments)]
fn expected_row(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    tail: &[f32],
    len: usize,
    head_dim: usize,
    config: &HackConfig,
    allowed: impl Fn(usize) -> bool,
    scale: f64,
) -> Vec<f64> {
    let gk = key_group(head_dim, config.partition);
    let qq: Vec<f64> = q.chunks(gk).flat_map(|c| qdq8(&c.iter().map(|&x| x as f64).collect::<Vec<_>>())).collect();
    let mut scores: Vec<f64> =
        (0..len).map(|t| (0..head_dim).map(|c| qq[c] * keys[t * head_dim + c] as f64).sum::<f64>() * scale).collect();
    for (t, s) in scores.iter_mut().enumerate() {
        if !allowed(t) {
            *s = f64::NEG_INFINITY;
        }
    }
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f64 = exp.iter().sum();
    let probs: Vec<f64> = exp.iter().map(|e| e / total).collect();
    let pi = config.partition;
    let blocks = len / pi;
    let mut out = vec![0.0; head_dim];
    for blk in 0..blocks {
        let p = qdq8(&probs[blk * pi..(blk + 1) * pi]);
        for (c, o) in out.iter_mut().enumerate() {
            // values: [blocks * head_dim rows, Π]
            *o += (0..pi).map(|t| p[t] * values[(blk * head_dim + c) * pi + t] as f64).sum::<f64>();
        }
    }
    for t in blocks * pi..len {
        for (c, o) in out.iter_mut().enumerate() {
            *o += probs[t] * tail[(t - blocks * pi) * head_dim + c] as f64;
        }
    }
    out
}

fn check_against_dequantized(
    config: HackConfig,
    geometry: CacheGeometry,
    len: usize,
    q_len: usize,
    window: Option<usize>,
) {
    let device = Default::default();
    let CacheGeometry { batch, kv_heads, heads, head_dim } = geometry;
    let mut cache = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 3, geometry, &device);
    cache.append(random([batch, kv_heads, len, head_dim], 1), random([batch, kv_heads, len, head_dim], 2)).unwrap();
    let q = random([batch, heads, q_len, head_dim], 3);
    let key_start: Vec<usize> = (0..batch).map(|b| b.min(len - q_len)).collect();
    let options = AttendOptions { scale: 0.125, key_start, window };
    let got = host(cache.attend(q.clone(), &options).unwrap());

    let view = cache.view().unwrap();
    let (keys, _) = dequantize(view.keys, config.key_bits);
    let values = view.values.map(|v| dequantize(v, config.key_bits).0).unwrap_or_default();
    let tail = view.tail.map(|t| host(t.clone())).unwrap_or_default();
    let (q, blocks) = (host(q), cache.blocks());
    let tail_len = len - blocks * config.partition;
    let mut worst: f64 = 0.0;
    for b in 0..batch {
        for h in 0..heads {
            let kvh = h / (heads / kv_heads);
            let stream = b * kv_heads + kvh;
            let k = &keys[stream * len * head_dim..(stream + 1) * len * head_dim];
            let v = if blocks > 0 {
                &values
                    [stream * blocks * head_dim * config.partition..(stream + 1) * blocks * head_dim * config.partition]
            } else {
                &[]
            };
            let t = &tail[stream * tail_len * head_dim..(stream + 1) * tail_len * head_dim];
            for qi in 0..q_len {
                let slot = len - q_len + qi;
                let row = &q[((b * heads + h) * q_len + qi) * head_dim..][..head_dim];
                let want =
                    expected_row(row, k, v, t, len, head_dim, &config, |key| options.allows(b, slot, key), 0.125);
                let have = &got[((b * heads + h) * q_len + qi) * head_dim..][..head_dim];
                for (w, g) in want.iter().zip(have) {
                    worst = worst.max((w - *g as f64).abs());
                }
            }
        }
    }
    // The outputs are convex combinations of values of magnitude <= ~8, computed in f32 through
    // four correction terms per partition (each rounded at ~1e-7 relative to terms of magnitude up
    // to Π·255·3·|scale·min|): 2e-3 covers the f32 rounding; a single 8-bit code of Q or P landing
    // on the other side of a rounding tie would move an output by ~1/255 of a value's range.
    assert!(worst < 2e-3, "{config} {geometry:?} len {len} q_len {q_len}: max diff {worst}");
}

#[test]
fn attention_equals_dequantized_attention() {
    let g = |batch, kv_heads, heads, head_dim| CacheGeometry { batch, kv_heads, heads, head_dim };
    for (config, geometry, len, q_len, window) in [
        ("bits=2,pi=32,round=stochastic,seed=4", g(2, 3, 9, 64), 77, 1, None),
        ("bits=2,pi=64,round=nearest", g(1, 2, 4, 64), 130, 5, None),
        ("bits=4,pi=128,round=nearest", g(2, 1, 2, 64), 300, 1, Some(100)),
        ("bits=4,pi=16,round=stochastic,seed=1", g(1, 2, 2, 32), 40, 40, None),
        ("bits=2,pi=32,round=nearest", g(3, 1, 3, 128), 31, 31, None),
    ] {
        check_against_dequantized(config.parse().unwrap(), geometry, len, q_len, window);
    }
}

#[test]
fn appending_in_pieces_equals_appending_at_once() {
    let device = Default::default();
    let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: 64 };
    let config: HackConfig = "bits=2,pi=32,round=stochastic,seed=9".parse().unwrap();
    let (k, v) = (random([2, 2, 75, 64], 5), random([2, 2, 75, 64], 6));
    let mut whole = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 1, geometry, &device);
    whole.append(k.clone(), v.clone()).unwrap();
    let mut pieces = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 1, geometry, &device);
    for (start, n) in [(0, 10), (10, 1), (11, 30), (41, 33), (74, 1)] {
        pieces.append(k.clone().narrow(2, start, n), v.clone().narrow(2, start, n)).unwrap();
    }
    assert_eq!((pieces.len(), pieces.blocks(), pieces.tail_len()), (75, 2, 11));
    assert_eq!(pieces.export_state(), whole.export_state());
    // Another layer draws other stochastic-rounding numbers.
    let mut other_layer = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 2, geometry, &device);
    other_layer.append(k, v).unwrap();
    assert_ne!(other_layer.export_state(), whole.export_state());
}

#[test]
fn state_round_trips_and_bytes_match_the_format() {
    let device = Default::default();
    for (config, len) in [("bits=2,pi=64,round=nearest", 200), ("bits=4,pi=32,round=nearest", 64), ("bits=2,pi=128", 5)]
    {
        let config: HackConfig = config.parse().unwrap();
        let geometry = CacheGeometry { batch: 2, kv_heads: 3, heads: 6, head_dim: 64 };
        let mut cache = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 0, geometry, &device);
        cache.append(random([2, 3, len, 64], 7), random([2, 3, len, 64], 8)).unwrap();
        let state = cache.export_state();
        let copy =
            TransferableScheme::<B>::import_state(&HackScheme::from(config.clone()), 0, geometry, &state, &device)
                .unwrap();
        assert_eq!(copy.export_state(), state);
        let q = random([2, 6, 1, 64], 9);
        let options = AttendOptions { scale: 0.125, key_start: vec![0, 0], window: None };
        assert_eq!(host(copy.attend(q.clone(), &options).unwrap()), host(cache.attend(q, &options).unwrap()));

        // The format's bytes, counted from the state's elements: packed words as they are, each
        // (min, scale) pair as one word of two fp16, each sum at its storage width, the tail in f32. The
        // state's own bytes are that count, so the wire carries the format.
        let count = |name: &str| state.get(name).map_or(0, |t| t.elements());
        let key_sum = sum_bytes(config.key_bits, key_group(64, config.partition));
        let value_sum = sum_bytes(config.key_bits, config.partition);
        let format = 4 * (count("k_words") + count("v_words"))
            + 4 * (count("k_params") + count("v_params"))
            + key_sum * count("k_sums")
            + value_sum * count("v_sums")
            + 4 * count("v_tail");
        assert_eq!(cache.memory_bytes(), format, "{config}");
        assert_eq!(state.byte_len(), format, "{config}");
        let width = |bytes: usize| if bytes == 1 { StateDType::U8 } else { StateDType::U16 };
        for (name, dtype) in [
            ("k_params", StateDType::I32),
            ("k_sums", width(key_sum)),
            ("v_params", StateDType::I32),
            ("v_sums", width(value_sum)),
        ] {
            assert!(state.get(name).ok().is_none_or(|t| t.dtype == dtype), "{config}: {name}");
        }
    }
}

#[test]
fn malformed_state_and_unsupported_geometry_are_rejected() {
    let device = Default::default();
    let config = HackConfig::new(2, 32, Rounding::Nearest).unwrap();
    let geometry = CacheGeometry { batch: 1, kv_heads: 1, heads: 1, head_dim: 64 };
    let mut cache = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 0, geometry, &device);
    cache.append(random([1, 1, 40, 64], 1), random([1, 1, 40, 64], 2)).unwrap();
    let state = cache.export_state();
    let import = |s: &LayerState| {
        TransferableScheme::<B>::import_state(&HackScheme::from(config.clone()), 0, geometry, s, &device).map(|_| ())
    };
    let mut wrong_len = state.clone();
    wrong_len.tokens = 41;
    assert!(matches!(import(&wrong_len), Err(CacheError::State(_))));
    let mut no_tail = state;
    no_tail.tensors.retain(|t| t.name != "v_tail");
    assert!(matches!(import(&no_tail), Err(CacheError::State(m)) if m.contains("v_tail")));

    let odd = CacheGeometry { batch: 1, kv_heads: 1, heads: 1, head_dim: 40 };
    let mut cache = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 0, odd, &device);
    let err = cache.append(random([1, 1, 2, 40], 1), random([1, 1, 2, 40], 2)).unwrap_err();
    assert!(matches!(err, CacheError::Unsupported(_)), "{err}");
}

#[test]
fn prefill_in_query_steps_equals_one_step() {
    let device = Default::default();
    let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: 64 };
    let config: HackConfig = "bits=2,pi=32,round=nearest".parse().unwrap();
    let mut cache = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 0, geometry, &device);
    cache.append(random([2, 2, 90, 64], 1), random([2, 2, 90, 64], 2)).unwrap();
    let q = random([2, 4, 90, 64], 3);
    let options = AttendOptions { scale: 0.125, key_start: vec![0, 11], window: Some(50) };
    let view = cache.view().unwrap();
    let whole = host(attention_reference(q.clone(), &view, &options).unwrap());
    let steps = host(attention_reference_in_steps(q, &view, &options, 7).unwrap());
    let worst = whole.iter().zip(&steps).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst < 1e-5, "max diff {worst}");
}

#[test]
fn codes_dequantize_as_the_host_does() {
    let geometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: 64 };
    for config in ["bits=2,pi=32", "bits=4,pi=64,round=nearest"] {
        let config: HackConfig = config.parse().unwrap();
        let mut cache = KvScheme::<B>::new_cache(&HackScheme::from(config.clone()), 0, geometry, &Default::default());
        cache.append(random([2, 2, 70, 64], 5), random([2, 2, 70, 64], 6)).unwrap();
        let view = cache.view().unwrap();
        let keys = view.keys.dequantize(config.key_bits, key_group(64, config.partition));
        assert_eq!(host(keys), dequantize(view.keys, config.key_bits).0, "{config}");
        let values = view.values.unwrap();
        assert_eq!(host(values.dequantize(config.key_bits, config.partition)), dequantize(values, config.key_bits).0);
    }
}

#[test]
fn packing_unpacked_codes_gives_every_word_back() {
    // Random 32-bit words, top bits set in about half (negative as `i32`), through the tensor
    // ops on NdArray's 64-bit integers: the words must come back as the same `i32` bits.
    let mut rng = StdRng::seed_from_u64(7);
    for bits in [2u8, 4] {
        let shape = [2, 3, 5, 4];
        let words: Vec<i32> = (0..shape.iter().product::<usize>()).map(|_| rng.random::<u32>() as i32).collect();
        let tensor =
            Tensor::<B, 4, burn::tensor::Int>::from_data(TensorData::new(words.clone(), shape), &Default::default());
        let codes = unpack_words(tensor, bits);
        assert_eq!(codes.dims(), [2, 3, 5, 4 * 32 / bits as usize]);
        let back: Vec<i32> = pack_words(codes, bits).into_data().convert::<i32>().into_vec().unwrap();
        assert_eq!(back, words, "{bits}-bit codes");
    }
}
