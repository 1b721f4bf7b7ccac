//! `cargo xtask eval`: the decode-perplexity table, written under `results/`.

use clap::Args;

use crate::{fetch_model, shell};

/// Arguments of `cargo xtask eval`.
#[derive(Args)]
pub struct EvalArgs {
    /// KV schemes to evaluate (repeatable), in the `--kv` syntax of the perplexity example.
    #[arg(long = "kv", default_value = "dense")]
    schemes: Vec<String>,
    /// Evaluation texts (repeatable).
    #[arg(long = "text", default_values = ["../shared/data/tempest.txt", "../shared/data/gpl-3.txt"])]
    texts: Vec<String>,
    /// Output path without extension: `<out>.md` (table) and `<out>.json` (raw reports).
    #[arg(long, default_value = "results/perplexity")]
    out: String,
    /// Backend: ndarray, wgpu or cuda (the latter two need the examples' features).
    #[arg(long, default_value = "ndarray")]
    backend: String,
    /// Add HACK's grid after the `--kv` schemes: bits {2, 4} × Π {32, 64, 128} × rounding
    /// {stochastic (seed 0), nearest}.
    #[arg(long)]
    hack_grid: bool,
    /// Print the perplexity command instead of running it (to run its binary elsewhere, e.g. a
    /// CUDA build on a GPU machine without a Rust toolchain).
    #[arg(long)]
    print_only: bool,
}

/// HACK's evaluation grid in the `--kv` syntax.
fn hack_grid() -> Vec<String> {
    let mut grid = Vec::new();
    for bits in [2, 4] {
        for pi in [32, 64, 128] {
            for round in ["stochastic,seed=0", "nearest"] {
                grid.push(format!("hack:bits={bits},pi={pi},round={round}"));
            }
        }
    }
    grid
}

/// Runs the perplexity example over every text and scheme.
pub fn eval(args: EvalArgs) -> anyhow::Result<()> {
    if !args.print_only {
        fetch_model::fetch_model()?;
    }
    let mut cmd: Vec<String> = ["run", "--release", "-p", "examples", "--bin", "perplexity"].map(String::from).to_vec();
    match args.backend.as_str() {
        "ndarray" => {}
        other => cmd.extend(["--features".to_string(), other.to_string()]),
    }
    cmd.extend(["--".to_string(), "--backend".to_string(), args.backend.clone()]);
    let grid = if args.hack_grid { hack_grid() } else { Vec::new() };
    for kv in args.schemes.iter().chain(&grid) {
        cmd.extend(["--kv".to_string(), kv.clone()]);
    }
    for text in &args.texts {
        cmd.extend(["--text".to_string(), text.clone()]);
    }
    cmd.extend(["--out".to_string(), args.out.clone()]);
    if args.print_only {
        println!("cargo {}", cmd.join(" "));
        return Ok(());
    }
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    shell::run("cargo", &refs)
}
