//! Import of received KV states into device caches: the upload a decode worker runs on its
//! decoding thread when a request joins its batch (every running request waits for it). For each
//! `--kv` scheme and `--context`, one request of an 8B-shaped model (`--layers` layers of 8 KV
//! heads of 128) is filled with random keys and values, exported to host states, and imported
//! back layer by layer with `TransferableScheme::import_state` from received-like host buffers
//! (each layer's tensors in one buffer of a receive pool, as the transfer client lands them; in
//! pageable memory, and in the device's page-locked memory where it has one, as a CUDA worker
//! receives by default), device-synchronized, then checked (each imported layer exports the
//! state it was imported from, byte for byte). Beside it, two of its parts: every layer's empty
//! cache built (`KvScheme::new_cache`: what a scheme prepares per request, e.g. HACK's rotations)
//! and every layer's tensors uploaded as an import uploads them (`LayerState::upload`, one
//! batched write a layer on CUDA, then each tensor read at its width: the bytes and the
//! per-tensor work, no cache logic); and the same bytes uploaded as one tensor by Burn's
//! `Tensor::from_data` (its upload path with no per-tensor work). The PyTorch anchor,
//! run in the same call: `cli/bench/upload_anchor.py` (pageable and pinned host-to-device
//! copies of the same sizes).
//!
//! `cargo run --release -p kvcompress-cli --features cuda --bin import_bench -- --backend cuda`

use std::time::Instant;

use burn::tensor::{backend::Backend, Bytes, DType, Distribution, FloatDType, Int, Tensor, TensorData};
use burn_kvcompress::{
    cache::{
        device_host_allocator, CacheGeometry, DeviceState, KvCache, LayerState, StateDType, StateTensor,
        TransferableCache, TransferableScheme,
    },
    model::ModelConfig,
};
use burn_kvschemes::{with_scheme, SchemeSpec};
use burn_kvtransfer::{
    protocol::BufferPool,
    state_codec::{decode_state, encode_state},
};
use clap::{Parser, ValueEnum};
use kvcompress_cli::{
    backend_choice::{BackendChoice, KernelBackend},
    bench::median,
    with_backend,
};
use std::path::Path;

/// Time importing received KV states into device caches.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Backend (cuda for the numbers that count; ndarray and wgpu check the program).
    #[arg(long, value_enum)]
    backend: BackendChoice,
    /// Schemes whose states are imported: `dense:storage=f16`, `dense`, or a HACK spelling or
    /// preset (schemes that need calibration files do not apply to random caches).
    #[arg(long = "kv", default_values = ["dense:storage=f16", "hack2"])]
    kvs: Vec<SchemeSpec>,
    /// Tokens of the request's cache (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "8192,32768")]
    context: Vec<usize>,
    /// Layers of the request (each imported from its own host buffers).
    #[arg(long, default_value_t = 32)]
    layers: usize,
    /// Timed imports per row (after one untimed); the median is reported.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Host memory the states are imported from (comma-separated): `pageable` (the global
    /// allocator) and `page-locked` (the device's, e.g. CUDA's pinned memory; skipped on a
    /// backend without one).
    #[arg(long, value_delimiter = ',', default_value = "pageable,page-locked")]
    host_memory: Vec<HostMemory>,
}

/// Where received states lie on the host.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum HostMemory {
    /// The global allocator's memory.
    Pageable,
    /// The device's page-locked memory.
    PageLocked,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    with_backend!(args.backend, run(&args))
}

fn run<B: KernelBackend>(device: B::Device, args: &Args) -> anyhow::Result<()> {
    let config = ModelConfig { num_layers: args.layers, ..ModelConfig::llama3_8b() };
    println!(
        "## Importing one request's received states ({} layers, {} KV heads of {}; ms, median of {}; GB/s of the \
         states' bytes)",
        args.layers, config.num_kv_heads, config.head_dim, args.reps
    );
    println!(
        "| kv | context | host memory | MB | import median | host part | GB/s | of which: empty caches | of which: tensors alone | \
         Burn's from_data, one tensor | GB/s |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for kv in &args.kvs {
        anyhow::ensure!(
            matches!(kv, SchemeSpec::Dense | SchemeSpec::HalfDense | SchemeSpec::Hack(_)),
            "--kv {kv}: the caches are random, so only dense and hack apply"
        );
        let scheme = kv.resolve(Path::new("random caches"), &config, None)?;
        for (&context, &memory) in args.context.iter().flat_map(|c| args.host_memory.iter().map(move |m| (c, m))) {
            let pool = match (memory, device_host_allocator::<B>(&device)) {
                (HostMemory::Pageable, _) => BufferPool::following_load(0),
                (HostMemory::PageLocked, Some(allocator)) => BufferPool::following_load(0).allocating_with(allocator),
                (HostMemory::PageLocked, None) => continue,
            };
            let received = Received { pool, memory };
            with_scheme!(scheme.clone(), time_import::<B, _>, (&config, context, kv, &received, args, &device))?;
        }
    }
    Ok(())
}

/// One table row: `scheme`'s states of a `context`-token request imported, and the same bytes
/// uploaded as one tensor.
fn time_import<B: Backend, S>(
    scheme: S,
    config: &ModelConfig,
    context: usize,
    kv: &SchemeSpec,
    received: &Received,
    args: &Args,
    device: &B::Device,
) -> anyhow::Result<()>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let geometry =
        CacheGeometry { batch: 1, kv_heads: config.num_kv_heads, heads: config.num_heads, head_dim: config.head_dim };
    let state = filled_state(&scheme, geometry, context, device)?;
    let bytes = state.byte_len() * args.layers;
    let copies = || (0..args.layers).map(|_| received.copy(&state)).collect::<anyhow::Result<Vec<_>>>();
    let import = |states: Vec<LayerState>| -> anyhow::Result<(f64, f64)> {
        let start = Instant::now();
        let caches = states
            .iter()
            .enumerate()
            .map(|(layer, s)| scheme.import_state(layer, geometry, s, device))
            .collect::<Result<Vec<_>, _>>()?;
        let host = start.elapsed().as_secs_f64() * 1e3;
        B::sync(device)?;
        let total = start.elapsed().as_secs_f64() * 1e3;
        drop(caches);
        Ok((total, host))
    };
    let upload = |buffer: Bytes| -> anyhow::Result<f64> {
        let words = buffer.len() / 4;
        let start = Instant::now();
        let tensor = Tensor::<B, 1, Int>::from_data(TensorData::from_bytes(buffer, [words], DType::I32), device);
        B::sync(device)?;
        let total = start.elapsed().as_secs_f64() * 1e3;
        drop(tensor);
        Ok(total)
    };
    let empty_caches = || -> anyhow::Result<f64> {
        let start = Instant::now();
        let caches = (0..args.layers).map(|layer| scheme.new_cache(layer, geometry, device)).collect::<Vec<_>>();
        B::sync(device)?;
        let total = start.elapsed().as_secs_f64() * 1e3;
        drop(caches);
        Ok(total)
    };
    let tensors_alone = |states: Vec<LayerState>| -> anyhow::Result<f64> {
        let start = Instant::now();
        let layers = states.iter().map(|s| s.upload::<B>(device));
        let tensors = layers.map(|layer| upload_alone(&layer, device)).collect::<anyhow::Result<Vec<_>>>()?;
        B::sync(device)?;
        let total = start.elapsed().as_secs_f64() * 1e3;
        drop(tensors);
        Ok(total)
    };
    import(copies()?)?;
    upload(Bytes::from_bytes_vec(vec![1; bytes / 4 * 4]))?;
    let mut times: [Vec<f64>; 5] = Default::default();
    for _ in 0..args.reps.max(1) {
        let (total, host) = import(copies()?)?;
        let rep = [
            total,
            host,
            empty_caches()?,
            tensors_alone(copies()?)?,
            upload(Bytes::from_bytes_vec(vec![1; bytes / 4 * 4]))?,
        ];
        times.iter_mut().zip(rep).for_each(|(t, ms)| t.push(ms));
    }
    let [import, host, empty, alone, upload] = times.map(median);
    // What was imported exports the same state again: the upload wrote every byte where it belongs.
    for (layer, copy) in copies()?.iter().enumerate() {
        let cache = scheme.import_state(layer, geometry, copy, device)?;
        anyhow::ensure!(cache.export_state() == state, "{kv} at {context} tokens: layer {layer} exports another state");
    }
    let gbs = |ms: f64| bytes as f64 / ms / 1e6;
    println!(
        "| {kv} | {context} | {} | {:.0} | {import:.1} | {host:.1} | {:.1} | {empty:.1} | {alone:.1} | {upload:.1} | {:.1} |",
        received.memory.to_possible_value().expect("no variant is skipped").get_name(),
        bytes as f64 / 1e6,
        gbs(import),
        gbs(upload)
    );
    Ok(())
}

/// A layer's tensors read as an import reads them (floats at their own width where the backend
/// has it, integers widened), with no cache around them: dropped after the caller's sync.
fn upload_alone<B: Backend>(layer: &DeviceState<B>, device: &B::Device) -> anyhow::Result<Vec<Box<dyn std::any::Any>>> {
    let read = |tensor: &StateTensor| -> anyhow::Result<Box<dyn std::any::Any>> {
        let name = &tensor.name;
        Ok(match tensor.dtype {
            StateDType::F16 if B::supports_dtype(device, DType::F16) => {
                Box::new(layer.to_float_as::<4>(name, FloatDType::F16)?)
            }
            StateDType::F16 | StateDType::F32 => Box::new(layer.to_float::<4>(name)?),
            _ => Box::new(layer.to_int::<4>(name)?),
        })
    };
    layer.state().tensors.iter().map(read).collect()
}

/// A layer's state holding `context` random tokens of `scheme`'s format.
fn filled_state<B: Backend, S>(
    scheme: &S,
    geometry: CacheGeometry,
    context: usize,
    device: &B::Device,
) -> anyhow::Result<LayerState>
where
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let mut cache = scheme.new_cache(0, geometry, device);
    let shape = [geometry.batch, geometry.kv_heads, context, geometry.head_dim];
    let random = || Tensor::<B, 4>::random(shape, Distribution::Normal(0.0, 1.0), device);
    cache.append(random(), random())?;
    Ok(cache.export_state())
}

/// Received-like copies of states: each layer's tensors in one buffer of a receive pool.
struct Received {
    pool: BufferPool,
    memory: HostMemory,
}

impl Received {
    /// `state` as the transfer client lands it: serialized, received into a buffer taken from
    /// the pool (recycled across repetitions, as a worker's receive buffers are) and decoded, its
    /// tensors slices of that buffer.
    fn copy(&self, state: &LayerState) -> anyhow::Result<LayerState> {
        let encoded = encode_state(state);
        let mut buffer = self.pool.take(encoded.len());
        buffer.copy_from_slice(&encoded);
        Ok(decode_state(self.pool.share(buffer))?)
    }
}
