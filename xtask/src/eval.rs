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
    /// Evaluate MILLION's grid instead: PQ (m, nbits) in {(32, 8), (32, 6), (16, 8)} (4, 3.5 and 2
    /// stored code bits per element at head dim 64) × recent window {0, 64}, beside dense. Each
    /// text is evaluated with codebooks calibrated on the other texts (never on itself); the
    /// codebooks and their training reports go to `target/pq-books/`, the k-means plots to
    /// `results/pq-kmeans/`, and one table per evaluated text to `<out>-pq-<text>.md/.json`.
    #[arg(long, conflicts_with = "hack_grid")]
    pq_grid: bool,
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

/// MILLION's evaluation grid: PQ configurations and recent windows.
const PQ_CONFIGS: [&str; 3] = ["m=32,nbits=8", "m=32,nbits=6", "m=16,nbits=8"];
const PQ_WINDOWS: [usize; 2] = [0, 64];

/// `cargo run` of an example binary on the chosen backend, up to and including `--backend`.
fn example(bin: &str, backend: &str) -> Vec<String> {
    let mut cmd: Vec<String> = ["run", "--release", "-p", "examples", "--bin", bin].map(String::from).to_vec();
    if backend != "ndarray" {
        cmd.extend(["--features".to_string(), backend.to_string()]);
    }
    cmd.extend(["--".to_string(), "--backend".to_string(), backend.to_string()]);
    cmd
}

/// The file stem of a path (`../shared/data/gpl-3.txt` -> `gpl-3`).
fn stem(path: &str) -> String {
    std::path::Path::new(path).file_stem().map_or_else(|| path.to_string(), |s| s.to_string_lossy().into_owned())
}

/// Runs (or prints) each command in order.
fn run_all(commands: Vec<Vec<String>>, print_only: bool) -> anyhow::Result<()> {
    for cmd in commands {
        if print_only {
            println!("cargo {}", cmd.join(" "));
        } else {
            let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
            shell::run("cargo", &refs)?;
        }
    }
    Ok(())
}

/// MILLION's grid: calibrations on the other texts, then one perplexity table per text.
fn pq_grid(args: &EvalArgs) -> anyhow::Result<Vec<Vec<String>>> {
    anyhow::ensure!(
        args.texts.len() >= 2,
        "--pq-grid calibrates each text's codebooks on the other texts: give two or more"
    );
    let books = |text: &str, config: &str| {
        format!("target/pq-books/{}-{}.safetensors", stem(text), config.replace([',', '='], "_"))
    };
    let mut commands = Vec::new();
    for config in PQ_CONFIGS {
        for text in &args.texts {
            let mut cmd = example("calibrate", &args.backend);
            let plot = format!("results/pq-kmeans/{}-{}.svg", stem(text), config.replace([',', '='], "_"));
            cmd.extend(
                [
                    "--config",
                    config,
                    "--text",
                    text,
                    "--tokens",
                    "8192",
                    "--out",
                    &books(text, config),
                    "--plot",
                    &plot,
                ]
                .map(String::from),
            );
            commands.push(cmd);
        }
    }
    for text in &args.texts {
        let others: Vec<&String> = args.texts.iter().filter(|t| *t != text).collect();
        let calibration = others[0];
        let mut cmd = example("perplexity", &args.backend);
        cmd.extend(["--kv".to_string(), "dense".to_string()]);
        for config in PQ_CONFIGS {
            for window in PQ_WINDOWS {
                cmd.extend([
                    "--kv".to_string(),
                    format!("pq:codebooks={},window={window}", books(calibration, config)),
                ]);
            }
        }
        cmd.extend([
            "--text".to_string(),
            text.clone(),
            "--out".to_string(),
            format!("{}-pq-{}", args.out, stem(text)),
        ]);
        commands.push(cmd);
    }
    Ok(commands)
}

/// Runs the perplexity example over every text and scheme.
pub fn eval(args: EvalArgs) -> anyhow::Result<()> {
    if !args.print_only {
        fetch_model::fetch_model()?;
        std::fs::create_dir_all("target/pq-books")?;
        std::fs::create_dir_all("results/pq-kmeans")?;
    }
    if args.pq_grid {
        return run_all(pq_grid(&args)?, args.print_only);
    }
    let mut cmd = example("perplexity", &args.backend);
    let grid = if args.hack_grid { hack_grid() } else { Vec::new() };
    for kv in args.schemes.iter().chain(&grid) {
        cmd.extend(["--kv".to_string(), kv.clone()]);
    }
    for text in &args.texts {
        cmd.extend(["--text".to_string(), text.clone()]);
    }
    cmd.extend(["--out".to_string(), args.out.clone()]);
    run_all(vec![cmd], args.print_only)
}
