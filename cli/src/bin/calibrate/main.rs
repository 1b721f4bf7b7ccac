//! Calibrate a compression scheme on text: run the model over calibration text with a cache that
//! records the post-RoPE keys and values, and fit the scheme's parameters to them.
//!
//! `pq` (MILLION) trains product-quantization codebooks by k-means and saves them as safetensors
//! tagged with the model's SHA-256, for `--kv pq:codebooks=FILE` in `generate`, `perplexity` and
//! `disagg`:
//!
//! ```text
//! calibrate --config m=32,nbits=8 --text gpl-3.txt --tokens 8192 --out books.safetensors --plot obj.svg
//! ```
//!
//! Beside the codebooks it writes `<out>.json`: the configuration, the k-means settings, the
//! calibration text and token count, training time and the relative reconstruction error of keys
//! and values after every k-means iteration (plotted by `--plot`).
//!
//! `zack` computes ZACK's per-KV-head rotations (SVD of post-RoPE `[Q; K]` and of `[V; W_Oᵀ]`)
//! and saves them as safetensors tagged with the model's SHA-256, for
//! `--kv zack:rotations=FILE,rate=0.5`:
//!
//! ```text
//! calibrate --scheme zack --config weighting=equal-energy,center=values --text gpl-3.txt \\
//!     --tokens 8192 --out rot.safetensors --plot spectra.svg
//! ```
//!
//! Its `<out>.json` holds the mean normalized singular-value spectra of both pairs (plotted by
//! `--plot`) and the compression rate and mean ranks at a sweep of removal rates ε.
//!
//! `zack-pq` trains k-means codebooks of ZACK's reduced keys and values at one set of rotations
//! and ranks (subspaces of `sub_dim` channels of each head's own coordinates), for
//! `--kv zack:rotations=FILE,rate=0.5+pq:codebooks=OUT`:
//!
//! ```text
//! calibrate --scheme zack-pq --zack rotations=rot.safetensors,rate=0.5 --config sub_dim=2,nbits=8 \
//!     --text gpl-3.txt --out reduced.safetensors --plot obj.svg
//! ```

mod pq;
mod record;
mod zack;
mod zack_pq;

use std::path::PathBuf;

use anyhow::bail;
use burn_million_pq::KmeansConfig;
use clap::{Parser, ValueEnum};
use kvcompress_cli::{backend_choice::BackendChoice, plot::PlotFormat};
use serde::Serialize;

/// Calibrate a KV-cache compression scheme on text (PQ codebooks for `--kv pq:codebooks=FILE`,
/// ZACK rotations for `--kv zack:rotations=FILE`, codebooks of ZACK's reduced dimensions for
/// `--kv zack:rotations=FILE,rate=R+pq:codebooks=FILE`).
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
pub struct Args {
    /// What to calibrate: `pq` (MILLION product-quantization codebooks), `zack` (ZACK's SVD
    /// rotations) or `zack-pq` (product-quantization codebooks of the dimensions `--zack` keeps).
    #[arg(long, value_enum, default_value_t = SchemeChoice::Pq)]
    scheme: SchemeChoice,
    /// The scheme's configuration; for pq `m=SUBSPACES,nbits=BITS[,scope=layer|layer-head]`
    /// (M subspaces per head vector, 2^BITS centroids each, one codebook per layer or per
    /// (layer, KV head)), required; for zack `weighting=equal-energy|concatenate,
    /// center=values|keys-values|none` (how the two blocks of `[Q; K]` and `[V; W_Oᵀ]` are scaled
    /// before the SVD, and which activations are centered; defaults equal-energy, values); for
    /// zack-pq `sub_dim=N,nbits=BITS` (subspaces of N reduced channels, 2^BITS centroids each:
    /// BITS/N bits per element; every rank becomes a multiple of N), required.
    #[arg(long)]
    config: Option<String>,
    /// zack-pq: the ZACK part whose kept dimensions are quantized, `rotations=FILE,rate=R` (or
    /// `eps=E`; the `zack:` spelling of `--kv`). Give `--kv` the same rotations and rate.
    #[arg(long)]
    zack: Option<String>,
    /// Calibration text files (repeatable), tokenized without BOS and read in order until
    /// `--tokens` tokens are taken.
    #[arg(long, required = true)]
    text: Vec<PathBuf>,
    /// Calibration tokens in all (fewer if the texts are shorter).
    #[arg(long, default_value_t = 8192)]
    tokens: usize,
    /// Tokens per prefill window (windows never span two texts).
    #[arg(long, default_value_t = 1024)]
    window: usize,
    /// Windows prefilled together as one batch (same samples, faster).
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Output file (safetensors); a JSON report is written beside it as `<out>.json`.
    #[arg(long)]
    out: PathBuf,
    /// Model: a `.gguf` file or a Hugging Face directory. Default: SmolLM2-135M-Instruct.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Backend the model runs on to record K/V (k-means and the SVD run on the CPU).
    #[arg(long, value_enum, default_value_t = BackendChoice::Flex)]
    backend: BackendChoice,
    /// k-means: mini-batch iterations.
    #[arg(long, default_value_t = KmeansConfig::default().iterations)]
    iterations: usize,
    /// k-means: points per mini-batch.
    #[arg(long, default_value_t = KmeansConfig::default().batch_size)]
    batch_size: usize,
    /// k-means: seed of every random choice.
    #[arg(long, default_value_t = KmeansConfig::default().seed)]
    seed: u64,
    /// k-means threads (default: the available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// zack: search the largest removal rate ε whose held-out decode perplexity stays within this
    /// factor of the dense model's (e.g. 1.05), and report it (needs `--held-out`).
    #[arg(long, requires = "held_out")]
    budget: Option<f64>,
    /// zack: held-out text for `--budget` (not one of the calibration texts).
    #[arg(long)]
    held_out: Option<PathBuf>,
    /// zack: perplexity windows of the held-out text per evaluation (1024 tokens each).
    #[arg(long, default_value_t = 1)]
    held_out_windows: usize,
    /// Plot to this `.svg` (with text) or `.png` (lines only; first curve blue, second red):
    /// for pq and zack-pq the relative reconstruction error of keys and values against the k-means
    /// iteration, for zack the mean normalized singular values of the query/key and
    /// value/output pairs against the head dimension.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// `--scheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeChoice {
    /// MILLION: product-quantization codebooks (k-means per subspace).
    Pq,
    /// ZACK: per-KV-head rotations of the query/key and value/output pairs (SVD).
    Zack,
    /// ZACK followed by PQ: codebooks of the reduced keys and values (k-means per subspace).
    ZackPq,
}

/// Checks the numeric flags before anything slow runs.
fn check_args(args: &Args) -> anyhow::Result<()> {
    for (flag, value) in [("--tokens", args.tokens), ("--window", args.window), ("--batch", args.batch)] {
        if value == 0 {
            bail!("{flag} must be at least 1");
        }
    }
    if args.batch_size == 0 || args.threads == Some(0) {
        bail!("--batch-size and --threads must be at least 1");
    }
    if let Some(plot) = &args.plot {
        PlotFormat::of_path(plot)?;
    }
    if args.budget.is_some_and(|b| !(b >= 1.0 && b.is_finite())) || args.held_out_windows == 0 {
        bail!("--budget must be a factor of at least 1 and --held-out-windows at least 1");
    }
    if args.budget.is_some() && args.scheme != SchemeChoice::Zack {
        bail!("--budget searches ZACK's removal rate: use it with --scheme zack");
    }
    if args.zack.is_some() != (args.scheme == SchemeChoice::ZackPq) {
        bail!("--zack names the ZACK part of --scheme zack-pq, and only of it");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    check_args(&args)?;
    match args.scheme {
        SchemeChoice::Pq => pq::run_pq(&args),
        SchemeChoice::Zack => zack::run_zack(&args),
        SchemeChoice::ZackPq => zack_pq::run_zack_pq(&args),
    }
}
