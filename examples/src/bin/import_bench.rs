//! Import of received KV states into device caches: the upload a decode worker runs on its
//! decoding thread when a request joins its batch (every running request waits for it). For each
//! `--kv` scheme and `--context`, one request of an 8B-shaped model (`--layers` layers of 8 KV
//! heads of 128) is filled with random keys and values, exported to host states, and imported
//! back layer by layer with `TransferableScheme::import_state` from fresh host buffers (as a
//! received request's are), device-synchronized, then checked (each imported layer exports the
//! state it was imported from, byte for byte); beside it, the same bytes uploaded as one tensor
//! by Burn's `Tensor::from_data` (its upload path with no per-tensor work). The PyTorch anchor,
//! run in the same call: `examples/bench/upload_anchor.py` (pageable and pinned host-to-device
//! copies of the same sizes).
//!
//! `cargo run --release -p examples --features cuda --bin import_bench -- --backend cuda`

use std::time::Instant;

use burn::tensor::{backend::Backend, Bytes, DType, Distribution, Int, Tensor, TensorData};
use burn_kvcompress::{
    cache::{CacheGeometry, KvCache, LayerState, StateTensor, TransferableCache, TransferableScheme},
    model::ModelConfig,
};
use burn_kvschemes::{with_scheme, SchemeSpec};
use clap::Parser;
use examples::{
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
    println!("| kv | context | MB | import median | host part | GB/s | Burn's from_data, one tensor | GB/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for kv in &args.kvs {
        anyhow::ensure!(
            matches!(kv, SchemeSpec::Dense | SchemeSpec::HalfDense | SchemeSpec::Hack(_)),
            "--kv {kv}: the caches are random, so only dense and hack apply"
        );
        let scheme = kv.resolve(Path::new("random caches"), &config, None)?;
        for &context in &args.context {
            with_scheme!(scheme.clone(), time_import::<B, _>, (&config, context, kv, args, &device))?;
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
    let received = || (0..args.layers).map(|_| fresh_copy(&state)).collect::<Vec<_>>();
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
    import(received())?;
    upload(Bytes::from_bytes_vec(vec![1; bytes / 4 * 4]))?;
    let (mut imports, mut hosts, mut uploads) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.reps.max(1) {
        let (total, host) = import(received())?;
        imports.push(total);
        hosts.push(host);
        uploads.push(upload(Bytes::from_bytes_vec(vec![1; bytes / 4 * 4]))?);
    }
    let (import, host, upload) = (median(imports), median(hosts), median(uploads));
    // What was imported exports the same state again: the upload wrote every byte where it belongs.
    for (layer, received) in received().iter().enumerate() {
        let cache = scheme.import_state(layer, geometry, received, device)?;
        anyhow::ensure!(cache.export_state() == state, "{kv} at {context} tokens: layer {layer} exports another state");
    }
    let gbs = |ms: f64| bytes as f64 / ms / 1e6;
    println!(
        "| {kv} | {context} | {:.0} | {import:.1} | {host:.1} | {:.1} | {upload:.1} | {:.1} |",
        bytes as f64 / 1e6,
        gbs(import),
        gbs(upload)
    );
    Ok(())
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

/// `state` with every tensor's bytes in a buffer of its own, freshly allocated (a received
/// request's bytes are not in any cache of the host).
fn fresh_copy(state: &LayerState) -> LayerState {
    let tensors = state.tensors.iter().map(|t| StateTensor { bytes: t.bytes.to_vec().into(), ..t.clone() }).collect();
    LayerState { tokens: state.tokens, tensors }
}
