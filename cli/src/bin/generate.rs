//! Generate text with a Llama/Mistral model through a (compressed) KV cache, streaming tokens to
//! stdout as they come.
//!
//! `cargo run --release -p kvcompress-cli --bin generate -- --chat "What is the capital of France?"`

use burn_kvschemes::{with_scheme, SchemeSpec};
use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use burn_kvcompress::{
    cache::KvScheme,
    generation::{generate, GenerateOptions, SamplingConfig},
    loading::{load_model, LoadedModel},
    paths::default_model_path,
    tokenizer::{chatml_prompt, ChatMessage, Role},
};
use clap::Parser;
use kvcompress_cli::{
    backend_choice::{BackendChoice, KernelBackend},
    with_backend,
};

/// Generate text from a prompt or a chat message.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Model: a `.gguf` file or a Hugging Face directory (config.json + model.safetensors +
    /// tokenizer.json). Default: SmolLM2-135M-Instruct from `cargo xtask fetch-model`.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Raw prompt, tokenized as is (special tokens such as `<|im_start|>` are parsed).
    #[arg(long, conflicts_with = "chat", required_unless_present = "chat")]
    prompt: Option<String>,
    /// A user message, wrapped in the model's chat format (ChatML for SmolLM2).
    #[arg(long)]
    chat: Option<String>,
    /// System message for --chat (default: the model template's own).
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Nucleus (top-p) mass for sampling.
    #[arg(long, default_value_t = 0.9)]
    top_p: f32,
    /// Random seed for sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// KV cache scheme: `dense`, `hack:bits=2,pi=64,round=stochastic`,
    /// `pq:codebooks=books.safetensors,window=64` (codebooks from `calibrate`) or
    /// `zack:rotations=rot.safetensors,rate=0.5` (rotations from `calibrate --scheme zack`; `eps=E`
    /// instead of `rate` sets the removal rate; `min_rank=N`, `multiple=N` shape the ranks;
    /// `storage=f16` halves the cache on wgpu and cuda), or ZACK followed by HACK quantization of
    /// the reduced dimensions, `zack:rotations=rot.safetensors,rate=0.5+hack:bits=2,pi=64`, or by
    /// product quantization, `zack:rotations=rot.safetensors,rate=0.5+pq:codebooks=reduced.safetensors`
    /// (codebooks from `calibrate --scheme zack-pq` at the same rotations and rate).
    #[arg(long, default_value = "dense")]
    kv: SchemeSpec,
    /// Backend to run on.
    #[arg(long, value_enum, default_value_t = BackendChoice::Flex)]
    backend: BackendChoice,
}

fn run<B: KernelBackend>(device: B::Device, args: &Args) -> anyhow::Result<()> {
    let path = args.model.clone().unwrap_or_else(default_model_path);
    let mut loaded = load_model::<B>(&path, &device)
        .with_context(|| format!("loading {} (run `cargo xtask fetch-model` for the default model)", path.display()))?;
    let scheme = args.kv.resolve(&path, loaded.model.config(), None)?;
    loaded.model = scheme.prepare(loaded.model)?;
    with_scheme!(scheme, run_scheme::<B, _>, (args, &loaded, &device))
}

fn run_scheme<B: KernelBackend, S: KvScheme<B>>(
    scheme: S,
    args: &Args,
    loaded: &LoadedModel<B>,
    device: &B::Device,
) -> anyhow::Result<()> {
    let tokenizer = loaded.tokenizer.as_ref().context("the model files carry no tokenizer")?;
    let text = match (&args.prompt, &args.chat) {
        (Some(prompt), _) => prompt.clone(),
        (None, Some(chat)) => {
            let mut messages = Vec::new();
            if let Some(system) = &args.system {
                messages.push(ChatMessage { role: Role::System, content: system.clone() });
            }
            messages.push(ChatMessage { role: Role::User, content: chat.clone() });
            chatml_prompt(&messages, true)
        }
        (None, None) => unreachable!("clap requires --prompt or --chat"),
    };
    let prompt = tokenizer.encode(&text, true)?;
    let options = GenerateOptions {
        max_new_tokens: args.max_new_tokens,
        stop_tokens: tokenizer.eos_id().into_iter().collect(),
        sampling: SamplingConfig { temperature: args.temperature, top_p: args.top_p, seed: args.seed },
    };
    let mut caches = loaded.model.new_cache(&scheme, 1, device);
    let mut stream = tokenizer.stream(true);
    let mut stdout = std::io::stdout();
    if args.prompt.is_some() {
        print!("{text}");
    }
    let mut failure = None;
    let result = generate(&loaded.model, &mut caches, &prompt, &options, |token| match stream.push(token) {
        Ok(piece) => {
            print!("{piece}");
            let _ = stdout.flush();
        }
        Err(e) => failure = Some(e),
    })?;
    println!("{}", stream.finish()?);
    if let Some(e) = failure {
        return Err(e.into());
    }
    eprintln!(
        "[{}: {} prompt tokens, prefill {:.1} tok/s; {} decode steps, {:.1} tok/s; KV cache {} bytes]",
        scheme.name(),
        result.prompt_tokens,
        result.prompt_tokens as f64 / result.prefill_seconds,
        result.decode_steps,
        result.decode_steps as f64 / result.decode_seconds.max(1e-9),
        caches.memory_bytes(),
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    with_backend!(args.backend, run(&args))
}
