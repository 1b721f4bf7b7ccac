//! Greedy continuations under each KV scheme beside dense's, with the position of the first token
//! that differs: the reference prompts of `fixtures/llamacpp-smollm2.json` (short: a format with a
//! float window may hold them whole), the chat question of the README, and long prompts cut from
//! the evaluation texts (a prefix of `--prefix-tokens`, so that the compressed blocks are
//! attended).
//!
//! `cargo run --release -p kvcompress-cli --bin continuations -- --kv hack2 --kv hack4 --out results/hack-continuations`

use burn_kvschemes::{with_scheme, SchemeSpec};
use std::{fmt::Write as _, path::PathBuf};

use anyhow::Context;
use burn_kvcompress::{
    generation::{generate, GenerateOptions, SamplingConfig},
    loading::{load_model, LoadedModel},
    paths::default_model_path,
    tokenizer::{chatml_prompt, ChatMessage, Role},
};
use clap::Parser;
use kvcompress_cli::{
    backend_choice::{BackendChoice, KernelBackend},
    reference::{default_texts, llamacpp_reference_file, load_reference_prompts},
    report::create_parent,
    with_backend,
};

/// Greedy continuations per KV scheme beside dense's, with the first differing position.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// Model: a `.gguf` file or a Hugging Face directory. Default: SmolLM2-135M-Instruct.
    #[arg(long)]
    model: Option<PathBuf>,
    /// KV schemes to compare with dense (repeatable), in the `--kv` syntax of `perplexity`.
    #[arg(long, required = true)]
    kv: Vec<String>,
    /// Tokens each continuation generates.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Tokens of each long prompt, cut from the start of each evaluation text.
    #[arg(long, default_value_t = 1000)]
    prefix_tokens: usize,
    /// The chat question whose answers are listed (ChatML).
    #[arg(long, default_value = "What is the capital of France?")]
    chat: String,
    /// Write the tables to `<out>.md`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Backend to run on.
    #[arg(long, value_enum, default_value_t = BackendChoice::Flex)]
    backend: BackendChoice,
}

/// A prompt to continue.
struct Prompt {
    label: String,
    tokens: Vec<u32>,
}

/// One scheme's continuation of one prompt.
struct Continuation {
    scheme: String,
    tokens: Vec<u32>,
    text: String,
}

fn prompts<B: KernelBackend>(args: &Args, loaded: &LoadedModel<B>) -> anyhow::Result<Vec<Prompt>> {
    let tokenizer = loaded.tokenizer.as_ref().context("the model files carry no tokenizer")?;
    let mut prompts = Vec::new();
    let chat = chatml_prompt(&[ChatMessage { role: Role::User, content: args.chat.clone() }], true);
    prompts.push(Prompt { label: format!("chat: {}", args.chat), tokens: tokenizer.encode(&chat, true)? });
    let reference = llamacpp_reference_file();
    let reference_prompts =
        load_reference_prompts(&reference).with_context(|| format!("reading prompts from {}", reference.display()))?;
    for prompt in reference_prompts {
        prompts
            .push(Prompt { label: format!("reference prompt {:?}", shorten(&prompt.text, 40)), tokens: prompt.tokens });
    }
    for path in default_texts() {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let tokens = tokenizer.encode(&text, false)?;
        let n = args.prefix_tokens.min(tokens.len());
        let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        prompts.push(Prompt { label: format!("the first {n} tokens of {name}"), tokens: tokens[..n].to_vec() });
    }
    Ok(prompts)
}

fn shorten(text: &str, chars: usize) -> String {
    let short: String = text.chars().take(chars).collect();
    if short.len() < text.len() {
        format!("{short}…")
    } else {
        short
    }
}

fn continue_with<B: KernelBackend, S: burn_kvcompress::cache::KvScheme<B>>(
    scheme: S,
    loaded: &LoadedModel<B>,
    prompts: &[Prompt],
    tokens: usize,
    device: &B::Device,
) -> anyhow::Result<Vec<Continuation>> {
    let tokenizer = loaded.tokenizer.as_ref().context("the model files carry no tokenizer")?;
    let options = GenerateOptions { max_new_tokens: tokens, stop_tokens: vec![], sampling: SamplingConfig::greedy() };
    prompts
        .iter()
        .map(|prompt| {
            let mut caches = loaded.model.new_cache(&scheme, 1, device);
            let out = generate(&loaded.model, &mut caches, &prompt.tokens, &options, |_| {})?;
            let tokens = out.tokens[0].clone();
            Ok(Continuation { scheme: scheme.name(), text: tokenizer.decode(&tokens)?, tokens })
        })
        .collect()
}

fn run<B: KernelBackend>(device: B::Device, args: &Args) -> anyhow::Result<String> {
    let path = args.model.clone().unwrap_or_else(default_model_path);
    let loaded = load_model::<B>(&path, &device)
        .with_context(|| format!("loading {} (run `cargo xtask fetch-model`)", path.display()))?;
    let prompts = prompts(args, &loaded)?;
    let mut runs = Vec::new();
    for spelling in std::iter::once("dense").chain(args.kv.iter().map(String::as_str)) {
        let arg: SchemeSpec = spelling.parse().map_err(anyhow::Error::msg)?;
        let scheme = arg.resolve(&path, loaded.model.config(), None)?;
        let model = LoadedModel { model: scheme.prepare(loaded.model.clone())?, tokenizer: loaded.tokenizer.clone() };
        eprintln!("continuing with {spelling}");
        runs.push(with_scheme!(scheme, continue_with::<B, _>, (&model, &prompts, args.tokens, &device))?);
    }
    let mut out = String::new();
    for (i, prompt) in prompts.iter().enumerate() {
        writeln!(out, "\n**{}** ({} tokens)\n", prompt.label, prompt.tokens.len())?;
        writeln!(out, "| KV cache | first token that differs from dense | continuation |\n|---|---:|---|")?;
        let dense = &runs[0][i];
        for run in &runs {
            let c = &run[i];
            let first = c.tokens.iter().zip(&dense.tokens).position(|(a, b)| a != b);
            let first = match (first, c.tokens.len() == dense.tokens.len()) {
                (Some(p), _) => format!("{}", p + 1),
                (None, true) => "none".to_string(),
                (None, false) => format!("{}", c.tokens.len().min(dense.tokens.len()) + 1),
            };
            let text = c.text.replace('|', "\\|").replace('\n', "⏎");
            writeln!(out, "| {} | {first} | {text} |", c.scheme)?;
        }
    }
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tables = with_backend!(args.backend, run(&args))?;
    println!("{tables}");
    if let Some(out) = &args.out {
        create_parent(out)?;
        let header = format!(
            "Greedy continuations of {} tokens under each KV cache beside dense's (backend {:?}; SmolLM2-135M-Instruct \
             unless `--model` says otherwise). Produced by `cargo run --release -p kvcompress-cli --bin continuations -- {}`.\n",
            args.tokens,
            args.backend,
            args.kv.iter().map(|kv| format!("--kv {kv}")).collect::<Vec<_>>().join(" ")
        );
        std::fs::write(out.with_extension("md"), header + &tables)?;
    }
    Ok(())
}
