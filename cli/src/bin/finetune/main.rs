//! Fine-tune a compression scheme's calibrated artifact on text: PQ codebooks from their k-means
//! starting point, ZACK rotations from their SVD starting point at chosen ranks, or HACK's
//! rotations from their Hadamard start for a quantization format (rotations kept orthogonal). The loss is each layer's attention-output error through the output projection,
//! on queries, keys and values recorded from the uncompressed model; early stopping watches the
//! same loss on held-out text and keeps the best point (never worse than the start).
//!
//! ```text
//! finetune --scheme pq --start codebooks=books.safetensors,window=64 --text gpl-3.txt \
//!     --out books-tuned.safetensors
//! finetune --scheme zack --start rotations=rot.safetensors,rate=0.5 --text gpl-3.txt \
//!     --held-out other.txt --out rot-tuned.safetensors --plot loss.svg
//! ```
//!
//! The result has the format calibration writes (`--kv pq:codebooks=books-tuned.safetensors` or
//! `--kv zack:rotations=rot-tuned.safetensors,rate=0.5` in every other command). HACK's rotations
//! start from the format's Hadamard transforms (`finetune --scheme hack --start hack2 --text
//! gpl-3.txt --out hack-rot.safetensors`) and are used as `--kv hack:…,rotations=hack-rot.safetensors`
//! with the same format. Beside it:
//! `<out>.json` (settings, per-step training loss, held-out evaluations, time, peak memory) and
//! the loss curve (`--plot`, default `<out>.loss.png`).

mod record;

use burn_kvschemes::{AnyScheme, SchemeSpec};
use std::path::PathBuf;

use anyhow::{bail, Context};
use burn::{
    backend::Autodiff,
    tensor::backend::{AutodiffBackend, Backend},
};
use burn_hack_attn::{
    finetune::finetune_hack_rotations,
    rotation::{RotationFile, RotationShape},
};
use burn_kvcompress::{
    finetune::{FinetuneConfig, FinetuneData, FinetuneProgress, FinetuneReport, OutputProjections},
    fingerprint::ModelFingerprint,
    loading::load_model,
    paths::default_model_path,
};
use burn_million_pq::finetune::finetune_codebooks;
use burn_zack::finetune::finetune_rotations;
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use kvcompress_cli::{
    backend_choice::BackendChoice,
    memory::peak_resident_bytes,
    plot::{plot_curves, Curve, PlotFormat, PlotSpec},
    report::{beside, create_parent, write_json_beside},
    with_backend,
};
use serde::Serialize;

use record::{record_samples, split_windows};

/// Fine-tune PQ codebooks, ZACK rotations or HACK rotations on text, from their calibrated start.
#[derive(Parser, Debug)]
#[command(about, long_about = None)]
pub struct Args {
    /// What to fine-tune: `pq` (MILLION codebooks), `zack` (ZACK rotations) or `hack` (HACK's
    /// query/key and value rotations).
    #[arg(long, value_enum)]
    scheme: SchemeChoice,
    /// The starting point and how it is used, as after `pq:` or `zack:` in `--kv`: for pq
    /// `codebooks=FILE[,window=N]` (the cache's recent window trained for; default 0), for zack
    /// `rotations=FILE[,rate=R|eps=E][,min_rank=N][,multiple=N]` (the ranks trained for), for hack
    /// a channel-axes format with a rotation to start from, e.g. `hack2` or
    /// `bits=2,pi=64,round=nearest,axes=channel,rot=hadamard,sinks=4,window=64` (the format trained
    /// for; the result is used as `rotations=OUT` in place of its `rot`).
    #[arg(long)]
    start: String,
    /// Training text files (repeatable), tokenized without BOS and cut into windows in order.
    #[arg(long, required = true)]
    text: Vec<PathBuf>,
    /// Held-out text files for early stopping (repeatable). Default: the last `--held-out-share`
    /// of the training windows.
    #[arg(long)]
    held_out: Vec<PathBuf>,
    /// Share of the training windows held out when no `--held-out` is given.
    #[arg(long, default_value_t = 0.2)]
    held_out_share: f64,
    /// Most training tokens.
    #[arg(long, default_value_t = 8192)]
    tokens: usize,
    /// Most held-out tokens (from `--held-out`).
    #[arg(long, default_value_t = 2048)]
    held_out_tokens: usize,
    /// Tokens per window (each text's shorter tail is dropped).
    #[arg(long, default_value_t = 512)]
    window: usize,
    /// Query rows per window the loss is taken on: the last ones, which see the longest
    /// contexts (ZACK overfits with 128; see `results/finetune-perplexity.md`).
    #[arg(long, default_value_t = 384)]
    query_rows: usize,
    /// Windows prefilled together while recording.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Most optimizer steps (each visits every layer once).
    #[arg(long, default_value_t = FinetuneConfig::default().steps)]
    steps: usize,
    /// Step size (Adam on codebooks, Riemannian Adam on rotations). Default: 1e-3 for pq, 5e-4
    /// for zack and hack.
    #[arg(long)]
    learning_rate: Option<f64>,
    /// Training windows per step.
    #[arg(long, default_value_t = FinetuneConfig::default().windows_per_step)]
    windows_per_step: usize,
    /// Steps between held-out evaluations.
    #[arg(long, default_value_t = FinetuneConfig::default().eval_every)]
    eval_every: usize,
    /// Evaluations without a new best held-out loss before stopping.
    #[arg(long, default_value_t = FinetuneConfig::default().patience)]
    patience: usize,
    /// Seed of the window order.
    #[arg(long, default_value_t = FinetuneConfig::default().seed)]
    seed: u64,
    /// Wall-clock budget for training in seconds (recording excluded): no step starts after it;
    /// the best point so far is saved.
    #[arg(long)]
    time_limit: Option<f64>,
    /// Output file (safetensors, the format `calibrate` writes); `<out>.json` is written beside.
    #[arg(long)]
    out: PathBuf,
    /// Loss curve (training and held-out loss per evaluation): `.png` (lines only: training
    /// blue, held-out red) or `.svg` (with text). Default: `<out>.loss.png`.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Model: a `.gguf` file or a Hugging Face directory. Default: SmolLM2-135M-Instruct.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Backend to record and train on (with autodiff).
    #[arg(long, value_enum, default_value_t = BackendChoice::Ndarray)]
    backend: BackendChoice,
}

/// `--scheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum SchemeChoice {
    /// MILLION product-quantization codebooks.
    Pq,
    /// ZACK rotations.
    Zack,
    /// HACK rotations.
    Hack,
}

impl Args {
    fn finetune_config(&self) -> FinetuneConfig {
        FinetuneConfig {
            steps: self.steps,
            learning_rate: self.learning_rate.unwrap_or(match self.scheme {
                SchemeChoice::Pq => 1e-3,
                SchemeChoice::Zack | SchemeChoice::Hack => 5e-4,
            }),
            windows_per_step: self.windows_per_step,
            eval_every: self.eval_every,
            patience: self.patience,
            seed: self.seed,
            time_limit: self.time_limit,
        }
    }

    fn plot_path(&self) -> PathBuf {
        self.plot.clone().unwrap_or_else(|| beside(&self.out, ".loss.png"))
    }

    /// Checks the flags before anything slow runs.
    fn check(&self) -> anyhow::Result<()> {
        for (flag, value) in [("--window", self.window), ("--query-rows", self.query_rows), ("--batch", self.batch)] {
            if value == 0 {
                bail!("{flag} must be at least 1");
            }
        }
        if self.query_rows > self.window {
            bail!("--query-rows {} exceeds --window {}", self.query_rows, self.window);
        }
        if !(self.held_out_share > 0.0 && self.held_out_share < 1.0) {
            bail!("--held-out-share must be between 0 and 1");
        }
        PlotFormat::of_path(&self.plot_path())?;
        self.finetune_config().validate()?;
        Ok(())
    }
}

/// The JSON report written beside the result.
#[derive(Serialize)]
struct Report<'a> {
    scheme: SchemeChoice,
    start: &'a str,
    out: String,
    model: String,
    model_sha256: String,
    backend: String,
    texts: Vec<String>,
    held_out: Vec<String>,
    train_windows: usize,
    held_out_windows: usize,
    window: usize,
    query_rows: usize,
    recording_seconds: f64,
    /// Peak resident memory of the process (host), bytes.
    peak_resident_bytes: Option<u64>,
    calibration: String,
    finetune: &'a FinetuneReport,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.check()?;
    with_backend!(args.backend, run(&args))
}

fn run<B: Backend>(device: B::Device, args: &Args) -> anyhow::Result<()> {
    let model_path = args.model.clone().unwrap_or_else(default_model_path);
    let fingerprint =
        ModelFingerprint::of_path(&model_path).with_context(|| format!("hashing {}", model_path.display()))?;
    let scheme_text = match args.scheme {
        SchemeChoice::Pq => format!("pq:{}", args.start),
        SchemeChoice::Zack => format!("zack:{}", args.start),
        SchemeChoice::Hack if burn_hack_attn::HackConfig::preset(&args.start).is_some() => args.start.clone(),
        SchemeChoice::Hack => format!("hack:{}", args.start),
    };
    let spec: SchemeSpec = scheme_text.parse().map_err(|e: String| anyhow::anyhow!("--start: {e}"))?;
    let loaded = load_model::<B>(&model_path, &device).with_context(|| {
        format!("loading {} (run `cargo xtask fetch-model` for the default model)", model_path.display())
    })?;
    let scheme = spec.resolve(&model_path, loaded.model.config(), Some(fingerprint))?;
    let tokenizer = loaded.tokenizer.as_ref().context("the model files carry no tokenizer")?;
    let (train_windows, held_out_windows) = split_windows(args, tokenizer)?;
    let started = std::time::Instant::now();
    let train = record_samples(&loaded.model, &train_windows, args, "training text", &device)?;
    let held_out = record_samples(&loaded.model, &held_out_windows, args, "held-out text", &device)?;
    let recording_seconds = started.elapsed().as_secs_f64();
    let data = FinetuneData { train, held_out, projections: OutputProjections::of_model(&loaded.model) };
    drop(loaded);
    eprintln!(
        "recorded {} training and {} held-out windows of {} tokens in {recording_seconds:.1} s",
        train_windows.len(),
        held_out_windows.len(),
        args.window
    );

    let config = args.finetune_config();
    let bar = ProgressBar::new(config.steps as u64).with_style(
        ProgressStyle::with_template("fine-tuning [{bar:30}] {pos}/{len} steps, {msg}, eta {eta}").expect("template"),
    );
    let mut on_progress = |p: FinetuneProgress| {
        bar.set_position(p.step as u64);
        bar.set_message(format!("loss {:.4}, best held-out {:.4}", p.train_loss, p.best_held_out));
    };
    create_parent(&args.out)?;
    let (report, calibration) =
        train_and_save::<Autodiff<B>>(&scheme, &data, &config, args, fingerprint, &device, &mut on_progress)?;
    bar.finish_and_clear();

    let plot = args.plot_path();
    let (train_curve, held_out_curve) = report.curves();
    let title = format!("{} fine-tuning: attention-output error", scheme_text);
    let x_label = format!("evaluation (every {} steps)", config.eval_every);
    let curves =
        [Curve { name: "training", values: &train_curve }, Curve { name: "held-out", values: &held_out_curve }];
    plot_curves(&plot, &PlotSpec { title: &title, x_label: &x_label, y_label: "relative error", curves: &curves })?;
    let names = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect();
    let json = Report {
        scheme: args.scheme,
        start: &args.start,
        out: args.out.display().to_string(),
        model: model_path.display().to_string(),
        model_sha256: fingerprint.to_string(),
        backend: format!("{:?}", args.backend).to_lowercase(),
        texts: names(&args.text),
        held_out: names(&args.held_out),
        train_windows: train_windows.len(),
        held_out_windows: held_out_windows.len(),
        window: args.window,
        query_rows: args.query_rows,
        recording_seconds,
        peak_resident_bytes: peak_resident_bytes(),
        calibration,
        finetune: &report,
    };
    let json_path = write_json_beside(&args.out, &json)?;

    let change = 100.0 * (report.best_held_out / report.initial_held_out - 1.0);
    println!("{}: {}", args.scheme_name(), args.out.display());
    println!(
        "held-out attention-output error {:.5} -> {:.5} ({change:+.1}%) at step {} of {}{}",
        report.initial_held_out,
        report.best_held_out,
        report.best_step,
        report.train_loss.len(),
        match (report.stopped_early, report.out_of_time) {
            (true, _) => " (stopped early)",
            (_, true) => " (time limit)",
            _ => "",
        }
    );
    let peak = peak_resident_bytes().map_or("unknown".into(), |b| format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64));
    println!("training {:.1} s, recording {recording_seconds:.1} s, peak host memory {peak}", report.seconds);
    println!("report {}, loss curve {}", json_path.display(), plot.display());
    Ok(())
}

impl Args {
    fn scheme_name(&self) -> &'static str {
        match self.scheme {
            SchemeChoice::Pq => "codebooks",
            SchemeChoice::Zack | SchemeChoice::Hack => "rotations",
        }
    }
}

/// Trains the artifact of `scheme` on `data`, saves it to `--out`, and returns the run's report
/// and the saved artifact's calibration text.
fn train_and_save<B: AutodiffBackend>(
    scheme: &AnyScheme,
    data: &FinetuneData,
    config: &FinetuneConfig,
    args: &Args,
    model: ModelFingerprint,
    device: &B::Device,
    on_progress: &mut dyn FnMut(FinetuneProgress),
) -> anyhow::Result<(FinetuneReport, String)> {
    match scheme {
        AnyScheme::Pq(pq) => {
            let (books, report) = finetune_codebooks::<B>(&pq.codebooks, pq.window, data, config, device, on_progress)?;
            books.save(&args.out)?;
            Ok((report, books.calibration))
        }
        AnyScheme::Zack(zack) => {
            let (rotations, report) =
                finetune_rotations::<B>(zack.rotations(), zack.ranks(), data, config, device, on_progress)?;
            rotations.save(&args.out)?;
            Ok((report, rotations.calibration))
        }
        AnyScheme::Hack(hack) => {
            let start = hack
                .rotations(RotationShape::from(data.check()?))?
                .context("--start has no rotation to fine-tune (add rot=hadamard)")?;
            let (rotations, report) =
                finetune_hack_rotations::<B>(&start, hack.config(), data, config, device, on_progress)?;
            let training = format!(
                "fine-tuned from `{}` for `{}` on {} windows, {} steps (held-out output error {:.4} -> {:.4})",
                match &hack.config().rotation {
                    burn_hack_attn::RotationSpec::Hadamard { seed } => format!("hadamard:{seed}"),
                    other => format!("{other:?}"),
                },
                hack.config(),
                data.train.len(),
                report.best_step,
                report.initial_held_out,
                report.best_held_out
            );
            RotationFile { rotations, model, training: training.clone() }.save(&args.out)?;
            Ok((report, training))
        }
        AnyScheme::Dense(_) | AnyScheme::HalfDense(_) | AnyScheme::ZackHack(_) | AnyScheme::ZackPq(_) => {
            unreachable!("--scheme is pq, zack or hack")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> anyhow::Result<Args> {
        let base =
            ["finetune", "--scheme", "pq", "--start", "codebooks=b.safetensors", "--text", "t.txt", "--out", "o"];
        let args = Args::try_parse_from(base.iter().chain(extra))?;
        args.check()?;
        Ok(args)
    }

    #[test]
    fn flags_are_checked_before_anything_runs() {
        let mut ok = args(&[]).unwrap();
        assert_eq!(ok.plot_path(), PathBuf::from("o.loss.png"));
        assert_eq!(ok.finetune_config(), FinetuneConfig::default());
        ok.scheme = SchemeChoice::Zack;
        assert_eq!(ok.finetune_config().learning_rate, 5e-4);
        assert!(args(&["--query-rows", "600"]).is_err(), "more query rows than window tokens");
        assert!(args(&["--held-out-share", "1"]).is_err());
        assert!(args(&["--eval-every", "0"]).is_err());
        assert!(args(&["--time-limit", "-1"]).is_err());
        assert!(args(&["--plot", "curve.jpg"]).is_err());
        assert!(args(&["--learning-rate", "0"]).is_err());
    }
}
