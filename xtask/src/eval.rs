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
}

/// Runs the perplexity example over every text and scheme.
pub fn eval(args: EvalArgs) -> anyhow::Result<()> {
    fetch_model::fetch_model()?;
    let mut cmd: Vec<String> = ["run", "--release", "-p", "examples", "--bin", "perplexity"].map(String::from).to_vec();
    match args.backend.as_str() {
        "ndarray" => {}
        other => cmd.extend(["--features".to_string(), other.to_string()]),
    }
    cmd.extend(["--".to_string(), "--backend".to_string(), args.backend.clone()]);
    for kv in &args.schemes {
        cmd.extend(["--kv".to_string(), kv.clone()]);
    }
    for text in &args.texts {
        cmd.extend(["--text".to_string(), text.clone()]);
    }
    cmd.extend(["--out".to_string(), args.out.clone()]);
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    shell::run("cargo", &refs)
}
