//! MILLION (PQ) attention on a GPU: checks the kernels against the ndarray reference, then times
//! decode attention on random K/V over a grid of contexts and batch sizes, with
//! device-synchronized timing; prints medians, the bytes the kernel must read and the achieved
//! bandwidth. The codebooks are random N(0, 1) centroids: speed does not depend on their values.
//! The PyTorch SDPA fp16 anchor is `cli/bench/sdpa_anchor.py`, run in the same session.

use std::sync::Arc;

use anyhow::ensure;
use burn::tensor::{Distribution, Tensor};
use burn_kvcompress::{
    backend::NdArray,
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, TransferableCache},
    fingerprint::ModelFingerprint,
};
use burn_million_pq::{
    cache::{PqCache, PqScheme},
    codebook::{CodebookGeometry, Codebooks},
    kernels::{attention_reference, PqBackend},
    PqConfig,
};
use clap::Parser;
use kvcompress_cli::{
    backend_choice::BackendChoice,
    bench::{decode_cells, diffs, diffs_from_cpu, filled_cache, time, AttentionGrid, DECODE_COLUMNS},
    with_backend,
};

/// Time MILLION (PQ) decode and prefill attention on random K/V.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Backend (a GPU backend: the kernels run on wgpu and cuda).
    #[arg(long, value_enum)]
    backend: BackendChoice,
    /// Product quantizer: subspaces (m), bits per code, codebook scope. The default is the paper's
    /// 4-bit configuration for head dimension 128.
    #[arg(long, default_value = "m=64,nbits=8,scope=layer")]
    config: PqConfig,
    /// Recent slots kept in f32.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// The grid of shapes and how often to time each.
    #[command(flatten)]
    grid: AttentionGrid,
}

/// Random N(0, 1) codebooks for one layer of the given geometry.
fn random_scheme(config: PqConfig, kv_heads: usize, head_dim: usize, window: usize) -> PqScheme {
    let mut books = Codebooks {
        config,
        geometry: CodebookGeometry { layers: 1, kv_heads, head_dim },
        model: ModelFingerprint::of_bytes(b"pq_bench random codebooks"),
        calibration: "random N(0, 1) centroids".into(),
        keys: Vec::new(),
        values: Vec::new(),
    };
    let random = || {
        let t = Tensor::<NdArray, 4>::random(books.shape(), Distribution::Normal(0.0, 1.0), &Default::default());
        t.into_data().convert::<f32>().into_vec::<f32>().expect("f32")
    };
    let (keys, values) = (random(), random());
    books.keys.push(keys);
    books.values.push(values);
    PqScheme::new(Arc::new(books), window)
}

/// The kernels on this backend against the ndarray reference on SmolLM2's geometry (9 query / 3
/// KV heads of 64 channels): the encoded state bit for bit, prefill and decode attention within
/// float tolerance.
fn check_against_cpu<B: PqBackend>(device: &B::Device) -> anyhow::Result<()> {
    let cpu_device = Default::default();
    let geometry = CacheGeometry { batch: 2, kv_heads: 3, heads: 9, head_dim: 64 };
    let (len, q_len) = (300, 48);
    let kv_shape = [2, 3, len, 64];
    let random = |shape| Tensor::<NdArray, 4>::random(shape, Distribution::Normal(0.0, 1.0), &cpu_device);
    let (k, v, q) = (random(kv_shape), random(kv_shape), random([2, 9, q_len, 64]));
    let (k1, v1) = (random([2, 3, 1, 64]), random([2, 3, 1, 64]));
    let to_backend = |t: &Tensor<NdArray, 4>| Tensor::<B, 4>::from_data(t.to_data(), device);
    let options = AttendOptions { scale: 0.125, key_start: vec![0, 40], window: None };
    for config in ["m=32,nbits=8", "m=16,nbits=8", "m=32,nbits=6,scope=layer-head", "m=64,nbits=4"] {
        let scheme = random_scheme(config.parse()?, 3, 64, 16);
        let mut cpu: PqCache<NdArray> = scheme.new_cache(0, geometry, &cpu_device);
        let mut gpu: PqCache<B> = scheme.new_cache(0, geometry, device);
        // A prefill, then one decode step (which encodes the prefill's older slots).
        cpu.append(k.clone(), v.clone())?;
        gpu.append(to_backend(&k), to_backend(&v))?;
        let prefill = diffs_from_cpu(gpu.attend(to_backend(&q), &options)?, cpu.attend(q.clone(), &options)?);
        cpu.append(k1.clone(), v1.clone())?;
        gpu.append(to_backend(&k1), to_backend(&v1))?;
        let same_state = gpu.export_state() == cpu.export_state();
        let q1 = q.clone().narrow(2, q_len - 1, 1);
        let decode = diffs_from_cpu(gpu.attend(to_backend(&q1), &options)?, cpu.attend(q1, &options)?);
        println!(
            "check vs ndarray, {config}: codes bit-exact {same_state}; prefill max {:.2e} mean {:.2e}; decode max {:.2e} mean {:.2e}",
            prefill.0, prefill.1, decode.0, decode.1
        );
        ensure!(same_state, "the encoded state differs from the ndarray reference");
        ensure!(prefill.1 < 1e-3 && decode.1 < 1e-3, "attention differs from the ndarray reference");
    }
    Ok(())
}

/// A cache of `len` slots in steady decode state: `len - 1` appended as a prefill, then one
/// decode step, so all but the newest `window` slots are codes.
fn decode_cache<B: PqBackend>(
    scheme: &PqScheme,
    geometry: CacheGeometry,
    len: usize,
    device: &B::Device,
) -> anyhow::Result<PqCache<B>> {
    let mut cache = filled_cache::<B, _>(scheme, geometry, len - 1, device)?;
    let shape = [geometry.batch, geometry.kv_heads, 1, geometry.head_dim];
    cache.append(
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), device),
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), device),
    )?;
    Ok(cache)
}

/// Bytes decode attention must read from device memory: the packed key and value codes (4-byte
/// words), the recent window in f32 and the queries (codebooks and the lookup table are small and
/// cache-resident).
fn device_bytes(args: &Args, batch: usize, len: usize) -> f64 {
    let recent = args.window.min(len);
    let codes = (len - recent) * args.config.words_per_vector() * 4;
    let window = recent * args.grid.head_dim * 4;
    (batch * args.grid.kv_heads * 2 * (codes + window) + batch * args.grid.heads * args.grid.head_dim * 4) as f64
}

fn run<B: PqBackend>(device: B::Device, args: &Args) -> anyhow::Result<()> {
    check_against_cpu::<B>(&device)?;
    let scheme = random_scheme(args.config, args.grid.kv_heads, args.grid.head_dim, args.window);
    let geometry = |batch| args.grid.geometry(batch);
    let scale = 1.0 / (args.grid.head_dim as f32).sqrt();
    // 1. The decode kernel against the reference on this backend, on the benchmark's geometry.
    for (batch, len) in [(1, 1), (2, 300), (3, 1000)] {
        let cache = decode_cache::<B>(&scheme, geometry(batch), len, &device)?;
        let q = Tensor::<B, 4>::random(
            [batch, args.grid.heads, 1, args.grid.head_dim],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let key_start: Vec<usize> = (0..batch).map(|b| b * len / 4).collect();
        let options = AttendOptions { scale, key_start, window: None };
        let got = cache.attend(q.clone(), &options)?;
        let want = attention_reference(q, &cache.view(), &options)?;
        let (max, mean) = diffs(got, want);
        println!("check decode kernel vs reference on this backend: batch {batch}, len {len}: max {max:.2e}, mean {mean:.2e}");
        // On CUDA the reference's f32 matmuls run in TF32 (10-bit mantissa) and the tensor-core
        // kernel's table and values in f16 (11 bits): ~1e-3 differences, a few 1e-3 at most (the
        // kernel tests hold each path to its derived bound).
        ensure!(max < 3e-2 && mean < 3e-3, "decode kernel differs from the reference");
    }

    // 2. Decode attention timing.
    println!(
        "\nPQ {} ({:.2} code bits/elem), window {}",
        args.config,
        args.config.code_bits_per_element(args.grid.head_dim),
        args.window
    );
    println!("| batch | context | {DECODE_COLUMNS} |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &batch in &args.grid.batches {
        for &len in &args.grid.contexts {
            let cache = decode_cache::<B>(&scheme, geometry(batch), len, &device)?;
            let q = Tensor::<B, 4>::random(
                [batch, args.grid.heads, 1, args.grid.head_dim],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            let options = AttendOptions { scale, key_start: vec![0; batch], window: None };
            let timing = time::<B>(&device, args.grid.runs, || {
                let _ = cache.attend(q.clone(), &options).expect("attend");
            });
            let bytes = device_bytes(args, batch, len);
            println!("| {batch} | {len} | {} |", decode_cells(timing, bytes));
        }
    }

    // 3. Prefill: full-precision attention over the prompt, then encoding it (which the next
    //    append does).
    println!("\n| prefill context | median ms |");
    println!("|---:|---:|");
    for &len in &args.grid.prefill_contexts {
        let shape = [1, args.grid.kv_heads, len, args.grid.head_dim];
        let k = Tensor::<B, 4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let v = Tensor::<B, 4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let (k1, v1) = (k.clone().narrow(2, 0, 1), v.clone().narrow(2, 0, 1));
        let q = Tensor::<B, 4>::random(
            [1, args.grid.heads, len, args.grid.head_dim],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let options = AttendOptions { scale, key_start: vec![0], window: None };
        let median = time::<B>(&device, 5.max(args.grid.runs / 20), || {
            let mut cache: PqCache<B> = scheme.new_cache(0, geometry(1), &device);
            cache.append(k.clone(), v.clone()).expect("append");
            let _ = cache.attend(q.clone(), &options).expect("attend");
            cache.append(k1.clone(), v1.clone()).expect("append");
        })
        .median;
        println!("| {len} | {:.2} |", median / 1e3);
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    with_backend!(args.backend, run(&args))
}
