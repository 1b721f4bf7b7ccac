//! HACK attention on a GPU: checks the kernels against their references on this backend (unless
//! `--timing-only`), then times decode attention (and prefill attention) on random K/V over a grid
//! of contexts and batch sizes, with device-synchronized timing, from queries already rotated as a
//! model's RoPE launch rotates them (the cache's `attend_rotated`); prints medians, the bytes the
//! kernel reads and the achieved bandwidth. The PyTorch SDPA fp16 anchor is
//! `cli/bench/sdpa_anchor.py`, run in the same session (see `results/hack-bench-*.md`).

use anyhow::ensure;
use burn::tensor::{Distribution, Tensor};
use burn_hack_attn::{
    cache::{channel_bytes, key_group, PARAMS_BYTES},
    kernels::{attention_reference, channel_attention_reference, HackBackend},
    Axes, HackConfig, HackScheme, RotationSpec, Rounding, PRESETS,
};
use burn_kvcompress::{
    backend::NdArray,
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, TransferableCache, TransferableScheme},
};
use clap::Parser;
use kvcompress_cli::{
    backend_choice::BackendChoice,
    bench::{self, decode_cells, diffs_from_cpu, time, AttentionGrid, DECODE_COLUMNS},
    with_backend,
};

/// Time HACK decode and prefill attention on random K/V.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Backend (a GPU backend: the kernels run on wgpu and cuda).
    #[arg(long, value_enum)]
    backend: BackendChoice,
    /// HACK configuration.
    #[arg(long, default_value = "bits=2,pi=64,round=stochastic,seed=0")]
    config: HackConfig,
    /// The grid of shapes and how often to time each.
    #[command(flatten)]
    grid: AttentionGrid,
    /// Time only, without the kernels' checks against the host references first: for repeated
    /// timing runs of a build whose checks have passed on this machine.
    #[arg(long)]
    timing_only: bool,
}

/// A cache of `len` random slots as a decode step finds it: on the channel axes, the blocks the
/// window has left are closed (as the first decode append closes them after a prefill).
fn filled_cache<B: HackBackend>(
    args: &Args,
    batch: usize,
    len: usize,
    device: &B::Device,
) -> anyhow::Result<<HackScheme as KvScheme<B>>::Cache> {
    let mut cache =
        bench::filled_cache(&HackScheme::new(args.config.clone())?, args.grid.geometry(batch), len, device)?;
    cache.close_blocks()?;
    Ok(cache)
}

/// The kernels and the prefill path on this backend against the ndarray reference, on SmolLM2's
/// geometry (9 query / 3 KV heads of 64 channels) and every Π and bit width: the quantize kernel
/// must give the same state bit for bit; decode and prefill attention within float tolerance.
fn check_against_cpu<B: HackBackend>(device: &B::Device) -> anyhow::Result<()> {
    let cpu_device = Default::default();
    let geometry = CacheGeometry { batch: 2, kv_heads: 3, heads: 9, head_dim: 64 };
    let (len, q_len) = (300, 48);
    let kv_shape = [2, 3, len, 64];
    let k = Tensor::<NdArray, 4>::random(kv_shape, Distribution::Normal(0.0, 1.0), &cpu_device);
    let v = Tensor::<NdArray, 4>::random(kv_shape, Distribution::Normal(0.0, 1.0), &cpu_device);
    let q = Tensor::<NdArray, 4>::random([2, 9, q_len, 64], Distribution::Normal(0.0, 1.0), &cpu_device);
    let to_backend = |t: &Tensor<NdArray, 4>| Tensor::<B, 4>::from_data(t.to_data(), device);
    let options = AttendOptions { scale: 0.125, key_start: vec![0, 40], window: None };
    let paper = [2, 4].into_iter().flat_map(|bits| [32, 64, 128].map(move |pi| (bits, pi)));
    let paper = paper.map(|(bits, pi)| Ok(HackConfig::new(bits, pi, Rounding::Stochastic { seed: 1 })?));
    // The presets without their rotation: it is a matrix product before the kernels (TF32 on
    // CUDA, so its rounding differs from the host's by more than the kernels' tolerance), which
    // `burn-hack-attn/tests/integration/channel_gpu.rs` checks on its own.
    let presets = PRESETS.iter().map(|p| Ok(HackConfig { rotation: RotationSpec::None, ..p.spelling.parse()? }));
    for config in paper.chain(presets).collect::<anyhow::Result<Vec<_>>>()? {
        let scheme = HackScheme::new(config.clone())?;
        let mut cpu_cache = KvScheme::<NdArray>::new_cache(&scheme, 0, geometry, &cpu_device);
        cpu_cache.append(k.clone(), v.clone())?;
        let mut cache = KvScheme::<B>::new_cache(&scheme, 0, geometry, device);
        cache.append(to_backend(&k), to_backend(&v))?;
        // On the channel axes a prefill quantizes nothing: close its blocks, as the first decode
        // append would.
        cpu_cache.close_blocks()?;
        cache.close_blocks()?;
        let same_state = cache.export_state() == cpu_cache.export_state();
        let prefill = diffs_from_cpu(cache.attend(to_backend(&q), &options)?, cpu_cache.attend(q.clone(), &options)?);
        let q1 = q.clone().narrow(2, q_len - 1, 1);
        let decode = diffs_from_cpu(cache.attend(to_backend(&q1), &options)?, cpu_cache.attend(q1, &options)?);
        println!(
            "check vs ndarray, {config}: state bit-exact {same_state}; prefill max {:.2e} \
             mean {:.2e}; decode max {:.2e} mean {:.2e}",
            prefill.0, prefill.1, decode.0, decode.1
        );
        ensure!(same_state, "the quantized state differs from the ndarray reference");
        ensure!(prefill.1 < 1e-3 && decode.1 < 1e-3, "attention differs from the ndarray reference");
    }
    Ok(())
}

/// Bytes the decode kernel reads from device memory: every resident code word and fp16 (min,
/// scale) word, the code sums it reads (4 bytes each on the device), the float slots (f32 on the
/// device) and the queries.
fn device_bytes(args: &Args, batch: usize, len: usize) -> f64 {
    if args.config.axes == Axes::Channel {
        let (d, pi) = (args.grid.head_dim, args.config.partition);
        let float = ((args.config.sinks + args.config.window + pi - 1).min(len) as f64).max(1.0);
        let blocks = (len as f64 - float) / pi as f64;
        // `channel_bytes` counts float slots at 2 bytes an element; the device holds them at 4.
        let coded = channel_bytes(&args.config, d, 0, 1) as f64 * blocks + float * (2 * d * 4) as f64;
        return batch as f64 * (args.grid.kv_heads as f64 * coded + (args.grid.heads * d * 4) as f64);
    }
    let (d, bits, pi) = (args.grid.head_dim, args.config.key_bits as usize, args.config.partition);
    let parts = d / key_group(d, pi);
    let blocks = len / pi;
    let tail = len - blocks * pi;
    let (key_sums, value_sums) = reads_code_sums(args);
    let keys = len * (d * bits / 8 + parts * (PARAMS_BYTES + 4 * key_sums as usize));
    let values = blocks * d * (pi * bits / 8 + PARAMS_BYTES + 4 * value_sums as usize) + tail * d * 4;
    (batch * args.grid.kv_heads * (keys + values) + batch * args.grid.heads * d * 4) as f64
}

/// Whether the decode kernel reads the cached key and value code sums: CUDA's tensor-core kernel
/// (2-bit codes) takes them from its products' padding where the geometry leaves some
/// (`MmaGeometry::key_sums_from_products`); the other kernels read them.
#[cfg(feature = "cuda")]
fn reads_code_sums(args: &Args) -> (bool, bool) {
    use burn_hack_attn::kernels::attention::MmaGeometry;
    let (d, pi) = (args.grid.head_dim as u32, args.config.partition as u32);
    let geo = MmaGeometry {
        group: (args.grid.heads / args.grid.kv_heads) as u32,
        head_dim: d,
        key_group: key_group(d as usize, pi as usize) as u32,
        partition: pi,
        warps: 1,
        meta_vector: 1,
    };
    match (args.backend, args.config.key_bits) {
        (BackendChoice::Cuda, 2) => (!geo.key_sums_from_products(), !geo.value_sums_from_products()),
        _ => (true, true),
    }
}

/// Without CUDA every kernel reads the cached code sums.
#[cfg(not(feature = "cuda"))]
fn reads_code_sums(_: &Args) -> (bool, bool) {
    (true, true)
}

fn run<B: HackBackend>(device: B::Device, args: &Args) -> anyhow::Result<()> {
    if args.timing_only {
        println!("checks against the host references skipped (--timing-only)");
    } else {
        check_against_cpu::<B>(&device)?;
        check_decode_kernel::<B>(&device, args)?;
    }
    time_decode::<B>(&device, args)?;
    time_prefill::<B>(&device, args)
}

/// The decode kernel against the reference on this backend, on the benchmark's geometry.
fn check_decode_kernel<B: HackBackend>(device: &B::Device, args: &Args) -> anyhow::Result<()> {
    for (batch, len) in [(1, 1), (2, 300), (3, 1000)] {
        let cache = filled_cache::<B>(args, batch, len, device)?;
        let q = Tensor::<B, 4>::random(
            [batch, args.grid.heads, 1, args.grid.head_dim],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        let key_start: Vec<usize> = (0..batch).map(|b| b * len / 4).collect();
        let options = AttendOptions { scale: 1.0 / (args.grid.head_dim as f32).sqrt(), key_start, window: None };
        let got = cache.attend(q.clone(), &options)?;
        // The reference on the host, over this cache's own state, given the queries this device
        // rotated (CUDA's products run in TF32: a host rotation differs by more than the noise).
        let state = cache.export_state();
        let scheme = HackScheme::new(args.config.clone())?;
        let host = TransferableScheme::<NdArray>::import_state(
            &scheme,
            0,
            args.grid.geometry(batch),
            &state,
            &Default::default(),
        )?;
        let q = Tensor::<NdArray, 4>::from_data(cache.rotated(q).into_data().convert::<f32>(), &Default::default());
        let want = match (host.view(), host.channel_view()) {
            (Some(view), _) => attention_reference(q, &view, &options)?,
            (None, Some(view)) => channel_attention_reference(q, &view, &options)?,
            (None, None) => unreachable!("a filled cache has a view"),
        };
        let (max, mean) = diffs_from_cpu(got, want);
        println!("check decode kernel vs reference on this backend: batch {batch}, len {len}: max {max:.2e}, mean {mean:.2e}");
        // On CUDA the reference's f32 tail product runs in TF32 (10-bit mantissa): up to
        // ~2^-11 Σ p|v| ≈ 2e-3 for these N(0, 1) values.
        ensure!(max < 1e-2 && mean < 1e-3, "decode kernel differs from the reference");
    }
    Ok(())
}

/// Decode attention timing over the grid.
fn time_decode<B: HackBackend>(device: &B::Device, args: &Args) -> anyhow::Result<()> {
    println!("\n| batch | context | {DECODE_COLUMNS} |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &batch in &args.grid.batches {
        for &len in &args.grid.contexts {
            let cache = filled_cache::<B>(args, batch, len, device)?;
            let q = Tensor::<B, 4>::random(
                [batch, args.grid.heads, 1, args.grid.head_dim],
                Distribution::Normal(0.0, 1.0),
                device,
            );
            let options = AttendOptions {
                scale: 1.0 / (args.grid.head_dim as f32).sqrt(),
                key_start: vec![0; batch],
                window: None,
            };
            // What a model's layer runs: its query comes rotated from RoPE's launch
            // (`SelfAttention::forward`), as SDPA's comes from RoPE's.
            let q = cache.rotated(q);
            let timing = time::<B>(device, args.grid.runs, || {
                let _ = cache.attend_rotated(q.clone(), &options).expect("attend");
            });
            let bytes = device_bytes(args, batch, len);
            println!("| {batch} | {len} | {} |", decode_cells(timing, bytes));
        }
    }
    Ok(())
}

/// Prefill attention timing (the paper's axes: the fused prefill kernel where it fits, Q/P 8-bit,
/// homomorphic products, causal; the channel axes: attention on the float slots).
fn time_prefill<B: HackBackend>(device: &B::Device, args: &Args) -> anyhow::Result<()> {
    println!("\n| prefill context | median ms |");
    println!("|---:|---:|");
    for &len in &args.grid.prefill_contexts {
        // As a prompt's prefill finds it: on the channel axes nothing is closed yet and attention
        // runs on the float slots.
        let cache = bench::filled_cache(&HackScheme::new(args.config.clone())?, args.grid.geometry(1), len, device)?;
        let q = Tensor::<B, 4>::random(
            [1, args.grid.heads, len, args.grid.head_dim],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        let options =
            AttendOptions { scale: 1.0 / (args.grid.head_dim as f32).sqrt(), key_start: vec![0], window: None };
        let q = cache.rotated(q);
        let median = time::<B>(device, 5.max(args.grid.runs / 20), || {
            let _ = cache.attend_rotated(q.clone(), &options).expect("attend");
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
