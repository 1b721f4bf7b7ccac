//! The PQ cache against an independent computation: attention over the host-reconstructed keys
//! and values (codes for old slots, f32 for the recent window) with the core's dense reference.

use crate::common::{
    case::{cases, config, run, tensor, Case, Tables},
    random_values, scheme,
};
use burn_kvcompress::{
    backend::NdArray,
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, TransferableCache, TransferableScheme},
    error::CacheError,
};
use burn_million_pq::{cache::PqCache, CodebookScope};

type B = NdArray;

#[test]
fn attention_matches_reconstructed_kv_within_the_derived_bound() {
    for (i, case) in cases().iter().enumerate() {
        let (diff, bound, raw_diff) = run::<B>(case, 100 * i as u64, Tables::F32);
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
    // 1 x 2 heads x 2 group x (32 subspaces x 600 coded + 900 slots) x 300 queries > 2^24: stepped.
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
    let (diff, bound, _) = run::<B>(&case, 7, Tables::F32);
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
                tensor::<B>(random_values(n * 32, seed), [1, 2, n, d]),
                tensor::<B>(random_values(n * 32, seed + 9), [1, 2, n, d]),
            )
            .unwrap();
    }
    let state = cache.export_state();
    let names: Vec<&str> = state.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["k_codes", "v_codes", "k_recent", "v_recent"]);
    let back: PqCache<B> = scheme.import_state(0, geometry, &state, &device).unwrap();
    assert_eq!(back.export_state(), state);
    let q = tensor::<B>(random_values(4 * d, 4), [1, 4, 1, d]);
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
        let x = tensor::<B>(vec![0.0; 2 * d], [1, 2, 1, d]);
        assert!(matches!(cache.append(x.clone(), x), Err(CacheError::Request(m)) if m.contains("do not fit")));
    }
    let name = KvScheme::<B>::name(&scheme);
    assert!(name.starts_with("pq:m=4,nbits=4,scope=layer,window=0,books="), "{name}");
    let other = crate::common::scheme(config(4, 4, CodebookScope::Layer), 2, 16, 0, 2);
    assert_ne!(KvScheme::<B>::name(&other), name);
}

#[test]
fn wrong_shapes_are_typed_errors() {
    let scheme = scheme(config(4, 4, CodebookScope::Layer), 2, 16, 2, 1);
    let geometry = CacheGeometry { batch: 1, kv_heads: 2, heads: 2, head_dim: 16 };
    let mut cache: PqCache<B> = scheme.new_cache(0, geometry, &Default::default());
    let bad = tensor::<B>(vec![0.0; 3 * 16], [1, 3, 1, 16]);
    assert!(matches!(cache.append(bad.clone(), bad), Err(CacheError::Shape { .. })));
    let x = tensor::<B>(vec![0.5; 2 * 16], [1, 2, 1, 16]);
    cache.append(x.clone(), x).unwrap();
    let options = AttendOptions { scale: 1.0, key_start: vec![0], window: None };
    let too_many = tensor::<B>(vec![0.0; 2 * 2 * 16], [1, 2, 2, 16]);
    assert!(matches!(cache.attend(too_many, &options), Err(CacheError::Shape { .. })));
}
