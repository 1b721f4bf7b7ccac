//! Decode-step weight products on a GPU: the backend's row-product kernel against Burn's matrix
//! product for `--rows` activation rows times each weight of a Llama-3-8B layer and its output
//! head, then an 8B-shaped model cut to `--layers` layers with Burn's ops or the backend's kernels
//! (weight products, RMSNorm, rotary embedding): the prefill of a `--context`-token prompt (TTFT)
//! and the decode steps after it over a `--kv` cache (dense f16 or HACK), with device-synchronized
//! timing (median, slowest, host enqueue time, pipelined); with `--ragged`, also the same steps
//! over the batch's sequences each prefilled alone and decoded as a ragged batch (what a
//! continuously batching worker runs: each row's cache attended and appended on its own). The
//! PyTorch anchors, run in the same call:
//! `cli/bench/gemv_anchor.py` for the products, `cli/bench/model_anchor.py` for TTFT and
//! the steps.
use burn_kvschemes::{with_scheme, SchemeSpec};
use std::time::Instant;

use burn::{
    module::Module,
    tensor::{Distribution, Tensor},
};
use std::path::Path;

use burn_kvcompress::{
    cache::{KvScheme, RaggedBatch},
    loading::{build_model, RandomWeights},
    model::{CausalLm, Logits, ModelConfig, ModelOps},
};
use clap::Parser;
use kvcompress_cli::{
    backend_choice::{BackendChoice, KernelBackend},
    bench::{time, Timing},
    weights_arg::WeightsArg,
    with_backend,
};

/// Time decode-step weight products and decode steps.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Backend (the kernel runs on wgpu and cuda).
    #[arg(long, value_enum)]
    backend: BackendChoice,
    /// Float type of the weights and activations.
    #[arg(long, value_enum, default_value_t = WeightsArg::F16)]
    weights: WeightsArg,
    /// Activation rows of the timed weight products (a decode step's batch; 1 to 8 take the
    /// row-product kernels, 2 to 32 in f16 or bf16 their tensor-core kernel where the device has
    /// one).
    #[arg(long, default_value_t = 1)]
    rows: usize,
    /// Timed calls per measurement.
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// Layers of the 8B-shaped model whose decode steps are timed (0: skip the steps).
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Tokens of the prompt: the timed prefill's length, and the cache before the timed steps.
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// Sequences per batch in the timed prefills and decode steps.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Timed prefills per variant (each into a fresh cache, after one untimed; 0: time the steps
    /// only).
    #[arg(long, default_value_t = 3)]
    prefill_runs: usize,
    /// KV cache of the timed model: `dense:storage=f16`, `dense`, or a HACK spelling or preset
    /// (`hack2`, `hack:bits=2,pi=64`); schemes that need calibration files (pq, zack, learned
    /// rotations) do not apply to the random weights.
    #[arg(long, default_value = "dense:storage=f16")]
    kv: SchemeSpec,
    /// Time the model with the backend's kernels only, not also with Burn's ops (for a profiler,
    /// whose report then holds one variant's launches).
    #[arg(long)]
    kernels_only: bool,
    /// Also time the decode steps over a ragged batch of `--batch` sequences, each prefilled
    /// alone (`RaggedBatch`: a continuously batching worker's step, attention and appends per
    /// row), beside the batch's own cache.
    #[arg(long)]
    ragged: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    with_backend!(args.backend, run(&args))
}

fn run<B: KernelBackend>(device: B::Device, args: &Args) -> anyhow::Result<()> {
    let dtype = args.weights.dtype();
    let bytes = burn::tensor::DType::from(dtype).size() as f64;
    println!(
        "## {} row(s) times a weight [k, n] ({}; µs; GB/s of the weight read, from the median)",
        args.rows,
        args.weights.name()
    );
    println!(
        "| k | n | kernel median | kernel host | kernel pipelined | GB/s | matmul median | matmul pipelined | GB/s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let c = ModelConfig::llama3_8b();
    let (h, kv, ff) = (c.hidden_size, c.num_kv_heads * c.head_dim, c.intermediate_size);
    for (k, n) in [(h, h), (h, kv), (h, ff), (ff, h), (h, c.vocab_size)] {
        let x = Tensor::<B, 2>::random([args.rows, k], Distribution::Normal(0.0, 1.0), &device).cast(dtype);
        let w = Tensor::<B, 2>::random([k, n], Distribution::Normal(0.0, 0.02), &device).cast(dtype);
        let kernel = time::<B>(&device, args.runs, || drop(B::row_product(x.clone(), w.clone())));
        let matmul = time::<B>(&device, args.runs, || drop(x.clone().matmul(w.clone())));
        let gbs = |us: f64| (k * n) as f64 * bytes / us / 1e3;
        println!(
            "| {k} | {n} | {:.1} | {:.1} | {:.1} | {:.0} | {:.1} | {:.1} | {:.0} |",
            kernel.median,
            kernel.host,
            kernel.pipelined,
            gbs(kernel.median),
            matmul.median,
            matmul.pipelined,
            gbs(matmul.median)
        );
    }
    if args.layers == 0 {
        return Ok(());
    }
    let config = ModelConfig { num_layers: args.layers, ..c.clone() };
    let model =
        build_model::<B, _>(config.clone(), &RandomWeights::new(config.clone(), 0), &device)?.with_weights_as(dtype)?;
    // A step reads every weight but the embedding's (one row of it).
    let weight_bytes = (model.num_params() - c.vocab_size * c.hidden_size) as f64 * bytes;
    anyhow::ensure!(
        matches!(args.kv, SchemeSpec::Dense | SchemeSpec::HalfDense | SchemeSpec::Hack(_)),
        "--kv {}: the model has random weights, so only dense and hack apply",
        args.kv
    );
    // Neither reads a file (a HACK spelling with a learned rotation file fails to resolve here).
    let scheme = args.kv.resolve(Path::new("random weights"), &config, None)?;
    let model = scheme.prepare(model)?;
    println!(
        "\n## {} layers of Llama-3-8B + output head, batch {}: prefill of {} tokens (TTFT), then decode steps over \
         the `{}` cache (ms)",
        args.layers, args.batch, args.context, args.kv
    );
    println!(
        "| ops | TTFT median | step median | step slowest | step host | step pipelined | weights GB/s (step median) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    with_scheme!(scheme, time_model::<B, _>, (model, weight_bytes, args, &device))
}

/// Times the model's prefills and decode steps with `scheme`'s caches, with Burn's ops and with
/// the backend's kernels (or only those, with `--kernels-only`), one table row each.
fn time_model<B: KernelBackend, S: KvScheme<B>>(
    scheme: S,
    model: CausalLm<B>,
    weight_bytes: f64,
    args: &Args,
    device: &B::Device,
) -> anyhow::Result<()> {
    let variants = [("Burn's", ModelOps::default()), ("backend kernels", ModelOps::of_backend::<B>())];
    for (name, ops) in variants.into_iter().skip(usize::from(args.kernels_only)) {
        let model = model.clone().with_ops(ops);
        let prompt: Vec<u32> = (0..args.context as u32).map(|i| i * 7 % 1000).collect();
        let prompts = vec![prompt; args.batch];
        // The untimed prefill compiles the kernels; its cache serves the steps.
        let mut caches = model.new_cache(&scheme, args.batch, device);
        model.forward(&prompts, &mut caches, Logits::Last)?;
        let mut ttft = (0..args.prefill_runs)
            .map(|_| {
                let mut fresh = model.new_cache(&scheme, args.batch, device);
                let start = Instant::now();
                drop(model.forward(&prompts, &mut fresh, Logits::Last)?);
                B::sync(device)?;
                Ok(start.elapsed().as_secs_f64() * 1e3)
            })
            .collect::<anyhow::Result<Vec<f64>>>()?;
        ttft.sort_by(f64::total_cmp);
        let ttft = ttft.get(ttft.len() / 2).map_or("-".to_string(), |t| format!("{t:.1}"));
        let steps = vec![vec![17]; args.batch];
        // Each timed step appends a token (the context grows by a few percent over the runs).
        let step = time::<B>(device, args.runs, || {
            drop(model.forward(&steps, &mut caches, Logits::Last).expect("decode step"));
        });
        print_steps(name, &ttft, &step, weight_bytes);
        if args.ragged {
            let mut ragged = RaggedBatch::new(args.layers);
            for prompt in &prompts {
                let mut alone = model.new_cache(&scheme, 1, device);
                model.forward(std::slice::from_ref(prompt), &mut alone, Logits::Last)?;
                ragged.join::<B>(alone)?;
            }
            // The untimed first step compiles the ragged step's launches.
            model.forward(&steps, ragged.caches(), Logits::Last)?;
            let step = time::<B>(device, args.runs, || {
                drop(model.forward(&steps, ragged.caches(), Logits::Last).expect("ragged decode step"));
            });
            print_steps(&format!("{name}, ragged"), "-", &step, weight_bytes);
        }
    }
    Ok(())
}

/// One table row of decode steps (timings in µs, printed in ms).
fn print_steps(name: &str, ttft: &str, step: &Timing, weight_bytes: f64) {
    println!(
        "| {name} | {ttft} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} |",
        step.median / 1e3,
        step.max / 1e3,
        step.host / 1e3,
        step.pipelined / 1e3,
        weight_bytes / step.median / 1e3
    );
}
