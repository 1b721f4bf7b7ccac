//! The channel layout (`axes=channel`): attention equals an independent f64 computation on the
//! dequantized keys and values with the same 8-bit query and weight codes; float slots attend
//! exactly; blocks close when they leave the window, after the append that adds them; rotations
//! cancel in `q kᵀ`; the state round-trips and its size is the format's.

use burn::tensor::{Tensor, TensorData};
use burn_hack_attn::{
    rotation::{rotate_heads, RotationRole},
    HackConfig, HackScheme,
};
use burn_kvcompress::{
    cache::{
        attention_reference, AttendOptions, CacheGeometry, KvCache, KvScheme, LayerState, TransferableCache,
        TransferableScheme,
    },
    error::CacheError,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

type B = burn::backend::NdArray<f32>;

/// Seeded N(0.3, 1.5²) values of `shape`, with channel 3 of every head 8 times larger (an outlier
/// channel, as real keys have).
fn random(shape: [usize; 4], seed: u64) -> Tensor<B, 4> {
    let mut rng = StdRng::seed_from_u64(seed);
    let d = shape[3];
    let values: Vec<f32> = (0..shape.iter().product())
        .map(|i| {
            let (u, v): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
            let x = 0.3 + 1.5 * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos();
            if i % d == 3 {
                8.0 * x
            } else {
                x
            }
        })
        .collect();
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

fn host(t: Tensor<B, 4>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

fn scheme(spelling: &str) -> HackScheme {
    HackScheme::new(spelling.parse::<HackConfig>().unwrap()).unwrap()
}

fn f16_rounded(t: Tensor<B, 4>) -> Tensor<B, 4> {
    let shape = t.dims();
    let v: Vec<f32> = host(t).into_iter().map(|x| half::f16::from_f32(x).to_f32()).collect();
    Tensor::from_data(TensorData::new(v, shape), &Default::default())
}

const GEOMETRY: CacheGeometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 6, head_dim: 32 };

#[test]
fn without_closed_blocks_attention_is_exact_on_f16_slots() {
    // A window longer than the context: nothing is quantized; with or without rotation the
    // result is attention on the f16-rounded keys and values.
    let g = GEOMETRY;
    let (len, q_len) = (40, 5);
    let (k, v) = (random([2, 2, len, 32], 1), random([2, 2, len, 32], 2));
    let q = random([2, 6, q_len, 32], 3);
    let options = AttendOptions { scale: 0.2, key_start: vec![0, 7], window: None };
    for rot in ["", ",rot=hadamard"] {
        let scheme = scheme(&format!("bits=2,pi=16,round=nearest,axes=channel,sinks=3,window=64{rot}"));
        // The cache rounds the rotated keys to f16: so does the expectation.
        let (q_r, k_r) = match scheme.rotation::<B>(RotationRole::Key, 0, 2, 32, &Default::default()).unwrap() {
            Some(r) => (rotate_heads(q.clone(), &r), rotate_heads(k.clone(), &r)),
            None => (q.clone(), k.clone()),
        };
        let want = host(attention_reference(q_r, f16_rounded(k_r), f16_rounded(v.clone()), &options).unwrap());
        let mut cache = KvScheme::<B>::new_cache(&scheme, 0, g, &Default::default());
        cache.append(k.clone(), v.clone()).unwrap();
        assert_eq!((cache.len(), cache.blocks(), cache.tail_len()), (len, 0, len - 3));
        let got = host(cache.attend(q.clone(), &options).unwrap());
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst < 1e-4, "{rot}: {worst}");
    }
}

#[test]
fn decode_steps_after_a_prefill_attend_like_dense() {
    let g = GEOMETRY;
    let len = 20;
    let (k, v) = (random([2, 2, len + 3, 32], 4), random([2, 2, len + 3, 32], 5));
    let scheme = scheme("bits=2,pi=16,round=nearest,axes=channel,window=64");
    let mut cache = KvScheme::<B>::new_cache(&scheme, 0, g, &Default::default());
    cache.append(k.clone().narrow(2, 0, len), v.clone().narrow(2, 0, len)).unwrap();
    for step in 0..3 {
        let n = len + step + 1;
        cache.append(k.clone().narrow(2, n - 1, 1), v.clone().narrow(2, n - 1, 1)).unwrap();
        let q = random([2, 6, 1, 32], 10 + step as u64);
        let options = AttendOptions { scale: 0.2, key_start: vec![0, 0], window: None };
        let want = host(
            attention_reference(
                q.clone(),
                f16_rounded(k.clone().narrow(2, 0, n)),
                f16_rounded(v.clone().narrow(2, 0, n)),
                &options,
            )
            .unwrap(),
        );
        let got = host(cache.attend(q, &options).unwrap());
        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(worst < 1e-4, "step {step}: {worst}");
        assert_eq!(cache.memory_bytes(), 2 * 2 * n * 2 * 32 * 2);
    }
}

/// The dequantized keys and values of a channel-layout state's closed blocks, per stream:
/// keys `[block][slot][channel]`, values `[block · Π + slot][channel]`, in f64; the key and value
/// (min, scale) pairs alongside.
struct Dequantized {
    keys: Vec<Vec<f64>>,
    values: Vec<Vec<f64>>,
    key_params: Vec<Vec<(f64, f64)>>,
    value_params: Vec<Vec<(f64, f64)>>,
    key_codes: Vec<Vec<f64>>,
    value_codes: Vec<Vec<f64>>,
}

fn ints(t: &burn_kvcompress::cache::StateTensor) -> Vec<u32> {
    let values: Tensor<B, 4, burn::tensor::Int> = t.to_int(&Default::default()).unwrap();
    values.into_data().convert::<i64>().into_vec::<i64>().unwrap().into_iter().map(|x| x as u32).collect()
}

fn unpack(words: &[u32], bits: usize) -> Vec<f64> {
    words.iter().flat_map(|&w| (0..32 / bits).map(move |i| ((w >> (i * bits)) & ((1 << bits) - 1)) as f64)).collect()
}

fn params(words: &[u32]) -> Vec<(f64, f64)> {
    words
        .iter()
        .map(|&w| {
            let p = burn_hack_attn::quant::GroupParams::from_word(w as i32);
            (p.min.to_f64(), p.scale.to_f64())
        })
        .collect()
}

fn dequantized(state: &LayerState, config: &HackConfig, streams: usize, d: usize) -> Dequantized {
    let (pi, kb, vb) = (config.partition, config.key_bits as usize, config.value_bits as usize);
    let group = pi.min(d);
    let get = |name: &str| ints(state.get(name).unwrap());
    let (kw, kp, vw, vp) = (get("k_slot_words"), get("k_params"), get("v_channel_words"), get("v_params"));
    let blocks = kp.len() / (streams * d);
    let mut out = Dequantized {
        keys: vec![],
        values: vec![],
        key_params: vec![],
        value_params: vec![],
        key_codes: vec![],
        value_codes: vec![],
    };
    for s in 0..streams {
        let k_codes = unpack(&kw[s * kw.len() / streams..(s + 1) * kw.len() / streams], kb);
        let k_par = params(&kp[s * kp.len() / streams..(s + 1) * kp.len() / streams]);
        let v_codes = unpack(&vw[s * vw.len() / streams..(s + 1) * vw.len() / streams], vb);
        let v_par = params(&vp[s * vp.len() / streams..(s + 1) * vp.len() / streams]);
        // Keys: a row of `d` codes per slot, (min, scale) per (block, channel); values: a row of
        // Π codes per (block, channel), (min, scale) per (slot, group). Both as
        // [block · Π + slot][channel].
        let mut keys = vec![0.0; blocks * pi * d];
        let mut key_codes = vec![0.0; blocks * pi * d];
        let mut values = vec![0.0; blocks * pi * d];
        let mut value_codes = vec![0.0; blocks * pi * d];
        for b in 0..blocks {
            for j in 0..d {
                let (m, sc) = k_par[b * d + j];
                for t in 0..pi {
                    let at = (b * pi + t) * d + j;
                    key_codes[at] = k_codes[at];
                    keys[at] = sc * k_codes[at] + m;
                    let c = v_codes[(b * d + j) * pi + t];
                    let (m, sc) = v_par[(b * pi + t) * (d / group) + j / group];
                    value_codes[at] = c;
                    values[at] = sc * c + m;
                }
            }
        }
        out.keys.push(keys);
        out.values.push(values);
        out.key_params.push(k_par);
        out.value_params.push(v_par);
        out.key_codes.push(key_codes);
        out.value_codes.push(value_codes);
    }
    out
}

/// Attention of one query row in f64, from the dequantized blocks and the float slots, with the
/// quantization of `q ⊙ s_b` (symmetric 8-bit) and `p ⊙ s_t` (8-bit from 0) written out here.
#[allow(clippy::too_many_arguments)]
fn oracle_row(
    q: &[f64],
    deq: &Dequantized,
    stream: usize,
    floats: (&[f64], &[f64], usize),
    tail: (&[f64], &[f64], usize),
    pi: usize,
    group: usize,
    scale: f64,
    allowed: impl Fn(usize) -> bool,
) -> Vec<f64> {
    let d = q.len();
    let blocks = deq.key_params[stream].len() / d;
    let (sinks_k, sinks_v, sinks) = floats;
    let (tail_k, tail_v, tail_len) = tail;
    let len = sinks + blocks * pi + tail_len;
    let mut scores = vec![f64::NEG_INFINITY; len];
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    for j in 0..sinks {
        scores[j] = dot(q, &sinks_k[j * d..(j + 1) * d]);
    }
    for b in 0..blocks {
        let par = &deq.key_params[stream][b * d..(b + 1) * d];
        let scaled: Vec<f64> = q.iter().zip(par).map(|(x, (_, s))| x * s).collect();
        let amax = scaled.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let sigma = if amax > 0.0 { amax / 127.0 } else { 1.0 };
        let codes: Vec<f64> = scaled.iter().map(|v| (v / sigma).round().clamp(-127.0, 127.0)).collect();
        let offset: f64 = q.iter().zip(par).map(|(x, (m, _))| x * m).sum();
        for t in 0..pi {
            let slot_codes = &deq.key_codes[stream][(b * pi + t) * d..(b * pi + t + 1) * d];
            scores[sinks + b * pi + t] = sigma * dot(&codes, slot_codes) + offset;
        }
    }
    for j in 0..tail_len {
        scores[sinks + blocks * pi + j] = dot(q, &tail_k[j * d..(j + 1) * d]);
    }
    let scores: Vec<f64> =
        scores.iter().enumerate().map(|(k, s)| if allowed(k) { s * scale } else { f64::NEG_INFINITY }).collect();
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let total: f64 = scores.iter().map(|s| (s - max).exp()).sum();
    let p: Vec<f64> = scores.iter().map(|s| (s - max).exp() / total).collect();
    let mut out = vec![0.0; d];
    for j in 0..sinks {
        for c in 0..d {
            out[c] += p[j] * sinks_v[j * d + c];
        }
    }
    let groups = d / group;
    for b in 0..blocks {
        for g in 0..groups {
            let param = |t: usize| deq.value_params[stream][(b * pi + t) * groups + g];
            let scaled: Vec<f64> = (0..pi).map(|t| p[sinks + b * pi + t] * param(t).1).collect();
            let max = scaled.iter().cloned().fold(0.0, f64::max);
            let tau = if max > 0.0 { max / 255.0 } else { 1.0 };
            for t in 0..pi {
                let e = (scaled[t] / tau).round().clamp(0.0, 255.0);
                let (m, _) = param(t);
                let codes = &deq.value_codes[stream][(b * pi + t) * d..];
                for (c, o) in out.iter_mut().enumerate().skip(g * group).take(group) {
                    *o += tau * e * codes[c] + p[sinks + b * pi + t] * m;
                }
            }
        }
    }
    for j in 0..tail_len {
        for c in 0..d {
            out[c] += p[sinks + blocks * pi + j] * tail_v[j * d + c];
        }
    }
    out
}

#[test]
fn attention_equals_an_f64_oracle_on_the_codes_with_the_same_eight_bit_steps() {
    // Prefill, then decode steps that close blocks; then a chunked prefill of 5 slots (q_len > 1
    // over closed blocks). GQA, left padding, a sliding window on one case.
    let cases = [
        ("bits=2,pi=16,round=nearest,axes=channel,sinks=3,window=8", 2, 3, 32, None),
        ("kbits=4,vbits=2,pi=32,round=nearest,axes=channel,window=4,clip=mse", 1, 2, 64, Some(40)),
        ("bits=4,pi=16,round=nearest,axes=channel", 2, 1, 16, None),
    ];
    for (i, (spelling, batch, group, d, window)) in cases.into_iter().enumerate() {
        let config: HackConfig = spelling.parse().unwrap();
        let scheme = HackScheme::new(config.clone()).unwrap();
        let kv_heads = 2;
        let g = CacheGeometry { batch, kv_heads, heads: kv_heads * group, head_dim: d };
        let mut cache = KvScheme::<B>::new_cache(&scheme, i, g, &Default::default());
        let total = 90;
        let (k, v) =
            (random([batch, kv_heads, total, d], 40 + i as u64), random([batch, kv_heads, total, d], 50 + i as u64));
        cache.append(k.clone().narrow(2, 0, 60), v.clone().narrow(2, 0, 60)).unwrap();
        for n in 60..85 {
            cache.append(k.clone().narrow(2, n, 1), v.clone().narrow(2, n, 1)).unwrap();
        }
        cache.append(k.clone().narrow(2, 85, 5), v.clone().narrow(2, 85, 5)).unwrap();
        assert!(cache.blocks() > 0);
        let q_len = 5;
        let q = random([batch, kv_heads * group, q_len, d], 60 + i as u64);
        let key_start: Vec<usize> = (0..batch).map(|b| 7 * b).collect();
        let options = AttendOptions { scale: 0.15, key_start, window };
        let got = host(cache.attend(q.clone(), &options).unwrap());

        let state = cache.export_state();
        let deq = dequantized(&state, &config, batch * kv_heads, d);
        let f64s = |name: &str| -> Vec<f64> {
            let t: Tensor<B, 4> = state.get(name).unwrap().to_float(&Default::default()).unwrap();
            host(t).into_iter().map(f64::from).collect()
        };
        let present = |name: &str| state.tensors.iter().any(|t| t.name == name);
        let (sk, sv) = if present("sinks_k") { (f64s("sinks_k"), f64s("sinks_v")) } else { (vec![], vec![]) };
        let (tk, tv) = (f64s("tail_k"), f64s("tail_v"));
        let sinks = sk.len() / (batch * kv_heads * d);
        let tail = tk.len() / (batch * kv_heads * d);
        let q_rot = match scheme.rotation::<B>(RotationRole::Key, i, kv_heads, d, &Default::default()).unwrap() {
            Some(r) => rotate_heads(q, &r),
            None => q,
        };
        let q_host: Vec<f64> = host(q_rot).into_iter().map(f64::from).collect();
        let mut worst = 0.0f64;
        for b in 0..batch {
            for h in 0..kv_heads * group {
                let stream = b * kv_heads + h / group;
                let rows = |x: &[f64], n: usize| x[stream * n * d..(stream + 1) * n * d].to_vec();
                let (sk, sv, tk, tv) = (rows(&sk, sinks), rows(&sv, sinks), rows(&tk, tail), rows(&tv, tail));
                for qi in 0..q_len {
                    let slot = total - q_len + qi;
                    let at = ((b * kv_heads * group + h) * q_len + qi) * d;
                    let want = oracle_row(
                        &q_host[at..at + d],
                        &deq,
                        stream,
                        (&sk, &sv, sinks),
                        (&tk, &tv, tail),
                        config.partition,
                        config.partition.min(d),
                        0.15,
                        |key| options.allows(b, slot, key),
                    );
                    for (w, g) in want.iter().zip(&got[at..at + d]) {
                        worst = worst.max((w - *g as f64).abs());
                    }
                }
            }
        }
        // f32 sums against f64 ones, and an 8-bit code that may round the other way at a tie.
        assert!(worst < 2e-3, "case {i} ({spelling}): {worst}");
    }
}

#[test]
fn blocks_close_once_the_window_leaves_them_after_the_append_that_adds_them() {
    let scheme = scheme("bits=2,pi=16,round=nearest,axes=channel,sinks=4,window=8");
    let g = CacheGeometry { batch: 1, kv_heads: 1, heads: 1, head_dim: 16 };
    let mut cache = KvScheme::<B>::new_cache(&scheme, 0, g, &Default::default());
    let kv = |n: usize, seed| random([1, 1, n, 16], seed);
    // A prefill quantizes nothing: 4 sinks and 36 tail slots.
    cache.append(kv(40, 1), kv(40, 2)).unwrap();
    assert_eq!((cache.blocks(), cache.tail_len()), (0, 36));
    // The next append closes the blocks the window had left (36 − 8 = 28: one block of 16).
    cache.append(kv(1, 3), kv(1, 4)).unwrap();
    assert_eq!((cache.blocks(), cache.tail_len()), (1, 21));
    // One slot at a time: the second block closes when 16 + 8 slots stand before the append.
    let mut closed_at = None;
    for standing in 41..80 {
        cache.append(kv(1, standing as u64), kv(1, 100 + standing as u64)).unwrap();
        if closed_at.is_none() && cache.blocks() == 2 {
            closed_at = Some(standing);
        }
        assert!(cache.tail_len() >= 9 && cache.tail_len() <= 8 + 16, "{standing}: tail {}", cache.tail_len());
    }
    // With `standing` slots before an append: 4 sinks, 16 closed, standing − 20 in the tail; the
    // second block (slots 20..36) leaves the window once standing − 20 − 8 ≥ 16.
    assert_eq!(closed_at, Some(44));
    assert_eq!(cache.len(), 80);
    // Shorter than the sinks: nothing but sinks.
    let mut short = KvScheme::<B>::new_cache(&scheme, 0, g, &Default::default());
    short.append(kv(3, 7), kv(3, 8)).unwrap();
    assert_eq!((short.blocks(), short.tail_len(), short.len()), (0, 0, 3));
}

#[test]
fn the_state_round_trips_costs_its_bytes_and_refuses_another_format() {
    let g = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: 32 };
    for spelling in ["hack2", "hack4", "kbits=4,vbits=2,pi=32,round=nearest,axes=channel,sinks=2,clip=mse"] {
        let scheme = scheme(spelling);
        let mut cache = KvScheme::<B>::new_cache(&scheme, 1, g, &Default::default());
        cache.append(random([2, 2, 300, 32], 5), random([2, 2, 300, 32], 6)).unwrap();
        // A prefill's state is sent sealed: the blocks the next append would close, closed.
        let state = cache.export_state();
        let copy = TransferableScheme::<B>::import_state(&scheme, 1, g, &state, &Default::default()).unwrap();
        assert_eq!(copy.export_state(), state, "{spelling}");
        assert!(copy.blocks() > 0, "{spelling}");
        assert_eq!(copy.memory_bytes(), state.byte_len(), "{spelling}: the format's bytes are the state's");
        // Sealing changes nothing the next append would not: both caches attend alike after it.
        let mut original = cache;
        let mut imported = copy;
        let (k, v) = (random([2, 2, 1, 32], 7), random([2, 2, 1, 32], 8));
        original.append(k.clone(), v.clone()).unwrap();
        imported.append(k, v).unwrap();
        assert_eq!(original.export_state(), imported.export_state(), "{spelling}");
        // A state of another format: refused with a typed error, not misread.
        let other = if spelling == "hack2" { "hack4" } else { "hack2" };
        let refused = TransferableScheme::<B>::import_state(&self::scheme(other), 1, g, &state, &Default::default());
        assert!(matches!(refused, Err(CacheError::State(_))), "{spelling} read as {other}: {refused:?}");
    }
}

#[test]
fn a_truncated_or_inconsistent_state_is_a_typed_error() {
    let g = CacheGeometry { batch: 1, kv_heads: 1, heads: 1, head_dim: 32 };
    let scheme = scheme("hack2");
    let mut cache = KvScheme::<B>::new_cache(&scheme, 0, g, &Default::default());
    cache.append(random([1, 1, 200, 32], 9), random([1, 1, 200, 32], 10)).unwrap();
    let state = cache.export_state();
    let import = |s: &LayerState| TransferableScheme::<B>::import_state(&scheme, 0, g, s, &Default::default());
    let mut longer = state.clone();
    longer.tokens += 1;
    assert!(matches!(import(&longer), Err(CacheError::State(_))));
    for dropped in ["tail_v", "k_params", "sinks_k"] {
        let mut missing = state.clone();
        missing.tensors.retain(|t| t.name != dropped);
        assert!(import(&missing).is_err(), "without {dropped}");
    }
    // A state whose codes are packed as earlier versions packed them (`k_words`, a row per block
    // and channel) has the same shapes as this packing where Π = head_dim (Π = 64 on SmolLM2):
    // refused by name, never read as this packing.
    let mut renamed = state.clone();
    for t in &mut renamed.tensors {
        t.name = t.name.replace("k_slot_words", "k_words").replace("v_channel_words", "v_words");
    }
    assert!(matches!(import(&renamed), Err(CacheError::State(_))));
}
