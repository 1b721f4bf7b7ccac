//! The PQ cache against an independent computation: attention over the host-reconstructed keys
//! and values (codes for old slots, f32 for the recent window) with the core's dense reference.

mod common;

use burn::tensor::{Tensor, TensorData};
use burn_kvcompress::{
    backend::NdArray,
    cache::{
        attention_reference, AttendOptions, CacheGeometry, KvCache, KvScheme, TransferableCache, TransferableScheme,
    },
    error::CacheError,
};
use burn_million_pq::{cache::PqCache, CodebookScope, PqConfig};
use common::{random_values, reconstruct_host, scheme};

type B = NdArray;

struct Case {
    config: PqConfig,
    head_dim: usize,
    kv_heads: usize,
    group: usize,
    batch: usize,
    window: usize,
    appends: &'static [usize],
    q_len: usize,
    key_start: Vec<usize>,
    sliding: Option<usize>,
}

fn tensor(values: Vec<f32>, shape: [usize; 4]) -> Tensor<B, 4> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

/// Slots `[from, to)` of `x: [batch, heads, n, d]` (row-major) as a flat vector.
fn slots(x: &[f32], shape: [usize; 4], from: usize, to: usize) -> Vec<f32> {
    let [b, h, n, d] = shape;
    (0..b * h).flat_map(|bh| x[(bh * n + from) * d..(bh * n + to) * d].iter().copied()).collect()
}

/// Returns the max difference from the expected output, its bound, and the max difference from
/// attention over the unquantized K/V (which must be far larger when slots are coded).
fn run(case: &Case, seed: u64) -> (f32, f32, f32) {
    let Case { config, head_dim: d, kv_heads, group, batch, window, .. } = *case;
    let heads = kv_heads * group;
    let scheme = scheme(config, kv_heads, d, window, seed);
    let geometry = CacheGeometry { batch, kv_heads, heads, head_dim: d };
    let mut cache: PqCache<B> = scheme.new_cache(0, geometry, &Default::default());
    let total: usize = case.appends.iter().sum();
    let kv_shape = [batch, kv_heads, total, d];
    let (k, v) =
        (random_values(kv_shape.iter().product(), seed + 10), random_values(kv_shape.iter().product(), seed + 11));
    let mut at = 0;
    for &n in case.appends {
        let piece = |x: &[f32]| tensor(slots(x, kv_shape, at, at + n), [batch, kv_heads, n, d]);
        cache.append(piece(&k), piece(&v)).unwrap();
        at += n;
    }
    let last = *case.appends.last().unwrap();
    let recent = total.min(window.max(last));
    assert_eq!((cache.coded_len(), cache.recent_len(), cache.len()), (total - recent, recent, total));

    // Expected: coded slots reconstructed on the host, recent ones as they are.
    let coded = total - recent;
    let expect = |x: &[f32], kind: usize| -> Vec<f32> {
        let old = reconstruct_host(&slots(x, kv_shape, 0, coded), [batch, kv_heads, coded, d], &scheme.codebooks, kind);
        let new = slots(x, kv_shape, coded, total);
        (0..batch * kv_heads)
            .flat_map(|bh| {
                old[bh * coded * d..(bh + 1) * coded * d].iter().chain(&new[bh * recent * d..(bh + 1) * recent * d])
            })
            .copied()
            .collect()
    };
    let (k_hat, v_hat) = (expect(&k, 0), expect(&v, 1));
    let q_shape = [batch, heads, case.q_len, d];
    let q = random_values(q_shape.iter().product(), seed + 12);
    let options =
        AttendOptions { scale: 1.0 / (d as f32).sqrt(), key_start: case.key_start.clone(), window: case.sliding };
    let got = cache.attend(tensor(q.clone(), q_shape), &options).unwrap();
    let want = attention_reference(
        tensor(q.clone(), q_shape),
        tensor(k_hat.clone(), kv_shape),
        tensor(v_hat.clone(), kv_shape),
        &options,
    )
    .unwrap();
    let diff = (got.clone() - want).abs().max().into_scalar();
    let raw = attention_reference(
        tensor(q.clone(), q_shape),
        tensor(k.clone(), kv_shape),
        tensor(v.clone(), kv_shape),
        &options,
    )
    .unwrap();
    let raw_diff = (got - raw).abs().max().into_scalar();

    // Bound: the table sums a score's d products in another order than the direct dot product,
    // so each score differs by at most γ_(d+1) Σ|q_i k_i| (u = 2^-24) times the scale; a softmax
    // input error ε moves the output by at most 2ε max|v|. Both sides also round the softmax
    // and the P·V sum: (total + d) u max|v| each, counted twice.
    let u = f32::EPSILON / 2.0;
    let max_v = v_hat.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let mut max_abs_dot = 0.0f32;
    for qv in q.chunks_exact(d) {
        for kv in k_hat.chunks_exact(d) {
            max_abs_dot = max_abs_dot.max(qv.iter().zip(kv).map(|(a, b)| (a * b).abs()).sum());
        }
    }
    let bound = 2.0 * options.scale * (d + 1) as f32 * u * max_abs_dot * max_v + 4.0 * (total + d) as f32 * u * max_v;
    (diff, bound, raw_diff)
}

fn config(subspaces: usize, nbits: u8, scope: CodebookScope) -> PqConfig {
    PqConfig { subspaces, nbits, scope }
}

fn cases() -> Vec<Case> {
    use CodebookScope::{Layer, LayerHead};
    vec![
        // Window 0: every older slot coded; decode steps; GQA 2; left padding.
        Case {
            config: config(8, 4, Layer),
            head_dim: 16,
            kv_heads: 2,
            group: 2,
            batch: 2,
            window: 0,
            appends: &[7, 1, 1, 1],
            q_len: 1,
            key_start: vec![0, 2],
            sliding: None,
        },
        // Per-head codebooks, 6-bit codes (5 per word), GQA 3, window 5.
        Case {
            config: config(8, 6, LayerHead),
            head_dim: 32,
            kv_heads: 2,
            group: 3,
            batch: 1,
            window: 5,
            appends: &[13, 1, 1, 1, 1, 1, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // SmolLM2's shape: 8-bit codes of 2 channels; a chunk of 9 queries over codes + window, sliding window.
        Case {
            config: config(32, 8, Layer),
            head_dim: 64,
            kv_heads: 3,
            group: 3,
            batch: 2,
            window: 4,
            appends: &[20, 9],
            q_len: 9,
            key_start: vec![3, 0],
            sliding: Some(6),
        },
        // One channel per subspace (scalar codebooks), window longer than the context.
        Case {
            config: config(8, 3, LayerHead),
            head_dim: 8,
            kv_heads: 1,
            group: 4,
            batch: 1,
            window: 64,
            appends: &[3, 1, 1],
            q_len: 1,
            key_start: vec![0],
            sliding: None,
        },
        // 12-bit codes (2 per word), an odd number of subspaces' words.
        Case {
            config: config(3, 12, Layer),
            head_dim: 12,
            kv_heads: 2,
            group: 1,
            batch: 1,
            window: 2,
            appends: &[30, 3],
            q_len: 3,
            key_start: vec![0],
            sliding: None,
        },
    ]
}

#[test]
fn attention_matches_reconstructed_kv_within_the_derived_bound() {
    for (i, case) in cases().iter().enumerate() {
        let (diff, bound, raw_diff) = run(case, 100 * i as u64);
        assert!(diff <= bound, "case {i}: {diff} > {bound}");
        // Quantization moves the output far more than the bound: the test tells codes from f32.
        let total: usize = case.appends.iter().sum();
        let all_recent = case.window >= total;
        assert!(
            all_recent || raw_diff > 100.0 * bound,
            "case {i}: unquantized attention is within {raw_diff} (bound {bound})"
        );
    }
}

#[test]
fn long_query_runs_are_split_into_steps_with_the_same_result() {
    // 1 x 2 heads x 2 group x 32 subspaces x 600 coded slots x 300 queries > 2^24: stepped.
    let case = Case {
        config: config(32, 8, CodebookScope::Layer),
        head_dim: 64,
        kv_heads: 2,
        group: 2,
        batch: 1,
        window: 0,
        appends: &[600, 300],
        q_len: 300,
        key_start: vec![0],
        sliding: None,
    };
    let (diff, bound, _) = run(&case, 7);
    assert!(diff <= bound, "{diff} > {bound}");
}

#[test]
fn state_round_trips_and_malformed_states_are_errors() {
    let (kv_heads, d) = (2, 16);
    let scheme = scheme(config(4, 5, CodebookScope::Layer), kv_heads, d, 3, 5);
    let geometry = CacheGeometry { batch: 1, kv_heads, heads: 4, head_dim: d };
    let device = Default::default();
    let mut cache: PqCache<B> = scheme.new_cache(0, geometry, &device);
    let fresh: PqCache<B> = scheme.import_state(0, geometry, &cache.export_state(), &device).unwrap();
    assert!(fresh.is_empty());
    for (n, seed) in [(9, 1), (1, 2), (1, 3)] {
        cache
            .append(
                tensor(random_values(n * 32, seed), [1, 2, n, d]),
                tensor(random_values(n * 32, seed + 9), [1, 2, n, d]),
            )
            .unwrap();
    }
    let state = cache.export_state();
    let names: Vec<&str> = state.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["k_codes", "v_codes", "k_recent", "v_recent"]);
    let back: PqCache<B> = scheme.import_state(0, geometry, &state, &device).unwrap();
    assert_eq!(back.export_state(), state);
    let q = tensor(random_values(4 * d, 4), [1, 4, 1, d]);
    let options = AttendOptions { scale: 0.25, key_start: vec![0], window: None };
    back.attend(q.clone(), &options)
        .unwrap()
        .into_data()
        .assert_eq(&cache.attend(q, &options).unwrap().into_data(), true);

    // Format bytes: 4 subspaces of 5 bits = 1 word per vector; 8 coded slots, 3 recent.
    let words = state.tensors[0].bytes.len() + state.tensors[1].bytes.len();
    assert_eq!(words, 2 * 2 * 8 * 4);
    assert_eq!(cache.memory_bytes(), words + 2 * 2 * 3 * d * 4 + scheme.codebooks.layer_bytes());

    let mut wrong_tokens = state.clone();
    wrong_tokens.tokens += 1;
    assert!(matches!(
        TransferableScheme::<B>::import_state(&scheme, 0, geometry, &wrong_tokens, &device),
        Err(CacheError::State(_))
    ));
    let mut no_values = state.clone();
    no_values.tensors.remove(1);
    assert!(matches!(
        TransferableScheme::<B>::import_state(&scheme, 0, geometry, &no_values, &device),
        Err(CacheError::State(_))
    ));
    let mut ragged = state.clone();
    ragged.tensors[2].shape[3] = 8;
    let half = ragged.tensors[2].bytes.len() / 2;
    ragged.tensors[2].bytes.truncate(half);
    assert!(matches!(
        TransferableScheme::<B>::import_state(&scheme, 0, geometry, &ragged, &device),
        Err(CacheError::State(_))
    ));
}

#[test]
fn codebooks_that_do_not_fit_are_reported_on_use() {
    let scheme = scheme(config(4, 4, CodebookScope::Layer), 2, 16, 0, 1);
    let device = Default::default();
    // Layer 1 does not exist in one-layer codebooks; head_dim 32 is not theirs either.
    for (layer, d) in [(1, 16), (0, 32)] {
        let geometry = CacheGeometry { batch: 1, kv_heads: 2, heads: 2, head_dim: d };
        let mut cache: PqCache<B> = scheme.new_cache(layer, geometry, &device);
        let x = tensor(vec![0.0; 2 * d], [1, 2, 1, d]);
        assert!(matches!(cache.append(x.clone(), x), Err(CacheError::Request(m)) if m.contains("do not fit")));
    }
    let name = KvScheme::<B>::name(&scheme);
    assert!(name.starts_with("pq:m=4,nbits=4,scope=layer,window=0,books="), "{name}");
    let other = common::scheme(config(4, 4, CodebookScope::Layer), 2, 16, 0, 2);
    assert_ne!(KvScheme::<B>::name(&other), name);
}

#[test]
fn wrong_shapes_are_typed_errors() {
    let scheme = scheme(config(4, 4, CodebookScope::Layer), 2, 16, 2, 1);
    let geometry = CacheGeometry { batch: 1, kv_heads: 2, heads: 2, head_dim: 16 };
    let mut cache: PqCache<B> = scheme.new_cache(0, geometry, &Default::default());
    let bad = tensor(vec![0.0; 3 * 16], [1, 3, 1, 16]);
    assert!(matches!(cache.append(bad.clone(), bad), Err(CacheError::Shape { .. })));
    let x = tensor(vec![0.5; 2 * 16], [1, 2, 1, 16]);
    cache.append(x.clone(), x).unwrap();
    let options = AttendOptions { scale: 1.0, key_start: vec![0], window: None };
    let too_many = tensor(vec![0.0; 2 * 2 * 16], [1, 2, 2, 16]);
    assert!(matches!(cache.attend(too_many, &options), Err(CacheError::Shape { .. })));
}
