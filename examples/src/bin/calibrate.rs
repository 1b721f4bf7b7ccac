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

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{bail, Context};
use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{LayerRecording, RecordingScheme},
    fingerprint::ModelFingerprint,
    loading::load_model,
    model::{Logits, ModelConfig},
    paths::default_model_path,
};
use burn_million_pq::{
    codebook::{train_codebooks, CalibrationSamples, TrainingReport},
    KmeansConfig, PqConfig,
};
use clap::{Parser, ValueEnum};
use examples::{
    backend_choice::BackendChoice,
    plot::{plot_curves, Curve, PlotFormat, PlotSpec, CURVE_COLOURS},
    with_backend,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Calibrate a KV-cache compression scheme on text (PQ codebooks for `--kv pq:codebooks=FILE`).
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
struct Args {
    /// What to calibrate: `pq` (MILLION product-quantization codebooks). ZACK's SVD rotations
    /// will join.
    #[arg(long, value_enum, default_value_t = SchemeChoice::Pq)]
    scheme: SchemeChoice,
    /// The scheme's configuration; for pq `m=SUBSPACES,nbits=BITS[,scope=layer|layer-head]`
    /// (M subspaces per head vector, 2^BITS centroids each, one codebook per layer or per
    /// (layer, KV head)).
    #[arg(long)]
    config: String,
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
    /// Backend the model runs on to record K/V (k-means runs on the CPU).
    #[arg(long, value_enum, default_value_t = BackendChoice::Ndarray)]
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
    /// Plot the relative reconstruction error of keys and values against the k-means iteration
    /// to this `.svg` (with text) or `.png` (lines only: keys blue, values red).
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// `--scheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum SchemeChoice {
    /// MILLION: product-quantization codebooks (k-means per subspace).
    Pq,
}

/// One calibration text, tokenized.
struct Text {
    name: String,
    tokens: Vec<u32>,
}

/// What the model recorded, and about what.
struct Recorded {
    layers: Vec<LayerRecording>,
    fingerprint: ModelFingerprint,
    model_config: ModelConfig,
    /// Tokens taken from each text, in order.
    taken: Vec<(String, usize)>,
    seconds: f64,
}

/// The JSON report written beside the codebooks.
#[derive(Serialize)]
struct Report<'a> {
    scheme: SchemeChoice,
    config: PqConfig,
    config_text: String,
    kmeans: KmeansConfig,
    threads: usize,
    model: String,
    model_sha256: String,
    codebooks: String,
    calibration: &'a str,
    texts: Vec<ReportText<'a>>,
    tokens: usize,
    window: usize,
    recording_seconds: f64,
    training_seconds: f64,
    /// Per iteration (0 = after k-means++), pooled over layers and codebooks.
    relative_error: ReportCurves<'a>,
}

#[derive(Serialize)]
struct ReportText<'a> {
    name: &'a str,
    tokens: usize,
}

#[derive(Serialize)]
struct ReportCurves<'a> {
    keys: &'a [f64],
    values: &'a [f64],
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
    Ok(())
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// Loads the model, tokenizes the texts (`(file name, contents)`) and prefills them window by
/// window through a recording cache, up to `args.tokens` tokens.
fn record<B: Backend>(
    device: B::Device,
    args: &Args,
    config: &PqConfig,
    sources: &[(String, String)],
) -> anyhow::Result<Recorded> {
    let path = args.model.clone().unwrap_or_else(default_model_path);
    let fingerprint = ModelFingerprint::of_path(&path).with_context(|| format!("hashing {}", path.display()))?;
    let loaded = load_model::<B>(&path, &device)
        .with_context(|| format!("loading {} (run `cargo xtask fetch-model` for the default model)", path.display()))?;
    let model_config = loaded.model.config().clone();
    config.validate(model_config.head_dim).with_context(|| format!("--config {config} for {}", path.display()))?;
    if args.window > model_config.max_position {
        bail!("--window {} is longer than the model's context of {}", args.window, model_config.max_position);
    }
    let tokenizer = loaded.tokenizer.context("the model files carry no tokenizer")?;
    let mut texts = Vec::new();
    let mut left = args.tokens;
    for (name, text) in sources {
        if left == 0 {
            break;
        }
        let mut tokens = tokenizer.encode(text, false).with_context(|| format!("tokenizing {name}"))?;
        tokens.truncate(left);
        left -= tokens.len();
        texts.push(Text { name: name.clone(), tokens });
    }
    let total: usize = texts.iter().map(|t| t.tokens.len()).sum();
    if left > 0 {
        eprintln!("note: the texts hold {total} tokens, fewer than --tokens {}", args.tokens);
    }
    // Full windows batch together; each text's shorter tail runs alone.
    let mut batches: Vec<Vec<&[u32]>> = Vec::new();
    for text in &texts {
        let windows: Vec<&[u32]> = text.tokens.chunks(args.window).collect();
        let (full, tail): (Vec<&[u32]>, Vec<&[u32]>) = windows.into_iter().partition(|w| w.len() == args.window);
        batches.extend(full.chunks(args.batch).map(<[&[u32]]>::to_vec));
        batches.extend(tail.into_iter().map(|w| vec![w]));
    }
    let bar = ProgressBar::new(total as u64).with_style(
        ProgressStyle::with_template("recording K/V [{bar:30}] {pos}/{len} tokens, eta {eta}").expect("template"),
    );
    let scheme = RecordingScheme::default();
    let started = Instant::now();
    for batch in &batches {
        let rows: Vec<Vec<u32>> = batch.iter().map(|w| w.to_vec()).collect();
        let mut caches = loaded.model.new_cache(&scheme, rows.len(), &device);
        loaded.model.forward(&rows, &mut caches, Logits::Last).context("prefilling a calibration window")?;
        bar.inc(rows.iter().map(Vec::len).sum::<usize>() as u64);
    }
    bar.finish_and_clear();
    Ok(Recorded {
        layers: scheme.recorder.take(),
        fingerprint,
        model_config,
        taken: texts.iter().map(|t| (t.name.clone(), t.tokens.len())).collect(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Trains the codebooks with a progress bar over every k-means iteration.
fn train(
    samples: &CalibrationSamples,
    config: PqConfig,
    kmeans: &KmeansConfig,
    recorded: &Recorded,
    calibration: &str,
    threads: usize,
) -> anyhow::Result<(burn_million_pq::codebook::Codebooks, TrainingReport)> {
    let g = samples.geometry;
    let total = g.layers * 2 * config.scope.groups(g.kv_heads) * config.subspaces * kmeans.iterations;
    let bar = ProgressBar::new(total as u64).with_style(
        ProgressStyle::with_template("k-means [{bar:30}] {pos}/{len} iterations, eta {eta}").expect("template"),
    );
    eprintln!(
        "training {config} codebooks for {g}: {} vectors per KV head, {} k-means x {} iterations, {threads} threads",
        samples.rows_per_head(),
        total / kmeans.iterations.max(1),
        kmeans.iterations
    );
    let result =
        train_codebooks(samples, config, kmeans, recorded.fingerprint, calibration.to_string(), threads, &|| {
            bar.inc(1)
        });
    bar.finish_and_clear();
    Ok(result?)
}

fn run_pq(args: &Args) -> anyhow::Result<()> {
    let config: PqConfig = args.config.parse().with_context(|| format!("--config `{}`", args.config))?;
    let kmeans = KmeansConfig {
        iterations: args.iterations,
        batch_size: args.batch_size,
        seed: args.seed,
        ..KmeansConfig::default()
    };
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let sources = args
        .text
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Ok((file_name(path), text))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let recorded = with_backend!(args.backend, record(args, &config, &sources))?;
    let samples = CalibrationSamples::from_recordings(&recorded.layers)?;
    let c = &recorded.model_config;
    eprintln!(
        "recorded {} layers x {} KV heads x {} vectors in {:.1} s",
        c.num_layers,
        c.num_kv_heads,
        samples.rows_per_head(),
        recorded.seconds
    );
    let tokens: usize = recorded.taken.iter().map(|(_, n)| n).sum();
    let texts: Vec<String> = recorded.taken.iter().map(|(name, n)| format!("{name}: {n} tokens")).collect();
    let calibration = format!("{} in windows of {}", texts.join(" + "), args.window);
    let (books, report) = train(&samples, config, &kmeans, &recorded, &calibration, threads)?;

    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    books.save(&args.out)?;
    let [keys, values] = &report.relative_error;
    let last = |curve: &[f64]| curve.last().copied().unwrap_or(f64::NAN);
    println!("codebooks: {} ({config}, calibrated on {calibration})", args.out.display());
    println!("training: {:.1} s", report.seconds);
    println!("relative reconstruction error: keys {:.5}, values {:.5}", last(keys), last(values));

    let model = args.model.clone().unwrap_or_else(default_model_path);
    let json = Report {
        scheme: args.scheme,
        config,
        config_text: config.to_string(),
        kmeans,
        threads,
        model: model.display().to_string(),
        model_sha256: recorded.fingerprint.to_hex(),
        codebooks: args.out.display().to_string(),
        calibration: &calibration,
        texts: recorded.taken.iter().map(|(name, tokens)| ReportText { name, tokens: *tokens }).collect(),
        tokens,
        window: args.window,
        recording_seconds: recorded.seconds,
        training_seconds: report.seconds,
        relative_error: ReportCurves { keys, values },
    };
    let mut json_path = args.out.clone().into_os_string();
    json_path.push(".json");
    let json_path = PathBuf::from(json_path);
    std::fs::write(&json_path, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    println!("report: {}", json_path.display());

    if let Some(plot) = &args.plot {
        let curves = [Curve { name: "keys", values: keys }, Curve { name: "values", values }];
        let title = format!("PQ {config} on {calibration}");
        let spec = PlotSpec {
            title: &title,
            x_label: "k-means iteration (0 = after k-means++)",
            y_label: "relative squared reconstruction error",
            curves: &curves,
        };
        plot_curves(plot, &spec)?;
        match PlotFormat::of_path(plot)? {
            PlotFormat::Svg => println!("plot: {}", plot.display()),
            PlotFormat::Png => println!(
                "plot: {} (no text in PNGs: keys {}, values {})",
                plot.display(),
                CURVE_COLOURS[0].0,
                CURVE_COLOURS[1].0
            ),
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    check_args(&args)?;
    match args.scheme {
        SchemeChoice::Pq => run_pq(&args),
    }
}
