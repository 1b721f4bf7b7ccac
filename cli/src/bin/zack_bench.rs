//! ZACK attention on a GPU: checks the decode kernel against the ndarray reference, then times
//! decode and prefill attention on random K/V against the kept rank, with device-synchronized
//! timing; prints medians, the bytes decode must read and the achieved bandwidth. The rotations
//! are random orthogonal matrices: speed does not depend on their values. Ranks are uneven across
//! KV heads (spread linearly from half to one and a half times the mean, as adaptive ranks are),
//! which the kernel's schedule balances. The PyTorch SDPA fp16 anchor is
//! `cli/bench/sdpa_anchor.py`, run in the same session.

use std::sync::Arc;

use anyhow::ensure;
use burn::tensor::{Distribution, Tensor};
use burn_kvcompress::{
    backend::NdArray,
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme},
    fingerprint::ModelFingerprint,
};
use burn_zack::{
    cache::{ReducedStorage, ZackCache, ZackScheme},
    kernels::ZackBackend,
    rotation::{HeadRotation, RotationConfig, RotationGeometry, Rotations},
    symmetric_eigen, Ranks,
};
use clap::Parser;
use kvcompress_cli::{
    backend_choice::BackendChoice,
    bench::{decode_cells, diffs_from_cpu, filled_cache, time, AttentionGrid, DECODE_COLUMNS},
    with_backend,
};

/// Time ZACK decode and prefill attention on random K/V against the kept rank.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Backend (a GPU backend: the decode kernel runs on wgpu and cuda).
    #[arg(long, value_enum)]
    backend: BackendChoice,
    /// Mean kept rank as a fraction of the head dimension (the same for keys and values), one
    /// table row group each.
    #[arg(long, value_delimiter = ',', default_value = "1.0,0.75,0.5,0.25")]
    rank_fractions: Vec<f64>,
    /// Give every KV head the mean rank instead of spreading ranks from 0.5x to 1.5x the mean.
    #[arg(long)]
    even: bool,
    /// Round every head's rank to the nearest multiple of this (at least the multiple), as
    /// `RankRule::multiple` does for adaptive ranks: at 8 the decode kernel loads 8 f16 (or 4 f32)
    /// at a time; 1 keeps the spread's exact ranks.
    #[arg(long, default_value_t = 8)]
    rank_multiple: usize,
    /// Element type of the cached reduced keys and values: f32 or f16 (half the bytes).
    #[arg(long, default_value = "f32")]
    storage: ReducedStorage,
    /// The grid of shapes and how often to time each.
    #[command(flatten)]
    grid: AttentionGrid,
}

/// A random orthogonal `d × d` basis (eigenvectors of a random Gram matrix).
fn random_basis(d: usize) -> Vec<f32> {
    let x = Tensor::<NdArray, 2>::random([2 * d, d], Distribution::Normal(0.0, 1.0), &Default::default());
    let gram: Vec<f64> = x.clone().transpose().matmul(x).into_data().convert::<f64>().into_vec().expect("f64");
    symmetric_eigen(&gram, d).vectors.iter().map(|&v| v as f32).collect()
}

/// Random rotations for one layer of `heads` query / `kv_heads` KV heads of `d` channels.
fn random_rotations(heads: usize, kv_heads: usize, d: usize) -> Rotations {
    let geometry = RotationGeometry { layers: 1, heads, kv_heads, head_dim: d };
    let head = |_| HeadRotation {
        basis: random_basis(d),
        singular_values: (0..d).rev().map(|i| i as f32 + 1.0).collect(),
        mean: vec![0.0; d],
    };
    Rotations {
        geometry,
        model: ModelFingerprint::of_bytes(b"zack_bench random rotations"),
        config: RotationConfig::default(),
        calibration: "random orthogonal bases".into(),
        query_key: vec![(0..kv_heads).map(head).collect()],
        value_output: vec![(0..kv_heads).map(head).collect()],
    }
}

/// Ranks with mean `fraction · head_dim` across KV heads, spread linearly from `(1 − a)` to
/// `(1 + a)` times the mean with `a = min(0.5, 1/fraction − 1)` (so no head exceeds `head_dim`),
/// or all equal if `even`; each rounded to the nearest multiple of `multiple` (at least
/// `multiple`, at most `head_dim`).
fn ranks(geometry: RotationGeometry, fraction: f64, even: bool, multiple: usize) -> Ranks {
    let d = geometry.head_dim as f64;
    let kv = geometry.kv_heads;
    let amplitude = if even || kv == 1 { 0.0 } else { (1.0 / fraction - 1.0).clamp(0.0, 0.5) };
    let rank = |h: usize| {
        let spread = 1.0 - amplitude + 2.0 * amplitude * h as f64 / (kv - 1).max(1) as f64;
        let rounded = (fraction * d * spread / multiple as f64).round() as usize * multiple;
        rounded.clamp(multiple, geometry.head_dim)
    };
    let layer: Vec<usize> = (0..kv).map(rank).collect();
    Ranks { head_dim: geometry.head_dim, query_key: vec![layer.clone()], value_output: vec![layer] }
}

/// The decode kernel and the prefill path on this backend, keys and values held as `storage`,
/// against ndarray (f32), on SmolLM2's geometry (9 query / 3 KV heads of 64 channels) with uneven
/// ranks.
fn check_against_cpu<B: ZackBackend>(device: &B::Device, storage: ReducedStorage) -> anyhow::Result<()> {
    let rotations = Arc::new(random_rotations(9, 3, 64));
    let mut ranks = ranks(rotations.geometry, 0.5, false, 1);
    ranks.value_output[0] = vec![64, 5, 30];
    let scheme = ZackScheme::new(rotations, ranks)?;
    let gpu_scheme = scheme.clone().with_storage(storage);
    let geometry = CacheGeometry { batch: 2, kv_heads: 3, heads: 9, head_dim: 64 };
    let cpu_device = Default::default();
    let random = |shape| Tensor::<NdArray, 4>::random(shape, Distribution::Normal(0.0, 1.0), &cpu_device);
    let to_backend = |t: &Tensor<NdArray, 4>| Tensor::<B, 4>::from_data(t.to_data(), device);
    let (k, v, q) = (random([2, 3, 700, 64]), random([2, 3, 700, 64]), random([2, 9, 40, 64]));
    let mut cpu: ZackCache<NdArray> = scheme.new_cache(0, geometry, &cpu_device);
    let mut gpu: ZackCache<B> = gpu_scheme.new_cache(0, geometry, device);
    cpu.append(k.clone(), v.clone())?;
    gpu.append(to_backend(&k), to_backend(&v))?;
    let options = AttendOptions { scale: 0.125, key_start: vec![0, 90], window: None };
    let prefill = diffs_from_cpu(gpu.attend(to_backend(&q), &options)?, cpu.attend(q.clone(), &options)?);
    let q1 = q.narrow(2, 39, 1);
    let decode = diffs_from_cpu(gpu.attend(to_backend(&q1), &options)?, cpu.attend(q1, &options)?);
    println!(
        "check vs ndarray (uneven ranks, {storage} storage): prefill max {:.2e} mean {:.2e}; decode max {:.2e} mean {:.2e}",
        prefill.0, prefill.1, decode.0, decode.1
    );
    // On CUDA the reference's f32 matmuls run in TF32 (10-bit mantissa): ~1e-3 differences; f16
    // storage rounds keys and values to 11-bit mantissas, the same order.
    ensure!(prefill.0 < 1e-2 && decode.0 < 1e-2, "attention differs from the ndarray reference");
    Ok(())
}

/// Bytes decode attention must read: the reduced keys and values (`storage`) and the queries (f32).
fn device_bytes(grid: &AttentionGrid, ranks: &Ranks, storage: ReducedStorage, batch: usize, len: usize) -> f64 {
    let kept: usize = ranks.query_key[0].iter().chain(&ranks.value_output[0]).sum();
    (batch * len * kept * storage.bytes() + batch * grid.heads * grid.head_dim * 4) as f64
}

fn run<B: ZackBackend>(device: B::Device, args: &Args) -> anyhow::Result<()> {
    check_against_cpu::<B>(&device, args.storage)?;
    let grid = &args.grid;
    let rotations = Arc::new(random_rotations(grid.heads, grid.kv_heads, grid.head_dim));
    let scale = 1.0 / (grid.head_dim as f32).sqrt();
    println!("\nreduced keys and values held as {}", args.storage);
    println!("\n| rank fraction | ranks per KV head | batch | context | {DECODE_COLUMNS} |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &fraction in &args.rank_fractions {
        let ranks = ranks(rotations.geometry, fraction, args.even, args.rank_multiple);
        let scheme = ZackScheme::new(rotations.clone(), ranks.clone())?.with_storage(args.storage);
        for &batch in &grid.batches {
            for &len in &grid.contexts {
                let cache = filled_cache::<B, _>(&scheme, grid.geometry(batch), len, &device)?;
                let q = Tensor::<B, 4>::random(
                    [batch, grid.heads, 1, grid.head_dim],
                    Distribution::Normal(0.0, 1.0),
                    &device,
                );
                let options = AttendOptions { scale, key_start: vec![0; batch], window: None };
                let timing = time::<B>(&device, grid.runs, || {
                    let _ = cache.attend(q.clone(), &options).expect("attend");
                });
                let bytes = device_bytes(grid, &ranks, args.storage, batch, len);
                println!(
                    "| {:.3} | {:?} | {batch} | {len} | {} |",
                    1.0 - ranks.compression_rate(),
                    ranks.query_key[0],
                    decode_cells(timing, bytes)
                );
            }
        }
    }
    println!("\n| rank fraction | prefill context | median ms |");
    println!("|---:|---:|---:|");
    for &fraction in &args.rank_fractions {
        let scheme =
            ZackScheme::new(rotations.clone(), ranks(rotations.geometry, fraction, args.even, args.rank_multiple))?
                .with_storage(args.storage);
        for &len in &grid.prefill_contexts {
            let cache = filled_cache::<B, _>(&scheme, grid.geometry(1), len, &device)?;
            let q =
                Tensor::<B, 4>::random([1, grid.heads, len, grid.head_dim], Distribution::Normal(0.0, 1.0), &device);
            let options = AttendOptions { scale, key_start: vec![0], window: None };
            let median = time::<B>(&device, 5.max(grid.runs / 20), || {
                let _ = cache.attend(q.clone(), &options).expect("attend");
            })
            .median;
            println!("| {:.3} | {len} | {:.2} |", 1.0 - scheme.ranks().compression_rate(), median / 1e3);
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.rank_multiple >= 1, "--rank-multiple must be at least 1");
    with_backend!(args.backend, run(&args))
}
