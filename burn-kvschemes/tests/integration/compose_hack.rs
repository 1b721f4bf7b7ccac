//! ZACK followed by HACK quantization: attention within the bound that K/V quantization error
//! allows from unquantized ZACK attention, the state round trip, the byte count of the format,
//! and ranks that HACK's key partitions cannot split refused.

use std::sync::Arc;

use crate::common::*;
use burn::tensor::Tensor;
use burn_hack_attn::{cache::key_group, HackConfig};
use burn_kvcompress::{
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, TransferableCache, TransferableScheme},
    fingerprint::ModelFingerprint,
};
use burn_kvschemes::compose::{ComposeError, ZackHackScheme};
use burn_zack::{
    cache::{ReducedStorage, ZackScheme},
    rotation::{HeadRotation, RotationConfig, RotationGeometry, Rotations},
    Ranks,
};

const D: usize = 64;
const GEOMETRY: CacheGeometry = CacheGeometry { batch: 2, kv_heads: 2, heads: 4, head_dim: D };

/// One layer of identity rotations: the reduced keys and values are the leading coordinates, so
/// the test can compute the reduced queries itself.
fn identity_rotations() -> Arc<Rotations> {
    let head = HeadRotation {
        basis: (0..D * D).map(|i| if i / D == i % D { 1.0 } else { 0.0 }).collect(),
        singular_values: (0..D).map(|i| (D - i) as f32).collect(),
        mean: vec![0.0; D],
    };
    Arc::new(Rotations {
        geometry: RotationGeometry { layers: 1, heads: 4, kv_heads: 2, head_dim: D },
        model: ModelFingerprint::of_bytes(b"compose"),
        config: RotationConfig::default(),
        calibration: "identity".into(),
        query_key: vec![vec![head.clone(); 2]],
        value_output: vec![vec![head; 2]],
    })
}

/// Key ranks 16 and 48 (multiples of 16 below Π = 64), value ranks 24 and 40.
fn zack_scheme(qk: [usize; 2]) -> ZackScheme {
    let ranks = Ranks { head_dim: D, query_key: vec![qk.to_vec()], value_output: vec![vec![24, 40]] };
    ZackScheme::new(identity_rotations(), ranks).unwrap()
}

/// Per-partition error bound of HACK's quantizer on `values` (spec: `scale / 2 + r` nearest,
/// `scale + r` stochastic, `r = 2^-10 max|x|` for the fp16 metadata).
fn partition_bound(values: &[f32], config: &HackConfig) -> f32 {
    let (lo, hi) = values.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)));
    let step = (hi - lo) / ((1u32 << config.key_bits) - 1) as f32;
    let rounding = match config.rounding {
        burn_hack_attn::Rounding::Nearest => 0.5,
        burn_hack_attn::Rounding::Stochastic { .. } => 1.0,
    };
    rounding * step + lo.abs().max(hi.abs()) / 1024.0
}

#[test]
fn attention_is_within_the_quantization_bound_of_unquantized_zack_attention() {
    let zack = zack_scheme([16, 48]);
    let (qk, vo) = ([16, 48], [24, 40]);
    for (config, len) in
        [("bits=4,pi=64,round=nearest", 100), ("bits=2,pi=16,round=nearest", 70), ("bits=2,pi=64", 150)]
    {
        let config: HackConfig = config.parse().unwrap();
        let composed = ZackHackScheme::new(zack.clone(), config.clone()).unwrap();
        let mut exact = KvScheme::<Cpu>::new_cache(&zack, 0, GEOMETRY, &Default::default());
        let mut quantized = KvScheme::<Cpu>::new_cache(&composed, 0, GEOMETRY, &Default::default());
        fill_both((&mut exact, &mut quantized), len, D, 11);
        let (keys, values) = exact.keys_values().unwrap();
        let (keys, values) = (host(keys), host(values));
        let (key_width, value_width) = (64, 64);

        // Per slot and key column, the error bound of the partition holding it.
        let mut key_error = vec![0.0f32; 2 * len * key_width];
        for row in 0..2 * len {
            let mut start = 0;
            for &rank in &qk {
                let group = key_group(rank, config.partition);
                for part in (start..start + rank).step_by(group) {
                    let cells = row * key_width + part..row * key_width + part + group;
                    let bound = partition_bound(&keys[cells.clone()], &config);
                    key_error[cells].fill(bound);
                }
                start += rank;
            }
        }
        // Closed value blocks: per channel and block of Π slots; the f32 tail is exact.
        let pi = config.partition;
        let mut value_error = 0.0f32;
        for b in 0..2 {
            for block in 0..len / pi {
                for c in 0..value_width {
                    let column: Vec<f32> =
                        (0..pi).map(|t| values[(b * len + block * pi + t) * value_width + c]).collect();
                    value_error = value_error.max(partition_bound(&column, &config));
                }
            }
        }
        let largest_value = values.iter().fold(0.0f32, |m, x| m.max(x.abs()));

        for (q_len, window) in [(1, None), (3, Some(20))] {
            let options = AttendOptions { scale: 0.125, key_start: vec![0, 5], window };
            let q = tensor(uniform(2 * 4 * q_len * D, 12), [2, 4, q_len, D]);
            let (want, got) =
                (exact.attend(q.clone(), &options).unwrap(), quantized.attend(q.clone(), &options).unwrap());
            let (want, got, q) = (host(want), host(got), host(q));
            // Largest score error: scale · Σ_j |q̃_j| e_j over the head's key columns.
            let mut score_error = 0.0f32;
            for b in 0..2 {
                for head in 0..4 {
                    let (g, first) = (head / 2, if head / 2 == 0 { 0 } else { qk[0] });
                    for i in 0..q_len {
                        let q_row = &q[((b * 4 + head) * q_len + i) * D..][..D];
                        for slot in 0..len {
                            let e = &key_error[(b * len + slot) * key_width + first..][..qk[g]];
                            let delta: f32 = (0..qk[g]).map(|j| q_row[j].abs() * e[j]).sum();
                            score_error = score_error.max(options.scale * delta);
                        }
                    }
                }
            }
            // Weights move by a factor within e^(±2δ); values by at most their partition bound.
            let bound = ((2.0 * score_error).exp() - 1.0) * (largest_value + value_error) + value_error + 1e-5;
            let diff = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(diff <= bound, "{config}, q_len {q_len}: {diff} beyond {bound}");
            assert!(diff > 0.0, "{config}: quantization changed nothing");
            // Past each head's value rank the output stays exactly zero.
            for (index, x) in got.iter().enumerate() {
                assert!(index % D < vo[(index / (q_len * D)) % 4 / 2] || *x == 0.0, "{config}: {x} at {index}");
            }
        }
    }
}

#[test]
fn state_round_trips_the_format_is_counted_and_bad_compositions_are_refused() {
    let config: HackConfig = "bits=2,pi=64,round=stochastic,seed=3".parse().unwrap();
    let composed = ZackHackScheme::new(zack_scheme([16, 48]), config.clone()).unwrap();
    let device = Default::default();
    let mut cache = KvScheme::<Cpu>::new_cache(&composed, 0, GEOMETRY, &device);
    let mut plain = KvScheme::<Cpu>::new_cache(composed.zack(), 0, GEOMETRY, &device);
    fill_both((&mut cache, &mut plain), 100, D, 21);
    // Per slot and row: keys 16·2/8 + (4 + 1) and 48·2/8 + (4 + 1) bytes; one closed block of
    // 64 channels, 64·2/8 + 4 + 1 bytes each; 36 tail slots of 64 f32.
    assert_eq!(cache.memory_bytes(), 2 * (100 * (9 + 17) + 64 * 21 + 36 * 64 * 4));

    let state = cache.export_state();
    // The state carries that format (f16 minima and scales, one-byte sums), not the device's f32.
    assert_eq!(state.byte_len(), cache.memory_bytes());
    let imported = TransferableScheme::<Cpu>::import_state(&composed, 0, GEOMETRY, &state, &device).unwrap();
    assert_eq!(imported.export_state(), state);
    let options = AttendOptions { scale: 0.125, key_start: vec![0, 0], window: None };
    let q = tensor(uniform(2 * 4 * D, 22), [2, 4, 1, D]);
    assert_eq!(host(imported.attend(q.clone(), &options).unwrap()), host(cache.attend(q, &options).unwrap()));
    let mut truncated = state.clone();
    truncated.tensors.pop();
    assert!(TransferableScheme::<Cpu>::import_state(&composed, 0, GEOMETRY, &truncated, &device).is_err());
    let mut reshaped = state;
    reshaped.tokens = 99;
    assert!(TransferableScheme::<Cpu>::import_state(&composed, 0, GEOMETRY, &reshaped, &device).is_err());

    let name = KvScheme::<Cpu>::name(&composed);
    assert!(name.starts_with("zack:") && name.ends_with("+hack:bits=2,pi=64,round=stochastic,seed=3"), "{name}");
    // A key rank of 40 splits into no partitions of Π = 64; f16 storage has no meaning here.
    let refused = ZackHackScheme::new(zack_scheme([40, 48]), config.clone()).unwrap_err();
    assert!(matches!(&refused, ComposeError::Config(m) if m.contains("multiple: 16")), "{refused}");
    let f16 = zack_scheme([16, 48]).with_storage(ReducedStorage::F16);
    assert!(matches!(ZackHackScheme::new(f16, config), Err(ComposeError::Config(_))));
    // A geometry the rotations do not fit fails on use.
    let mut wrong = KvScheme::<Cpu>::new_cache(&composed, 0, CacheGeometry { head_dim: 32, ..GEOMETRY }, &device);
    let small: Tensor<Cpu, 4> = tensor(uniform(2 * 2 * 32, 1), [2, 2, 1, 32]);
    assert!(wrong.append(small.clone(), small).is_err());
}

/// `values` on the grid of `2^-10` steps: numbers in `[-1, 1]` with at most 11 significant bits,
/// which TF32 holds exactly. Burn's f32 matmul runs in TF32 on CUDA's tensor cores, so the reduced
/// keys and values equal the host's only when the products of the identity basis are exact there.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn tf32_exact(values: Vec<f32>) -> Vec<f32> {
    values.into_iter().map(|x| (x * 1024.0).round() / 1024.0).collect()
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[test]
fn on_the_gpu_the_codes_equal_the_hosts_and_attention_follows() {
    let to_gpu = |t: Tensor<Cpu, 4>| Tensor::<Gpu, 4>::from_data(t.into_data(), &Default::default());
    let uniform = |n, seed| tf32_exact(uniform(n, seed));
    for (config, len) in [("bits=2,pi=64,seed=5", 150), ("bits=4,pi=16,round=nearest", 37)] {
        let composed = ZackHackScheme::new(zack_scheme([16, 48]), config.parse().unwrap()).unwrap();
        let mut host_cache = KvScheme::<Cpu>::new_cache(&composed, 0, GEOMETRY, &Default::default());
        let mut gpu_cache = KvScheme::<Gpu>::new_cache(&composed, 0, GEOMETRY, &Default::default());
        let k = tensor(uniform(2 * 2 * len * D, 31), [2, 2, len, D]);
        let v = tensor(uniform(2 * 2 * len * D, 32), [2, 2, len, D]);
        for (start, n) in [(0, len - 1), (len - 1, 1)] {
            let (k, v) = (k.clone().narrow(2, start, n), v.clone().narrow(2, start, n));
            host_cache.append(k.clone(), v.clone()).unwrap();
            gpu_cache.append(to_gpu(k), to_gpu(v)).unwrap();
        }
        // Codes, metadata, sums and tail, bit for bit.
        assert_eq!(gpu_cache.export_state(), host_cache.export_state(), "{config}");
        let options = AttendOptions { scale: 0.125, key_start: vec![0, 3], window: None };
        let q = tensor(uniform(2 * 4 * D, 33), [2, 4, 1, D]);
        let want = host(host_cache.attend(q.clone(), &options).unwrap());
        let got = host(gpu_cache.attend(to_gpu(q), &options).unwrap());
        // The same operands through the decode kernel: f32 rounding of sums over ≤ 150 slots.
        let diff = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(diff < 1e-4, "{config}: {diff}");
    }
}
