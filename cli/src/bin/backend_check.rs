//! Checks a backend against the ndarray CPU reference on the same model and measures its prefill
//! and decode throughput.
//!
//! For each prompt: the last position's logits (max-abs difference to ndarray) and a greedy
//! continuation (must be identical). Then prefill `--prefill-tokens` tokens of `--text` in one
//! batch and decode `--decode-steps` tokens one at a time, timed with the result read back to the
//! host (which synchronizes the device).

use std::{path::PathBuf, time::Instant};

use anyhow::{ensure, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{
    backend::NdArray,
    cache::DenseScheme,
    generation::{generate, GenerateOptions, SamplingConfig},
    loading::load_model,
    model::{logits_to_host, CausalLm, Logits},
    paths::default_model_path,
};
use clap::Parser;
use kvcompress_cli::{backend_choice::BackendChoice, with_backend};

/// Compare a backend with the ndarray reference and time it.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Backend under test.
    #[arg(long, value_enum)]
    backend: BackendChoice,
    /// Model: a `.gguf` file or a Hugging Face directory. Default: SmolLM2-135M-Instruct.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompts to compare (repeatable). Default: a few short English and code prompts.
    #[arg(long)]
    prompt: Vec<String>,
    /// Greedy tokens generated per prompt on both backends.
    #[arg(long, default_value_t = 32)]
    greedy_tokens: usize,
    /// Largest max-abs logit difference accepted. On tensor-core GPUs CUDA runs f32 matrix
    /// products in TF32 (10-bit mantissa, cubek-matmul's choice), which moves SmolLM2's logits by
    /// up to ~7e-2: use `--tolerance 0.1` there. wgpu on lavapipe stays within 1e-4.
    #[arg(long, default_value_t = 1e-2)]
    tolerance: f32,
    /// Text whose tokens feed the throughput measurement.
    #[arg(long)]
    text: Option<PathBuf>,
    /// Tokens prefilled in one batch for the throughput measurement.
    #[arg(long, default_value_t = 512)]
    prefill_tokens: usize,
    /// Decode steps timed after the prefill.
    #[arg(long, default_value_t = 128)]
    decode_steps: usize,
    /// Sequences per batch in the throughput measurement.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Skip timing the ndarray reference (it is slow on large prefills).
    #[arg(long)]
    skip_cpu_timing: bool,
}

const DEFAULT_PROMPTS: [&str; 3] = [
    "The capital of France is",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
];

fn last_logits<B: Backend>(model: &CausalLm<B>, tokens: &[u32], device: &B::Device) -> anyhow::Result<Vec<f32>> {
    let mut caches = model.new_cache(&DenseScheme, 1, device);
    Ok(logits_to_host(model.forward(&[tokens.to_vec()], &mut caches, Logits::Last)?).remove(0))
}

fn greedy<B: Backend>(model: &CausalLm<B>, tokens: &[u32], n: usize, device: &B::Device) -> anyhow::Result<Vec<u32>> {
    let mut caches = model.new_cache(&DenseScheme, 1, device);
    let options = GenerateOptions { max_new_tokens: n, stop_tokens: vec![], sampling: SamplingConfig::greedy() };
    Ok(generate(model, &mut caches, tokens, &options, |_| {})?.tokens.remove(0))
}

/// (prefill tokens/s, decode tokens/s), all batch rows counted.
fn throughput<B: Backend>(
    model: &CausalLm<B>,
    tokens: &[u32],
    args: &Args,
    device: &B::Device,
) -> anyhow::Result<(f64, f64)> {
    let prompt: Vec<Vec<u32>> = vec![tokens[..args.prefill_tokens].to_vec(); args.batch];
    // Warm-up on the very shapes timed below, so that kernel compilation and autotuning stay out
    // of the numbers.
    let mut caches = model.new_cache(&DenseScheme, args.batch, device);
    model.forward(&prompt, &mut caches, Logits::Last)?.into_data();
    for _ in 0..2 {
        model.forward(&vec![vec![1]; args.batch], &mut caches, Logits::Last)?.into_data();
    }

    let mut caches = model.new_cache(&DenseScheme, args.batch, device);
    let started = Instant::now();
    model.forward(&prompt, &mut caches, Logits::Last)?.into_data();
    let prefill = (args.batch * args.prefill_tokens) as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    for step in 0..args.decode_steps {
        let next = tokens[(args.prefill_tokens + step) % tokens.len()];
        model.forward(&vec![vec![next]; args.batch], &mut caches, Logits::Last)?.into_data();
    }
    let decode = (args.batch * args.decode_steps) as f64 / started.elapsed().as_secs_f64();
    Ok((prefill, decode))
}

fn run<B: Backend>(device: B::Device, args: &Args) -> anyhow::Result<()> {
    let path = args.model.clone().unwrap_or_else(default_model_path);
    let cpu_device = Default::default();
    let reference = load_model::<NdArray>(&path, &cpu_device).with_context(|| format!("loading {}", path.display()))?;
    let tokenizer = reference.tokenizer.context("the model carries no tokenizer")?;
    let model = load_model::<B>(&path, &device)?.model;
    let prompts: Vec<String> = match args.prompt.is_empty() {
        true => DEFAULT_PROMPTS.iter().map(|p| p.to_string()).collect(),
        false => args.prompt.clone(),
    };
    let mut worst: f32 = 0.0;
    let mut all_identical = true;
    println!("| prompt | max abs logit diff | greedy identical |\n|---|---:|---|");
    for prompt in &prompts {
        let tokens = tokenizer.encode(prompt, true)?;
        let a = last_logits(&reference.model, &tokens, &cpu_device)?;
        let b = last_logits(&model, &tokens, &device)?;
        let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        let same = greedy(&reference.model, &tokens, args.greedy_tokens, &cpu_device)?
            == greedy(&model, &tokens, args.greedy_tokens, &device)?;
        worst = worst.max(diff);
        all_identical &= same;
        println!("| {:?} | {diff:.3e} | {same} |", prompt.chars().take(40).collect::<String>());
    }
    let text_path = args.text.clone().unwrap_or_else(|| kvcompress_cli::reference::repo_file("data/tempest.txt"));
    let text = std::fs::read_to_string(&text_path).with_context(|| format!("reading {}", text_path.display()))?;
    let tokens = tokenizer.encode(&text, false)?;
    ensure!(tokens.len() > args.prefill_tokens, "the text is shorter than --prefill-tokens");
    println!(
        "\n| backend | batch | prefill tok/s ({} tokens) | decode tok/s ({} steps) |\n|---|---:|---:|---:|",
        args.prefill_tokens, args.decode_steps
    );
    let (p, d) = throughput(&model, &tokens, args, &device)?;
    println!("| {:?} | {} | {p:.1} | {d:.1} |", args.backend, args.batch);
    if !args.skip_cpu_timing {
        let (p, d) = throughput(&reference.model, &tokens, args, &cpu_device)?;
        println!("| Ndarray | {} | {p:.1} | {d:.1} |", args.batch);
    }
    ensure!(worst < args.tolerance, "max abs logit difference {worst} exceeds {}", args.tolerance);
    ensure!(all_identical, "greedy continuations differ");
    println!("\nOK: max abs logit difference {worst:.3e} < {}, greedy continuations identical", args.tolerance);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    with_backend!(args.backend, run(&args))
}
